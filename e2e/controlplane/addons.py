"""What every workload cluster runs besides Kubernetes, from the pinned sources.

Pure helpers (file lists and manifest rewrites): the CRDs vendored in crds/,
and over the Go module source directories `hack/tools.sh --e2e --dataplane --env` prints,
kwok's stages, LWS's webhook manifests and provider-kubernetes' package; and
kubeconfigs.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

# kwok refuses to start without stages: node initialisation, heartbeats with
# leases, and the fast pod lifecycle (ready, complete) from kwok's module; pod
# deletion from ours (stages/), which terminates a pod before deleting it as a
# kubelet does, so the claims it owns are released.
KWOK_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    # Only nodes labelled node-not-ready.stage.kwok.x-k8s.io=true: e2e makes a node NotReady.
    "kustomize/stage/node/chaos/node-not-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
)
# Our own: pod deletion (stages/), and the pods kwok hands to the pods supervisor
# (pods/stages/): kwok's pod-ready for every pod whose images run nothing here, and
# pod-start (Running with its IP, Ready left to the probes) for the rest.
OWN_STAGES = tuple(sorted((Path(__file__).parent / "stages").glob("*.yaml"))) + tuple(
    sorted((Path(__file__).parent / "pods" / "stages").glob("*.yaml")))

LWS_WEBHOOKS = "config/webhook/manifests.yaml"
LWS_NAMESPACE = "lws-system"
# config/webhook/*-patch.yaml: the pod webhooks only see LWS pods.
LWS_POD_WEBHOOKS = ("mpod.kb.io", "vpod.kb.io")
LWS_POD_SELECTOR = {"matchExpressions": [
    {"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]}

PROVIDER_KUBERNETES_LEGACY_CRD = "kubernetes.crossplane.io_objects.yaml"


class AddonError(RuntimeError):
    pass


def load_all(path: Path) -> list[Any]:
    """The YAML documents of a file, with libyaml's parser: a vendored CRD is up to a
    few MB, which the pure-Python parser reads in seconds."""
    return list(yaml.load_all(Path(path).read_text(), Loader=yaml.CSafeLoader))



def kwok_stage_files(kwok_src: Path) -> list[Path]:
    files = [Path(kwok_src) / rel for rel in KWOK_STAGES] + list(OWN_STAGES)
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise AddonError(f"kwok stages missing from {kwok_src}: {', '.join(missing)}")
    return files


def crd_files(directory: Path, *, pattern: str = "*.yaml") -> list[Path]:
    """The CRD manifests directly in a directory (kustomization files excluded)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise AddonError(f"no CRD directory {directory}")
    files = []
    for path in sorted(directory.glob(pattern)):
        docs = [d for d in load_all(path) if isinstance(d, dict)]
        if docs and all(d.get("kind") == "CustomResourceDefinition" for d in docs):
            files.append(path)
    if not files:
        raise AddonError(f"no CustomResourceDefinition in {directory}")
    return files


# The folders of crds/ every cluster gets (hack/vendor_crds.py copies them from the
# modules hack/tools/ pins: the same files the unit tests validate against). Envoy
# Gateway's must exist before its controller starts, which watches only the kinds
# it finds; PodMonitor's so the API server admits what an InferenceCluster that
# opts in to monitoring composes (no operator or Prometheus runs).
CLUSTER_CRDS = ("gateway-api", "inference-extension", "lws", "envoy-gateway",
                "prometheus-operator")
# KEDA's ScaledObject and TriggerAuthentication, on the control plane only: an
# autoscaled deployment's ScaledObject is admitted by a real API server; KEDA's
# operator does not run (it does not build from the module proxy).
CONTROL_PLANE_CRDS = ("keda",)
# What the harness cannot run without.
REQUIRED_CRDS = ("inferencepools.inference.networking.k8s.io",
                 "leaderworkersets.leaderworkerset.x-k8s.io",
                 "disaggregatedsets.disaggregatedset.x-k8s.io",
                 "httproutes.gateway.networking.k8s.io")


def vendored_crds(repo: Path, folders: Iterable[str]) -> list[Path]:
    """The CRD files of the named folders of crds/ (`make vendor-crds`)."""
    return [f for folder in folders for f in crd_files(Path(repo) / "crds" / folder)]


def cluster_crds(repo: Path) -> list[Path]:
    """What every cluster installs; fails when crds/ lacks a CRD the harness needs."""
    files = vendored_crds(repo, CLUSTER_CRDS)
    missing = sorted(set(REQUIRED_CRDS) - set(crd_names(files)))
    if missing:
        raise AddonError(f"crds/ lacks {', '.join(missing)}; run `make vendor-crds`")
    return files


def crd_names(paths: Iterable[Path]) -> list[str]:
    out = []
    for path in paths:
        for doc in load_all(path):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                out.append(doc["metadata"]["name"])
    return out


def lws_webhooks(manifests: str, *, port: int, ca_pem: bytes,
                 host: str = "127.0.0.1") -> list[dict]:
    """LWS's webhook configurations pointed at a loopback URL with our CA.

    The upstream manifests name a Service; a local process has none, so every
    webhook gets `clientConfig.url` and `caBundle` instead, the pod webhooks
    the objectSelector the kustomize patches add (only LWS pods), and the
    configurations the `lws-` prefix of the release."""
    out = []
    bundle = base64.b64encode(ca_pem).decode()
    for doc in yaml.safe_load_all(manifests):
        if not isinstance(doc, dict):
            continue
        if doc.get("kind") not in ("MutatingWebhookConfiguration",
                                   "ValidatingWebhookConfiguration"):
            raise AddonError(f"unexpected {doc.get('kind')} in the LWS webhook manifests")
        doc = dict(doc)
        doc["metadata"] = {"name": "lws-" + doc["metadata"]["name"]}
        hooks = []
        for hook in doc.get("webhooks") or []:
            hook = dict(hook)
            path = (hook.get("clientConfig") or {}).get("service", {}).get("path", "")
            if not path:
                raise AddonError(f"webhook {hook.get('name')} has no service path")
            hook["clientConfig"] = {"url": f"https://{host}:{port}{path}", "caBundle": bundle}
            if hook.get("name") in LWS_POD_WEBHOOKS:
                hook["objectSelector"] = LWS_POD_SELECTOR
            hooks.append(hook)
        doc["webhooks"] = hooks
        out.append(doc)
    if not out:
        raise AddonError("no webhook configuration in the LWS manifests")
    return out


def lws_config(*, webhook_port: int, cert_dir: Path, health_port: int) -> dict:
    """The LWS manager's Configuration: no cert management, no leader election,
    webhook and health on loopback, metrics off."""
    return {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
    }


def kubeconfig(name: str, server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes,
               namespace: str | None = None) -> dict:
    """A self-contained kubeconfig (certificates embedded) for one cluster."""
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    context: dict[str, Any] = {"cluster": name, "user": f"{name}-admin"}
    if namespace:
        context["namespace"] = namespace
    return {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server,
                                                "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": f"{name}-admin", "user": {"client-certificate-data": b64(cert_pem),
                                                    "client-key-data": b64(key_pem)}}],
        "contexts": [{"name": name, "context": context}],
        "current-context": name,
    }


def dump_all(docs: Iterable[Mapping[str, Any]]) -> str:
    return yaml.safe_dump_all([dict(d) for d in docs], sort_keys=False)


def provider_package_files(package_dir: Path, *, drop_legacy: bool) -> list[Path]:
    """provider-kubernetes' package/: crossplane.yaml and crds/ (optionally without the
    legacy cluster-scoped objects.kubernetes.crossplane.io, which needs a conversion
    webhook)."""
    package_dir = Path(package_dir)
    meta = package_dir / "crossplane.yaml"
    if not meta.is_file():
        raise AddonError(f"no crossplane.yaml in {package_dir}")
    crds = sorted((package_dir / "crds").glob("*.yaml"))
    if not crds:
        raise AddonError(f"no CRDs in {package_dir / 'crds'}")
    if drop_legacy:
        crds = [c for c in crds if c.name != PROVIDER_KUBERNETES_LEGACY_CRD]
    return [meta, *crds]
