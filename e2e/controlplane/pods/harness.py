"""How `make cluster` runs the pods supervisor: one component per cluster.

Pure helpers that core.py calls: each cluster's pod CIDR (kwok hands pod IPs out
of it and the cluster's bridge takes its last address), the supervisor's command
line, the Secrets the example engines read, and the clean-up after `down`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from e2e.controlplane.pods import images, netns
from e2e.controlplane.pods.runner import PodRunner
from e2e.controlplane.procs import Spec

# The Secret the example deployments' engines read their Hugging Face token from
# (`env[].valueFrom.secretKeyRef`): a kubelet refuses to start a container whose
# Secret is missing, and so does the supervisor. Its value is a placeholder: the
# simulator downloads nothing.
EXAMPLE_SECRET = {"name": "hf-token", "key": "token", "value": "placeholder-not-a-token"}


def pod_cidr(index: int) -> str:
    """The i-th cluster's pod CIDR (kwok's --cidr); distinct per cluster."""
    return f"10.{64 + index}.0.0/16"


def supervisor_spec(cluster: str, *, kubeconfig: Path, cidr: str, state_dir: Path,
                    tools: Mapping[str, str], repo: Path) -> Spec:
    return Spec(f"pods:{cluster}", (
        sys.executable, "-m", "e2e.controlplane.pods", "--cluster", cluster,
        "--kubeconfig", str(kubeconfig), "--cidr", cidr, "--state-dir", str(state_dir),
        "--inference-sim", tools["INFERENCE_SIM"], "--epp", tools["EPP"],
        "--pd-sidecar", tools["PD_SIDECAR"], "--lws-manager", tools["LWS_MANAGER"]),
        cwd=str(repo))


def state_dir_of(spec: Mapping[str, Any]) -> Path:
    """A recorded supervisor's --state-dir (supervisor_spec), from its command line."""
    argv = list(spec["argv"])
    path = Path(argv[argv.index("--state-dir") + 1])
    return path if path.is_absolute() else Path(spec.get("cwd") or ".") / path


def container_dir(state_dir: Path, cluster: str, pod: Mapping[str, Any], container: str) -> Path:
    """Where a cluster's supervisor runs a pod's container: the working directory
    runner.PodRunner gives its process."""
    return state_dir / netns.netns_name(cluster, PodRunner.pod_key(pod)) / "containers" / container


def engine_containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod's containers whose image runs as a simulated engine (vLLM, SGLang)."""
    return [c for c in (pod.get("spec") or {}).get("containers") or []
            if (role := images.role(c.get("image", ""))) is not None and role.is_engine]


def example_secrets(namespaces: Iterable[str]) -> list[dict[str, Any]]:
    """Each namespace and the example Secret in it, for every cluster: a remote
    cluster's namespace is composed later (and never deleted with a replica)."""
    out: list[dict[str, Any]] = []
    for ns in sorted(set(namespaces)):
        out.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        out.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": EXAMPLE_SECRET["name"], "namespace": ns},
                    "stringData": {EXAMPLE_SECRET["key"]: EXAMPLE_SECRET["value"]}})
    return out


def clean_up(network: netns.Network | None = None) -> list[str]:
    """Remove every pod namespace and cluster bridge the supervisors made (after they
    stopped): what a crash left behind is gone too. The names this returns."""
    network = network or netns.Network()
    gone = []
    for name in netns.list_namespaces():
        if name.startswith(netns.NETNS_PREFIX):
            network.remove_pod(name)
            gone.append(name)
    for bridge in netns.list_bridges():
        network.remove_bridge_named(bridge)
        gone.append(bridge)
    return gone
