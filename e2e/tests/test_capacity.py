"""Capacity that is real and shared fairly, on the real control plane.

Observed nodes: the control-plane cluster's InferenceCluster reads its Nodes
directly; each remote cluster's comes from the inventory reporter composed
onto it (run by the harness with the composed ServiceAccount's token). A
cordoned node (kubectl cordon) and a NotReady node (kwok's own node-not-ready
chaos stage) leave the count, and the scheduler places by what is left.

Quota: an InferenceQuota caps one namespace while another namespace takes
the rest of the same devices.

Making room: a Pack deployment moves a replica so that a deployment which fits
on no cluster gets a whole pool (function/scheduler/room.py).
"""

from __future__ import annotations

import json

import pytest
from conftest import REPO
from live import (IC, MD, SERVING, SETTLE, Stopwatch, apply_docs, claims_on_their_pool,
                  condition, delete_and_wait, ensure_namespace, get, is_true, replicas_of,
                  serving_pods, single_gpu, wait, wait_condition, wait_scheduled)

from e2e.controlplane import fleet
from e2e.controlplane.core import ControlPlane
from function.contract.inventory_report import REPORT_NAME, REPORT_NAMESPACE

NS = "capacity-team"
OBSERVED = 2 * SETTLE  # a cluster's status follows its nodes within its poll interval
NOT_READY_LABEL = "node-not-ready.stage.kwok.x-k8s.io"  # kwok's chaos stage (addons.KWOK_STAGES)


def pool_status(cp: ControlPlane, ic: str, pool: str) -> dict:
    obj = get(cp, IC, ic) or {}
    for p in (obj.get("status") or {}).get("nodePools") or []:
        if p.get("name") == pool:
            return {**p, "observed": condition(obj, "CapacityObserved")}
    return {}


def wait_pool(cp: ControlPlane, ic: str, pool: str, timeout: float = OBSERVED, **want) -> dict:
    def check():
        got = pool_status(cp, ic, pool)
        if got.get("observed", {}).get("status") != "True" or \
                any(got.get(k) != v for k, v in want.items()):
            raise AssertionError(f"{ic}/{pool}: {got}")
        return got
    return wait(f"InferenceCluster {ic} pool {pool} to report {want}", check, timeout)


@pytest.fixture(scope="module", autouse=True)
def namespace(cp: ControlPlane):
    ensure_namespace(cp, NS)


def test_every_cluster_reports_the_nodes_it_has(cp: ControlPlane, timings):
    clock = Stopwatch()
    for ic in fleet.load_fleet(REPO / "examples" / "fleet"):
        name = ic["metadata"]["name"]
        for p in ic["spec"]["nodePools"]:
            got = wait_pool(cp, name, p["name"], nodes=p["nodes"], readyNodes=p["nodes"],
                            schedulableNodes=p["nodes"], declaredNodes=p["nodes"])
            assert got["observedAt"]
    timings["capacity: every cluster observed (s)"] = clock.seconds()
    # The remote clusters' reports are what the reporter wrote there.
    for name in ("eu-west-1", "us-central-batch"):
        cm = get(cp, "configmaps", REPORT_NAME, REPORT_NAMESPACE, cluster=cp.cluster(name))
        assert cm is not None and "inventory.json" in cm["data"], name


def test_cordoned_nodes_leave_the_count_and_the_scheduler_places_by_what_is_left(
        cp: ControlPlane, timings):
    cluster, pool = "us-east-1", "l4"  # the control-plane cluster: its Nodes are read directly
    nodes = [fleet.node_name(cluster, pool, i) for i in range(4)]
    md = single_gpu("cordon-probe", NS, 4, {"topology.kubernetes.io/region": cluster})
    try:
        clock = Stopwatch()
        for n in nodes[:3]:
            cp.kubectl("cordon", n, cluster=cp.cluster(cluster))
        got = wait_pool(cp, cluster, pool, nodes=1, schedulableNodes=1, readyNodes=4)
        assert got["declaredNodes"] == 4
        timings["capacity: cordon to observed on the control-plane cluster (s)"] = clock.seconds()
        apply_docs(cp, [md])
        status = wait_scheduled(cp, NS, "cordon-probe", 1)["status"]
        reasons = {u["reason"] for u in status["unscheduled"]}
        assert all(f'no node of pool "{pool}" with 1 gpu free' in r for r in reasons), reasons
        assert not is_true(get(cp, MD, "cordon-probe", NS), "ReplicasScheduled")
        for n in nodes[:3]:
            cp.kubectl("uncordon", n, cluster=cp.cluster(cluster))
        wait_pool(cp, cluster, pool, nodes=4, schedulableNodes=4)
        wait_scheduled(cp, NS, "cordon-probe", 4)
    finally:
        for n in nodes:
            cp.kubectl("uncordon", n, cluster=cp.cluster(cluster), check=False)
        delete_and_wait(cp, NS, "cordon-probe")


def test_a_not_ready_node_on_a_remote_cluster_leaves_the_count(cp: ControlPlane, timings):
    cluster, pool = "eu-west-1", "l4-4x"  # remote: counted from the reporter's report
    handle = cp.cluster(cluster)
    node = fleet.node_name(cluster, pool, 0)
    # Four L4s per node: one node left takes four one-GPU replicas, the fifth waits.
    md = single_gpu("not-ready-probe", NS, 5, {"region": "eu-west"})
    try:
        clock = Stopwatch()
        cp.kubectl("label", "node", node, f"{NOT_READY_LABEL}=true", cluster=handle)
        wait(f"node {node} NotReady", lambda: condition(
            get(cp, "nodes", node, cluster=handle), "Ready").get("status") == "False", 60)
        got = wait_pool(cp, cluster, pool, nodes=1, readyNodes=1, schedulableNodes=1)
        timings["capacity: NotReady to observed through the reporter (s)"] = clock.seconds()
        assert got["declaredNodes"] == 2
        apply_docs(cp, [md])
        wait_scheduled(cp, NS, "not-ready-probe", 4)
        cp.kubectl("label", "node", node, f"{NOT_READY_LABEL}-", cluster=handle)
        wait_pool(cp, cluster, pool, nodes=2, readyNodes=2)
        wait_scheduled(cp, NS, "not-ready-probe", 5)
    finally:
        cp.kubectl("label", "node", node, f"{NOT_READY_LABEL}-", cluster=handle, check=False)
        delete_and_wait(cp, NS, "not-ready-probe")
        wait_pool(cp, cluster, pool, nodes=2, readyNodes=2)


# --- Devices the clusters publish ------------------------------------------------------

def declared_pool(cluster: str, pool: str) -> tuple[int, dict]:
    """The pool's index in its InferenceCluster and the pool as the fleet declares it."""
    ic = next(i for i in fleet.load_fleet(REPO / "examples" / "fleet")
              if i["metadata"]["name"] == cluster)
    return next((i, p) for i, p in enumerate(ic["spec"]["nodePools"]) if p["name"] == pool)


def without_claim(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "claim"}


def test_a_pool_that_leaves_devices_out_counts_what_its_nodes_publish(cp: ControlPlane, timings):
    """The harness publishes each node's devices in ResourceSlices as a DRA driver
    would. Every pool reports what its nodes publish; with the declaration taken
    away, the scheduler places by the published devices, and kube-scheduler
    allocates the replicas' claims through the DeviceClass the function found."""
    pools = {"us-east-1": "l4",     # the control-plane cluster: slices read directly
             "eu-west-1": "l4-4x"}  # remote: the inventory reporter lists them
    clock = Stopwatch()
    for cluster, pool in pools.items():
        declared = [without_claim(d) for d in declared_pool(cluster, pool)[1]["devices"]
                    if fleet.published(d)]

        def reported(cluster=cluster, pool=pool, declared=declared):
            got = pool_status(cp, cluster, pool).get("publishedDevices")
            # The API server defaults `claim` (DRA): published devices are all DRA's.
            got = got if got is None else [without_claim(d) for d in got]
            if got != declared:
                raise AssertionError(f"{cluster}/{pool} publishes {got}, declares {declared}")
            return got
        wait(f"{cluster}/{pool} to report the devices its nodes publish", reported, OBSERVED)
    timings["capacity: published devices reported (s)"] = clock.seconds()

    mds = [single_gpu(f"published-{c}", NS, 1, {"topology.kubernetes.io/region": c})
           for c in pools]
    undeclare = {c: declared_pool(c, p)[0] for c, p in pools.items()}
    try:
        for cluster, i in undeclare.items():
            cp.kubectl("patch", IC, cluster, "--type=json", "-p",
                       f'[{{"op":"remove","path":"/spec/nodePools/{i}/devices"}}]')
        apply_docs(cp, mds)
        for md in mds:
            name = md["metadata"]["name"]
            wait_scheduled(cp, NS, name, 1)

            def serving(name=name):
                (mr,) = replicas_of(cp, NS, name)
                if (mr.get("status") or {}).get("phase") != "Serving":
                    raise AssertionError(f"{name}: {mr.get('status')}")
                return mr
            mr = wait(f"{name} Serving", serving, SERVING)
            requests = [r for m in mr["spec"]["engines"][0]["members"]
                        for r in m.get("deviceRequests") or []]
            assert [r["deviceClassName"] for r in requests] == ["gpu.nvidia.com"], requests
            assert claims_on_their_pool(cp, mr) == []
    finally:
        for md in mds:  # all at once: each wait is for the namespace's pods on every cluster
            cp.kubectl("delete", MD, md["metadata"]["name"], "-n", NS, "--ignore-not-found",
                       "--wait=false")
        for md in mds:
            delete_and_wait(cp, NS, md["metadata"]["name"])
        for cluster, pool in pools.items():
            i, declared = declared_pool(cluster, pool)
            cp.kubectl("patch", IC, cluster, "--type=json", "-p", json.dumps(
                [{"op": "add", "path": f"/spec/nodePools/{i}/devices",
                  "value": declared["devices"]}]), check=False)


# --- Fair share ------------------------------------------------------------------------

CAPPED, OTHER = "quota-capped", "quota-other"
L4_NODES = 6  # replicas of the uncapped namespace: us-east-1 has 4 L4s, eu-west-1 eight more


def quota() -> dict:
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceQuota",
            "metadata": {"name": "e2e-l4"},
            "spec": {"namespaces": [CAPPED], "limits": [{
                "name": "l4", "devices": 2, "selectors": [
                    {"cel": 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA-L4"'}]}]}}


def test_a_quota_caps_one_namespace_while_another_fills_the_rest(cp: ControlPlane):
    for ns in (CAPPED, OTHER):
        ensure_namespace(cp, ns)
    prod = {"tier": "prod"}
    try:
        apply_docs(cp, [quota()])
        apply_docs(cp, [single_gpu("capped", CAPPED, 4, prod)])
        status = wait_scheduled(cp, CAPPED, "capped", 2)["status"]
        reasons = [u["reason"] for u in status["unscheduled"]]
        assert len(reasons) == 2 and all(
            "under quota e2e-l4/l4 (2 of 2 devices in use" in r for r in reasons), reasons
        # The other namespace is not capped: it takes L4s past the capped one's limit.
        apply_docs(cp, [single_gpu("uncapped", OTHER, L4_NODES - 2, prod)])
        wait_scheduled(cp, OTHER, "uncapped", L4_NODES - 2)

        def used():
            q = get(cp, "inferencequotas.modelplane.ai", "e2e-l4") or {}
            limits = {lim["name"]: lim for lim in (q.get("status") or {}).get("limits") or []}
            got = limits.get("l4") or {}
            if (got.get("used"), got.get("devices")) != (2, 2):
                raise AssertionError(q.get("status"))
            return True
        wait("InferenceQuota e2e-l4 to report 2 of 2 used", used, SETTLE)
    finally:
        delete_and_wait(cp, CAPPED, "capped")
        delete_and_wait(cp, OTHER, "uncapped")
        cp.kubectl("delete", "inferencequotas.modelplane.ai", "e2e-l4", "--ignore-not-found")


# --- Making room -----------------------------------------------------------------

def test_a_pack_deployment_moves_a_replica_to_make_room_for_one_that_fits_nowhere(
        cp: ControlPlane, timings):
    """A deployment whose engine needs all eight of eu-west-1's L4s (eight copies of
    one one-L4 engine: one pool, never split; us-east-1's pool has four) waits while
    one replica of another holds one of them. Switched to Pack, that deployment moves
    the replica to us-east-1, and the waiting one gets eu-west-1's pool, where
    kube-scheduler puts its eight pods on the two nodes, four each."""
    prod = {"tier": "prod"}
    small = single_gpu("room-small", NS, 2, prod)  # Spread: one replica on each L4 pool
    wide = single_gpu("room-wide", NS, 1, prod)
    wide["spec"]["template"]["spec"]["engines"][0]["copies"] = 8
    try:
        apply_docs(cp, [small])
        wait_scheduled(cp, NS, "room-small", 2)
        assert sorted(mr["spec"]["clusterName"] for mr in replicas_of(cp, NS, "room-small")) \
            == ["eu-west-1", "us-east-1"]
        apply_docs(cp, [wide])
        status = wait_scheduled(cp, NS, "room-wide", 0)["status"]
        assert status["unscheduled"], status  # eu-west-1 has 7 free L4s, us-east-1 3

        clock = Stopwatch()
        small["spec"]["template"]["spec"]["placement"] = {"strategy": "Pack"}
        apply_docs(cp, [small])
        wait_scheduled(cp, NS, "room-wide", 1)
        timings["room: Pack switch -> waiting deployment placed (s)"] = clock.seconds()
        assert [mr["spec"]["clusterName"] for mr in replicas_of(cp, NS, "room-small")] \
            == ["us-east-1", "us-east-1"]
        (mr,) = replicas_of(cp, NS, "room-wide")
        assert mr["spec"]["clusterName"] == "eu-west-1"
        assert mr["spec"]["engines"][0]["members"][0]["nodePoolName"] == "l4-4x"
        # Real pods on real nodes: both deployments serve, the wide one's eight
        # pods on the two nodes the move freed (kube-scheduler allocated their claims).
        for name in ("room-wide", "room-small"):
            wait_condition(cp, MD, name, NS, "ReplicasReady", SERVING)
        timings["room: Pack switch -> both serving (s)"] = clock.seconds()
        (mr,) = replicas_of(cp, NS, "room-wide")
        assert claims_on_their_pool(cp, mr) == []
        assert len({p["spec"]["nodeName"] for p in serving_pods(cp, mr)}) == 2
    finally:
        # Both at once: the wait for one sees the other's pods in the namespace.
        for name in ("room-wide", "room-small"):
            cp.kubectl("delete", MD, name, "-n", NS, "--ignore-not-found", "--wait=false")
        delete_and_wait(cp, NS, "room-wide")
        delete_and_wait(cp, NS, "room-small")
