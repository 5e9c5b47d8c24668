"""Devices, not nodes: what the scheduler promises is what kube-scheduler allocates.

us-east-1's `h100-8x` pool has two kwok nodes, each publishing eight H100s in a
ResourceSlice as a DRA driver would. A pod of nobody's deployment claims two
of one node's GPUs: the InferenceCluster observes them taken, and one-GPU
replicas share the node until the six others are claimed; the rest wait with
the reason the function gives. A four-GPU engine goes where four are free on
one node, and waits, naming the most any one node has free, where none has.
Every claim kube-scheduler allocates is on the node its pod runs on, and
`preview`, given the InferenceCluster as observed and the replicas that run,
predicts the same number of replicas as the cluster runs.

The engines run an image the harness does not map, so their pods are kwok's
(nothing is served): what is checked is placement and allocation.
"""

from __future__ import annotations

import copy
import pathlib
import subprocess
import sys

import pytest
import yaml
from conftest import REPO
from live import (IC, MD, SETTLE, Stopwatch, apply_docs, claims_on_their_pool, delete_and_wait,
                  ensure_namespace, get, items, replicas_of, serving_pods, single_gpu, wait,
                  wait_scheduled)

from e2e.controlplane import fleet
from e2e.controlplane.core import ControlPlane

NS = "devices-team"
OTHER = "devices-elsewhere"  # a namespace this project composes nothing in
CLUSTER, POOL = "us-east-1", "h100-8x"
NODES = [fleet.node_name(CLUSTER, POOL, i) for i in range(2)]
H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA-H100-80GB"'
IMAGE = "example.com/e2e/engine:kwok-only"  # not in the pod runner's image table
OBSERVED = 2 * SETTLE


def h100(name: str, replicas: int, gpus: int) -> dict:
    """`replicas` replicas of one Standalone engine claiming `gpus` H100s, on us-east-1."""
    md = copy.deepcopy(single_gpu(name, NS, replicas, {"topology.kubernetes.io/region": CLUSTER}))
    member = md["spec"]["template"]["spec"]["engines"][0]["members"][0]
    member["nodeSelector"]["devices"] = [{"name": "gpu", "count": gpus,
                                          "selectors": [{"cel": H100}]}]
    for c in member["template"]["spec"]["containers"]:
        c["image"] = IMAGE
    return md


def pool_status(cp: ControlPlane) -> dict:
    obj = get(cp, IC, CLUSTER) or {}
    return next((p for p in (obj.get("status") or {}).get("nodePools") or []
                 if p.get("name") == POOL), {})


def wait_nodes(cp: ControlPlane, nodes: int) -> None:
    def check():
        got = pool_status(cp)
        if got.get("nodes") != nodes:
            raise AssertionError(got)
        return got
    wait(f"{CLUSTER}/{POOL} to count {nodes} nodes", check, OBSERVED)


def allocated(cp: ControlPlane, name: str) -> dict[str, int]:
    """Node -> H100s kube-scheduler allocated to the deployment's pods there; fails
    while a pod is unscheduled or a claim unallocated or off its pod's node."""
    claims = {c["metadata"]["name"]: c
              for c in items(cp, "resourceclaims", NS, cluster=cp.cluster(CLUSTER))}
    per_node: dict[str, int] = {}
    for mr in replicas_of(cp, NS, name):
        problems = claims_on_their_pool(cp, mr)
        if problems:
            raise AssertionError(problems)
        for pod in serving_pods(cp, mr):
            node = pod["spec"]["nodeName"]
            for st in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
                claim = claims.get(st.get("resourceClaimName") or "") or {}
                results = (((claim.get("status") or {}).get("allocation") or {})
                           .get("devices") or {}).get("results") or []
                per_node[node] = per_node.get(node, 0) + len(results)
    return per_node


def wait_allocated(cp: ControlPlane, name: str, want: dict[str, int]) -> None:
    def check():
        got = allocated(cp, name)
        if got != want:
            raise AssertionError(f"allocated {got}, want {want}")
        return got
    wait(f"{name}'s claims allocated as {want}", check, SETTLE)


def preview_scheduled(cp: ControlPlane, tmp: pathlib.Path, md: dict,
                      existing: list[dict]) -> int:
    """What `preview` predicts for `md` on us-east-1 as it is observed now (the live
    InferenceCluster, status and all), beside `existing` replicas: the scheduled
    count in the deployment's status."""
    ic = get(cp, IC, CLUSTER) or {}
    ic["metadata"] = {k: v for k, v in ic["metadata"].items() if k in ("name", "labels")}
    for sub in ("fleet", "replicas"):
        (tmp / sub).mkdir(exist_ok=True)
        for f in (tmp / sub).glob("*.yaml"):
            f.unlink()
    (tmp / "fleet" / "ic.yaml").write_text(yaml.safe_dump(ic))
    for i, mr in enumerate(existing):
        kept = {k: mr[k] for k in ("apiVersion", "kind", "spec")}
        kept["metadata"] = {k: mr["metadata"][k] for k in
                            ("name", "namespace", "labels", "creationTimestamp")}
        (tmp / "replicas" / f"mr-{i}.yaml").write_text(yaml.safe_dump(kept))
    (tmp / "md.yaml").write_text(yaml.safe_dump(md))
    out = subprocess.run(
        [sys.executable, "-m", "function.runtime.main", "preview", "--fleet", str(tmp / "fleet"),
         "--deployment", str(tmp / "md.yaml"), "--replicas-dir", str(tmp / "replicas"),
         "-o", "yaml"], cwd=REPO, capture_output=True, text=True, timeout=300, check=True)
    doc = next(d for d in yaml.safe_load_all(out.stdout) if d and d.get("kind") == "ModelDeployment")
    return int(doc["status"]["replicas"]["scheduled"])


def foreign(gpus: int) -> list[dict]:
    """A ResourceClaim and a pod using it, made by hand: nothing this project composed."""
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "someone-elses", "namespace": OTHER},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": "gpu.nvidia.com", "count": gpus,
                 "selectors": [{"cel": {"expression": H100}}]}}]}}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "someone-elses", "namespace": OTHER},
           "spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "someone-elses"}],
                    "containers": [{"name": "job", "image": IMAGE,
                                    "resources": {"claims": [{"name": "gpu"}]}}]}}
    return [claim, pod]


def gpu_status(cp: ControlPlane) -> tuple[int, int, int]:
    """(used, free, largestFree) of the pool's GPUs, as the InferenceCluster reports them."""
    gpu = next((d for d in pool_status(cp).get("devices") or [] if d["name"] == "gpu"), {})
    return gpu.get("used", -1), gpu.get("free", -1), gpu.get("largestFree", -1)


def taken_on(cp: ControlPlane) -> dict[str, int]:
    """Node -> GPUs the InferenceCluster observes other claims holding on the pool."""
    return {e["node"]: sum(d["count"] for d in e["devices"] if d["name"] == "gpu")
            for e in pool_status(cp).get("takenDevices") or []}


@pytest.fixture(scope="module", autouse=True)
def namespace(cp: ControlPlane):
    ensure_namespace(cp, NS)
    ensure_namespace(cp, OTHER, cluster=cp.cluster(CLUSTER))


def test_one_gpu_replicas_share_a_node_until_its_gpus_are_claimed(cp: ControlPlane, timings,
                                                                 tmp_path):
    one, four = h100("one-gpu", 9, 1), h100("four-gpu", 3, 4)
    handle = cp.cluster(CLUSTER)
    try:
        # One node counts, and someone else's pod holds two of its GPUs.
        cp.kubectl("cordon", NODES[1], cluster=handle)
        apply_docs(cp, foreign(2), cluster=handle)
        wait_nodes(cp, 1)
        clock = Stopwatch()
        wait("the InferenceCluster to observe 2 GPUs taken on the first node",
             lambda: taken_on(cp) == {NODES[0]: 2} or fail(taken_on(cp)), OBSERVED)
        timings["devices: a foreign claim observed (s)"] = clock.seconds()

        # Six one-GPU replicas fill what is left of the node; the others wait.
        clock = Stopwatch()
        apply_docs(cp, [one])
        status = wait_scheduled(cp, NS, "one-gpu", 6)["status"]
        assert len(status["unscheduled"]) == 3, status
        assert all(f'no node of pool "{POOL}" with 1 gpu free' in u["reason"]
                   for u in status["unscheduled"]), status
        wait_allocated(cp, "one-gpu", {NODES[0]: 6})
        timings["devices: six one-GPU replicas beside a foreign claim (s)"] = clock.seconds()
        assert preview_scheduled(cp, tmp_path, one, []) == 6
        # `kubectl get ic` follows: every GPU of the node used, none free on it.
        wait("the InferenceCluster to count the node's 8 GPUs used",
             lambda: gpu_status(cp) == (8, 0, 0) or fail(gpu_status(cp)), OBSERVED)

        # The foreign pod goes: its two GPUs take two more replicas.
        for kind in ("pod", "resourceclaim"):
            cp.kubectl("delete", kind, "someone-elses", "-n", OTHER, cluster=handle)
        wait_scheduled(cp, NS, "one-gpu", 8, OBSERVED)
        wait_allocated(cp, "one-gpu", {NODES[0]: 8})

        # Both nodes: the ninth takes one GPU of the second; of three four-GPU
        # replicas one fits (seven free there), the next finds three on any node.
        cp.kubectl("uncordon", NODES[1], cluster=handle)
        wait_nodes(cp, 2)
        wait_scheduled(cp, NS, "one-gpu", 9)
        wait_allocated(cp, "one-gpu", {NODES[0]: 8, NODES[1]: 1})
        existing = replicas_of(cp, NS, "one-gpu")
        apply_docs(cp, [four])
        status = wait_scheduled(cp, NS, "four-gpu", 1)["status"]
        assert all('with 4 gpu free (a pod needs them on one node; the most free on one is '
                   '3 gpu)' in u["reason"] for u in status["unscheduled"]), status
        wait_allocated(cp, "four-gpu", {NODES[1]: 4})
        assert preview_scheduled(cp, tmp_path, four, existing) == 1

        # Three more one-GPU replicas fill the second node exactly: sixteen of sixteen.
        clock = Stopwatch()
        one["spec"]["replicas"] = 12
        apply_docs(cp, [one])
        wait_scheduled(cp, NS, "one-gpu", 12)
        wait_allocated(cp, "one-gpu", {NODES[0]: 8, NODES[1]: 4})
        wait_allocated(cp, "four-gpu", {NODES[1]: 4})
        timings["devices: two nodes filled by 4- and 1-GPU engines (s)"] = clock.seconds()
    finally:
        cp.kubectl("uncordon", NODES[1], cluster=handle, check=False)
        for kind in ("pod", "resourceclaim"):
            cp.kubectl("delete", kind, "someone-elses", "-n", OTHER, "--ignore-not-found",
                       cluster=handle, check=False)
        for name in ("one-gpu", "four-gpu"):
            cp.kubectl("delete", MD, name, "-n", NS, "--ignore-not-found", "--wait=false")
        for name in ("one-gpu", "four-gpu"):
            delete_and_wait(cp, NS, name)


def fail(got):
    raise AssertionError(got)
