"""The remote identity we ship grants exactly what the function composes onto a
workload cluster (#33, finding 3): security/remote-identity.yaml, the ClusterRole for
the kubeconfig of a remote cluster's ClusterProviderConfig.

provider-kubernetes applies each Object's `spec.forProvider.manifest` on the remote
cluster with that identity. What that takes follows from the Object (provider-kubernetes
v1.2's default server-side apply, found on make cluster: even an observe-only Object
dry-runs an apply):

* Observe: get and a dry-run apply (patch); with `spec.watch`, a list and watch of the
  kind (the provider's informer, cluster-wide);
* Create: create and patch (an apply that creates); Update: patch; Delete: delete;
  LateInitialize: nothing remote; `*` (no managementPolicies): all of them.

get, patch and delete name the object; create, list and watch cannot. A Role or
ClusterRole composed there, and a binding of one, is let through only if the identity
holds every rule of it (Kubernetes' RBAC escalation check), so those rules are needed
too.

What is rendered: every replica the example deployments place (the ModelReplicas of
tests/golden/, which tests/test_composer_golden.py renders from examples/deployments),
each on its cluster made remote, and the example replica; remote replicas of every
serving mode from the composer's builders (Service, a LeaderWorkerSet gang,
EndpointPicker with a replicated picker, PrefillDecode); the example cache staged on a
remote cluster; a ModelService on a remote front door with retries, an FQDN endpoint
with a credential, API keys or JWT; the example fleet's and stack's InferenceClusters,
one with a PodMonitor.
"""

from __future__ import annotations

import copy
import pathlib
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import kubernetes_validate
import pytest
import yaml
import test_modelcache as cache_tests
import test_modelservice as service_tests
from builders import EXAMPLES, ROOT, desired, load, load_one
from composer_support import FLEET, REMOTE, as_composed, compose, gang, replica, standalone, template
from schemas import KUBERNETES_VERSION
from test_cluster_inventory import run_cluster
from test_cluster_stack import install

from e2e.controlplane import security as harness_security
from function.contract.stack import BY_FIELD, COMPONENTS, GATEWAY, LABEL_COMPONENT

SHIPPED = ROOT / "security" / "remote-identity.yaml"
ROLE_NAME = "modelplane-remote"
# What the serving stack's controllers' tier takes on top (a controller's chart).
STACK_SHIPPED = ROOT / "security" / "remote-identity-stack.yaml"
STACK_ROLE_NAME = "modelplane-remote-stack"
NON_RESOURCE = "<non-resource URL>"  # an Access's group for a nonResourceURLs rule
OBJECT_GROUP = "kubernetes.m.crossplane.io"

# Which resource each kind composed onto a remote cluster is, by (API group, kind).
RESOURCES: dict[tuple[str, str], str] = {
    ("", "Namespace"): "namespaces",
    ("", "Service"): "services",
    ("", "ServiceAccount"): "serviceaccounts",
    ("", "ConfigMap"): "configmaps",
    ("", "Secret"): "secrets",
    ("", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("apps", "Deployment"): "deployments",
    ("batch", "Job"): "jobs",
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): "leaderworkersets",
    ("resource.k8s.io", "ResourceClaimTemplate"): "resourceclaimtemplates",
    ("gateway.networking.k8s.io", "HTTPRoute"): "httproutes",
    ("gateway.networking.k8s.io", "Gateway"): "gateways",
    ("gateway.networking.k8s.io", "GatewayClass"): "gatewayclasses",
    ("inference.networking.k8s.io", "InferencePool"): "inferencepools",
    ("rbac.authorization.k8s.io", "Role"): "roles",
    ("rbac.authorization.k8s.io", "RoleBinding"): "rolebindings",
    ("rbac.authorization.k8s.io", "ClusterRole"): "clusterroles",
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): "clusterrolebindings",
    ("monitoring.coreos.com", "PodMonitor"): "podmonitors",
    ("gateway.envoyproxy.io", "Backend"): "backends",
    ("gateway.envoyproxy.io", "BackendTrafficPolicy"): "backendtrafficpolicies",
    ("gateway.envoyproxy.io", "HTTPRouteFilter"): "httproutefilters",
    ("gateway.envoyproxy.io", "SecurityPolicy"): "securitypolicies",
    ("apiextensions.k8s.io", "CustomResourceDefinition"): "customresourcedefinitions",
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"):
        "mutatingwebhookconfigurations",
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"):
        "validatingwebhookconfigurations",
}
# What provider-kubernetes does on the remote cluster for each management policy.
# provider-kubernetes v1.2 applies with server-side apply unless started with
# --enable-server-side-apply=false: it observes an object by a get and a dry-run apply
# (a patch, which RBAC checks like any other), creates it by an apply (a patch that
# creates, so create and patch) and updates it by an apply.
POLICY_VERBS: dict[str, frozenset[str]] = {
    "Observe": frozenset({"get", "patch"}), "Create": frozenset({"create", "patch"}),
    "Update": frozenset({"patch"}), "Delete": frozenset({"delete"}),
    "LateInitialize": frozenset()}
NAMED_VERBS = frozenset({"get", "patch", "delete"})  # the others cannot name an object
# Verbs that would let the identity grant or act as more than it holds.
ESCALATING = frozenset({"*", "escalate", "bind", "impersonate"})


class Access(NamedTuple):
    group: str
    resource: str
    verb: str
    name: str | None  # None: any object of the resource


# --- what the function composes ------------------------------------------------------

def resource_of(manifest: Mapping[str, Any]) -> tuple[str, str]:
    group = manifest["apiVersion"].rpartition("/")[0]
    found = RESOURCES.get((group, manifest["kind"]))
    if found is None:
        pytest.fail(f"{manifest['kind']} ({manifest['apiVersion']}) is composed onto a remote "
                    "cluster but is not in RESOURCES: add its resource here and the rule it "
                    "needs to security/remote-identity.yaml")
    return group, found


def verbs_of(obj: Mapping[str, Any]) -> frozenset[str]:
    """What provider-kubernetes does on the remote cluster for one Object."""
    spec = obj["spec"]
    policies = spec.get("managementPolicies") or ["*"]
    if "*" in policies:
        policies = list(POLICY_VERBS)
    unknown = [p for p in policies if p not in POLICY_VERBS]
    assert not unknown, f"{obj['metadata']['name']}: unknown management policies {unknown}"
    verbs = frozenset().union(*(POLICY_VERBS[p] for p in policies))
    if spec.get("watch") and "Observe" in policies:
        verbs |= {"list", "watch"}
    return verbs


def needs_of(obj: Mapping[str, Any]) -> Iterator[Access]:
    """Every access one Object takes on its cluster, with what a role it composes grants."""
    manifest = obj["spec"]["forProvider"]["manifest"]
    group, resource = resource_of(manifest)
    for verb in verbs_of(obj):
        yield Access(group, resource, verb,
                     manifest["metadata"]["name"] if verb in NAMED_VERBS else None)
    if manifest["kind"] in ("Role", "ClusterRole"):
        yield from accesses(manifest["rules"])


def accesses(rules: list[Mapping[str, Any]]) -> Iterator[Access]:
    for rule in rules:
        for url in rule.get("nonResourceURLs") or []:
            for verb in rule["verbs"]:
                yield Access(NON_RESOURCE, url, verb, None)
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [None]:
                        yield Access(group, resource, verb, name)


def remote_objects(composed: Mapping[str, Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    objects = [o for o in composed.values()
               if o["kind"] == "Object" and o["apiVersion"].startswith(OBJECT_GROUP + "/")]
    for o in objects:
        assert o["spec"]["providerConfigRef"].get("kind", "ClusterProviderConfig") \
            == "ClusterProviderConfig", o["metadata"]["name"]
    return objects


# --- the renders -----------------------------------------------------------------------

def made_remote(name: str) -> dict[str, Any]:
    ic = copy.deepcopy(FLEET[name])
    ic["spec"].setdefault("providerConfigRef", {"name": name, "kind": "ClusterProviderConfig"})
    return ic


def example_replicas() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted((ROOT / "tests" / "golden").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "ModelReplica":
                doc.pop("status", None)
                yield f"examples/deployments/{path.stem}.yaml", doc
    yield "examples/replicas", as_composed(load_one(EXAMPLES / "replicas" / "llama-3-1-8b-0.yaml"))


def serving_modes() -> Iterator[tuple[str, dict[str, Any]]]:
    yield "Unified, router Service", replica(standalone(pool="l4-4x"), cluster=REMOTE)
    yield "Unified, a Leader/Worker gang", replica(gang(pool="h100-8x-rdma", nodes=2),
                                                   cluster=REMOTE)
    picked = replica(standalone(pool="l4-4x", copies=2), cluster=REMOTE)
    picked["spec"]["serving"]["router"] = "EndpointPicker"
    yield "Unified, router EndpointPicker", picked
    yield "PrefillDecode", replica(
        dict(standalone("prefill", pool="l4-4x"), phase="Prefill"),
        dict(standalone("decode", pool="l4-4x", template=template(args=["m", "--port=8200"])),
             phase="Decode"),
        cluster=REMOTE, mode="PrefillDecode")


def front_doors() -> Iterator[tuple[str, dict[str, Any]]]:
    endpoints = [service_tests.endpoint("a"),
                 service_tests.endpoint("b", "https://api.example.com",
                                        auth={"secretRef": {"name": "provider-key"}})]
    primary = ((1, {"app": "a"}), (1, {"app": "b"}))
    for label, authentication in (
            ("API keys", {"apiKeys": {"secretRef": {"name": "clients"}}}),
            ("JWT", {"jwt": {"providers": [{"name": "corp", "remoteJWKS": {
                "uri": "https://idp.example.com/.well-known/jwks.json"}}]}})):
        spec = service_tests.service(primary, gateway={"clusterName": "edge"},
                                     retry={"attempts": 2}, authentication=authentication)
        yield f"a ModelService on a remote front door, {label}", desired(service_tests.run(
            spec, [[endpoints[0]], [endpoints[1]]], door=[service_tests.REMOTE_DOOR]))


def controllers_tier(obj: Mapping[str, Any]) -> bool:
    """An Object of a controller's chart, which the stack role grants (a CRD, the
    controller's namespace and the stack's Gateway are the base role's)."""
    manifest = obj["spec"]["forProvider"]["manifest"]
    component = (manifest["metadata"].get("labels") or {}).get(LABEL_COMPONENT)
    return component in BY_FIELD \
        and manifest["kind"] not in ("CustomResourceDefinition", "Namespace")


def clusters() -> Iterator[tuple[str, dict[str, Any]]]:
    for ic in load(EXAMPLES / "fleet") + load(EXAMPLES / "stack"):
        # Installed to the last tier: every Object a stack ever composes.
        yield f"InferenceCluster {ic['metadata']['name']}", install(ic)[0]
    monitored = made_remote("eu-west-1")
    monitored["spec"]["monitoring"] = {"podMonitor": {"interval": "15s"}}
    yield "InferenceCluster eu-west-1 with a PodMonitor", desired(run_cluster(monitored))
    # Every component observed: each probe CRD (an External component's, observed by
    # name) and the Gateway.
    observing = made_remote("eu-west-1")
    observing["spec"]["stack"] = {c.field: {"mode": "External"}
                                  for c in (*COMPONENTS, GATEWAY)}
    yield "InferenceCluster eu-west-1 observing every component", desired(run_cluster(observing))


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Mapping[str, Any]]]:
    """What each render composes onto remote clusters: its Objects."""
    with pytest.MonkeyPatch.context() as mp:
        # A replicated endpoint picker elects a leader: its Role grants Leases and events.
        mp.setenv("MODELPLANE_EPP_REPLICAS", "2")
        out: dict[str, list[Mapping[str, Any]]] = {}
        for label, mr in [*example_replicas(), *serving_modes()]:
            placed = compose(mr, made_remote(mr["spec"]["clusterName"]))
            # Routed too: a replica whose routing failed would hide what routing needs.
            assert not placed.fatal and placed.of_kind("HTTPRoute"), (label, placed.fatal)
            out[f"{label}: {mr['metadata']['name']}"] = remote_objects(placed.desired)
        staged = cache_tests.run(observed=cache_tests.secret_there())
        out["examples/caches/qwen3-8b.yaml on eu-west-1"] = remote_objects(desired(staged))
        for label, composed in [*front_doors(), *clusters()]:
            out[label] = remote_objects(composed)
    return out


def needs(rendered: Mapping[str, list[Mapping[str, Any]]], stack_role: bool) -> dict[Access, str]:
    """Every access the renders take, with the first render that takes it: those of
    the controllers' tier (stack_role) or all the others."""
    out: dict[Access, str] = {}
    for label, objects in rendered.items():
        for obj in objects:
            if controllers_tier(obj) != stack_role:
                continue
            manifest = obj["spec"]["forProvider"]["manifest"]
            for access in needs_of(obj):
                out.setdefault(access, f"{label} ({manifest['kind']} {manifest['metadata']['name']})")
    return out


@pytest.fixture(scope="module")
def needed(rendered) -> dict[Access, str]:
    return needs(rendered, stack_role=False)


@pytest.fixture(scope="module")
def stack_needed(rendered) -> dict[Access, str]:
    needed = needs(rendered, stack_role=True)
    assert needed, "no render installs a controller's chart"
    return needed


# --- what we ship ------------------------------------------------------------------------

def shipped_role(path: pathlib.Path = SHIPPED, name: str = ROLE_NAME) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [("ClusterRole", name)]
    return docs[0]


def granted(path: pathlib.Path = SHIPPED, name: str = ROLE_NAME) -> set[Access]:
    return set(accesses(shipped_role(path, name)["rules"]))


def stack_granted() -> set[Access]:
    return granted(STACK_SHIPPED, STACK_ROLE_NAME)


def allows(grants: set[Access], need: Access) -> bool:
    return need._replace(name=None) in grants or (need.name is not None and need in grants)


def test_every_access_the_function_takes_on_a_remote_cluster_is_granted(needed):
    grants = granted()
    missing = sorted((a, why) for a, why in needed.items() if not allows(grants, a))
    assert missing == [], "security/remote-identity.yaml does not grant:\n" + "\n".join(
        f"  {a.verb} {a.resource}.{a.group or 'core'}{' ' + a.name if a.name else ''}: {why}"
        for a, why in missing)


def test_the_role_grants_nothing_the_function_never_composes(needed):
    any_of_verb = {a._replace(name=None) for a in needed}
    # A grant of every object is needed when some object takes that verb; one naming
    # objects, when each of them does.
    needless = sorted(g for g in granted()
                      if (g not in any_of_verb if g.name is None else g not in needed))
    assert needless == [], "security/remote-identity.yaml grants what nothing needs:\n" + \
        "\n".join(f"  {g.verb} {g.resource}.{g.group or 'core'}{' ' + g.name if g.name else ''}"
                  for g in needless)


def test_the_stack_role_with_the_base_grants_what_installing_a_controller_takes(stack_needed):
    grants = granted() | stack_granted()
    missing = sorted((a, why) for a, why in stack_needed.items() if not allows(grants, a))
    assert missing == [], "security/remote-identity-stack.yaml does not grant:\n" + "\n".join(
        f"  {a.verb} {a.resource}.{a.group or 'core'}{' ' + a.name if a.name else ''}: {why}"
        for a, why in missing)


def test_the_stack_role_grants_only_what_the_base_lacks_and_a_controller_needs(stack_needed):
    base = granted()
    any_of_verb = {a._replace(name=None) for a in stack_needed}
    needless = sorted(g for g in stack_granted()
                      if allows(base, g) or
                      (g not in any_of_verb if g.name is None else g not in stack_needed))
    assert needless == [], "security/remote-identity-stack.yaml grants what it need not:\n" + \
        "\n".join(f"  {g.verb} {g.resource}.{g.group or 'core'}{' ' + g.name if g.name else ''}"
                  for g in needless)


def test_the_stack_role_has_no_wildcard_and_no_escalation():
    role = shipped_role(STACK_SHIPPED, STACK_ROLE_NAME)
    assert "aggregationRule" not in role
    for rule in role["rules"]:
        assert not {"*"} & {*rule.get("apiGroups", []), *rule.get("resources", []),
                            *rule.get("nonResourceURLs", [])}, rule
        assert not ESCALATING & set(rule["verbs"]), rule
    kubernetes_validate.validate(role, KUBERNETES_VERSION, strict=True)


def test_the_role_has_no_wildcard_no_escalation_and_is_not_cluster_admin():
    role = shipped_role()
    assert role["metadata"]["name"] != "cluster-admin" and "aggregationRule" not in role
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule, rule
        assert not {"*"} & {*rule["apiGroups"], *rule["resources"]}, rule
        assert not ESCALATING & set(rule["verbs"]), rule
        assert all("/" not in r for r in rule["resources"]), rule  # no subresources


def test_the_renders_compose_every_kind_the_table_knows(rendered):
    """Each feature that lands on a remote cluster is rendered, and the table holds no
    kind the function no longer composes there."""
    kinds = {resource_of(o["spec"]["forProvider"]["manifest"])
             for objects in rendered.values() for o in objects}
    assert kinds == {(group, resource) for (group, _), resource in RESOURCES.items()}


def test_an_unknown_kind_fails_loudly():
    with pytest.raises(pytest.fail.Exception, match="Widget .* is not in RESOURCES"):
        resource_of({"apiVersion": "example.com/v1", "kind": "Widget"})


@pytest.mark.parametrize(("spec", "verbs"), [
    ({"managementPolicies": ["Observe"]}, {"get", "patch"}),
    ({"managementPolicies": ["Observe"], "watch": True}, {"get", "patch", "list", "watch"}),
    ({"managementPolicies": ["Observe", "Create", "Update", "LateInitialize"]},
     {"get", "create", "patch"}),
    ({}, {"get", "create", "patch", "delete"}),
    ({"managementPolicies": ["*"], "watch": True},
     {"get", "list", "watch", "create", "patch", "delete"}),
])
def test_the_verbs_follow_the_objects_management_policies(spec, verbs):
    assert verbs_of({"metadata": {"name": "x"}, "spec": spec}) == verbs


def example_documents() -> list[dict[str, Any]]:
    """The commented example of a ServiceAccount bound to the role, uncommented."""
    lines = SHIPPED.read_text().splitlines()
    example = []
    for line in lines[lines.index("#   apiVersion: v1"):]:
        if not line.startswith("#"):
            break
        example.append(line.removeprefix("#   "))
    return [d for d in yaml.safe_load_all("\n".join(example)) if d]


def test_the_role_and_the_example_are_valid_kubernetes():
    for doc in [shipped_role(), *example_documents()]:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_example_binding_binds_the_shipped_role():
    kinds = {d["kind"]: d for d in example_documents()}
    binding, account = kinds["ClusterRoleBinding"], kinds["ServiceAccount"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": ROLE_NAME}
    assert binding["subjects"] == [{"kind": "ServiceAccount", **account["metadata"]}]
    token = kinds["Secret"]
    assert token["metadata"]["annotations"]["kubernetes.io/service-account.name"] == \
        account["metadata"]["name"]


def test_make_cluster_applies_it_on_no_control_plane():
    applied = {(d["kind"], d["metadata"]["name"]) for d in harness_security.manifests()}
    assert ("ClusterRole", ROLE_NAME) not in applied
    assert ("ClusterRole", "modelplane-tenant") in applied


def test_make_cluster_binds_both_shipped_roles_to_its_remote_identity():
    docs = harness_security.remote_identity()
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    assert roles == {ROLE_NAME: shipped_role(),
                     STACK_ROLE_NAME: shipped_role(STACK_SHIPPED, STACK_ROLE_NAME)}
    bindings = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert sorted(b["roleRef"]["name"] for b in bindings) == [ROLE_NAME, STACK_ROLE_NAME]
    assert {s["name"] for b in bindings for s in b["subjects"]} == {harness_security.REMOTE_IDENTITY}
