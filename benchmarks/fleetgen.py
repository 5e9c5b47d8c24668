"""A deterministic (seeded) fleet generator for the benchmarks.

Sizes (issue #8):
  S: 10 clusters x 4 pools,   20 live replicas,                    deployment of 10 replicas
  M: 100 clusters x 8 pools,  500 live replicas from 50 deployments,  10 replicas
  L: 1000 clusters x 8 pools, 5000 live replicas from 500 deployments, 100 replicas

Every pool publishes realistic devices: GPUs with product, architecture,
driver version and memory capacity, RDMA NICs on the large GPU pools, and a
Synthetic CPU device. Live replicas are placed within capacity, so the ledger
is realistic but never overcommitted. The deployment under test has two
engines of a Leader and a Worker each, with CEL selectors.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from function.contract.api import API_VERSION, LABEL_CLUSTER, LABEL_DEPLOYMENT, LABEL_REPLICA_INDEX
from function.contract.names import dns_label


@dataclass(frozen=True)
class Size:
    name: str
    clusters: int
    pools: int
    live_replicas: int
    deployments: int
    replicas: int


SIZES = {
    "S": Size("S", 10, 4, 20, 4, 10),
    "M": Size("M", 100, 8, 500, 50, 10),
    "L": Size("L", 1000, 8, 5000, 500, 100),
}

GPUS = [  # product, architecture, memory, driver
    ("NVIDIA-H100-80GB", "Hopper", "80Gi", "550.54.15"),
    ("NVIDIA-H200-141GB", "Hopper", "141Gi", "565.57.1"),
    ("NVIDIA-L4", "Ada", "24Gi", "550.54.15"),
    ("NVIDIA-A100-80GB", "Ampere", "80Gi", "535.161.8"),
    ("NVIDIA-B200-180GB", "Blackwell", "180Gi", "570.86.10"),
]
REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-south-1"]


def gpu_device(product: str, arch: str, memory: str, driver: str, count: int) -> dict:
    return {"name": "gpu", "claim": "DRA", "driver": "gpu.nvidia.com",
            "deviceClassName": "gpu.nvidia.com", "count": count,
            "attributes": {"productName": {"string": product}, "architecture": {"string": arch},
                           "driverVersion": {"version": driver},
                           "cudaComputeCapability": {"version": "9.0.0"}},
            "capacity": {"memory": {"value": memory}}}


def nic_device(count: int) -> dict:
    return {"name": "nic", "claim": "DRA", "driver": "dra.net", "deviceClassName": "dranet",
            "count": count, "attributes": {"rdma": {"bool": True},
                                           "linkSpeedGbps": {"int": 400}}}


def cpu_device() -> dict:
    return {"name": "cpu", "claim": "Synthetic", "driver": "cpu.modelplane.ai", "count": 1,
            "attributes": {"architecture": {"string": "amd64"}}}


def fleet(size: Size, rng: random.Random) -> list[dict]:
    clusters = []
    for c in range(size.clusters):
        pools = []
        for p in range(size.pools):
            product, arch, memory, driver = GPUS[(c + p) % len(GPUS)]
            per_node = 8 if p % 2 == 0 else 4
            devices = [gpu_device(product, arch, memory, driver, per_node)]
            if per_node == 8:
                devices.append(nic_device(8))
            devices.append(cpu_device())
            pools.append({"name": f"pool-{p}", "nodes": rng.choice([4, 8, 16, 32]),
                          "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                          "devices": devices})
            # A price per product and pool (as a list price is): no pool's bytes
            # become distinct that were alike, so the parse cache shares them as
            # before. Some unpriced: the cost score weighs both.
            g = (c + p) % len(GPUS)
            if (g + p) % 4 != 3:
                pools[-1]["costPerNodeHour"] = f"{10 + 7 * g + 3 * p}.{(11 * g + p) % 100:02d}"
        spec: dict = {"gateway": {"name": "inference", "namespace": "gateway",
                                  "address": f"c{c}.llm.example.com"},
                      "nodePools": pools}
        if c % 2:
            spec["providerConfigRef"] = {"name": f"cluster-{c:04d}"}
        if c % 10 == 9:
            spec["taints"] = [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]
        clusters.append({
            "apiVersion": API_VERSION, "kind": "InferenceCluster",
            "metadata": {"name": f"cluster-{c:04d}",
                         "labels": {"region": REGIONS[c % len(REGIONS)], "tier": "prod"}},
            "spec": spec})
    return clusters


def engine(name: str, product_cel: str, nodes: int) -> dict:
    def member(role: str) -> dict:
        m: dict = {"role": role, "nodeSelector": {"devices": [
            {"name": "gpu", "count": 8, "selectors": [
                {"cel": product_cel},
                {"cel": 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'}]},
            {"name": "rdma", "count": 8, "selectors": [
                {"cel": 'device.attributes["dra.net"].rdma == true'}]}]},
            "template": {"spec": {"containers": [{
                "name": "engine", "image": "vllm/vllm-openai:v0.11.0",
                "args": ["--model", "meta-llama/Llama-3.1-405B", "--port", "8200",
                         "--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"]}]}}}
        if role == "Worker":
            m["worker"] = {"nodes": nodes}
        return m
    return {"name": name, "copies": 1, "members": [member("Leader"), member("Worker")]}


def deployment(size: Size, name: str = "bench", namespace: str = "ml-team") -> dict:
    hopper = 'device.attributes["gpu.nvidia.com"].architecture in ["Hopper", "Blackwell"]'
    any_big = 'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("540.0.0"))'
    return {"apiVersion": API_VERSION, "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": size.replicas, "template": {"spec": {
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                "engines": [engine("prefill", hopper, 1), engine("decode", any_big, 1)]}}}}


def live_replicas(size: Size, clusters: list[dict], rng: random.Random) -> list[dict]:
    """Replicas of other deployments, one Standalone 8-GPU engine each, within capacity."""
    free = {(c["metadata"]["name"], p["name"]): p["nodes"] // 2
            for c in clusters for p in c["spec"]["nodePools"]}
    slots = sorted(free)
    out = []
    for i in range(size.live_replicas):
        dep = f"live-{i % size.deployments:03d}"
        cluster, pool = slots[rng.randrange(len(slots))]
        if free[(cluster, pool)] == 0:
            cluster, pool = next(k for k in slots if free[k] > 0)
        free[(cluster, pool)] -= 1
        index = i // size.deployments
        out.append({
            "apiVersion": API_VERSION, "kind": "ModelReplica",
            "metadata": {"name": dns_label(dep, cluster, index), "namespace": f"team-{i % 7}",
                         "creationTimestamp": f"2026-01-{1 + i % 28:02d}T00:00:00Z",
                         "labels": {LABEL_DEPLOYMENT: dep, LABEL_CLUSTER: cluster,
                                    LABEL_REPLICA_INDEX: str(index)}},
            "spec": {"clusterName": cluster, "engines": [{"name": "vllm", "copies": 1, "members": [{
                "role": "Standalone", "nodePoolName": pool,
                "nodeSelector": {"devices": [{"name": "gpu", "count": 8}]},
                "deviceRequests": [{"name": "gpu", "claim": "DRA", "count": 8,
                                    "deviceClassName": "gpu.nvidia.com"}],
                "template": {"spec": {"containers": [{"name": "engine",
                                                      "image": "vllm/vllm-openai:v0.11.0"}]}}}]}]}})
    return out


def generate(size_name: str, seed: int = 42) -> tuple[dict, list[dict], list[dict]]:
    """(deployment under test, InferenceClusters, live ModelReplicas), same for a seed."""
    size = SIZES[size_name]
    rng = random.Random(f"{seed}-{size_name}")
    clusters = fleet(size, rng)
    return deployment(size), clusters, live_replicas(size, clusters, rng)
