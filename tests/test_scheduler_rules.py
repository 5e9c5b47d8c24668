"""The scheduler's rules, one table test each (issue #3).

Most tests drive `function.runtime.fn.run_function` with a synthetic fleet from
`fleetgen` the way Crossplane calls the function: the InferenceClusters that
match clusterSelector and every ModelReplica as required resources, this
deployment's ModelReplicas as observed composed resources. A few call
`function.scheduler.plan.plan` directly where that is clearer.
"""

from __future__ import annotations

import re

import pytest
from builders import desired, request
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from fleetgen import (
    GPU,
    NS,
    PER_NODE,
    World,
    cluster,
    condition,
    deployment,
    device,
    engine,
    fatal,
    foreign_replica,
    key,
    leader,
    memory_at_least,
    messages,
    own_replica,
    placements,
    pool,
    pool_nodes,
    product_is,
    req,
    stamp,
    standalone,
    status,
    synthetic,
    taint,
    to_plain,
    total_usage,
    worker,
)

from function import cluster as cluster_fn
from function.contract.api import (
    API_VERSION,
    LABEL_CLUSTER,
    LABEL_DEPLOYMENT,
    LABEL_REPLICA_INDEX,
    REQUIRE_CLUSTERS,
    REQUIRE_REPLICAS,
)
from function.contract.records import parse_cluster
from function.kit import requeue
from function.runtime import fn
from function.scheduler.filters import Deployment
from function.scheduler.model import parse_replica
from function.scheduler.output import replica_name
from function.scheduler.plan import Inputs, plan

H100 = device("gpu", "H100", count=8)
L4 = device("gpu", "L4", count=4, memory="24Gi")


# These rules are about where replicas go, so most engines here take whole nodes:
# device by device, pods sharing nodes, is tests/test_scheduler_devices.py.

def whole_node(product: str = "H100", copies: int | None = None, name: str = "vllm") -> dict:
    """A Standalone engine taking every GPU of one node (one pod, one node)."""
    return engine(name, standalone(req("gpu", PER_NODE[product], product_is(product))),
                  copies=copies)


def on_whole_nodes(name: str, **kw) -> dict:
    """A deployment whose replicas each take one whole H100 node."""
    return deployment(name, whole_node(), **kw)


def gang(workers: int, *, count: int = 8, product: str = "H100", copies: int | None = None,
         leader_claims: bool = True, name: str = "vllm", phase: str | None = None) -> dict:
    r = req("gpu", count, product_is(product))
    return engine(name, leader(r) if leader_claims else leader(), worker(workers, r),
                  copies=copies, phase=phase)


def plan_of(md: dict, clusters: list[dict], own=(), others=(), malformed=None):
    """`plan()` on parsed inputs, bypassing the RunFunction I/O."""
    tspec = md["spec"]["template"]["spec"]
    dep = Deployment(match_labels=(tspec.get("clusterSelector") or {}).get("matchLabels") or {},
                     tolerations=tspec.get("tolerations") or [], engines=tspec["engines"])
    return plan(Inputs(replicas=md["spec"]["replicas"], deployment=dep,
                       clusters=[parse_cluster(c) for c in clusters],
                       malformed_clusters=dict(malformed or {}),
                       own=[parse_replica(r) for r in own],
                       others=[parse_replica(r) for r in others]))


def used(rsp, clusters, others=()) -> dict[tuple[str, str], int]:
    """Device-claiming pods per (cluster, pool), other deployments' plus our desired
    replicas: nodes, where every pod takes a whole node."""
    mrs = [to_plain(m) for m in desired(rsp).values()] + list(others)
    usage = total_usage(mrs)
    return {k: usage.get(k, 0) for k in pool_nodes(clusters)}


def member_of(rsp, index: int, engine_name: str = "vllm", member: int = 0) -> dict:
    for mr in desired(rsp).values():
        if mr["metadata"]["labels"].get(LABEL_REPLICA_INDEX) == str(index):
            e = next(e for e in mr["spec"]["engines"] if e["name"] == engine_name)
            return to_plain(e["members"][member])
    raise AssertionError(f"no replica {index}")


# --- 1. Inputs ----------------------------------------------------------------

def test_the_scheduler_requires_the_selected_clusters_and_every_model_replica():
    md = deployment("llama", selector={"tier": "prod"})
    rsp = World(md, []).run(resolved=False)
    clusters = rsp.requirements.resources[REQUIRE_CLUSTERS]
    assert (clusters.api_version, clusters.kind) == (API_VERSION, "InferenceCluster")
    assert dict(clusters.match_labels.labels) == {"tier": "prod"}
    replicas = rsp.requirements.resources[REQUIRE_REPLICAS]
    assert (replicas.api_version, replicas.kind) == (API_VERSION, "ModelReplica")
    assert not replicas.HasField("namespace")  # every namespace: the ledger is fleet-wide


def test_without_a_cluster_selector_every_cluster_is_required_through_an_explicit_empty_match():
    # Crossplane's required-resource fetcher rejects a selector whose match is
    # unset ("unsupported required resource selector type <nil>"); an empty
    # matchLabels lists everything.
    rsp = World(deployment("llama"), []).run(resolved=False)
    for name in (REQUIRE_CLUSTERS, REQUIRE_REPLICAS):
        sel = rsp.requirements.resources[name]
        assert sel.WhichOneof("match") == "match_labels", name
        assert dict(sel.match_labels.labels) == {}


def test_the_first_call_echoes_observed_replicas():
    md = deployment("llama", replicas=3)
    mr = own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))
    mr["status"] = {"phase": "Serving", "endpoint": "https://a.example.com/llama"}
    world = World(md, [cluster("a", pool("h100", 4, H100))],
                  observed={key("a", 0): mr})
    rsp = world.run(resolved=False)
    got = {k: to_plain(v) for k, v in desired(rsp).items()}
    # Exactly what exists, nothing new, and only identity, labels and spec.
    assert list(got) == [key("a", 0)]
    assert got[key("a", 0)]["spec"] == mr["spec"]
    assert got[key("a", 0)]["metadata"] == {k: mr["metadata"][k]
                                            for k in ("name", "namespace", "labels")}
    assert "status" not in got[key("a", 0)]
    assert not fatal(rsp)


def test_a_call_with_only_one_requirement_resolved_still_decides_nothing():
    md = deployment("llama", replicas=2)
    mr = own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))
    req_ = request(md, required={REQUIRE_CLUSTERS: [cluster("a", pool("h100", 4, H100))]},
                   observed={key("a", 0): mr})
    rsp = fn.run_function(req_)
    assert list(desired(rsp)) == [key("a", 0)]


def test_the_first_call_without_observed_replicas_emits_nothing():
    rsp = World(deployment("llama", replicas=2), []).run(resolved=False)
    assert desired(rsp) == {}
    assert not fatal(rsp)


def test_resolved_requirements_with_no_clusters_report_the_shortfall():
    rsp = World(deployment("llama", replicas=1), []).run()
    assert desired(rsp) == {}
    assert condition(rsp, "ReplicasScheduled")[:2] == ("False", "Unschedulable")
    assert status(rsp)["unscheduled"] == [
        {"index": 0, "reason": "0/0 clusters fit replica 0: no InferenceCluster matched"}]


# --- 2. Filters ---------------------------------------------------------------

def test_a_cluster_whose_labels_do_not_match_the_selector_is_filtered():
    md = deployment("llama", selector={"tier": "prod"})
    result = plan_of(md, [cluster("a", pool("h100", 4, H100), labels={"tier": "dev"})])
    assert result.placements == []
    assert result.unscheduled[0].message("replica 0") == \
        "0/1 clusters fit replica 0: 1 does not match clusterSelector"


def test_noschedule_keeps_new_replicas_away_from_an_untolerating_deployment():
    clusters = [cluster("a", pool("h100", 4, H100), taints=[taint("dedicated", "NoSchedule",
                                                                   "batch")]),
                cluster("b", pool("h100", 4, H100))]
    rsp = World(deployment("llama", replicas=2), clusters).run()
    assert {c for c, _ in placements(rsp).values()} == {"b"}


@pytest.mark.parametrize("toleration", [
    {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"},
    {"key": "dedicated", "operator": "Exists"},
    {"operator": "Exists"},
    {"key": "dedicated", "value": "batch"},  # operator defaults to Equal, any effect
], ids=["equal", "exists-key", "exists-everything", "default-operator"])
def test_a_tolerated_noschedule_taint_admits_new_replicas(toleration):
    clusters = [cluster("a", pool("h100", 4, H100),
                        taints=[taint("dedicated", "NoSchedule", "batch")])]
    rsp = World(deployment("llama", tolerations=[toleration]), clusters).run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}


@pytest.mark.parametrize("toleration", [
    {"key": "dedicated", "operator": "Equal", "value": "other", "effect": "NoSchedule"},
    {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
    {"key": "other", "operator": "Exists"},
], ids=["wrong-value", "wrong-effect", "wrong-key"])
def test_a_toleration_that_does_not_match_leaves_the_taint_in_force(toleration):
    clusters = [cluster("a", pool("h100", 4, H100),
                        taints=[taint("dedicated", "NoSchedule", "batch")])]
    rsp = World(deployment("llama", tolerations=[toleration]), clusters).run()
    assert placements(rsp) == {}
    assert status(rsp)["unscheduled"][0]["reason"] == \
        "0/1 clusters fit replica 0: 1 is tainted (dedicated=batch:NoSchedule)"


def test_a_noschedule_taint_added_later_does_not_move_existing_replicas():
    md = deployment("llama")
    mr = own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))
    clusters = [cluster("a", pool("h100", 4, H100), taints=[taint("maintenance", "NoSchedule")]),
                cluster("b", pool("h100", 4, H100))]
    rsp = World(md, clusters, observed={key("a", 0): mr}).run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}
    assert condition(rsp, "ReplicasScheduled")[:2] == ("True", "AllScheduled")


def test_untolerated_noexecute_drains_a_replica_to_another_cluster():
    md = deployment("llama", replicas=2)
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1)),
                key("b", 1): own_replica(md, "b", 1, {"vllm": "h100"}, created=stamp(2))}
    clusters = [cluster("a", pool("h100", 4, H100), taints=[taint("evict", "NoExecute")]),
                cluster("b", pool("h100", 4, H100)),
                cluster("c", pool("h100", 4, H100))]
    rsp = World(md, clusters, observed=observed).run()
    # Same index, new cluster (the emptiest one), new composed resource; the
    # old one is gone from the desired state.
    assert placements(rsp) == {0: ("c", {"vllm": "h100"}), 1: ("b", {"vllm": "h100"})}
    assert set(desired(rsp)) == {key("c", 0), key("b", 1)}
    assert "replica 0 moved from a to c: cluster a is tainted evict:NoExecute" in messages(rsp)


def test_a_drained_replica_with_nowhere_to_go_is_removed_and_reported():
    md = deployment("llama")
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))}
    clusters = [cluster("a", pool("h100", 4, H100), taints=[taint("evict", "NoExecute")])]
    rsp = World(md, clusters, observed=observed).run()
    assert desired(rsp) == {}
    assert status(rsp)["unscheduled"] == [{
        "index": 0,
        "reason": "drained from a (cluster a is tainted evict:NoExecute); "
                  "0/1 clusters fit replica 0: 1 is tainted (evict:NoExecute)",
        "clusters": [{"name": "a", "reason": "is tainted (evict:NoExecute)"}]}]
    assert condition(rsp, "ReplicasScheduled")[:2] == ("False", "Unschedulable")


def test_a_tolerated_noexecute_taint_keeps_the_replica():
    md = deployment("llama", tolerations=[{"key": "evict", "operator": "Exists",
                                           "effect": "NoExecute"}])
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))}
    clusters = [cluster("a", pool("h100", 4, H100), taints=[taint("evict", "NoExecute")]),
                cluster("b", pool("h100", 4, H100))]
    rsp = World(md, clusters, observed=observed).run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}


def test_prefer_noschedule_is_advisory():
    clusters = [cluster("a", pool("h100", 4, H100), taints=[taint("soft", "PreferNoSchedule")])]
    rsp = World(deployment("llama"), clusters).run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}


def test_an_unready_cluster_gets_no_new_replicas_but_keeps_its_own():
    md = deployment("llama", replicas=2)
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))}
    clusters = [cluster("a", pool("h100", 4, H100), ready=False)]
    rsp = World(md, clusters, observed=observed).run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}
    assert status(rsp)["unscheduled"] == [
        {"index": 1, "reason": "0/1 clusters fit replica 1: 1 is not ready",
         "clusters": [{"name": "a", "reason": "is not ready"}]}]


def test_a_cluster_without_a_ready_condition_counts_as_ready():
    rsp = World(deployment("llama"), [cluster("a", pool("h100", 4, H100))]).run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}


def test_a_pool_must_satisfy_every_selector_of_a_request():
    # 80Gi H100s and 24Gi L4s: "H100 or L4" AND ">= 40Gi" leaves only the H100 pool.
    md = deployment("llama", engine("vllm", standalone(
        req("gpu", 1, product_is("H100", "L4"), memory_at_least("40Gi")))))
    clusters = [cluster("a", pool("l4", 4, L4), pool("h100", 4, H100))]
    rsp = World(md, clusters).run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}


def test_a_pool_must_offer_the_requested_count_on_one_node():
    md = deployment("llama", engine("vllm", standalone(req("gpu", 8, product_is("L4")))))
    clusters = [cluster("a", pool("l4", 16, L4))]  # 64 L4s, but 4 per node
    rsp = World(md, clusters).run()
    assert placements(rsp) == {}
    assert status(rsp)["unscheduled"][0]["reason"] == \
        '0/1 clusters fit replica 0: 1 has no pool matching engine "vllm"'


def test_all_requests_of_a_member_must_fit_one_node_together():
    # Two requests of 3 GPUs each need 6 per node; the pool has 4.
    md = deployment("llama", engine("vllm", standalone(
        req("a", 3, product_is("L4")), req("b", 3, product_is("L4")))))
    rsp = World(md, [cluster("a", pool("l4", 8, L4))]).run()
    assert placements(rsp) == {}


def test_two_requests_competing_for_one_device_kind_still_fit_when_an_assignment_exists():
    # Request "any" (declared first) accepts X or Y; request "x-only" accepts
    # only X. A greedy pass in declaration order hands X to "any" and rejects
    # the pool; the exact search gives Y to "any" and X to "x-only".
    x = device("x", "H100", count=1, device_class="x.example.com")
    y = device("y", "A100", count=1, device_class="y.example.com")
    md = deployment("llama", engine("vllm", standalone(
        req("any", 1, product_is("H100", "A100")), req("x-only", 1, product_is("H100")))))
    rsp = World(md, [cluster("a", pool("mixed", 2, x, y))]).run()
    assert placements(rsp) == {0: ("a", {"vllm": "mixed"})}
    resolved = {r["name"]: r["deviceClassName"]
                for r in member_of(rsp, 0)["deviceRequests"]}
    assert resolved == {"any": "y.example.com", "x-only": "x.example.com"}


def test_matching_backtracks_when_the_most_constrained_first_order_is_not_enough():
    # Every request accepts both kinds; X has 2 per node, Y has 3. Taking
    # them in order and always the first kind that still has room (r1 -> X,
    # r2 -> Y, r3 stuck) fails; r1 -> Y, r2 -> X, r3 -> Y fits.
    x = device("x", "H100", count=2, device_class="x.example.com")
    y = device("y", "A100", count=3, device_class="y.example.com")
    sel = memory_at_least("40Gi")
    md = deployment("llama", engine("vllm", standalone(
        req("r1", 1, sel), req("r2", 2, sel), req("r3", 2, sel))))
    rsp = World(md, [cluster("a", pool("mixed", 1, x, y))]).run()
    assert placements(rsp) == {0: ("a", {"vllm": "mixed"})}
    taken: dict[str, int] = {}
    for r in member_of(rsp, 0)["deviceRequests"]:
        taken[r["deviceClassName"]] = taken.get(r["deviceClassName"], 0) + r["count"]
    assert taken == {"x.example.com": 2, "y.example.com": 3}


def test_requests_that_cannot_share_a_node_are_rejected_however_they_are_assigned():
    x = device("x", "H100", count=2)
    y = device("y", "A100", count=3)
    sel = memory_at_least("40Gi")
    md = deployment("llama", engine("vllm", standalone(
        req("r1", 2, sel), req("r2", 2, sel), req("r3", 2, sel))))
    rsp = World(md, [cluster("a", pool("mixed", 1, x, y))]).run()
    assert placements(rsp) == {}


def test_every_request_takes_devices_of_a_single_kind():
    # 2 X + 2 Y per node, but a 3-device request cannot mix kinds.
    x = device("x", "H100", count=2)
    y = device("y", "A100", count=2)
    md = deployment("llama", engine("vllm", standalone(req("gpu", 3, memory_at_least("40Gi")))))
    rsp = World(md, [cluster("a", pool("mixed", 4, x, y))]).run()
    assert placements(rsp) == {}


def test_synthetic_devices_constrain_placement_but_are_never_claimed():
    fabric = synthetic("fabric", type="infiniband")
    md = deployment("llama", engine("vllm", standalone(
        req("gpu", 8, product_is("H100")),
        req("ib", 1, 'device.attributes["fabric.example.com"].type == "infiniband"'))))
    clusters = [cluster("a", pool("plain", 4, H100), pool("ib", 4, H100, fabric))]
    rsp = World(md, clusters).run()
    assert placements(rsp) == {0: ("a", {"vllm": "ib"})}
    resolved = {r["name"]: r for r in member_of(rsp, 0)["deviceRequests"]}
    assert resolved["gpu"]["claim"] == "DRA" and resolved["gpu"]["deviceClassName"] == GPU
    assert resolved["ib"]["claim"] == "Synthetic" and "deviceClassName" not in resolved["ib"]


def test_a_member_requesting_only_synthetic_devices_costs_nothing():
    # A CPU-only leader that selects the pool's Synthetic CPU device rides on
    # its engine's pool: the gang costs its 2 workers, not 3 nodes.
    cpu = synthetic("cpu", "cpu.example.com", architecture="amd64")
    md = deployment("llama", engine("vllm", leader(
        req("cpu", 1, 'device.attributes["cpu.example.com"].architecture == "amd64"')),
        worker(2, req("gpu", 8, product_is("H100")))))
    clusters = [cluster("a", pool("h100", 2, H100, cpu))]
    world = World(md, clusters)
    rsp = world.step()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}
    assert used(rsp, clusters) == {("a", "h100"): 2}
    assert [r["claim"] for r in member_of(rsp, 0, member=0)["deviceRequests"]] == ["Synthetic"]


def test_an_engine_requesting_only_synthetic_devices_takes_a_node_of_its_pool():
    # It has nothing to ride on: each of its pods takes a whole node (#48 finding 4;
    # it used to fit a full pool, and forty such replicas a pool of two nodes).
    cpu = synthetic("cpu", "cpu.example.com", architecture="arm64")
    md = deployment("router", engine("router", standalone(
        req("cpu", 1, 'device.attributes["cpu.example.com"].architecture == "arm64"'))))
    clusters = [cluster("a", pool("cpu", 2, cpu))]
    others = [foreign_replica("hog", "a", {"cpu": 2}, created=stamp(0))]
    full = World(md, clusters, others).run()
    assert placements(full) == {}
    assert "no node of pool \"cpu\" with a whole node free" in \
        status(full)["unscheduled"][0]["reason"]
    half = [foreign_replica("hog", "a", {"cpu": 1}, created=stamp(0))]
    md["spec"]["replicas"] = 2
    rsp = World(md, clusters, half).run()
    assert placements(rsp) == {0: ("a", {"router": "cpu"})}  # the one free node, no more


def test_a_selector_that_errors_on_a_device_does_not_select_it():
    # L4s publish no "hbm" attribute: the lookup errors there and, as in DRA,
    # the device is not selected; the H100 pool (which has it) is chosen.
    h100 = device("gpu", "H100", count=8, hbm=True)
    md = deployment("llama", engine("vllm", standalone(
        req("gpu", 1, f'device.attributes["{GPU}"].hbm'))))
    rsp = World(md, [cluster("a", pool("l4", 4, L4), pool("h100", 4, h100))]).run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}


def test_the_cheapest_reason_names_the_first_failing_filter_per_cluster():
    md = deployment("llama", engine("vllm", standalone(req("gpu", 1, product_is("B200")))))
    clusters = [cluster("a", pool("h100", 4, H100)),
                cluster("b", pool("h100", 4, H100), ready=False),
                cluster("c", pool("h100", 4, H100), taints=[taint("x", "NoSchedule")])]
    rsp = World(md, clusters).run()
    assert status(rsp)["unscheduled"][0]["reason"] == (
        '0/3 clusters fit replica 0: 1 has no pool matching engine "vllm", '
        "1 is not ready, 1 is tainted (x:NoSchedule)")


# --- 3. Capacity in pods and their devices ------------------------------------

def test_each_copy_of_a_standalone_is_a_pod_taking_its_devices_on_one_node():
    # Three GPUs a pod: two pods take six of a node's eight, and the two left on
    # each node fit no third pod although four are free in all.
    md = deployment("llama", engine("vllm", standalone(req("gpu", 3, product_is("H100"))),
                                    copies=2), replicas=3)
    clusters = [cluster("a", pool("h100", 2, H100))]
    rsp = World(md, clusters).run()
    assert used(rsp, clusters) == {("a", "h100"): 4}
    assert status(rsp)["unscheduled"][0]["reason"] == (
        '0/1 clusters fit replica 2: 1 has no node of pool "h100" with 3 gpu free (a pod '
        "needs them on one node; the most free on one is 2 gpu)")


def test_a_worker_costs_its_nodes_times_copies():
    # (1 leader + 3 workers) x 2 copies = 8 nodes.
    md = deployment("llama", gang(3, copies=2), replicas=2)
    clusters = [cluster("a", pool("h100", 8, H100))]
    world = World(md, clusters)
    rsp = world.step()
    assert used(rsp, clusters) == {("a", "h100"): 8}
    assert status(rsp)["unscheduled"][0]["reason"] == (
        '0/1 clusters fit replica 1: 1 has no node of pool "h100" with 8 gpu free (a pod '
        "needs them on one node; the most free on one is 0 gpu)")


def test_a_leader_that_claims_no_device_rides_on_its_engines_pool():
    md = deployment("qwen", gang(2, copies=2, leader_claims=False), replicas=2)
    clusters = [cluster("a", pool("h100", 5, H100))]
    rsp = World(md, clusters).run()
    assert used(rsp, clusters) == {("a", "h100"): 4}
    assert status(rsp)["unscheduled"][0]["reason"] == (
        '0/1 clusters fit replica 1: 1 has room on pool "h100" for 1 of the 4 pods that each '
        "need 8 gpu on one node")
    assert member_of(rsp, 0, member=0)["deviceRequests"] == []
    assert member_of(rsp, 0, member=0)["nodePoolName"] == "h100"


def test_other_deployments_replicas_take_capacity():
    clusters = [cluster("a", pool("h100", 2, H100)), cluster("b", pool("h100", 2, H100))]
    others = [foreign_replica("other-0", "a", {"h100": 2}, created=stamp(0))]
    rsp = World(deployment("llama"), clusters, others).run()
    assert placements(rsp) == {0: ("b", {"vllm": "h100"})}


def test_two_engines_of_one_replica_never_double_book_a_pool():
    md = deployment("pd", engine("prefill", standalone(req("gpu", 8, product_is("H100"))),
                                 copies=2, phase="Prefill"),
                    engine("decode", standalone(req("gpu", 8, product_is("H100"))),
                           copies=2, phase="Decode"), mode="PrefillDecode")
    # Each engine alone fits the 3-node pool; together they need 4.
    clusters = [cluster("a", pool("big", 3, H100), pool("small", 2, H100))]
    rsp = World(md, clusters).run()
    assert placements(rsp) == {0: ("a", {"prefill": "big", "decode": "small"})}
    assert used(rsp, clusters) == {("a", "big"): 2, ("a", "small"): 2}


def test_two_engines_that_only_fit_a_pool_separately_are_rejected_together():
    md = deployment("pd", engine("prefill", standalone(req("gpu", 8, product_is("H100"))),
                                 copies=2, phase="Prefill"),
                    engine("decode", standalone(req("gpu", 8, product_is("H100"))),
                           copies=2, phase="Decode"), mode="PrefillDecode")
    rsp = World(md, [cluster("a", pool("big", 3, H100))]).run()
    assert placements(rsp) == {}
    assert status(rsp)["unscheduled"][0]["reason"] == (
        '0/1 clusters fit replica 0: 1 has too few free devices for engines '
        '"prefill", "decode" together')


def test_the_search_over_pools_finds_a_placement_the_first_choice_would_miss():
    # Prefill fits both pools and tries "big" first (where its two 4-GPU pods
    # share a node); decode, three whole nodes, only fits "big". The search puts
    # prefill on "small" (a whole L4 node each) so decode can have "big".
    md = deployment("pd", engine("prefill", standalone(req("gpu", 4, product_is("H100", "L4"))),
                                 copies=2, phase="Prefill"),
                    engine("decode", standalone(req("gpu", 8, product_is("H100"))),
                           copies=3, phase="Decode"), mode="PrefillDecode")
    clusters = [cluster("a", pool("big", 3, H100), pool("small", 2, L4))]
    rsp = World(md, clusters).run()
    assert placements(rsp) == {0: ("a", {"prefill": "small", "decode": "big"})}


def test_an_engine_is_never_split_across_pools():
    # The gang needs 3 nodes; the cluster has 4 free, but 2 + 2 on two pools.
    md = deployment("llama", gang(2))
    clusters = [cluster("a", pool("h100-a", 2, H100), pool("h100-b", 2, H100)),
                cluster("b", pool("h100", 3, H100))]
    rsp = World(md, clusters).run()
    assert placements(rsp) == {0: ("b", {"vllm": "h100"})}
    only_a = World(md, clusters[:1]).run()
    assert placements(only_a) == {}
    assert status(only_a)["unscheduled"][0]["reason"] == (
        '0/1 clusters fit replica 0: 1 has room on pool "h100-a" for 2 of the 3 pods that '
        "each need 8 gpu on one node")


def test_a_gang_whose_members_match_only_different_pools_fails_closed():
    md = deployment("llama", engine("vllm", leader(req("gpu", 1, product_is("L4"))),
                                    worker(2, req("gpu", 8, product_is("H100")))))
    rsp = World(md, [cluster("a", pool("l4", 4, L4), pool("h100", 4, H100))]).run()
    assert placements(rsp) == {}
    assert status(rsp)["unscheduled"][0]["reason"] == \
        '0/1 clusters fit replica 0: 1 has no pool matching engine "vllm"'


def test_every_member_of_an_engine_lands_on_one_pool():
    md = deployment("llama", gang(3, copies=2), replicas=2)
    clusters = [cluster("a", pool("h100", 8, H100)), cluster("b", pool("h100", 8, H100))]
    rsp = World(md, clusters).run()
    for mr in desired(rsp).values():
        for e in mr["spec"]["engines"]:
            assert len({m["nodePoolName"] for m in e["members"]}) == 1


# --- 4. Retain, fill, spread, scale down --------------------------------------

def test_an_existing_replica_keeps_its_cluster_even_when_another_is_emptier():
    md = deployment("llama", replicas=2)
    observed = {key("b", 0): own_replica(md, "b", 0, {"vllm": "h100"}, created=stamp(1))}
    clusters = [cluster("a", pool("h100", 4, H100)), cluster("b", pool("h100", 4, H100))]
    rsp = World(md, clusters, observed=observed).run()
    assert placements(rsp) == {0: ("b", {"vllm": "h100"}), 1: ("a", {"vllm": "h100"})}
    assert key("b", 0) in desired(rsp)


def test_new_replicas_spread_over_clusters_one_at_a_time_ties_by_name():
    clusters = [cluster(n, pool("h100", 4, H100)) for n in ("c", "a", "b")]
    rsp = World(deployment("llama", replicas=5), clusters).run()
    assert {i: c for i, (c, _) in placements(rsp).items()} == \
        {0: "a", 1: "b", 2: "c", 3: "a", 4: "b"}


def test_spread_counts_only_this_deployments_replicas():
    clusters = [cluster("a", pool("h100", 8, H100)), cluster("b", pool("h100", 8, H100))]
    others = [foreign_replica(f"other-{i}", "a", {"h100": 1}, index=i, created=stamp(i))
              for i in range(3)]
    rsp = World(deployment("llama", replicas=2), clusters, others).run()
    assert {i: c for i, (c, _) in placements(rsp).items()} == {0: "a", 1: "b"}


def test_a_full_cluster_is_skipped_and_the_next_fewest_loaded_is_used():
    md = deployment("llama", replicas=3)
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))}
    clusters = [cluster("a", pool("h100", 1, H100)), cluster("b", pool("h100", 1, H100)),
                cluster("c", pool("h100", 4, H100))]
    rsp = World(md, clusters, observed=observed).run()
    assert {i: c for i, (c, _) in placements(rsp).items()} == {0: "a", 1: "b", 2: "c"}


def test_new_replicas_take_the_lowest_free_index():
    md = deployment("llama", replicas=3)
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1)),
                key("a", 2): own_replica(md, "a", 2, {"vllm": "h100"}, created=stamp(2))}
    rsp = World(md, [cluster("a", pool("h100", 4, H100))], observed=observed).run()
    assert sorted(placements(rsp)) == [0, 1, 2]
    assert set(desired(rsp)) == {key("a", 0), key("a", 1), key("a", 2)}


def test_scale_down_removes_from_the_most_loaded_cluster_highest_index_first():
    md = deployment("llama", replicas=2)
    observed = {key("a", i): own_replica(md, "a", i, {"vllm": "h100"}, created=stamp(i))
                for i in (0, 2, 3)}
    observed[key("b", 1)] = own_replica(md, "b", 1, {"vllm": "h100"}, created=stamp(1))
    clusters = [cluster("a", pool("h100", 4, H100)), cluster("b", pool("h100", 4, H100))]
    rsp = World(md, clusters, observed=observed).run()
    # a hosts 3: drop 3; a still hosts 2 of 3: drop 2.
    assert {i: c for i, (c, _) in placements(rsp).items()} == {0: "a", 1: "b"}
    assert set(desired(rsp)) == {key("a", 0), key("b", 1)}


def test_scale_down_between_equally_loaded_clusters_removes_the_highest_index():
    md = deployment("llama", replicas=1)
    observed = {key("a", 1): own_replica(md, "a", 1, {"vllm": "h100"}, created=stamp(1)),
                key("b", 0): own_replica(md, "b", 0, {"vllm": "h100"}, created=stamp(2))}
    clusters = [cluster("a", pool("h100", 4, H100)), cluster("b", pool("h100", 4, H100))]
    rsp = World(md, clusters, observed=observed).run()
    assert {i: c for i, (c, _) in placements(rsp).items()} == {0: "b"}


def test_scale_down_removes_replicas_of_lost_and_drained_clusters_first():
    md = deployment("llama", replicas=1)
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1)),
                key("a", 1): own_replica(md, "a", 1, {"vllm": "h100"}, created=stamp(2)),
                key("gone", 2): own_replica(md, "gone", 2, {"vllm": "h100"}, created=stamp(3)),
                key("b", 3): own_replica(md, "b", 3, {"vllm": "h100"}, created=stamp(4))}
    clusters = [cluster("a", pool("h100", 4, H100)),
                cluster("b", pool("h100", 4, H100), taints=[taint("evict", "NoExecute")])]
    world = World(md, clusters, observed=observed)
    rsp = world.run()
    # Drained (b) first, then lost (gone), then the most loaded cluster (a).
    assert {i: c for i, (c, _) in placements(rsp).items()} == {0: "a"}
    assert status(rsp)["unscheduled"] == []
    world.md["spec"]["replicas"] = 3
    rsp = world.run()
    assert {i: c for i, (c, _) in placements(rsp).items()} == {0: "a", 1: "a", 2: "a"}


def test_scale_to_zero_removes_every_replica():
    md = deployment("llama", replicas=0)
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))}
    rsp = World(md, [cluster("a", pool("h100", 4, H100))], observed=observed).run()
    assert desired(rsp) == {}
    assert status(rsp)["replicas"] == {"desired": 0, "scheduled": 0, "ready": 0}
    assert condition(rsp, "ReplicasScheduled")[0] == "True"
    assert condition(rsp, "ReplicasReady")[0] == "True"


def test_a_replica_whose_cluster_is_gone_is_re_created_elsewhere():
    md = deployment("llama", replicas=2)
    observed = {key("gone", 0): own_replica(md, "gone", 0, {"vllm": "h100"}, created=stamp(1)),
                key("a", 1): own_replica(md, "a", 1, {"vllm": "h100"}, created=stamp(2))}
    clusters = [cluster("a", pool("h100", 4, H100)), cluster("b", pool("h100", 4, H100))]
    rsp = World(md, clusters, observed=observed).run()
    assert placements(rsp) == {0: ("b", {"vllm": "h100"}), 1: ("a", {"vllm": "h100"})}
    assert set(desired(rsp)) == {key("b", 0), key("a", 1)}
    assert "replica 0 moved from gone to b: cluster gone is gone or no longer selected" \
        in messages(rsp)


def test_a_replica_whose_cluster_is_gone_and_has_nowhere_to_go_is_kept():
    md = deployment("llama")
    mr = own_replica(md, "gone", 0, {"vllm": "h100"}, created=stamp(1))
    rsp = World(md, [cluster("a", pool("h100", 0, H100))], observed={key("gone", 0): mr}).run()
    assert to_plain(desired(rsp)[key("gone", 0)])["spec"] == mr["spec"]
    state, reason, msg = condition(rsp, "ReplicasScheduled")
    assert (state, reason) == ("False", "KeptAsIs")
    assert "replica 0 on gone: cluster gone is gone or no longer selected" in msg


def test_a_replica_on_a_cluster_that_no_longer_matches_the_selector_moves():
    md = deployment("llama", selector={"tier": "prod"})
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))}
    clusters = [cluster("a", pool("h100", 4, H100), labels={"tier": "dev"}),
                cluster("b", pool("h100", 4, H100), labels={"tier": "prod"})]
    result = plan_of(md, clusters, own=list(observed.values()))
    assert [(p.index, p.cluster) for p in result.placements] == [(0, "b")]
    assert result.notes == ["replica 0 moved from a to b: cluster a no longer matches "
                            "clusterSelector"]


def test_a_replica_whose_pool_no_longer_matches_refits_within_its_cluster():
    md = deployment("llama")
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "old"}, created=stamp(1))}
    clusters = [cluster("a", pool("old", 4, L4), pool("new", 4, H100)),
                cluster("b", pool("h100", 4, H100))]
    rsp = World(md, clusters, observed=observed).run()
    assert placements(rsp) == {0: ("a", {"vllm": "new"})}
    assert set(desired(rsp)) == {key("a", 0)}


def test_a_replica_refitted_within_its_cluster_holds_its_new_nodes():
    md = on_whole_nodes("llama", replicas=2)
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "old"}, created=stamp(1))}
    clusters = [cluster("a", pool("old", 4, L4), pool("new", 1, H100))]
    rsp = World(md, clusters, observed=observed).run()
    assert placements(rsp) == {0: ("a", {"vllm": "new"})}
    assert status(rsp)["unscheduled"][0]["reason"] == (
        '0/1 clusters fit replica 1: 1 has no node of pool "new" with 8 gpu free (a pod needs '
        "them on one node; the most free on one is 0 gpu)")


def test_a_retained_replica_follows_the_deployments_current_template():
    md = deployment("llama", whole_node(copies=1))
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))}
    md["spec"]["template"]["spec"]["engines"][0]["copies"] = 2
    rsp = World(md, [cluster("a", pool("h100", 4, H100))], observed=observed).run()
    (mr,) = desired(rsp).values()
    assert to_plain(mr)["spec"]["engines"][0]["copies"] == 2


# --- 5. Overcommit repair -----------------------------------------------------

def test_an_overcommitted_pool_re_places_its_youngest_replica():
    # The pool shrank from 2 nodes to 1. Replica 1 is the older one, so
    # replica 0 (the younger, despite its lower index) moves.
    md = on_whole_nodes("llama", replicas=2)
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(5)),
                key("a", 1): own_replica(md, "a", 1, {"vllm": "h100"}, created=stamp(1))}
    clusters = [cluster("a", pool("h100", 1, H100)), cluster("b", pool("h100", 4, H100))]
    rsp = World(md, clusters, observed=observed).run()
    assert {i: c for i, (c, _) in placements(rsp).items()} == {0: "b", 1: "a"}
    assert any(m.startswith("replica 0 moved from a to b: pool h100 on a is overcommitted")
               for m in messages(rsp))


def test_an_older_replica_of_another_deployment_keeps_its_place_over_ours():
    md = on_whole_nodes("llama")
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(5))}
    others = [foreign_replica("other-0", "a", {"h100": 2}, created=stamp(1))]
    clusters = [cluster("a", pool("h100", 2, H100)), cluster("b", pool("h100", 2, H100))]
    rsp = World(md, clusters, others, observed=observed).run()
    assert {i: c for i, (c, _) in placements(rsp).items()} == {0: "b"}


def test_our_older_replica_keeps_its_place_when_another_deployment_raced_in():
    # The other deployment's replica is younger: it is the one its own
    # scheduler re-places; ours stays.
    md = on_whole_nodes("llama")
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))}
    others = [foreign_replica("other-0", "a", {"h100": 2}, created=stamp(5))]
    clusters = [cluster("a", pool("h100", 2, H100)), cluster("b", pool("h100", 2, H100))]
    rsp = World(md, clusters, others, observed=observed).run()
    assert {i: c for i, (c, _) in placements(rsp).items()} == {0: "a"}


def test_overcommit_repair_keeps_the_oldest_that_fit_and_moves_every_younger_one():
    md = on_whole_nodes("llama", replicas=3)
    observed = {key("a", i): own_replica(md, "a", i, {"vllm": "h100"}, created=stamp(10 - i))
                for i in range(3)}
    clusters = [cluster("a", pool("h100", 1, H100)), cluster("b", pool("h100", 4, H100)),
                cluster("c", pool("h100", 4, H100))]
    rsp = World(md, clusters, observed=observed).run()
    # Replica 2 is the oldest and stays; 1 and 0 (the youngest) move, placed
    # in index order and spread out.
    assert {i: c for i, (c, _) in placements(rsp).items()} == {2: "a", 0: "b", 1: "c"}


def test_overcommit_repair_breaks_equal_timestamps_by_name():
    md = on_whole_nodes("llama", replicas=2)
    observed = {key("a", i): own_replica(md, "a", i, {"vllm": "h100"}, created=stamp(1))
                for i in range(2)}
    clusters = [cluster("a", pool("h100", 1, H100)), cluster("b", pool("h100", 4, H100))]
    rsp = World(md, clusters, observed=observed).run()
    # llama-a-0 sorts before llama-a-1: it counts as older and stays.
    assert {i: c for i, (c, _) in placements(rsp).items()} == {0: "a", 1: "b"}


def test_an_overcommitted_replica_with_nowhere_to_go_stays():
    md = on_whole_nodes("llama", replicas=2)
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1)),
                key("a", 1): own_replica(md, "a", 1, {"vllm": "h100"}, created=stamp(2))}
    rsp = World(md, [cluster("a", pool("h100", 1, H100))], observed=observed).run()
    assert set(desired(rsp)) == {key("a", 0), key("a", 1)}
    state, reason, msg = condition(rsp, "ReplicasScheduled")
    assert (state, reason) == ("False", "KeptAsIs")
    assert ("replica 1 on a: pool h100 on a is overcommitted (its pods need more devices "
            "than its 1 node has)") in msg


def test_a_replica_moved_off_an_overcommitted_pool_may_land_on_another_pool_of_its_cluster():
    md = on_whole_nodes("llama", replicas=2)
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "p1"}, created=stamp(1)),
                key("a", 1): own_replica(md, "a", 1, {"vllm": "p1"}, created=stamp(2))}
    clusters = [cluster("a", pool("p1", 1, H100), pool("p2", 1, H100))]
    rsp = World(md, clusters, observed=observed).run()
    assert placements(rsp) == {0: ("a", {"vllm": "p1"}), 1: ("a", {"vllm": "p2"})}


def test_a_displaced_replica_keeps_its_nodes_until_it_has_a_new_place():
    # Pool p0 shrank to nothing under both replicas. Replica 0 (older, both
    # engines on p0) is re-placed first; p1's two nodes look free to it only
    # if replica 1's decode node there is forgotten. Replica 1 still holds
    # that node until it moves, so replica 0 stays as it is and replica 1
    # (which can reuse its own node) moves onto p1: p1 is never overcommitted.
    a100 = device("gpu", "A100", count=1, memory="40Gi")
    md = deployment("pd", engine("prefill", standalone(req("gpu", 1, product_is("A100"))),
                                 phase="Prefill"),
                    engine("decode", standalone(req("gpu", 1, product_is("A100"))),
                           phase="Decode"), mode="PrefillDecode", replicas=2)
    observed = {
        key("b", 0): own_replica(md, "b", 0, {"prefill": "p0", "decode": "p0"}, created=stamp(1)),
        key("b", 1): own_replica(md, "b", 1, {"prefill": "p0", "decode": "p1"}, created=stamp(2))}
    clusters = [cluster("b", pool("p0", 0, a100), pool("p1", 2, a100))]
    rsp = World(md, clusters, observed=observed).run()
    assert placements(rsp) == {0: ("b", {"prefill": "p0", "decode": "p0"}),
                               1: ("b", {"prefill": "p1", "decode": "p1"})}
    assert used(rsp, clusters)[("b", "p1")] == 2
    assert "replica 1 moved from b to b: pool p0 on b is overcommitted (its pods need more " \
        "devices than its 0 nodes have) and it is among the youngest" in messages(rsp)


# --- 6. ModelReplica output ---------------------------------------------------

def test_a_replica_manifest_carries_labels_template_metadata_and_resolved_devices():
    h100 = device("gpu", "H100", count=8, device_class="h100.nvidia.com")
    md = deployment("llama", engine("vllm", leader(req("gpu", 8, product_is("H100"))),
                                    worker(1, req("gpu", 8, product_is("H100"))), copies=2),
                    labels={"team": "ml"}, annotations={"example.com/owner": "ml@example.com"},
                    mode="Unified")
    rsp = World(md, [cluster("eu", pool("h100", 4, h100))]).run()
    (k, mr), = desired(rsp).items()
    mr = to_plain(mr)
    assert k == key("eu", 0)
    assert mr["apiVersion"] == API_VERSION and mr["kind"] == "ModelReplica"
    assert mr["metadata"]["namespace"] == NS
    assert mr["metadata"]["labels"] == {"team": "ml", LABEL_DEPLOYMENT: "llama",
                                        LABEL_CLUSTER: "eu", LABEL_REPLICA_INDEX: "0"}
    assert mr["metadata"]["annotations"] == {"example.com/owner": "ml@example.com"}
    assert mr["spec"]["clusterName"] == "eu"
    assert mr["spec"]["serving"] == {"mode": "Unified"}
    (e,) = mr["spec"]["engines"]
    assert e["name"] == "vllm" and e["copies"] == 2
    template = md["spec"]["template"]["spec"]["engines"][0]["members"]
    for got, want in zip(e["members"], template):
        assert got["nodePoolName"] == "h100"
        assert got["deviceRequests"] == [{
            "name": "gpu", "claim": "DRA", "count": 8, "deviceClassName": "h100.nvidia.com",
            "selectors": [{"cel": product_is("H100")}]}]
        # Everything else is the deployment's member, verbatim.
        assert {k: v for k, v in got.items() if k not in ("nodePoolName", "deviceRequests")} \
            == want


def test_replicas_whose_members_got_one_fit_share_their_resolved_device_requests(monkeypatch):
    # The response converts a shared list once (structs.update's memo); what
    # each replica says is what it says built on its own.
    from function.scheduler import output
    md = deployment("llama", engine("vllm", leader(req("gpu", 8, product_is("H100"))),
                                    worker(1, req("gpu", 8, product_is("H100")))), replicas=4)
    calls = []
    real = output.replica_manifest
    monkeypatch.setattr(output, "replica_manifest",
                        lambda md, p, shared=None: calls.append((md, p)) or real(md, p, shared))
    World(md, [cluster(c, pool("h100", 4, H100)) for c in ("a", "b")]).run()
    assert len(calls) == 4
    shared: dict = {}
    together = [real(md_, p, shared) for md_, p in calls]
    alone = [real(md_, p) for md_, p in calls]
    assert together == alone
    lists = [m["deviceRequests"] for mr in together for m in mr["spec"]["engines"][0]["members"]]
    assert len(lists) == 8 and len({id(x) for x in lists}) == 2  # leader's and worker's


DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def test_replica_names_are_dns_labels_of_at_most_63_characters():
    long_md = "a-deployment-with-a-very-long-name-that-fills-most-of-the-budget"[:63]
    clusters = [cluster("a-very-long-cluster-name-in-some-far-away-region-1", pool("h100", 8, H100)),
                cluster("b", pool("h100", 8, H100))]
    rsp = World(deployment(long_md, replicas=12), clusters).run()
    names = [mr["metadata"]["name"] for mr in desired(rsp).values()]
    assert len(names) == 12 and len(set(names)) == 12
    for n in names:
        assert len(n) <= 63 and DNS_LABEL.fullmatch(n), n
    assert [p["name"] for p in status(rsp)["placements"]] == \
        [desired(rsp)[key(c, i)]["metadata"]["name"]
         for i, (c, _) in sorted(placements(rsp).items())]


def test_replica_names_are_unique_per_deployment_cluster_and_index():
    from function.scheduler.output import replica_name
    names = {replica_name(d, c, i) for d in ("llama", "llama-2", "x" * 63)
             for c in ("a", "b", "eu-west-1", "y" * 63) for i in range(12)}
    assert len(names) == 3 * 4 * 12


def test_replica_names_of_two_deployments_in_one_namespace_never_collide():
    from function.scheduler.output import replica_name
    assert replica_name("llama", "eu-west-1", 0) != replica_name("llama-eu", "west-1", 0)


def test_a_move_to_another_cluster_is_a_new_composed_resource_and_name():
    md = deployment("llama")
    observed = {key("gone", 0): own_replica(md, "gone", 0, {"vllm": "h100"}, created=stamp(1))}
    rsp = World(md, [cluster("a", pool("h100", 4, H100))], observed=observed).run()
    (k, mr), = desired(rsp).items()
    assert k == key("a", 0) and mr["metadata"]["name"] != observed[key("gone", 0)]["metadata"]["name"]


# --- 7. Status ----------------------------------------------------------------

def test_status_reports_each_replica_its_pools_readiness_and_endpoint():
    md = deployment("pd", engine("prefill", standalone(req("gpu", 1, product_is("H100"))),
                                 phase="Prefill"),
                    engine("decode", standalone(req("gpu", 1, product_is("H100"))),
                           phase="Decode"), mode="PrefillDecode", replicas=2)
    clusters = [cluster("a", pool("h100", 4, H100)), cluster("b", pool("h100", 4, H100))]
    world = World(md, clusters)
    world.step()
    world.observed[key("a", 0)]["status"] = {"phase": "Serving",
                                             "endpoint": "https://a.example.com/ml-team/pd"}
    world.observed[key("b", 1)]["status"] = {"phase": "Loading"}
    rsp = world.run()
    st = status(rsp)
    assert st["replicas"] == {"desired": 2, "scheduled": 2, "ready": 1}
    assert st["placements"] == [
        {"name": replica_name("pd", "a", 0), "index": 0, "cluster": "a", "ready": True,
         "pools": {"decode": "h100", "prefill": "h100"},
         "endpoint": "https://a.example.com/ml-team/pd"},
        {"name": replica_name("pd", "b", 1), "index": 1, "cluster": "b", "ready": False,
         "pools": {"decode": "h100", "prefill": "h100"}}]
    assert st["unscheduled"] == []
    assert condition(rsp, "ReplicasScheduled") == ("True", "AllScheduled",
                                                   "2/2 replicas scheduled")
    assert condition(rsp, "ReplicasReady") == ("False", "NotAllReady", "1/2 replicas serving")
    world.observed[key("b", 1)]["status"] = {"phase": "Serving"}
    assert condition(world.run(), "ReplicasReady") == ("True", "AllReady", "2/2 replicas serving")


def test_each_replica_is_ready_when_it_serves_and_the_deployment_when_all_do():
    """Crossplane derives Ready from composed readiness, and counts an unspecified
    one as not ready: the scheduler says it for every ModelReplica it emits."""
    md = deployment("m", engine("vllm", standalone(req("gpu", 1, product_is("H100")))),
                    replicas=2)
    world = World(md, [cluster("a", pool("h100", 4, H100)), cluster("b", pool("h100", 4, H100))])
    world.step()
    rsp = world.run()
    assert {k: r.ready for k, r in rsp.desired.resources.items()} == {
        key("a", 0): fnv1.READY_FALSE, key("b", 1): fnv1.READY_FALSE}
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
    world.observed[key("a", 0)]["status"] = {"phase": "Serving"}
    rsp = world.run()
    assert rsp.desired.resources[key("a", 0)].ready == fnv1.READY_TRUE
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
    world.observed[key("b", 1)]["status"] = {"phase": "Serving"}
    rsp = world.run()
    assert {r.ready for r in rsp.desired.resources.values()} == {fnv1.READY_TRUE}
    assert rsp.desired.composite.ready == fnv1.READY_TRUE


def test_a_new_deployment_is_not_ready_before_the_fleet_is_read():
    """The first call composes nothing; left to Crossplane, an XR composing
    nothing derives Ready=True."""
    md = deployment("m", engine("vllm", standalone(req("gpu", 1, product_is("H100")))),
                    replicas=2)
    rsp = fn.run_function(request(md))
    assert not rsp.desired.resources
    assert rsp.desired.composite.ready == fnv1.READY_FALSE


def two_replicas_with_serving(nodes: int, serving: tuple[int, ...]) -> fnv1.RunFunctionResponse:
    """Two one-H100 replicas asked of a cluster with `nodes` H100 nodes, placed
    by a first call; then the call that sees the replicas `serving` Serving."""
    md = deployment("m", engine("vllm", standalone(req("gpu", 1, product_is("H100")))),
                    replicas=2)
    world = World(md, [cluster("a", pool("h100", nodes, H100))])
    world.step()
    for index in serving:
        world.observed[key("a", index)]["status"] = {"phase": "Serving"}
    return world.run()


def test_a_deployment_short_of_capacity_is_not_ready_though_its_replicas_serve():
    rsp = two_replicas_with_serving(nodes=1, serving=(0,))
    assert rsp.desired.resources[key("a", 0)].ready == fnv1.READY_TRUE
    assert rsp.desired.composite.ready == fnv1.READY_FALSE


def test_a_deployment_waiting_for_capacity_asks_to_be_called_again_soon():
    """Crossplane does not watch the fleet for a deployment: while a replica
    waits for room, the response's TTL brings the next look forward."""
    # Two replicas of a whole node each, one node: one replica waits for room.
    md = deployment("m", engine("vllm", standalone(req("gpu", 8, product_is("H100")))),
                    replicas=2)
    waiting = World(md, [cluster("a", pool("h100", 1, H100))]).run()
    assert "Unschedulable" in str(waiting.conditions)
    assert waiting.meta.ttl.ToTimedelta() == requeue.WAITING
    settled = two_replicas_with_serving(nodes=2, serving=(0, 1))
    assert settled.meta.ttl.ToTimedelta() > requeue.WAITING


def test_a_deployment_waiting_for_its_replicas_to_serve_asks_to_be_called_again_soon():
    """Crossplane watches the ModelReplicas, but their status updates can open
    its watch circuit breaker: while one is placed and not serving yet, the TTL
    brings the next look forward."""
    rsp = two_replicas_with_serving(nodes=2, serving=(0,))
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
    assert rsp.meta.ttl.ToTimedelta() == requeue.WAITING


CIRCUIT_OPENED = "2026-11-26T15:59:23Z"


def settled_with_responsive(responsive: dict | None, monkeypatch,
                            minutes_later: float = 0.2) -> fnv1.RunFunctionResponse:
    """A deployment whose two replicas serve, as Crossplane calls it with its
    `Responsive` condition (None: none yet), `minutes_later` after CIRCUIT_OPENED."""
    import datetime
    opened = datetime.datetime.fromisoformat(CIRCUIT_OPENED)
    monkeypatch.setattr(requeue, "now",
                        lambda: opened + datetime.timedelta(minutes=minutes_later))
    md = deployment("m", engine("vllm", standalone(req("gpu", 1, product_is("H100")))),
                    replicas=2)
    world = World(md, [cluster("a", pool("h100", 2, H100))])
    world.step()
    for index in (0, 1):
        world.observed[key("a", index)]["status"] = {"phase": "Serving"}
    if responsive is not None:
        world.md["status"] = {"conditions": [{"lastTransitionTime": CIRCUIT_OPENED,
                                              **responsive}]}
    return world.run()


OPEN = {"type": "Responsive", "status": "False", "reason": "WatchCircuitOpen",
        "message": "Too many watch events from ModelEndpoint/m-a-0 (ns). "
                   "Allowing events periodically."}
CLOSED = {"type": "Responsive", "status": "True", "reason": "WatchCircuitClosed"}


def test_a_settled_deployment_whose_watch_circuit_is_open_asks_to_be_called_again_soon(
        monkeypatch):
    """Crossplane drops the watch events of a composite whose circuit breaker is
    open, the composite's own included: a deployment scaled right after it
    settled (bench-live's day-2 wave) would see its new spec only when the
    minute's TTL ran out. While the circuit is open, the TTL is WAITING."""
    settled = settled_with_responsive(OPEN, monkeypatch)
    assert settled.desired.composite.ready == fnv1.READY_TRUE
    assert settled.meta.ttl.ToTimedelta() == requeue.WAITING


def test_a_settled_deployment_keeps_the_default_ttl_while_its_circuit_is_closed(monkeypatch):
    for responsive in (None, CLOSED):
        settled = settled_with_responsive(responsive, monkeypatch)
        assert settled.desired.composite.ready == fnv1.READY_TRUE
        assert settled.meta.ttl.ToTimedelta() > requeue.WAITING


def test_an_open_circuit_shortens_the_ttl_only_for_the_breakers_cooldown(monkeypatch):
    """Past the cooldown Crossplane closes the breaker on the next event: a
    deployment that tripped it once is not called every WAITING for ever."""
    cooldown = requeue.CIRCUIT_COOLDOWN.total_seconds() / 60
    just_before = settled_with_responsive(OPEN, monkeypatch, minutes_later=cooldown - 0.1)
    assert just_before.meta.ttl.ToTimedelta() == requeue.WAITING
    after = settled_with_responsive(OPEN, monkeypatch, minutes_later=cooldown)
    assert after.meta.ttl.ToTimedelta() > requeue.WAITING


def test_an_open_circuit_whose_time_is_unreadable_counts_as_just_opened(monkeypatch):
    settled = settled_with_responsive({**OPEN, "lastTransitionTime": "yesterday"},
                                      monkeypatch, minutes_later=60)
    assert settled.meta.ttl.ToTimedelta() == requeue.WAITING


def test_the_unschedulable_message_reads_like_kube_scheduler():
    md = deployment("pd", engine("prefill", standalone(req("gpu", 1, product_is("H100"))),
                                 phase="Prefill"),
                    gang(3, name="decode", phase="Decode"), mode="PrefillDecode", replicas=3)
    h100x4 = device("gpu", "H100", count=4)
    clusters = [
        cluster("a", pool("h100", 8, h100x4)),  # 4 per node: decode wants 8
        cluster("b", pool("h100", 8, h100x4)),
        cluster("c", pool("h100", 4, H100)),     # 2 nodes held: decode's 4 pods need 4
        cluster("d", pool("h100", 8, H100), taints=[taint("dedicated", "NoSchedule", "batch")]),
    ]
    others = [foreign_replica("other-0", "c", {"h100": 2}, created=stamp(0))]
    rsp = World(md, clusters, others).run()
    assert placements(rsp) == {}
    want = ('0/4 clusters fit replica 2: 2 have no pool matching engine "decode", '
            '1 has room on pool "h100" for 2 of the 4 pods that each need 8 gpu on one node, '
            "1 is tainted (dedicated=batch:NoSchedule)")
    st = status(rsp)
    # Beside the summary, each cluster's own verdict, by name.
    assert st["unscheduled"][2] == {"index": 2, "reason": want, "clusters": [
        {"name": "a", "reason": 'has no pool matching engine "decode"'},
        {"name": "b", "reason": 'has no pool matching engine "decode"'},
        {"name": "c", "reason": 'has room on pool "h100" for 2 of the 4 pods that each need '
                                '8 gpu on one node'},
        {"name": "d", "reason": "is tainted (dedicated=batch:NoSchedule)"}]}
    assert st["replicas"] == {"desired": 3, "scheduled": 0, "ready": 0}
    state, reason, msg = condition(rsp, "ReplicasScheduled")
    assert (state, reason) == ("False", "Unschedulable")
    # Replicas sharing one shortfall are named together.
    assert msg == want.replace("replica 2", "replicas 0, 1, 2")


def test_the_most_common_reason_comes_first():
    md = deployment("llama")
    clusters = [cluster("a", pool("l4", 4, L4))] + [
        cluster(n, pool("h100", 4, H100), taints=[taint("dedicated", "NoSchedule", "batch")])
        for n in ("b", "c", "d")]
    rsp = World(md, clusters).run()
    assert status(rsp)["unscheduled"][0]["reason"] == (
        "0/4 clusters fit replica 0: 3 are tainted (dedicated=batch:NoSchedule), "
        '1 has no pool matching engine "vllm"')


def test_each_unscheduled_replica_names_at_most_100_clusters_the_summary_counts_all():
    clusters = [cluster(f"c{i:03}", pool("h100", 4, H100), ready=False) for i in range(120)]
    st = status(World(deployment("llama"), clusters).run())
    [entry] = st["unscheduled"]
    assert entry["reason"] == "0/120 clusters fit replica 0: 120 are not ready"
    assert [c["name"] for c in entry["clusters"]] == [f"c{i:03}" for i in range(100)]
    assert {c["reason"] for c in entry["clusters"]} == {"is not ready"}


def test_a_partial_shortfall_is_never_reported_true():
    md = on_whole_nodes("llama", replicas=3)
    rsp = World(md, [cluster("a", pool("h100", 2, H100))]).run()
    assert status(rsp)["replicas"] == {"desired": 3, "scheduled": 2, "ready": 0}
    why = ('has no node of pool "h100" with 8 gpu free (a pod needs them on one node; '
           "the most free on one is 0 gpu)")
    assert status(rsp)["unscheduled"] == [{
        "index": 2, "reason": f"0/1 clusters fit replica 2: 1 {why}",
        "clusters": [{"name": "a", "reason": why}]}]
    assert condition(rsp, "ReplicasScheduled")[0] == "False"


def test_the_inference_cluster_reports_the_devices_and_nodes_the_placed_replicas_hold():
    # Two gangs of three 8-GPU pods hold six whole H100 nodes. On the L4 pool
    # (4 GPUs a node) a 3-GPU pod and two 1-GPU pods share: packed largest first
    # onto the fullest node, the 3 and a 1 fill one node and the other 1 uses a
    # second, so both nodes are in use while 3 GPUs remain free on one.
    md = deployment("llama", gang(2, copies=1), replicas=2)
    ic = cluster("a", pool("h100", 8, H100), pool("l4", 2, L4))
    others = [foreign_replica("other-0", "a", {"l4": 2}, gpus=1, created=stamp(0)),
              foreign_replica("other-1", "a", {"l4": 1}, gpus=3, created=stamp(0))]
    world = World(md, [ic], others)
    world.step()
    replicas = [*world.observed.values(), *others]
    rsp = fn.run_function(request(ic, required={REQUIRE_REPLICAS: replicas}))
    from builders import composite
    st = to_plain(composite(rsp))["status"]
    assert st["nodePools"] == [
        {"name": "h100", "nodes": 8, "declaredNodes": 8, "usedNodes": 6, "freeNodes": 2,
         "devices": [{"name": "gpu", "perNode": 8, "total": 64, "used": 48, "free": 16,
                      "largestFree": 8}]},
        {"name": "l4", "nodes": 2, "declaredNodes": 2, "usedNodes": 2, "freeNodes": 0,
         "devices": [{"name": "gpu", "perNode": 4, "total": 8, "used": 5, "free": 3,
                      "largestFree": 3}]}]
    assert st["freeDevices"] == "h100: 16/64 gpu, l4: 3/8 gpu"
    assert cluster_fn.REQUIRE_REPLICAS == REQUIRE_REPLICAS


# --- 8. Never destructive -----------------------------------------------------

def test_an_invalid_selector_keeps_every_existing_replica():
    md = deployment("llama", replicas=3)
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1)),
                key("gone", 1): own_replica(md, "gone", 1, {"vllm": "h100"}, created=stamp(2))}
    md["spec"]["template"]["spec"]["engines"][0]["members"][0]["nodeSelector"]["devices"][0][
        "selectors"] = [{"cel": 'device.attributes["gpu.example.com"].productName =='}]
    rsp = World(md, [cluster("a", pool("h100", 4, H100))], observed=observed).run()
    got = {k: to_plain(v) for k, v in desired(rsp).items()}
    assert set(got) == set(observed)  # nothing removed, moved or added
    for k, mr in observed.items():
        assert got[k]["spec"] == mr["spec"]
    state, reason, msg = condition(rsp, "ReplicasScheduled")
    assert (state, reason) == ("False", "InvalidSelector")
    assert "invalid CEL selector" in msg and "existing replicas are kept" in msg
    assert not fatal(rsp)


def test_a_selector_that_is_not_boolean_is_invalid():
    md = deployment("llama", engine("vllm", standalone(req("gpu", 1, "device.driver"))))
    rsp = World(md, [cluster("a", pool("h100", 4, H100))]).run()
    assert desired(rsp) == {}
    assert condition(rsp, "ReplicasScheduled")[1] == "InvalidSelector"
    assert "must evaluate to bool, not string" in condition(rsp, "ReplicasScheduled")[2]


def test_a_selector_whose_value_is_not_boolean_on_a_device_selects_nothing():
    # Typed dyn at compile time (an attribute), a string at run time: as in
    # DRA, an evaluation error, so the device is not selected.
    md = deployment("llama", engine("vllm", standalone(
        req("gpu", 1, f'device.attributes["{GPU}"].productName'))))
    rsp = World(md, [cluster("a", pool("h100", 4, H100))]).run()
    assert desired(rsp) == {}
    assert condition(rsp, "ReplicasScheduled")[1] == "Unschedulable"


def test_a_malformed_cluster_keeps_its_replicas():
    md = on_whole_nodes("llama", replicas=2)
    observed = {key("bad", 0): own_replica(md, "bad", 0, {"vllm": "h100"}, created=stamp(1))}
    bad = cluster("bad", pool("h100", 4, H100))
    bad["spec"]["nodePools"][0]["nodes"] = "many"
    clusters = [bad, cluster("a", pool("h100", 0, H100))]
    rsp = World(md, clusters, observed=observed).run()
    got = {k: to_plain(v) for k, v in desired(rsp).items()}
    assert set(got) == {key("bad", 0)}
    assert got[key("bad", 0)]["spec"] == observed[key("bad", 0)]["spec"]
    assert any(m.startswith("InferenceCluster bad is malformed and skipped")
               for m in messages(rsp, fnv1.SEVERITY_WARNING))
    st = status(rsp)
    why = ('has no node of pool "h100" with 8 gpu free (a pod needs them on one node; '
           "the most free on one is 0 gpu)")
    assert st["unscheduled"] == [{
        "index": 1, "reason": f"0/2 clusters fit replica 1: 1 {why}, 1 is malformed",
        "clusters": [{"name": "a", "reason": why}, {"name": "bad", "reason": "is malformed"}]}]
    assert condition(rsp, "ReplicasScheduled")[0] == "False"


@pytest.mark.parametrize("breakage", [
    lambda ic: ic["spec"].update(nodePools="h100"),
    lambda ic: ic["spec"]["nodePools"][0].pop("name"),
    lambda ic: ic["spec"]["nodePools"][0]["devices"][0].pop("deviceClassName"),
    lambda ic: ic["spec"]["nodePools"][0]["devices"][0].update(count="eight"),
    lambda ic: ic["spec"].update(taints=[{"key": "x"}]),
    lambda ic: ic.update(status={"conditions": "Ready"}),
    lambda ic: ic["spec"]["nodePools"][0].update(name=["h100"]),
    lambda ic: ic["spec"]["nodePools"][0]["devices"][0].update(attributes="H100"),
    lambda ic: ic["spec"]["nodePools"][0]["devices"][0].update(driver=["gpu.example.com"]),
    lambda ic: ic["spec"]["nodePools"][0]["devices"][0].update(claim="Maybe"),
    lambda ic: ic["spec"].update(taints=[{"key": {"a": 1}, "effect": "NoSchedule"}]),
    lambda ic: ic.update(metadata={"name": "bad", "labels": "tier=prod"}),
], ids=["pools-not-a-list", "pool-without-name", "dra-device-without-class",
        "count-not-a-number", "taint-without-effect", "conditions-not-a-list",
        "pool-name-not-a-string", "attributes-not-a-map", "driver-not-a-string",
        "claim-unknown", "taint-key-not-a-string", "labels-not-a-map"])
def test_every_kind_of_malformed_cluster_is_skipped_without_raising(breakage):
    md = deployment("llama", replicas=2)
    observed = {key("bad", 0): own_replica(md, "bad", 0, {"vllm": "h100"}, created=stamp(1))}
    bad = cluster("bad", pool("h100", 4, H100))
    breakage(bad)
    rsp = World(md, [bad, cluster("a", pool("h100", 4, H100))], observed=observed).run()
    assert not fatal(rsp)
    assert placements(rsp) == {0: ("bad", {"vllm": "h100"}), 1: ("a", {"vllm": "h100"})}


def test_a_malformed_model_replica_is_kept_as_is_and_reported():
    md = deployment("llama", replicas=2)
    good = own_replica(md, "b", 1, {"vllm": "h100"}, created=stamp(2))
    bad = own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))
    del bad["spec"]["engines"][0]["members"][0]["nodePoolName"]
    clusters = [cluster("a", pool("h100", 4, H100)), cluster("b", pool("h100", 4, H100))]
    rsp = World(md, clusters, observed={key("a", 0): bad, key("b", 1): good}).run()
    got = {k: to_plain(v) for k, v in desired(rsp).items()}
    # The bad object is echoed untouched under its own key; the good one is
    # kept; index 0 stays reserved, so the replacement is index 2, and no
    # new replica ever takes the bad one's key or name.
    assert got[key("a", 0)]["spec"] == bad["spec"]
    assert {i: c for i, (c, _) in placements(rsp).items() if i != 0} == {1: "b", 2: "a"}
    assert len({mr["metadata"]["name"] for mr in got.values()}) == len(got) == 3
    warning = "ModelReplica replica-0-a is malformed and kept as is: engine 'vllm' is not " \
              "on exactly one pool"
    assert warning in messages(rsp, fnv1.SEVERITY_WARNING)
    state, reason, msg = condition(rsp, "ReplicasScheduled")
    assert (state, reason) == ("False", "KeptAsIs") and warning in msg


def test_a_model_replica_without_its_index_label_is_kept_and_its_nodes_counted():
    md = on_whole_nodes("llama")
    mr = own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))
    del mr["metadata"]["labels"][LABEL_REPLICA_INDEX]
    clusters = [cluster("a", pool("h100", 1, H100)), cluster("b", pool("h100", 1, H100))]
    rsp = World(md, clusters, observed={key("a", 0): mr}).run()
    got = {k: to_plain(v) for k, v in desired(rsp).items()}
    assert got[key("a", 0)]["spec"] == mr["spec"]
    # Its node on a is taken, so the replacement goes to b under another key.
    assert {i: c for i, (c, _) in placements(rsp).items()} == {1: "b"}
    assert condition(rsp, "ReplicasScheduled")[1] == "KeptAsIs"


def test_a_malformed_replica_of_another_deployment_is_counted_by_the_most_it_can_hold():
    # Left out of the ledger, its node would look free (#33): an unreadable
    # count is read as one copy, the least it can be.
    bad = foreign_replica("other-0", "a", {"h100": 1}, created=stamp(0))
    bad["spec"]["engines"][0]["copies"] = "lots"
    rsp = World(deployment("llama"), [cluster("a", pool("h100", 1, H100))], [bad]).run()
    assert placements(rsp) == {}
    assert "a ModelReplica in another namespace is malformed and counted by the most it can " \
        "hold on a (1 node of pool h100)" in messages(rsp, fnv1.SEVERITY_WARNING)


def test_a_warning_about_a_malformed_replica_names_it_only_in_our_own_namespace():
    # Another tenant's object names (and what is wrong inside it) are not ours to read.
    theirs = foreign_replica("their-secret-project-0", "a", {"h100": 1}, created=stamp(0))
    theirs["spec"]["engines"][0]["copies"] = "their-secret-value"
    mine = foreign_replica("my-other-0", "b", {"h100": 1}, namespace=NS, created=stamp(0))
    mine["spec"]["engines"][0]["copies"] = "lots"
    rsp = World(deployment("llama"), [cluster("a", pool("h100", 1, H100)),
                                      cluster("b", pool("h100", 1, H100))], [theirs, mine]).run()
    said = messages(rsp, fnv1.SEVERITY_WARNING)
    assert not [m for m in said if "their-secret" in m or "other-team" in m], said
    assert any(m.startswith(f"ModelReplica {NS}/my-other-0 is malformed and counted by the "
                            "most it can hold on b") and "lots" in m for m in said), said


@pytest.mark.parametrize("breakage,counted,says", [
    (lambda mr: mr.update(metadata="other-0"), True, "counted by the most it can hold"),
    (lambda mr: mr["metadata"].update(name=["other-0"]), True,
     "counted by the most it can hold"),
    (lambda mr: mr["spec"].update(clusterName=None), False, "names no cluster"),
    (lambda mr: mr["spec"].update(clusterName=7), False, "names no cluster"),
    # A member on no readable pool, or no readable engines: nowhere to charge.
    (lambda mr: mr["spec"]["engines"][0]["members"][0].update(nodePoolName=3), True,
     "(no nodes)"),
    (lambda mr: mr["spec"].update(engines="all of them"), True, "(no nodes)"),
], ids=["metadata-not-a-map", "name-not-a-string", "no-cluster", "cluster-not-a-string",
        "pool-not-a-string", "engines-not-a-list"])
def test_every_kind_of_malformed_foreign_replica_is_read_without_raising(breakage, counted, says):
    bad = foreign_replica("other-0", "a", {"h100": 1}, created=stamp(0))
    breakage(bad)
    good = foreign_replica("other-1", "a", {"h100": 1}, created=stamp(0))
    rsp = World(on_whole_nodes("llama", replicas=2),
                [cluster("a", pool("h100", 2, H100))], [bad, good]).run()
    assert not fatal(rsp)
    holds = counted and says != "(no nodes)"
    assert placements(rsp) == ({} if holds else {0: ("a", {"vllm": "h100"})})
    assert any("is malformed and" in m and says in m
               for m in messages(rsp, fnv1.SEVERITY_WARNING))


def test_a_reason_quoting_braces_is_not_a_format_string():
    md = deployment("llama")
    clusters = [cluster("a", pool("h100", 4, H100), taints=[taint("team{0}", "NoSchedule", "{x}")])]
    result = plan_of(md, clusters)
    assert result.unscheduled[0].message("replica 0") == \
        "0/1 clusters fit replica 0: 1 is tainted (team{0}={x}:NoSchedule)"


def test_an_invalid_deployment_is_fatal_and_touches_nothing():
    md = deployment("llama")
    md["spec"]["template"]["spec"]["engines"][0]["members"][0]["role"] = "Leader"
    rsp = World(md, [cluster("a", pool("h100", 4, H100))]).run()
    assert fatal(rsp) and desired(rsp) == {}
