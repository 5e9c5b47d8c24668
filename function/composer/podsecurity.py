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

A tenant's pod labels and annotations pass only where an allowlist says so
(`allowed`), and the rest are dropped with a warning: a key asks something of
the cluster that only the platform may grant far more often than a denylist
can name (an AppArmor or seccomp profile, a second network or a fixed IP from
Multus, GKE, Kube-OVN or Calico, a mesh opt-out, a runtime's hypervisor or user
namespace, secrets injected by Vault, devices through CDI, an autoscaler's
do-not-evict). What passes: a key without a prefix and without a dot (`team`,
`version`: no controller reads those), the recommended `app.kubernetes.io/`
labels, and what the cluster's platform team adds for its own cluster
(InferenceCluster `spec.podSecurity.allowedMetadataPrefixes`), except the
prefixes of `DENIED_PREFIXES`, which no cluster may open.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
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


# Prefixes a tenant may use on every cluster: Kubernetes' recommended labels.
ALLOWED_PREFIXES = ("app.kubernetes.io/",)
_PLAIN = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_]*[A-Za-z0-9])?$")  # no prefix, no dot


def denied(key: str) -> bool:
    return key.startswith(DENIED_PREFIXES)


def allowed(key: str, extra: Sequence[str] = ()) -> bool:
    """Whether a tenant's pod label or annotation passes: plain, or under an allowed
    prefix (ours, or `extra`, the cluster's), and never under a denied one."""
    if denied(key):
        return False
    return bool(_PLAIN.match(key)) or key.startswith((*ALLOWED_PREFIXES, *extra))


def allowed_keys(values: Mapping[str, str], what: str, notes: list[str],
                 extra: Sequence[str] = ()) -> dict[str, str]:
    """`values` with only the allowed keys; a note names each one dropped."""
    kept = {k: v for k, v in values.items() if allowed(k, extra)}
    dropped = sorted(set(values) - set(kept))
    if dropped:
        notes.append(f"{what} {', '.join(dropped)} dropped: a tenant's pod labels and "
                     "annotations are plain names, app.kubernetes.io/ ones and the prefixes "
                     "the cluster's spec.podSecurity.allowedMetadataPrefixes lists "
                     "(docs/security.md#pod-security)")
    return kept


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
