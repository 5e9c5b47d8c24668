"""The scheduler is a framework: a filter or score added as CONTRIBUTING.md says
takes part in every decision, with nothing else changed.

Each test registers a toy step exactly as the guide's walkthrough does (one
function, one entry in FILTERS or SCORES) and reads the outcome where an ML
team would: the status and the events of a RunFunction call.
"""

from __future__ import annotations

import pytest
from fleetgen import (
    World,
    cluster,
    condition,
    deployment,
    device,
    key,
    messages,
    own_replica,
    placements,
    pool,
    stamp,
    status,
)

from function.scheduler import filters, scores
from function.scheduler.filters import Eviction, Filter
from function.scheduler.scores import Score

H100 = device("gpu", "H100", count=1)  # one GPU a node: a one-GPU replica takes a node
MAINTENANCE = "example.com/maintenance"


def under_maintenance(dep, cluster, matcher):
    return "{is} under maintenance" if cluster.labels.get(MAINTENANCE) == "true" else None


def leave_for_maintenance(dep, cluster):
    if cluster.labels.get(MAINTENANCE) == "true":
        return Eviction(f"cluster {cluster.name} is under maintenance")
    return None


def gold_first(cluster, state):
    return 1 if cluster.labels.get("tier") == "gold" else 0


@pytest.fixture
def maintenance_filter(monkeypatch):
    monkeypatch.setattr(filters, "FILTERS", filters.FILTERS + (
        Filter("maintenance", under_maintenance, leave_for_maintenance),))


@pytest.fixture
def gold_score(monkeypatch):
    monkeypatch.setattr(scores, "SCORES", (Score("gold_first", gold_first),) + scores.SCORES)


def fleet(*maintained: str) -> list[dict]:
    return [cluster(name, pool("h100", 4, H100),
                    labels={"tier": "prod", **({MAINTENANCE: "true"} if name in maintained else {})})
            for name in ("a", "b")]


def test_a_new_filter_says_which_cluster_refused_a_new_replica(maintenance_filter):
    rsp = World(deployment("llama"), fleet("a", "b")).run()
    [entry] = status(rsp)["unscheduled"]
    assert entry["reason"] == "0/2 clusters fit replica 0: 2 are under maintenance"
    assert entry["clusters"] == [{"name": "a", "reason": "is under maintenance"},
                                 {"name": "b", "reason": "is under maintenance"}]


def test_a_new_filter_judges_replicas_already_placed_too(maintenance_filter):
    md = deployment("llama")
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))}
    rsp = World(md, fleet("a"), observed=observed).run()
    assert placements(rsp) == {0: ("b", {"vllm": "h100"})}
    assert "replica 0 moved from a to b: cluster a is under maintenance" in messages(rsp)


def test_a_replica_the_filter_evicts_stays_until_another_cluster_takes_it(maintenance_filter):
    md = deployment("llama")
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))}
    rsp = World(md, fleet("a", "b"), observed=observed).run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}
    state, reason, message = condition(rsp, "ReplicasScheduled")
    assert (state, reason) == ("False", "KeptAsIs")
    assert message.startswith("replica 0 on a: cluster a is under maintenance")


def test_without_the_filter_the_same_fleet_is_used_as_before():
    rsp = World(deployment("llama", replicas=2), fleet("a", "b")).run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"}), 1: ("b", {"vllm": "h100"})}


def test_a_new_score_ranks_before_the_spread_rule(gold_score):
    clusters = [cluster("a", pool("h100", 4, H100)),
                cluster("b", pool("h100", 2, H100), labels={"tier": "gold"})]
    rsp = World(deployment("llama", replicas=3), clusters).run()
    # Gold first while it fits (2 nodes), then the spread rule's choice.
    assert placements(rsp) == {0: ("b", {"vllm": "h100"}), 1: ("b", {"vllm": "h100"}),
                               2: ("a", {"vllm": "h100"})}


def test_a_filter_cannot_leave_out_what_it_does_to_replicas_already_placed():
    with pytest.raises(TypeError):
        Filter("maintenance", under_maintenance)  # no evict: refused at once
