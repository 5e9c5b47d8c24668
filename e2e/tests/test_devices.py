"""Devices, not nodes: what the scheduler promises is what kube-scheduler allocates.

us-east-1's `h100-8x` pool has two kwok nodes, each publishing eight H100s in a
ResourceSlice as a DRA driver would. One-GPU replicas share a node until its
eight GPUs are claimed; a ninth waits with the reason the function gives; a
four-GPU engine goes where four are free on one node, and waits, naming the
most any one node has free, where none has. Every claim kube-scheduler
allocates is on the node its pod runs on, and `preview`, given the same fleet
and replicas, predicts the same number of replicas as the cluster runs.

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


def preview_scheduled(cp: ControlPlane, tmp: pathlib.Path, md: dict, nodes: int,
                      existing: list[dict]) -> int:
    """What `preview` predicts for `md` on us-east-1 with the pool at `nodes` nodes,
    beside `existing` replicas: the scheduled count in the deployment's status."""
    ic = next(i for i in fleet.load_fleet(REPO / "examples" / "fleet")
              if i["metadata"]["name"] == CLUSTER)
    for p in ic["spec"]["nodePools"]:
        if p["name"] == POOL:
            p["nodes"] = nodes
    (tmp / "fleet").mkdir(exist_ok=True)
    (tmp / "fleet" / "ic.yaml").write_text(yaml.safe_dump(ic))
    (tmp / "replicas").mkdir(exist_ok=True)
    for f in (tmp / "replicas").glob("*.yaml"):
        f.unlink()
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


@pytest.fixture(scope="module", autouse=True)
def namespace(cp: ControlPlane):
    ensure_namespace(cp, NS)


def test_one_gpu_replicas_share_a_node_until_its_gpus_are_claimed(cp: ControlPlane, timings,
                                                                 tmp_path):
    one, four = h100("one-gpu", 9, 1), h100("four-gpu", 3, 4)
    handle = cp.cluster(CLUSTER)
    try:
        # One node counts: eight one-GPU replicas fill it, the ninth waits.
        cp.kubectl("cordon", NODES[1], cluster=handle)
        wait_nodes(cp, 1)
        clock = Stopwatch()
        apply_docs(cp, [one])
        status = wait_scheduled(cp, NS, "one-gpu", 8)["status"]
        (waiting,) = status["unscheduled"]
        assert f'no node of pool "{POOL}" with 1 gpu free' in waiting["reason"], waiting
        wait_allocated(cp, "one-gpu", {NODES[0]: 8})
        timings["devices: eight one-GPU replicas allocated on one node (s)"] = clock.seconds()
        assert preview_scheduled(cp, tmp_path, one, 1, []) == 8
        got = pool_status(cp)
        gpu = next(d for d in got["devices"] if d["name"] == "gpu")
        assert (gpu["used"], gpu["free"], gpu["largestFree"]) == (8, 0, 0), got

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
        assert preview_scheduled(cp, tmp_path, four, 2, existing) == 1

        # Three more one-GPU replicas fill the second node exactly: sixteen of sixteen.
        one["spec"]["replicas"] = 12
        apply_docs(cp, [one])
        wait_scheduled(cp, NS, "one-gpu", 12)
        wait_allocated(cp, "one-gpu", {NODES[0]: 8, NODES[1]: 4})
        wait_allocated(cp, "four-gpu", {NODES[1]: 4})
        timings["devices: two nodes filled by 4- and 1-GPU engines (s)"] = clock.seconds()
    finally:
        cp.kubectl("uncordon", NODES[1], cluster=handle, check=False)
        for name in ("one-gpu", "four-gpu"):
            cp.kubectl("delete", MD, name, "-n", NS, "--ignore-not-found", "--wait=false")
        for name in ("one-gpu", "four-gpu"):
            delete_and_wait(cp, NS, name)
