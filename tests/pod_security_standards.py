"""The Pod Security Standards' checks, for the tests: what Pod Security Admission refuses.

Written from the standards themselves
(kubernetes.io/docs/concepts/security/pod-security-standards, the controls of
the `latest` version as of Kubernetes 1.34): no Python library implements them
(the only implementation is the Go module k8s.io/pod-security-admission, which
the API server runs). Each check returns the violations of one control, worded
after the control's name, for a pod spec and its metadata. `baseline` runs the
baseline controls; `restricted` runs those and the restricted ones.

Containers are every container of the pod: containers, initContainers (native
sidecars included) and ephemeralContainers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

Pod = Mapping[str, Any]  # {"metadata": ..., "spec": ...}

BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t",
                           "container_engine_t"})
RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                                "persistentVolumeClaim", "projected", "secret"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("securityContext") or {}


# --- baseline ---------------------------------------------------------------------------


def host_process(pod: Pod) -> list[str]:
    spec = pod["spec"]
    return [f"{name}: hostProcess" for name, sc in
            [("pod", _sc(spec))] + [(c["name"], _sc(c)) for c in containers(spec)]
            if (sc.get("windowsOptions") or {}).get("hostProcess")]


def host_namespaces(pod: Pod) -> list[str]:
    return [f"pod: {k}" for k in ("hostNetwork", "hostPID", "hostIPC") if pod["spec"].get(k)]


def privileged(pod: Pod) -> list[str]:
    return [f"{c['name']}: privileged" for c in containers(pod["spec"])
            if _sc(c).get("privileged")]


def baseline_capabilities(pod: Pod) -> list[str]:
    return [f"{c['name']}: adds {cap}" for c in containers(pod["spec"])
            for cap in (_sc(c).get("capabilities") or {}).get("add") or []
            if cap not in BASELINE_CAPABILITIES]


def host_path_volumes(pod: Pod) -> list[str]:
    return [f"volume {v.get('name')}: hostPath" for v in pod["spec"].get("volumes") or []
            if "hostPath" in v]


def host_ports(pod: Pod) -> list[str]:
    return [f"{c['name']}: hostPort {p['hostPort']}" for c in containers(pod["spec"])
            for p in c.get("ports") or [] if p.get("hostPort")]


def apparmor(pod: Pod) -> list[str]:
    spec, out = pod["spec"], []
    for name, sc in [("pod", _sc(spec))] + [(c["name"], _sc(c)) for c in containers(spec)]:
        kind = (sc.get("appArmorProfile") or {}).get("type")
        if kind not in (None, "RuntimeDefault", "Localhost"):
            out.append(f"{name}: appArmorProfile {kind}")
    for key, value in ((pod.get("metadata") or {}).get("annotations") or {}).items():
        if key.startswith(APPARMOR_ANNOTATION) and not (
                value == "runtime/default" or value.startswith("localhost/")):
            out.append(f"annotation {key}: {value}")
    return out


def selinux(pod: Pod) -> list[str]:
    spec, out = pod["spec"], []
    for name, sc in [("pod", _sc(spec))] + [(c["name"], _sc(c)) for c in containers(spec)]:
        opts = sc.get("seLinuxOptions") or {}
        if opts.get("type", "") not in SELINUX_TYPES or opts.get("user") or opts.get("role"):
            out.append(f"{name}: seLinuxOptions {dict(opts)}")
    return out


def proc_mount(pod: Pod) -> list[str]:
    return [f"{c['name']}: procMount {_sc(c)['procMount']}" for c in containers(pod["spec"])
            if _sc(c).get("procMount") not in (None, "Default")]


def baseline_seccomp(pod: Pod) -> list[str]:
    spec = pod["spec"]
    return [f"{name}: seccompProfile Unconfined" for name, sc in
            [("pod", _sc(spec))] + [(c["name"], _sc(c)) for c in containers(spec)]
            if (sc.get("seccompProfile") or {}).get("type") == "Unconfined"]


def sysctls(pod: Pod) -> list[str]:
    return [f"pod: sysctl {s.get('name')}" for s in _sc(pod["spec"]).get("sysctls") or []
            if s.get("name") not in SAFE_SYSCTLS]


# --- restricted -------------------------------------------------------------------------


def volume_types(pod: Pod) -> list[str]:
    out = []
    for v in pod["spec"].get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {v.get('name')}: {', '.join(sorted(kinds - RESTRICTED_VOLUMES))}")
    return out


def privilege_escalation(pod: Pod) -> list[str]:
    return [f"{c['name']}: allowPrivilegeEscalation is not false" for c in containers(pod["spec"])
            if _sc(c).get("allowPrivilegeEscalation") is not False]


def run_as_non_root(pod: Pod) -> list[str]:
    spec = pod["spec"]
    pod_level = _sc(spec).get("runAsNonRoot")
    out = ["pod: runAsNonRoot false"] if pod_level is False else []
    for c in containers(spec):
        mine = _sc(c).get("runAsNonRoot")
        if mine is False or (mine is None and pod_level is not True):
            out.append(f"{c['name']}: runAsNonRoot is not true (neither pod nor container)")
    return out


def run_as_user(pod: Pod) -> list[str]:
    spec = pod["spec"]
    return [f"{name}: runAsUser 0" for name, sc in
            [("pod", _sc(spec))] + [(c["name"], _sc(c)) for c in containers(spec)]
            if sc.get("runAsUser") == 0]


def restricted_seccomp(pod: Pod) -> list[str]:
    spec = pod["spec"]
    pod_kind = (_sc(spec).get("seccompProfile") or {}).get("type")
    ok = ("RuntimeDefault", "Localhost")
    out = [f"pod: seccompProfile {pod_kind}"] if pod_kind not in (None, *ok) else []
    for c in containers(spec):
        kind = (_sc(c).get("seccompProfile") or {}).get("type")
        if kind not in (None, *ok) or (kind is None and pod_kind is None):
            out.append(f"{c['name']}: seccompProfile is {kind or 'unset'} "
                       f"(RuntimeDefault or Localhost, on the pod or the container)")
    return out


def restricted_capabilities(pod: Pod) -> list[str]:
    out = []
    for c in containers(pod["spec"]):
        caps = _sc(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{c['name']}: capabilities do not drop ALL")
        out += [f"{c['name']}: adds {cap}" for cap in caps.get("add") or []
                if cap != "NET_BIND_SERVICE"]
    return out


Check = Callable[[Pod], list[str]]
BASELINE: dict[str, Check] = {
    "HostProcess": host_process, "Host Namespaces": host_namespaces,
    "Privileged Containers": privileged, "Capabilities": baseline_capabilities,
    "HostPath Volumes": host_path_volumes, "Host Ports": host_ports, "AppArmor": apparmor,
    "SELinux": selinux, "/proc Mount Type": proc_mount, "Seccomp": baseline_seccomp,
    "Sysctls": sysctls,
}
RESTRICTED: dict[str, Check] = {
    **BASELINE, "Volume Types": volume_types, "Privilege Escalation": privilege_escalation,
    "Running as Non-root": run_as_non_root, "Running as Non-root user": run_as_user,
    "Seccomp": restricted_seccomp, "Capabilities": restricted_capabilities,
}
LEVELS = {"baseline": BASELINE, "restricted": RESTRICTED}


def violations(pod: Pod, level: str) -> list[str]:
    """Every violation of `level` (baseline, restricted), as `<control>: <what>`."""
    return [f"{control}: {v}" for control, check in LEVELS[level].items() for v in check(pod)]


def pods_of(manifest: Mapping[str, Any]) -> Iterator[tuple[str, Pod]]:
    """(where, pod template) of a workload manifest: Deployment, LeaderWorkerSet, Job."""
    kind, spec, name = manifest.get("kind"), manifest.get("spec") or {}, \
        (manifest.get("metadata") or {}).get("name")
    if kind in ("Deployment", "Job"):
        yield f"{kind} {name}", spec["template"]
    elif kind == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        if "leaderTemplate" in lwt:
            yield f"{kind} {name} leader", lwt["leaderTemplate"]
        yield f"{kind} {name} worker", lwt["workerTemplate"]
