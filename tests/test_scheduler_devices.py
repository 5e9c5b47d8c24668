"""Devices, not nodes (issue #34): a pod takes the devices its DRA requests got
from one node, and pods of any deployment share a node while its devices last.

The fleets here are 8-GPU nodes, as in LLM serving: one-GPU replicas of a 7-8B
model, four-GPU engines of a 70B one. The rules about where replicas go
(taints, spread, overcommit order, cost ties) are pinned with whole-node
engines in the other scheduler tests; these pin what changes when pods share.
"""

from __future__ import annotations

import itertools

from builders import composite, request
from fleetgen import (
    World,
    cluster,
    deployment,
    device,
    engine,
    foreign_replica,
    key,
    leader,
    messages,
    own_replica,
    placements,
    pool,
    product_is,
    req,
    stamp,
    standalone,
    status,
    to_plain,
    worker,
)

from function.contract.api import REQUIRE_REPLICAS
from function.runtime import fn

H100 = device("gpu", "H100", count=8)
ON_H100 = {"vllm": "h100"}


def gpus(n: int, name: str = "llama", replicas: int = 1, strategy: str | None = None) -> dict:
    """A deployment of Standalone replicas taking `n` H100s each (one pod)."""
    md = deployment(name, engine("vllm", standalone(req("gpu", n, product_is("H100")))),
                    replicas=replicas)
    if strategy:
        md["spec"]["template"]["spec"]["placement"] = {"strategy": strategy}
    return md


def no_node_with(n: int, most: int, pool_name: str = "h100") -> str:
    return (f'has no node of pool "{pool_name}" with {n} gpu free (a pod needs them on one '
            f"node; the most free on one is {most} gpu)")


def pool_status(ic: dict, replicas: list[dict]) -> list[dict]:
    """status.nodePools of the InferenceCluster with `replicas` placed."""
    rsp = fn.run_function(request(ic, required={REQUIRE_REPLICAS: replicas}))
    return to_plain(composite(rsp))["status"]["nodePools"]


def by_cluster(rsp) -> dict[int, str]:
    return {i: c for i, (c, _) in placements(rsp).items()}


# --- sharing ----------------------------------------------------------------------

def test_twenty_one_gpu_replicas_on_two_8_gpu_nodes_place_16_and_say_why_for_the_rest():
    rsp = World(gpus(1, replicas=20), [cluster("a", pool("h100", 2, H100))]).run()
    assert sorted(placements(rsp)) == list(range(16))
    unscheduled = status(rsp)["unscheduled"]
    assert [u["index"] for u in unscheduled] == [16, 17, 18, 19]
    assert unscheduled[0]["reason"] == \
        f"0/1 clusters fit replica 16: 1 {no_node_with(1, 0)}"
    assert status(rsp)["replicas"] == {"desired": 20, "scheduled": 16, "ready": 0}


def test_pods_of_different_deployments_share_a_node():
    # Another team's 3-GPU pod holds part of the only node; five of ours fill the rest.
    others = [foreign_replica("other-0", "a", {"h100": 1}, gpus=3, created=stamp(0))]
    rsp = World(gpus(1, replicas=6), [cluster("a", pool("h100", 1, H100))], others).run()
    assert sorted(placements(rsp)) == [0, 1, 2, 3, 4]
    assert status(rsp)["unscheduled"][0]["reason"] == \
        f"0/1 clusters fit replica 5: 1 {no_node_with(1, 0)}"


def test_a_4_gpu_pod_does_not_fit_two_nodes_with_3_free_each():
    # Six GPUs are free in all, but no node has four.
    others = [foreign_replica("other-0", "a", {"h100": 2}, gpus=5, created=stamp(0))]
    rsp = World(gpus(4), [cluster("a", pool("h100", 2, H100))], others).run()
    assert placements(rsp) == {}
    assert status(rsp)["unscheduled"][0]["reason"] == \
        f"0/1 clusters fit replica 0: 1 {no_node_with(4, 3)}"


def test_four_gpu_and_one_gpu_engines_fill_two_nodes_exactly():
    # The one-GPU replicas go first and pack onto one node (best fit), which
    # leaves the other node whole for the four-GPU pods: 4 x 1 + 3 x 4 = 16.
    ic = cluster("a", pool("h100", 2, H100))
    small = World(gpus(1, "small", replicas=4), [ic])
    small.apply(small.run())
    held = list(small.observed.values())
    big = World(gpus(4, "big", replicas=4), [ic], held)
    rsp = big.run()
    assert sorted(placements(rsp)) == [0, 1, 2]
    assert status(rsp)["unscheduled"][0]["reason"] == \
        f"0/1 clusters fit replica 3: 1 {no_node_with(4, 0)}"
    big.apply(rsp)
    [h100] = pool_status(ic, held + list(big.observed.values()))
    assert (h100["usedNodes"], h100["freeNodes"]) == (2, 0)
    assert h100["devices"] == [{"name": "gpu", "perNode": 8, "total": 16, "used": 16,
                                "free": 0, "largestFree": 0}]


def test_two_engines_of_one_replica_share_the_nodes_of_their_pool():
    # Prefill's three 4-GPU pods and decode's four 1-GPU pods are judged together.
    md = deployment("pd", engine("prefill", standalone(req("gpu", 4, product_is("H100"))),
                                 copies=3, phase="Prefill"),
                    engine("decode", standalone(req("gpu", 1, product_is("H100"))),
                           copies=4, phase="Decode"), mode="PrefillDecode", replicas=2)
    rsp = World(md, [cluster("a", pool("h100", 2, H100))]).run()
    assert placements(rsp) == {0: ("a", {"prefill": "h100", "decode": "h100"})}
    assert status(rsp)["unscheduled"][0]["reason"] == (
        f"0/1 clusters fit replica 1: 1 {no_node_with(4, 0)}")


# --- gangs --------------------------------------------------------------------------

def test_gang_workers_share_a_node_when_its_devices_allow():
    # A leader and three workers of 2 GPUs each: 8 GPUs, one node.
    r = req("gpu", 2, product_is("H100"))
    md = deployment("gang", engine("vllm", leader(r), worker(3, r)), replicas=2)
    ic = cluster("a", pool("h100", 1, H100))
    world = World(md, [ic])
    rsp = world.run()
    assert placements(rsp) == {0: ("a", ON_H100)}
    assert status(rsp)["unscheduled"][0]["reason"] == \
        f"0/1 clusters fit replica 1: 1 {no_node_with(2, 0)}"
    world.apply(rsp)
    [h100] = pool_status(ic, list(world.observed.values()))
    assert (h100["usedNodes"], h100["devices"][0]["used"]) == (1, 8)


def test_a_leader_that_claims_no_device_rides_free():
    # Two 4-GPU workers fill the node; the leader claims nothing and takes nothing.
    r = req("gpu", 4, product_is("H100"))
    md = deployment("gang", engine("vllm", leader(), worker(2, r)), replicas=2)
    world = World(md, [cluster("a", pool("h100", 1, H100))])
    rsp = world.run()
    assert placements(rsp) == {0: ("a", ON_H100)}
    assert status(rsp)["unscheduled"][0]["reason"] == \
        f"0/1 clusters fit replica 1: 1 {no_node_with(4, 0)}"
    world.apply(rsp)
    [mr] = world.observed.values()
    lead = mr["spec"]["engines"][0]["members"][0]
    assert (lead["deviceRequests"], lead["nodePoolName"]) == ([], "h100")


# --- Pack ---------------------------------------------------------------------------

def test_pack_fills_the_cluster_with_fewest_free_devices_first():
    # b's node has 3 GPUs held: Pack fills its 5 free before it opens a; Spread
    # would start on a (by name).
    fleet = [cluster("a", pool("h100", 1, H100)), cluster("b", pool("h100", 1, H100))]
    others = [foreign_replica("other-0", "b", {"h100": 1}, gpus=3, created=stamp(0))]
    rsp = World(gpus(1, replicas=6, strategy="Pack"), fleet, others).run()
    assert by_cluster(rsp) == {0: "b", 1: "b", 2: "b", 3: "b", 4: "b", 5: "a"}
    spread = World(gpus(1, replicas=1), fleet, others).run()
    assert by_cluster(spread) == {0: "a"}


def test_pods_fill_the_fullest_node_so_a_whole_node_stays_free():
    # A 6-GPU pod holds one node; a 2-GPU pod goes beside it (best fit), so an
    # 8-GPU pod still finds the other node whole.
    ic = cluster("a", pool("h100", 2, H100))
    others = [foreign_replica("other-0", "a", {"h100": 1}, gpus=6, created=stamp(0))]
    small = World(gpus(2, "small"), [ic], others)
    small.apply(small.run())
    held = [*others, *small.observed.values()]
    [h100] = pool_status(ic, held)
    assert (h100["usedNodes"], h100["devices"][0]["largestFree"]) == (1, 8)
    rsp = World(gpus(8, "whole"), [ic], held).run()
    assert placements(rsp) == {0: ("a", ON_H100)}


# --- cost ---------------------------------------------------------------------------

def test_a_pod_costs_its_share_of_a_node():
    # One GPU of eight is an eighth of a's node (8 / 8 = 1 an hour); on b a
    # one-GPU node costs 2. Charged by whole nodes, a would cost 8 and lose.
    fleet = [cluster("a", {**pool("h100", 1, H100), "costPerNodeHour": "8"}),
             cluster("b", {**pool("h100", 4, device("gpu", "H100", count=1)),
                           "costPerNodeHour": "2"})]
    assert placements(World(gpus(1), fleet).run()) == {0: ("a", ON_H100)}
    # Four GPUs are half of a's node (4 an hour) and the whole of a 4-GPU node
    # of b's (3.5).
    assert placements(World(gpus(4), [fleet[0], cluster(
        "b", {**pool("h100", 1, device("gpu", "H100", count=4)),
              "costPerNodeHour": "3.5"})]).run()) == {0: ("b", ON_H100)}


def test_a_pod_is_charged_its_scarcest_device_kind():
    # One GPU of eight and one NIC of one: the NIC makes it a whole node.
    def nics(count: int) -> dict:
        return device("nic", "CX7", count=count, driver="nic.example.com")

    md = deployment("llama", engine("vllm", standalone(
        req("gpu", 1, product_is("H100")), req("nic", 1, 'device.driver == "nic.example.com"'))))
    fleet = [cluster("a", {**pool("h100", 1, H100, nics(1)), "costPerNodeHour": "8"}),
             cluster("b", {**pool("h100", 1, H100, nics(8)), "costPerNodeHour": "9"})]
    # a: max(1/8, 1/1) x 8 = 8; b: max(1/8, 1/8) x 9 = 1.125.
    assert placements(World(md, fleet).run()) == {0: ("b", ON_H100)}


# --- overcommit repair --------------------------------------------------------------

def test_overcommit_repair_at_device_level_moves_the_youngest():
    # Three 4-GPU replicas on a node of eight (the pool lost a node): the two
    # oldest fit, the youngest (replica 0, despite its index) moves.
    md = gpus(4, replicas=3)
    observed = {key("a", i): own_replica(md, "a", i, ON_H100, created=stamp(t))
                for i, t in ((0, 5), (1, 1), (2, 3))}
    fleet = [cluster("a", pool("h100", 1, H100)), cluster("b", pool("h100", 1, H100))]
    rsp = World(md, fleet, observed=observed).run()
    assert by_cluster(rsp) == {0: "b", 1: "a", 2: "a"}
    assert ("replica 0 moved from a to b: pool h100 on a is overcommitted (its pods need more "
            "devices than its 1 node has) and it is among the youngest") in messages(rsp)


def test_pods_that_share_a_node_are_not_overcommitted():
    # Eight one-GPU replicas on one 8-GPU node: nothing moves.
    md = gpus(1, replicas=8)
    observed = {key("a", i): own_replica(md, "a", i, ON_H100, created=stamp(i))
                for i in range(8)}
    fleet = [cluster("a", pool("h100", 1, H100)), cluster("b", pool("h100", 1, H100))]
    rsp = World(md, fleet, observed=observed).run()
    assert by_cluster(rsp) == {i: "a" for i in range(8)}
    assert not [m for m in messages(rsp) if "moved" in m]


# --- InferenceCluster status --------------------------------------------------------

def test_the_inference_cluster_reports_devices_used_free_and_largest_free_per_pool():
    l4 = device("gpu", "L4", count=4, memory="24Gi")
    ic = cluster("a", pool("h100", 2, H100), pool("l4", 1, l4), pool("idle", 3, H100))
    held = [foreign_replica("x", "a", {"h100": 3}, gpus=3, created=stamp(0)),
            foreign_replica("y", "a", {"l4": 1}, gpus=1, created=stamp(0))]
    rsp = fn.run_function(request(ic, required={REQUIRE_REPLICAS: held}))
    st = to_plain(composite(rsp))["status"]
    # Three 3-GPU pods: two on one node (6 of 8), one on the other (3 of 8).
    assert [(p["name"], p["usedNodes"], p["freeNodes"], p["devices"]) for p in
            st["nodePools"]] == [
        ("h100", 2, 0, [{"name": "gpu", "perNode": 8, "total": 16, "used": 9, "free": 7,
                         "largestFree": 5}]),
        ("l4", 1, 0, [{"name": "gpu", "perNode": 4, "total": 4, "used": 1, "free": 3,
                       "largestFree": 3}]),
        ("idle", 0, 3, [{"name": "gpu", "perNode": 8, "total": 24, "used": 0, "free": 24,
                         "largestFree": 8}])]
    assert st["freeDevices"] == "h100: 7/16 gpu, l4: 3/4 gpu, idle: 24/24 gpu"
    assert (st["nodes"], st["freeNodes"]) == (6, 3)


# --- determinism --------------------------------------------------------------------

def test_the_same_fleet_gives_the_same_bytes_whatever_order_other_replicas_are_listed_in():
    # Placed one by one in the order 3, 3, 5, 5 the other pods would take all three
    # nodes (3+3 | 5 | 5); counted largest first they take two (5+3 | 5+3) and
    # the third node stays whole for the 8-GPU replica, in every order.
    ic = cluster("a", pool("h100", 3, H100))
    others = [foreign_replica(f"other-{i}", "a", {"h100": 1}, gpus=n, index=i,
                              created=stamp(i))
              for i, n in enumerate((3, 3, 5, 5))]
    outputs = set()
    for order in itertools.permutations(others):
        rsp = World(gpus(8, replicas=2), [ic], list(order)).run()
        assert by_cluster(rsp) == {0: "a"}
        outputs.add(rsp.SerializeToString(deterministic=True))
    assert len(outputs) == 1
