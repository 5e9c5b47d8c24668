"""What `make bench-live` applies: a generated fleet and D ModelDeployments. Pure and
deterministic (a seed in, the same documents out); tests/test_bench_live.py.

The fleet: N InferenceClusters, the first on the control plane itself and the rest
remote (each an API server of its own, as `make cluster FLEET=DIR` starts them), each
with one pool of 8-GPU nodes and one CPU node (where the endpoint picker of a
PrefillDecode deployment lands: it asks for no GPU and tolerates no taint).

The deployments: the repository's own examples (single-gpu for Unified,
prefill-decode for PrefillDecode, alternating), 1-3 replicas each, with every engine
image moved to a repository the pod runner does not map
(e2e/controlplane/pods/images.py), so every pod stays kwok-only: kwok marks it Ready
and nothing runs in it. The function is told the same for the images it adds
itself (the endpoint picker and the routing sidecar, FUNCTION_ENV).
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "deployments"
NS = "bench-live"
API_VERSION = "modelplane.ai/v1alpha1"
GPU_PRODUCT = "NVIDIA-H100-80GB"     # the prefill-decode example's selector asks for it
GPUS_PER_NODE = 8
# Images the pod runner maps nowhere (any repository outside images.REPOSITORIES):
# a pod of them is kwok's alone.
IMAGE_REGISTRY = "registry.example.com/bench-live"
# The images the function adds for PrefillDecode, overridden in its environment
# (function/composer/routing/serving_config.py) the same way.
FUNCTION_ENV = {
    "MODELPLANE_EPP_IMAGE": f"{IMAGE_REGISTRY}/llm-d-inference-scheduler:v0.7.1",
    "MODELPLANE_ROUTING_SIDECAR_IMAGE": f"{IMAGE_REGISTRY}/llm-d-routing-sidecar:v0.7.1",
}
UNIFIED, PD = "Unified", "PrefillDecode"
_EXAMPLE = {UNIFIED: "single-gpu.yaml", PD: "prefill-decode.yaml"}
_EXAMPLE_PRODUCTS = ('"NVIDIA-L4"', '"NVIDIA-H100-80GB"')


def cluster_names(clusters: int) -> list[str]:
    if clusters < 1:
        raise ValueError("at least one cluster (the control plane's own)")
    return [f"live-{i}" for i in range(clusters)]


def inference_cluster(name: str, index: int, gpu_nodes: int) -> dict[str, Any]:
    """One cluster: `gpu_nodes` nodes of 8 H100s (taint nvidia.com/gpu) and a CPU node.
    The first (index 0) is the control plane itself; every other is remote."""
    spec: dict[str, Any] = {
        "gateway": {"name": "inference-gateway", "namespace": "gateway-system",
                    "address": f"https://llm.{name}.example.com"},
        "nodePools": [
            {"name": "h100-8x", "nodes": gpu_nodes, "costPerNodeHour": "33",
             "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
             "devices": [{"name": "gpu", "claim": "DRA", "driver": "gpu.nvidia.com",
                          "deviceClassName": "gpu.nvidia.com", "count": GPUS_PER_NODE,
                          "attributes": {"productName": {"string": GPU_PRODUCT},
                                         "architecture": {"string": "Hopper"},
                                         "driverVersion": {"version": "550.54.15"},
                                         "cudaComputeCapability": {"version": "9.0.0"}},
                          "capacity": {"memory": {"value": "80Gi"}}}]},
            {"name": "cpu", "nodes": 1},
        ],
    }
    if index > 0:
        spec = {"providerConfigRef": {"name": name, "kind": "ClusterProviderConfig"}, **spec}
    return {"apiVersion": API_VERSION, "kind": "InferenceCluster",
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/region": name,
                                                  "tier": "prod"}},
            "spec": spec}


def fleet(clusters: int, gpu_nodes: int) -> list[dict[str, Any]]:
    if gpu_nodes < 1:
        raise ValueError("at least one GPU node per cluster")
    return [inference_cluster(name, i, gpu_nodes)
            for i, name in enumerate(cluster_names(clusters))]


def write_fleet(docs: Sequence[Mapping[str, Any]], directory: Path) -> list[Path]:
    """One file per InferenceCluster, named so that file order is fleet order."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for i, ic in enumerate(docs):
        path = directory / f"{i:04d}-{ic['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(dict(ic), sort_keys=False))
        out.append(path)
    return out


def unmapped(image: str) -> str:
    """`vllm/vllm-openai:v0.10.1.1` -> the same repository and tag under IMAGE_REGISTRY."""
    return f"{IMAGE_REGISTRY}/{image.rsplit('/', 1)[-1]}"


def _containers(md: Mapping[str, Any]):
    for engine in md["spec"]["template"]["spec"]["engines"]:
        for member in engine["members"]:
            yield from member["template"]["spec"].get("containers") or []
            yield from member["template"]["spec"].get("initContainers") or []


def _load_example(mode: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / _EXAMPLE[mode]).read_text())


def deployment(example: Mapping[str, Any], name: str, replicas: int) -> dict[str, Any]:
    """The example as NS/`name` with `replicas`: kwok-only images, the fleet's GPU in
    every selector, no Hugging Face token (no Secret in NS; nothing downloads)."""
    md = copy.deepcopy(dict(example))
    md["metadata"] = {"name": name, "namespace": NS}
    md["spec"]["replicas"] = replicas
    tmpl = md["spec"]["template"]
    tmpl.setdefault("metadata", {}).setdefault("labels", {})["app.kubernetes.io/name"] = name
    for c in _containers(md):
        c["image"] = unmapped(c["image"])
        env = [e for e in c.get("env") or [] if e.get("name") != "HF_TOKEN"]
        if env:
            c["env"] = env
        else:
            c.pop("env", None)
    for engine in tmpl["spec"]["engines"]:
        for member in engine["members"]:
            for dev in (member.get("nodeSelector") or {}).get("devices") or []:
                for sel in dev.get("selectors") or []:
                    for product in _EXAMPLE_PRODUCTS:
                        sel["cel"] = sel["cel"].replace(product, f'"{GPU_PRODUCT}"')
    return md


def deployments(count: int, seed: int = 36) -> list[dict[str, Any]]:
    """`count` deployments, Unified and PrefillDecode alternating, each with 1-3
    replicas drawn from `seed`."""
    if count < 1:
        raise ValueError("at least one deployment")
    rng = random.Random(seed)
    examples = {mode: _load_example(mode) for mode in (UNIFIED, PD)}
    out = []
    for i in range(count):
        mode = UNIFIED if i % 2 == 0 else PD
        name = f"live-{i:03d}-{'uni' if mode == UNIFIED else 'pd'}"
        out.append(deployment(examples[mode], name, rng.randint(1, 3)))
    return out


def scaled(mds: Sequence[Mapping[str, Any]], by: int = 1) -> list[dict[str, Any]]:
    """The day-2 wave: every deployment with `by` more replicas."""
    out = []
    for md in mds:
        more = copy.deepcopy(dict(md))
        more["spec"]["replicas"] = int(more["spec"]["replicas"]) + by
        out.append(more)
    return out


def cluster_to_lose(replicas_on: Mapping[str, int], clusters: Sequence[str]) -> str:
    """The last wave loses the remote cluster holding the most replicas (the first by
    name among equals): the control plane's own (clusters[0]) is never lost."""
    remote = clusters[1:]
    if not remote:
        raise ValueError("no remote cluster to lose")
    return min(remote, key=lambda c: (-replicas_on.get(c, 0), c))


def mode_of(md: Mapping[str, Any]) -> str:
    return ((md["spec"]["template"]["spec"].get("serving") or {}).get("mode")) or UNIFIED


def gpus_per_replica(md: Mapping[str, Any]) -> int:
    """GPUs one replica claims: every engine's copies times its members' GPU counts
    (the examples used here are Standalone members: one pod each)."""
    total = 0
    for engine in md["spec"]["template"]["spec"]["engines"]:
        per_copy = 0
        for member in engine["members"]:
            for dev in (member.get("nodeSelector") or {}).get("devices") or []:
                if dev.get("name") == "gpu":
                    per_copy += int(dev.get("count", 1))
        total += per_copy * int(engine.get("copies", 1))
    return total


def gpu_nodes_per_cluster(mds: Sequence[Mapping[str, Any]], clusters: int,
                          day2_by: int = 1, headroom: float = 1.5, minimum: int = 2) -> int:
    """Enough 8-GPU nodes per cluster for every replica after the day-2 wave with
    `headroom` once one cluster is lost (the last wave; a fleet of one loses none), and
    for one replica of every deployment on a single cluster (Spread may send each
    deployment's first replica to the same cluster)."""
    total = sum(gpus_per_replica(md) * (int(md["spec"]["replicas"]) + day2_by) for md in mds)
    one_each = sum(gpus_per_replica(md) for md in mds)
    need = max(headroom * total / max(1, clusters - 1), headroom * one_each)
    return max(minimum, math.ceil(need / GPUS_PER_NODE))


def placed_on(md: Mapping[str, Any] | None) -> set[str]:
    """The clusters a deployment's status places replicas on (status.placements)."""
    placements = ((md or {}).get("status") or {}).get("placements") or []
    return {str(p.get("cluster")) for p in placements if isinstance(p, Mapping)}


def converged(md: Mapping[str, Any] | None, want: int) -> bool:
    """A deployment serves what was asked: Ready=True (Crossplane's, from the
    function's composite readiness) and status.replicas desired = ready = `want`.
    Desired must match too: right after a scale the status still describes the old
    spec, Ready included."""
    status = (md or {}).get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or [])
    counts = status.get("replicas") or {}
    return ready and counts.get("desired") == want and counts.get("ready") == want
