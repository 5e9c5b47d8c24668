"""The scheduler's `stack` filter: a cluster whose declared serving stack is not ready
takes no new replica, says why per cluster, and keeps the replicas it has.

A cluster that declares no stack is scheduled as before, whatever its conditions say.
"""

from __future__ import annotations

from fleetgen import (
    World,
    cluster,
    deployment,
    device,
    key,
    own_replica,
    placements,
    pool,
    stamp,
    status,
)

from function.contract.records import parse_cluster
from function.scheduler import filters

H100 = device("gpu", "H100", count=8)
STACK = {"gatewayAPI": {"mode": "External"}}


def stacked(name: str, ready: str | None, message: str = "") -> dict:
    """A cluster declaring a stack; `ready` its StackReady status (None: not reported)."""
    ic = cluster(name, pool("h100", 4, H100))
    ic["spec"]["stack"] = dict(STACK)
    if ready is not None:
        ic["status"] = {"conditions": [{"type": "StackReady", "status": ready,
                                        "reason": "Ready" if ready == "True" else "Failed",
                                        "message": message}]}
    return ic


def test_a_cluster_whose_stack_is_not_ready_takes_no_new_replica_and_says_why():
    md = deployment("llama", replicas=2)
    clusters = [stacked("a", "False", "gatewayAPI Failed: httproutes.gateway.networking.k8s.io "
                        "is not observed on the cluster"),
                cluster("b", pool("h100", 1, device("gpu", "H100", count=1)))]
    rsp = World(md, clusters).run()
    assert [c for c, _ in placements(rsp).values()] == ["b"]
    reasons = {c["name"]: c["reason"] for u in status(rsp).get("unscheduled") or []
               for c in u["clusters"]}
    assert reasons.get("a") == ("is not serving-ready (stack: gatewayAPI Failed: "
                                "httproutes.gateway.networking.k8s.io is not observed on the "
                                "cluster)")


def test_a_declared_stack_not_reported_yet_counts_as_not_ready():
    rsp = World(deployment("llama"), [stacked("a", None)]).run()
    assert placements(rsp) == {}
    assert status(rsp)["unscheduled"][0]["clusters"] == [
        {"name": "a", "reason": "is not serving-ready (stack: not reported yet)"}]


def test_a_ready_stack_admits_replicas():
    rsp = World(deployment("llama"), [stacked("a", "True", "1 components ready")]).run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}


def test_replicas_already_on_a_cluster_whose_stack_turns_unready_stay():
    md = deployment("llama", replicas=1)
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))}
    rsp = World(md, [stacked("a", "False", "leaderWorkerSet Progressing")],
                observed=observed).run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}
    step = next(f for f in filters.FILTERS if f.name == "stack")
    assert step.evict is filters.stays


def test_without_a_stack_a_stale_stack_condition_means_nothing():
    ic = cluster("a", pool("h100", 4, H100))
    ic["status"] = {"conditions": [{"type": "StackReady", "status": "False", "message": "old"}]}
    assert parse_cluster(ic).stack_unready == ""
    assert placements(World(deployment("llama"), [ic]).run()) == {0: ("a", {"vllm": "h100"})}
