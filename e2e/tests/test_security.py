"""The tenancy model we ship (security/, docs/security.md), against the real API server.

A tenant is a ServiceAccount bound to `modelplane-tenant` in its namespace (a
RoleBinding, as docs/security.md says). A broad editor is an identity whose RBAC
lets it write every modelplane.ai kind and provider-kubernetes Objects (what
Kubernetes' built-in `edit` role grants once Crossplane aggregates XR kinds into
it): RBAC lets it in, and the admission policies must still refuse what only the
platform's controllers may do. Every write here is `--dry-run=server` (admission
runs in full, nothing is stored) except the ModelEndpoint whose status is tried.
"""

from __future__ import annotations

import base64
import json

import pytest
import yaml
from builders import load_one
from conftest import REPO
from live import ensure_namespace, single_gpu

from e2e.controlplane.core import ControlPlane

NS = "tenant-a"
TENANT = f"system:serviceaccount:{NS}:tenant"
EDITOR = "broad-editor"  # a user, impersonated
ENDPOINT = "provider"


def identities() -> list[dict]:
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "tenant", "namespace": NS}},
        {"apiVersion": rbac, "kind": "RoleBinding",
         "metadata": {"name": "tenant-modelplane", "namespace": NS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "modelplane-tenant"},
         "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": NS}]},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": "e2e-broad-editor"},
         "rules": [{"apiGroups": ["modelplane.ai", "kubernetes.m.crossplane.io"],
                    "resources": ["*"], "verbs": ["*"]}]},
        {"apiVersion": rbac, "kind": "RoleBinding",
         "metadata": {"name": "broad-editor", "namespace": NS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "e2e-broad-editor"},
         "subjects": [{"kind": "User", "name": EDITOR, "apiGroup": "rbac.authorization.k8s.io"}]},
    ]


@pytest.fixture(scope="module")
def tenancy(cp: ControlPlane):
    ensure_namespace(cp, NS)
    cp.apply(identities())
    yield
    cp.kubectl("delete", "clusterrole", "e2e-broad-editor", "--ignore-not-found")
    cp.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false")


def as_(cp: ControlPlane, who: str, *args: str, doc: dict | None = None):
    """kubectl as `who`; (exit code, stderr)."""
    proc = cp.kubectl(f"--as={who}", *args, *(["-f", "-"] if doc is not None else []),
                      input=None if doc is None else yaml.safe_dump(doc), check=False)
    return proc.returncode, proc.stderr.strip()


def create(cp: ControlPlane, who: str, doc: dict):
    return as_(cp, who, "create", "--dry-run=server", doc=doc)


def deployment() -> dict:
    return single_gpu("chat", NS, 1)


def replica() -> dict:
    """The example ModelReplica (valid against its XRD: admission policies run after
    schema validation), in the tenant's namespace."""
    mr = load_one(REPO / "examples" / "replicas" / "llama-3-1-8b-0.yaml")
    mr["metadata"] = {"name": "by-hand", "namespace": NS}
    return mr


def remote_object(provider_config: dict | None) -> dict:
    spec: dict = {"forProvider": {"manifest": {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "anything", "namespace": "kube-system"}}}}
    if provider_config is not None:
        spec["providerConfigRef"] = provider_config
    return {"apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "Object",
            "metadata": {"name": "reach", "namespace": NS}, "spec": spec}


def refused_by_policy(result: tuple[int, str], policy: str) -> str:
    code, err = result
    assert code != 0 and policy in err and "denied request" in err, (code, err)
    return err


def refused_by_rbac(result: tuple[int, str]) -> None:
    code, err = result
    assert code != 0 and "Forbidden" in err and "cannot" in err, (code, err)


def test_a_tenant_writes_deployments_and_reads_replicas_but_writes_no_replica_or_status(
        cp: ControlPlane, tenancy):
    assert create(cp, TENANT, deployment()) == (0, "")
    assert as_(cp, TENANT, "get", "modelreplicas.modelplane.ai", "-n", NS)[0] == 0
    refused_by_rbac(create(cp, TENANT, replica()))
    refused_by_rbac(create(cp, TENANT, remote_object(None)))
    # Its own ModelEndpoint: created for real, so that its status can be tried.
    endpoint = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelEndpoint",
                "metadata": {"name": ENDPOINT, "namespace": NS},
                "spec": {"url": "https://api.example.com", "rewritePath": "/"}}
    assert as_(cp, TENANT, "create", doc=endpoint)[0] == 0
    refused_by_rbac(as_(cp, TENANT, "patch", "modelendpoints.modelplane.ai", ENDPOINT, "-n", NS,
                        "--subresource=status", "--type=merge", "--dry-run=server",
                        "-p", json.dumps({"status": {"phase": "Valid"}})))


def test_rbac_that_lets_an_editor_in_does_not_let_it_write_replicas_or_status(
        cp: ControlPlane, tenancy):
    err = refused_by_policy(create(cp, EDITOR, replica()), "modelplane-controller-only")
    assert "a ModelReplica is the scheduler's output" in err and EDITOR in err
    err = refused_by_policy(as_(cp, EDITOR, "patch", "modelendpoints.modelplane.ai", ENDPOINT,
                                "-n", NS, "--subresource=status", "--type=merge",
                                "--dry-run=server",
                                "-p", json.dumps({"status": {"phase": "Valid"}})),
                            "modelplane-controller-only")
    assert "write the status of modelendpoints" in err


def provider_config(credentials: dict) -> dict:
    return {"apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "ProviderConfig",
            "metadata": {"name": "mine", "namespace": NS}, "spec": {"credentials": credentials}}


# The two doors a namespaced ProviderConfig opened (#48 finding 2): the platform's
# kubeconfig Secret, which docs/install.md asks for in crossplane-system, and the
# provider's own identity.
PLATFORM_SECRET = {"source": "Secret", "secretRef": {
    "namespace": "crossplane-system", "name": "eu-west-1-kubeconfig", "key": "kubeconfig"}}
INJECTED = {"source": "InjectedIdentity"}


def test_only_the_platform_writes_provider_kubernetes_kinds(cp: ControlPlane, tenancy):
    # An Object with the platform's cluster-wide credentials, or with a ProviderConfig of
    # the namespace (which may name the same credentials): refused alike.
    for ref in (None, {"kind": "ClusterProviderConfig", "name": "eu-west-1"},
                {"kind": "ProviderConfig", "name": "mine"}):
        err = refused_by_policy(create(cp, EDITOR, remote_object(ref)),
                                "modelplane-provider-kinds")
        assert "only the platform's controllers" in err and EDITOR in err
    for credentials in (PLATFORM_SECRET, INJECTED):
        refused_by_policy(create(cp, EDITOR, provider_config(credentials)),
                          "modelplane-provider-kinds")
    # The platform's controllers (here, the harness's admin) pass.
    for doc in (remote_object(None), provider_config(INJECTED)):
        assert cp.kubectl("create", "--dry-run=server", "-f", "-",
                          input=yaml.safe_dump(doc)).returncode == 0


def test_an_object_that_exists_is_not_changed_relabelled_or_deleted_but_by_the_platform(
        cp: ControlPlane, tenancy):
    """Status writes, metadata-only updates and deletes: what the policy missed before."""
    obj = remote_object(None)
    obj["metadata"]["name"] = "observed-only"
    obj["spec"]["managementPolicies"] = ["Observe"]  # the provider only reads it
    name = ("objects.kubernetes.m.crossplane.io", "observed-only", "-n", NS)
    cp.apply([obj])
    try:
        refused_by_policy(as_(cp, EDITOR, "label", *name, "stolen=yes", "--dry-run=server"),
                          "modelplane-provider-kinds")
        err = refused_by_policy(as_(cp, EDITOR, "patch", *name, "--subresource=status",
                                    "--type=merge", "--dry-run=server", "-p",
                                    json.dumps({"status": {"atProvider": {}}})),
                                "modelplane-provider-kinds")
        assert "objects/status" in err
        refused_by_policy(as_(cp, EDITOR, "delete", *name, "--dry-run=server"),
                          "modelplane-provider-kinds")
        # The tenant's RBAC never let it near them in the first place.
        refused_by_rbac(as_(cp, TENANT, "delete", *name, "--dry-run=server"))
    finally:
        cp.kubectl("delete", *name, "--ignore-not-found", "--wait=false")


@pytest.mark.parametrize("namespace", ["kube-system", "default", "crossplane-system"])
def test_no_model_is_created_in_a_reserved_namespace_by_anyone(cp: ControlPlane, namespace):
    """Not even by the platform's controllers (here, the harness's admin): a model's
    workloads land in a namespace named like its own, here and on every cluster."""
    proc = cp.kubectl("create", "--dry-run=server", "-f", "-", check=False,
                      input=yaml.safe_dump(single_gpu("chat", namespace, 1)))
    assert proc.returncode != 0, proc.stdout
    assert "modelplane-reserved-namespaces" in proc.stderr and \
        f"namespace {namespace} is reserved" in proc.stderr, proc.stderr


@pytest.mark.parametrize("cluster", ["eu-west-1", "us-central-batch"])
def test_the_provider_reaches_workload_clusters_as_the_shipped_remote_identity(
        cp: ControlPlane, cluster):
    """The ClusterProviderConfig's kubeconfig holds the token of a ServiceAccount bound
    to security/remote-identity.yaml's ClusterRole, not the cluster's admin: every
    other scenario that composes onto a remote cluster runs with exactly those rules."""
    secret = json.loads(cp.kubectl("get", "secret", f"{cluster}-kubeconfig", "-n",
                                   "crossplane-system", "-o", "json").stdout)
    kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    (user,) = kubeconfig["users"]
    assert set(user["user"]) == {"token"}, "not a token: the admin's certificate?"
    who = "system:serviceaccount:kube-system:modelplane-remote"
    remote = cp.cluster(cluster)
    can = cp.kubectl("auth", "can-i", "--list", f"--as={who}", cluster=remote).stdout
    assert "*.*" not in can, can  # never everything
    for verb, what, allowed in (("create", "leaderworkersets.leaderworkerset.x-k8s.io", True),
                                ("create", "deployments.apps", True),
                                ("create", "clusterroles.rbac.authorization.k8s.io", True),
                                ("escalate", "clusterroles.rbac.authorization.k8s.io", False),
                                ("update", "customresourcedefinitions.apiextensions.k8s.io",
                                 False),
                                ("create", "pods", False),
                                ("delete", "nodes", False)):
        got = cp.kubectl("auth", "can-i", verb, what, f"--as={who}", "-A", cluster=remote,
                         check=False).stdout.strip()
        assert got == ("yes" if allowed else "no"), (verb, what, got)
