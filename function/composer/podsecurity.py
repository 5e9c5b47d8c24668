"""Pod security of every pod the composer composes: the cluster's level, and what tenants may not set.

The level is the InferenceCluster's `spec.podSecurity.enforce` (platform-owned;
default `restricted`), a Pod Security Standards level:

| level | pod | every container, init containers and sidecars included |
|---|---|---|
| restricted | runAsNonRoot, seccomp RuntimeDefault | allowPrivilegeEscalation false, capabilities drop ALL |
| baseline | seccomp RuntimeDefault | allowPrivilegeEscalation false |
| privileged | nothing | nothing |

`baseline` keeps what does not stop an engine image that runs as root (the
upstream vllm/vllm-openai has no USER): it leaves out runAsNonRoot, which the
kubelet would refuse such an image for, and the capability drop, without which
root cannot write files it does not own. `privileged` is for clusters whose
injected sidecars need more than baseline allows (a mesh's init container
with NET_ADMIN). No runAsUser is set on engines: a uid the image does not know
breaks vLLM (torch asks getpwuid for the user at import) in a way harder to
read than the kubelet's own "image will run as root"; an image for a
restricted cluster names its numeric non-root USER itself. Our own images set
theirs (the endpoint picker 65532, the cache downloader 1000).

The settings are ours wherever they overlap what a container already has:
tenants cannot write a securityContext (the curated template has none), and
the routing sidecar's and the endpoint picker's own settings are already these.
Independently of the level, engine and cache pods get no ServiceAccount token
(`automountServiceAccountToken: false`): they never call the API server. The
endpoint picker keeps its token, the one pod that needs it: it watches its
InferencePool and the pool's pods (its Role, routing/epp.py).

Tenant pod labels and annotations under `DENIED_PREFIXES` are dropped with a
warning: each asks something of the cluster that only the platform may grant
(an AppArmor or seccomp profile, a second network, a mesh opt-out, secrets
injected by Vault, devices through CDI or a runtime annotation).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from function.contract.enums import PodSecurityLevel

NAMESPACE_LABEL = "pod-security.kubernetes.io/enforce"

# Label and annotation key prefixes a tenant's pod template may not set.
DENIED_PREFIXES = (
    "container.apparmor.security.beta.kubernetes.io/",  # AppArmor: unconfined
    "seccomp.security.alpha.kubernetes.io/",            # legacy seccomp: unconfined
    "container.seccomp.security.alpha.kubernetes.io/",
    "k8s.v1.cni.cncf.io/",                              # Multus: more networks
    "v1.multus-cni.io/",                                # Multus: another default network
    "sidecar.istio.io/",                                # Istio: injection, its settings
    "traffic.sidecar.istio.io/",                        # Istio: ports left out of the mesh
    "proxy.istio.io/",
    "istio.io/",                                        # Istio: revision (injection)
    "linkerd.io/",                                      # Linkerd: injection
    "config.linkerd.io/",                               # Linkerd: skipped ports
    "config.alpha.linkerd.io/",
    "vault.hashicorp.com/",                             # Vault agent: a role's secrets
    "cdi.k8s.io/",                                      # CDI: devices outside DRA
    "io.kubernetes.cri-o.",                             # CRI-O: user namespaces, devices
)


def denied(key: str) -> bool:
    return key.startswith(DENIED_PREFIXES)


def allowed_keys(values: Mapping[str, str], what: str, notes: list[str]) -> dict[str, str]:
    """`values` without the denied keys; a note names each one dropped."""
    dropped = sorted(k for k in values if denied(k))
    if dropped:
        notes.append(f"{what} {', '.join(dropped)} dropped: they ask the cluster for what "
                     "only the platform may grant (the prefixes refused are listed in "
                     "docs/security.md#pod-security)")
    return {k: v for k, v in values.items() if not denied(k)}


def pod_context(level: str) -> dict[str, Any]:
    if level == PodSecurityLevel.RESTRICTED:
        return {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    if level == PodSecurityLevel.BASELINE:
        return {"seccompProfile": {"type": "RuntimeDefault"}}
    return {}


def container_context(level: str) -> dict[str, Any]:
    if level == PodSecurityLevel.RESTRICTED:
        return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    if level == PodSecurityLevel.BASELINE:
        return {"allowPrivilegeEscalation": False}
    return {}


def harden(spec: dict[str, Any], level: str, *, token: bool = False,
           run_as_user: int | None = None) -> None:
    """Write the level's settings into a pod spec, in place (idempotent).

    `token`: whether the pod keeps its ServiceAccount token. `run_as_user`: the
    image's own uid, for our images (set at restricted only, where runAsNonRoot
    needs a numeric user the kubelet can check)."""
    pod = {**(spec.get("securityContext") or {}), **pod_context(level)}
    if run_as_user is not None and level == PodSecurityLevel.RESTRICTED:
        pod["runAsUser"] = run_as_user
    if pod:
        spec["securityContext"] = dict(sorted(pod.items()))
    ours = container_context(level)
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            merged = {**(container.get("securityContext") or {}), **ours}
            if merged:
                container["securityContext"] = dict(sorted(merged.items()))
    if not token:
        spec["automountServiceAccountToken"] = False


def namespace_labels(level: str) -> dict[str, str]:
    """The labels of a namespace composed on a remote cluster."""
    return {NAMESPACE_LABEL: level}
