"""The local control plane's pure helpers: certificates (openssl), kubeconfigs,
LWS's webhook configurations on loopback, the tool list hack/tools.sh prints,
and the aggregated ClusterRole read from docs/install.md."""

from __future__ import annotations

import base64
import pathlib
import subprocess

import pytest
import yaml

from e2e.controlplane import addons, certs, core, tools

ROOT = pathlib.Path(__file__).resolve().parents[2]

LWS_MANIFESTS = """
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset}
  failurePolicy: Fail
  name: mleaderworkerset.kb.io
  rules: [{apiGroups: [leaderworkerset.x-k8s.io], apiVersions: [v1], operations: [CREATE, UPDATE],
           resources: [leaderworkersets]}]
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
  failurePolicy: Fail
  name: mpod.kb.io
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate--v1-pod}
  failurePolicy: Fail
  name: vpod.kb.io
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}]
  sideEffects: None
"""


# ---- certificates ----------------------------------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = certs.make_ca(d)
    return d, ca


def test_a_serving_certificate_names_loopback_and_verifies(pki):
    d, ca = pki
    leaf = certs.issue(ca, d, "apiserver", "kube-apiserver", server=True,
                       dns=["localhost", "kubernetes.default.svc"], ips=["127.0.0.1"])
    assert certs.verify(ca.crt, leaf.crt).endswith("OK")
    text = certs.describe(leaf.crt)
    assert "DNS:localhost" in text and "IP Address:127.0.0.1" in text
    assert "TLS Web Server Authentication" in text and "CA:FALSE" in text
    assert oct(leaf.key.stat().st_mode & 0o777) == "0o600"


def test_the_admin_client_certificate_is_in_system_masters(pki):
    d, ca = pki
    admin = certs.issue(ca, d, "admin", "modelplane-e2e-admin", orgs=["system:masters"],
                        client=True)
    subject = subprocess.run(["openssl", "x509", "-in", str(admin.crt), "-noout", "-subject"],
                             capture_output=True, text=True, check=True).stdout
    assert "O = system:masters" in subject and "CN = modelplane-e2e-admin" in subject
    assert "TLS Web Client Authentication" in certs.describe(admin.crt)


def test_a_certificate_signed_by_a_ca_made_elsewhere(pki, tmp_path):
    d, ca = pki
    # Crossplane's CA arrives as PEM bytes from a Secret.
    other = certs.write_ca(tmp_path, "crossplane-ca", *ca.pem())
    leaf = certs.issue(other, tmp_path, "function", "function-model-serving", server=True,
                       ips=["127.0.0.1"])
    assert certs.verify(ca.crt, leaf.crt).endswith("OK")


def test_extensions_refuse_a_leaf_for_nothing_and_bad_subjects(pki):
    with pytest.raises(certs.CertError):
        certs.extensions()
    d, ca = pki
    with pytest.raises(certs.CertError, match="unsupported"):
        certs.issue(ca, d, "x", "a/b", client=True)


def test_service_account_keys(tmp_path):
    key, pub = certs.make_rsa_keypair(tmp_path)
    assert b"PUBLIC KEY" in pub.read_bytes() and b"PRIVATE KEY" in key.read_bytes()


# ---- kubeconfig and webhooks ---------------------------------------------------------

def test_kubeconfig_embeds_everything():
    kc = addons.kubeconfig("eu-west-1", "https://127.0.0.1:6443", b"CA", b"CERT", b"KEY")
    assert kc["current-context"] == "eu-west-1"
    cluster = kc["clusters"][0]["cluster"]
    assert cluster == {"server": "https://127.0.0.1:6443",
                       "certificate-authority-data": base64.b64encode(b"CA").decode()}
    user = kc["users"][0]["user"]
    assert base64.b64decode(user["client-key-data"]) == b"KEY"
    # Round-trips as YAML (what the kubeconfig Secret holds).
    assert yaml.safe_load(yaml.safe_dump(kc)) == kc


def test_lws_webhooks_point_at_loopback_with_our_ca():
    hooks = addons.lws_webhooks(LWS_MANIFESTS, port=9555, ca_pem=b"PEM")
    assert [h["metadata"]["name"] for h in hooks] == [
        "lws-mutating-webhook-configuration", "lws-validating-webhook-configuration"]
    all_hooks = [w for h in hooks for w in h["webhooks"]]
    assert [w["clientConfig"]["url"] for w in all_hooks] == [
        "https://127.0.0.1:9555/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
        "https://127.0.0.1:9555/mutate--v1-pod", "https://127.0.0.1:9555/validate--v1-pod"]
    assert all(w["clientConfig"]["caBundle"] == base64.b64encode(b"PEM").decode()
               for w in all_hooks)
    pods = [w for w in all_hooks if w["name"] in addons.LWS_POD_WEBHOOKS]
    # Only LWS pods go through the pod webhooks: a stopped LWS blocks no other pod.
    assert len(pods) == 2 and all(w["objectSelector"] == addons.LWS_POD_SELECTOR for w in pods)
    assert "objectSelector" not in all_hooks[0]


def test_lws_config_turns_off_cert_management_and_leader_election(tmp_path):
    cfg = addons.lws_config(webhook_port=1, cert_dir=tmp_path, health_port=2)
    assert cfg["internalCertManagement"] == {"enable": False}
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["webhook"] == {"port": 1, "host": "127.0.0.1", "certDir": str(tmp_path)}
    assert cfg["health"]["healthProbeBindAddress"] == "127.0.0.1:2"


def test_crd_files_keep_only_crds_and_the_cluster_set_names_what_the_harness_needs(tmp_path):
    for folder in addons.CLUSTER_CRDS:
        (tmp_path / "crds" / folder).mkdir(parents=True)
        (tmp_path / "crds" / folder / "kustomization.yaml").write_text("resources: [a.yaml]\n")
        (tmp_path / "crds" / folder / "x.yaml").write_text(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
            f"metadata: {{name: things.{folder}.example.com}}\n")
    with pytest.raises(addons.AddonError, match="lacks .*inferencepools.inference.networking.k8s.io"):
        addons.cluster_crds(tmp_path)
    files = addons.vendored_crds(tmp_path, ["lws"])
    assert [f.name for f in files] == ["x.yaml"]
    assert addons.crd_names(files) == ["things.lws.example.com"]


def test_the_vendored_crds_hold_what_every_cluster_needs():
    names = addons.crd_names(addons.cluster_crds(ROOT))
    assert set(addons.REQUIRED_CRDS) <= set(names)
    assert len(names) == len(set(names))


def test_provider_package_files_can_drop_the_legacy_crd(tmp_path):
    (tmp_path / "crds").mkdir()
    (tmp_path / "crossplane.yaml").write_text("kind: Provider\n")
    for name in ("kubernetes.crossplane.io_objects.yaml", "kubernetes.m.crossplane.io_objects.yaml"):
        (tmp_path / "crds" / name).write_text("x: 1\n")
    keep = addons.provider_package_files(tmp_path, drop_legacy=False)
    drop = addons.provider_package_files(tmp_path, drop_legacy=True)
    assert len(keep) == 3 and [p.name for p in drop] == ["crossplane.yaml",
                                                         "kubernetes.m.crossplane.io_objects.yaml"]


# ---- tools ---------------------------------------------------------------------------------

def test_tools_env_lines_are_parsed_and_checked(tmp_path):
    binary = tmp_path / "bin"
    binary.write_text("")
    lines = [f"{k}={binary}" for k in tools.BINARIES] + \
        [f"export {k}='{tmp_path}'" for k in tools.SOURCES] + ["# comment", "noise"]
    env = tools.parse_env("\n".join(lines))
    assert env["KUBECTL"] == str(binary) and env["KWOK_SRC"] == str(tmp_path)
    assert tools.check(env)["ETCD"] == str(binary)
    with pytest.raises(tools.ToolsError, match="did not print ETCD"):
        tools.check({k: v for k, v in env.items() if k != "ETCD"})
    with pytest.raises(tools.ToolsError, match="do not exist"):
        tools.check(env | {"KWOK": str(tmp_path / "missing")})


def test_go_mod_pins_and_module_versions(tmp_path):
    mod = tmp_path / "go.mod"
    mod.write_text("module x\n\ngo 1.24\n\nrequire github.com/a/b v1.2.0\n\n"
                   "require (\n\tgithub.com/c/d v0.3.1 // indirect\n)\n")
    assert tools.go_mod_pin(mod, "github.com/a/b") == "v1.2.0"
    assert tools.go_mod_pin(mod, "github.com/c/d") == "v0.3.1"
    with pytest.raises(tools.ToolsError):
        tools.go_mod_pin(mod, "github.com/e/f")
    assert tools.version_of_src(pathlib.Path("/m/provider-kubernetes@v1.2.0")) == "v1.2.0"


def test_the_documented_cluster_role_is_found():
    role = core.docs_cluster_role(ROOT / "docs" / "install.md")
    assert role["kind"] == "ClusterRole"
    assert role["metadata"]["labels"]["rbac.crossplane.io/aggregate-to-crossplane"] == "true"
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert {"deployments", "leaderworkersets", "httproutes"} <= resources


def test_a_doc_without_the_cluster_role_fails_loudly(tmp_path):
    (tmp_path / "install.md").write_text("```yaml\nkind: ClusterRole\nmetadata: {name: x}\n```\n")
    with pytest.raises(core.ControlPlaneError, match="no aggregated ClusterRole"):
        core.docs_cluster_role(tmp_path / "install.md")


def test_example_namespaces_are_the_ones_the_examples_use():
    assert core.example_namespaces(ROOT / "examples" / "deployments") == {"ml-team"}
