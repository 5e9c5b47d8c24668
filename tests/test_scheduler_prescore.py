"""A score owns its preparation (kube-scheduler's PreScore): registered in SCORES
with a `prepare`, as CONTRIBUTING.md's walkthrough does, it is prepared once per
cycle and ranks from what it prepared, with nothing else changed.

Each test registers a toy score exactly as the guide does (functions and one
entry in SCORES) and reads the placements a RunFunction call makes.
"""

from __future__ import annotations

import pytest
from fleetgen import GPU, World, cluster, deployment, device, engine, placements, pool, standalone

from function.scheduler import scores
from function.scheduler.scores import Score

# One GPU a node: each one-GPU replica takes a whole node, so "fits" counts nodes.
H100 = device("gpu", "H100", count=1)
H200 = device("gpu", "H200", count=1)


def gold_clusters(state, level):
    """Worked out once per cycle: the clusters the platform team marked gold."""
    prepared.append(level)
    return frozenset(name for name, c in state.clusters.items() if c.labels.get("tier") == "gold")


def gold_first(cluster, gold):
    return int(cluster.name in gold)


prepared: list[int] = []


@pytest.fixture(autouse=True)
def _clear():
    prepared.clear()


def register(monkeypatch, score: Score) -> None:
    monkeypatch.setattr(scores, "SCORES", (score,) + scores.SCORES)


def fleet() -> list[dict]:
    return [cluster("a", pool("h100", 4, H100)),
            cluster("b", pool("h100", 2, H100), labels={"tier": "gold"})]


def test_a_score_ranks_from_what_it_prepared_once_per_cycle(monkeypatch):
    register(monkeypatch, Score("gold_first", gold_first, prepare=gold_clusters))
    rsp = World(deployment("llama", replicas=3), fleet()).run()
    # Gold first while it fits (2 nodes), then the spread rule's choice.
    assert placements(rsp) == {0: ("b", {"vllm": "h100"}), 1: ("b", {"vllm": "h100"}),
                               2: ("a", {"vllm": "h100"})}
    assert prepared == [0]  # three replicas, two clusters: one preparation


def test_a_score_that_does_not_apply_is_neither_prepared_nor_ranked(monkeypatch):
    register(monkeypatch, Score("gold_first", gold_first, prepare=gold_clusters,
                                applies=lambda state: False))
    rsp = World(deployment("llama", replicas=3), fleet()).run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"}), 1: ("b", {"vllm": "h100"}),
                               2: ("a", {"vllm": "h100"})}
    assert prepared == []


def test_a_cycle_with_nothing_to_place_prepares_nothing(monkeypatch):
    register(monkeypatch, Score("gold_first", gold_first, prepare=gold_clusters))
    rsp = World(deployment("llama", replicas=0), fleet()).run()
    assert placements(rsp) == {}
    assert prepared == []


def fungible() -> dict:
    """One GPU, an H200 if any cluster has one free, else an H100."""
    first = [{"name": p.lower(), "count": 1,
              "selectors": [{"cel": f'device.attributes["{GPU}"].productName == "{p}"'}]}
             for p in ("H200", "H100")]
    return deployment("llama", engine("vllm", standalone({"name": "gpu", "firstAvailable": first})),
                      replicas=2)


def test_a_by_level_preparation_is_asked_once_per_level_the_walk_reaches(monkeypatch):
    register(monkeypatch, Score("gold_first", gold_first, prepare=gold_clusters, by_level=True))
    rsp = World(fungible(), fleet()).run()
    assert placements(rsp) == {0: ("b", {"vllm": "h100"}), 1: ("b", {"vllm": "h100"})}
    assert prepared == [0, 1]  # no H200 anywhere: every replica walks both levels


def test_a_level_free_preparation_serves_every_level(monkeypatch):
    register(monkeypatch, Score("gold_first", gold_first, prepare=gold_clusters))
    rsp = World(fungible(), fleet() + [cluster("c", pool("h200", 1, H200))]).run()
    assert placements(rsp) == {0: ("c", {"vllm": "h200"}), 1: ("b", {"vllm": "h100"})}
    assert prepared == [0]
