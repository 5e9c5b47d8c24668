"""`make placement-quality`: the reference solver is exact on problems small enough
to solve by hand, the corpus is the same for the same seed, and the harness
replays deployments through the real scheduler and reports every column.
The corpus's ratios are measurements (benchmarks/README.md), never asserted here."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib
import json
import pathlib
import random
import sys

import pytest

from benchmarks import corpus, packing, quality, solver
from benchmarks.packing import NODE
from function.contract.records import parse_cluster

ROOT = pathlib.Path(__file__).resolve().parent.parent


def small(replicas: int, name: str = "d00-small", gpus: int = 1) -> dict:
    return corpus.deployment(name, replicas, corpus.standalone("vllm", corpus.gpus(gpus, "h100")))


def gang(replicas: int, workers: int, name: str = "d01-gang") -> dict:
    return corpus.deployment(name, replicas, corpus.gang("vllm", workers, "h100"))


def two_clusters_of_four() -> list[dict]:
    return [corpus.cluster(n, corpus.pool("h100", 4)) for n in ("a", "b")]


def best(clusters: list[dict], deployments: list[dict], held: list[dict] = (),
         accounting: str = packing.DEVICE) -> solver.Optimum:
    case = corpus.Case("hand", "hand", clusters, list(held), deployments)
    return quality.optimum(case, time_limit=10, accounting=accounting)


def one_node(nodes: int = 1) -> list[dict]:
    return [corpus.cluster("a", corpus.pool("h100", nodes))]


# --- device accounting: what one node holds ---------------------------------

def test_eight_one_gpu_replicas_share_one_eight_gpu_node_counted_by_devices_not_by_nodes():
    assert best(one_node(), [small(20)]).placed == 8
    assert best(one_node(), [small(20)], accounting=NODE).placed == 1


def test_a_four_gpu_and_four_one_gpu_replicas_fill_one_node_exactly():
    exact = [small(1, "d00-four", gpus=4), small(4, "d01-one", gpus=1)]
    assert best(one_node(), exact).per_deployment == {"d00-four": 1, "d01-one": 4}
    # Nothing more fits beside them: 4 + 5 and 8 + 4 GPUs are over the node's 8.
    more = [small(2, "d00-four", gpus=4), small(5, "d01-one", gpus=1)]
    assert best(one_node(), more).placed == 5
    case = corpus.Case("hand", "hand", one_node(), [], exact)
    assert quality.optimum(case, 10, most_gpus=True).gpus == 8
    assert quality.optimum(case, 10, accounting=NODE, most_gpus=True).gpus == 4


def test_two_five_gpu_pods_need_two_nodes_never_ten_of_sixteen_gpus_on_one():
    # 10 GPUs fit in the pool's 16, not on any one node: each pod takes its own.
    assert best(one_node(2), [small(3, gpus=5)]).placed == 2
    assert best(one_node(1), [small(3, gpus=5)]).placed == 1
    # Nor does a 3-GPU pod fill the 3 GPUs two 5-GPU pods leave, split 3 + 3 ... on one node.
    assert best(one_node(2), [small(2, "d00-five", gpus=5), small(3, "d01-three", gpus=3)]
                ).per_deployment == {"d00-five": 2, "d01-three": 2}


def test_a_gang_s_pods_may_share_a_node_but_each_takes_its_devices_from_one():
    def four_gpu_gang(replicas: int) -> dict:
        return corpus.deployment("d00-gang", replicas, {"name": "vllm", "copies": 1, "members": [
            {"role": "Leader", "nodeSelector": {"devices": [corpus.gpus(4, "h100")]},
             "template": {"spec": {"containers": [{"name": "e", "image": "vllm/vllm-openai:v0.11.0"}]}}},
            {"role": "Worker", "worker": {"nodes": 3},
             "nodeSelector": {"devices": [corpus.gpus(4, "h100")]},
             "template": {"spec": {"containers": [{"name": "e", "image": "vllm/vllm-openai:v0.11.0"}]}}}]})
    # Leader + 3 workers of 4 GPUs: two nodes, two pods on each.
    assert best(one_node(2), [four_gpu_gang(2)]).placed == 1
    assert best(one_node(1), [four_gpu_gang(1)]).placed == 0
    assert best(one_node(4), [four_gpu_gang(2)], accounting=NODE).placed == 1


def test_fragmentation_the_optimum_packs_one_gpu_replicas_to_leave_whole_nodes():
    # Two 8-GPU nodes; eight 1-GPU replicas, then one 8-GPU one: the eight share
    # a node, the other stays whole. One small replica on each node would place 9 - 1.
    opt = best(one_node(2), [small(8, "d00-one"), small(1, "d01-eight", gpus=8)])
    assert (opt.placed, opt.per_deployment["d01-eight"]) == (9, 1)
    held = [corpus.held_replica(0, "a", "h100", 2, gpus_each=1)]  # one GPU on each node, perhaps
    # The held pods pack as best they can: both on one node leaves the other whole.
    assert best(one_node(2), [small(1, gpus=8)], held).placed == 1
    assert best(one_node(2), [small(3, gpus=4)], held).placed == 3


def test_devices_taken_by_claims_outside_the_project_leave_each_node_only_what_is_left():
    pool = parse_cluster(one_node(2)[0]).pools[0]
    # One node has 3 GPUs taken, the other 7: a 4-GPU pod fits the first only.
    taken = dataclasses.replace(pool, taken=((("gpu", 3),), (("gpu", 7),)))
    assert packing.node_classes(taken, packing.DEVICE) == (
        ((("gpu", 1), ("nic", 8)), 1), ((("gpu", 5), ("nic", 8)), 1))
    assert packing.node_classes(taken, NODE) == ()
    room = solver.PoolRoom(2, packing.node_classes(taken, packing.DEVICE))
    assert solver.nodes_needed(room, (((("gpu", 4),), 1),)) == 1
    assert solver.nodes_needed(room, (((("gpu", 4),), 2),)) is None
    assert solver.nodes_needed(room, (((("gpu", 1),), 6),)) == 2


def test_patterns_are_the_maximal_ways_to_share_a_node_and_their_count_is_capped():
    one, two, four = (("gpu", 1),), (("gpu", 2),), (("gpu", 4),)
    found = packing.patterns((("gpu", 8),), [one, two, four])
    assert (0, 0, 2) in found and (8, 0, 0) in found and (2, 1, 1) in found
    assert (0, 0, 1) not in found and (1, 1, 1) not in found  # room for more: not maximal
    assert len(found) == len(set(found))
    with pytest.raises(packing.PatternLimit):
        packing.patterns((("gpu", 64),), [one, two, four, (("gpu", 3),)], limit=50)


def test_the_solver_packs_small_replicas_to_leave_a_whole_cluster_for_a_gang():
    # Two 4-node clusters; two 1-node replicas and two 4-node gangs: at most
    # three fit (both small ones on one cluster, one gang on the other).
    opt = best(two_clusters_of_four(), [small(2), gang(2, workers=3)])
    assert (opt.placed, opt.proven) == (3, True)
    assert opt.per_deployment == {"d00-small": 2, "d01-gang": 1}


def test_the_solver_counts_what_other_deployments_already_hold():
    held = [corpus.held_replica(0, "a", "h100", 3), corpus.held_replica(1, "b", "h100", 1)]
    opt = best(two_clusters_of_four(), [small(2), gang(2, workers=3)], held)
    # 1 node free on a, 3 on b: no gang fits anywhere; both small ones do.
    assert opt.per_deployment == {"d00-small": 2, "d01-gang": 0}


def test_the_solver_may_use_any_firstavailable_alternative_and_counts_copies():
    clusters = [corpus.cluster("a", corpus.pool("l4", 1), corpus.pool("h100", 2))]
    fungible = corpus.deployment("d00-fungible", 5, corpus.standalone(
        "vllm", corpus.alternatives(("l4", 1), ("h100", 1)), copies=2))
    # Charged a node per pod, each replica takes 2 nodes of one pool: only the H100 pool has two.
    assert best(clusters, [fungible], accounting=NODE).placed == 1
    # By devices, 2 replicas on the L4 node's 4 GPUs, 8 on each H100 node's 8: all 5.
    assert best(clusters, [fungible]).placed == 5
    fungible["spec"]["replicas"] = 20
    assert best(clusters, [fungible]).placed == (4 + 2 * 8) // 2


def test_the_solver_puts_a_gang_on_one_pool_never_across_two():
    clusters = [corpus.cluster("a", corpus.pool("h100", 2), corpus.pool("a100", 2))]
    across = corpus.deployment("d00-gang", 1, corpus.gang("vllm", 2, "h100", "a100"))
    assert best(clusters, [across]).placed == 0


def test_first_come_first_served_keeps_the_earlier_deployment_the_count_optimum_drops():
    clusters = [corpus.cluster("a", corpus.pool("h100", 4))]
    deployments = [gang(1, workers=3, name="d00-gang"), small(4, name="d01-small")]
    assert best(clusters, deployments).per_deployment == {"d00-gang": 0, "d01-small": 4}
    case = corpus.Case("hand", "hand", clusters, [], deployments)
    in_order = quality.optimum(case, 10, in_order=True)
    assert in_order.per_deployment == {"d00-gang": 1, "d01-small": 0}


def test_the_replay_loses_what_spreading_costs_on_the_same_problem():
    case = corpus.Case("hand", "hand", two_clusters_of_four(), [], [small(2), gang(2, workers=3)])
    replay = quality.replay(case, None)
    # Spread puts one small replica on each cluster: no 4-node block is left.
    assert replay.placed == {"d00-small": 2, "d01-gang": 0}
    assert replay.overcommitted == []


def test_settling_gives_a_pack_deployment_s_block_to_the_gang_that_arrived_after_it():
    # Two whole-node replicas (8 GPUs each) pack onto a; the first 3-node gang
    # takes b, the second fits nowhere (a has 2 free, b 1). Reconciled again, the
    # small deployment moves one replica into b's spare node and a takes the gang.
    case = corpus.Case("hand", "hand", two_clusters_of_four(), [],
                       [small(2, gpus=8), gang(2, workers=2)])
    pack = quality.replay(case, "Pack")
    assert pack.first == {"d00-small": 2, "d01-gang": 1}
    assert pack.placed == {"d00-small": 2, "d01-gang": 2}
    assert (pack.moves, pack.rounds, pack.overcommitted) == (1, 2, [])
    assert quality.replay(case, "Pack", settle=False).placed == pack.first
    spread = quality.replay(case, None)  # Spread moves nothing for anyone
    assert spread.moves == 0 and spread.placed == spread.first


def test_what_spread_loses_there_it_loses_to_the_later_gang_not_at_arrival():
    case = corpus.Case("hand", "hand", two_clusters_of_four(), [], [small(2), gang(2, workers=3)])
    replay = quality.replay(case, None, time_limit=10)
    # Each deployment got all the fleet had room for when it arrived (after
    # the small ones, no cluster has 4 free nodes): nothing is short at
    # arrival, yet the optimum places 3. The loss is the small ones' placement.
    assert replay.possible == {"d00-small": 2, "d01-gang": 0}
    assert replay.short_at_arrival == 0
    assert quality.replay(case, None).possible == {}  # only measured when asked


def test_short_at_arrival_counts_what_the_fleet_had_room_for_and_a_deployment_missed(monkeypatch):
    case = corpus.Case("hand", "hand", two_clusters_of_four(), [], [small(3), gang(1, workers=3)])
    real = quality.reconcile

    def drops_the_small_ones(md, clusters, ledger, own=None, deployments=()):
        placed, status = real(md, clusters, ledger, own, deployments)
        if md["metadata"]["name"] == "d00-small":
            placed = dict(list(placed.items())[:1])
        return placed, status
    monkeypatch.setattr(quality, "reconcile", drops_the_small_ones)
    replay = quality.replay(case, "Pack", time_limit=10)
    assert replay.first == {"d00-small": 1, "d01-gang": 1}
    assert replay.possible == {"d00-small": 3, "d01-gang": 1}
    assert replay.short_at_arrival == 2


def test_the_overcommit_check_finds_a_pool_held_beyond_its_nodes():
    clusters = two_clusters_of_four()
    ledger = [corpus.held_replica(0, "a", "h100", 3), corpus.held_replica(1, "a", "h100", 2)]
    assert quality.overcommits(clusters, ledger) == ["a/h100: 5 > 4"]


def test_the_overcommit_check_counts_devices_on_each_node_not_the_pool_s_total():
    clusters = [corpus.cluster("a", corpus.pool("h100", 2))]
    # Three 5-GPU pods: 15 of the pool's 16 GPUs, yet no two share a node.
    ledger = [corpus.held_replica(0, "a", "h100", 3, gpus_each=5)]
    assert quality.overcommits(clusters, ledger) == ["a/h100: 3 > 2"]
    sixteen = [corpus.held_replica(0, "a", "h100", 16, gpus_each=1)]
    assert quality.overcommits(clusters, sixteen) == []
    assert quality.overcommits(clusters, sixteen, accounting=NODE) == ["a/h100: 16 > 2"]


def test_the_corpus_is_the_same_for_a_seed_and_covers_every_trap():
    one, again, other = corpus.generate(7, 2), corpus.generate(7, 2), corpus.generate(8, 2)
    assert [c.deployments for c in one] == [c.deployments for c in again]
    assert [c.clusters for c in one] != [c.clusters for c in other]
    assert {c.trap for c in one} == set(corpus.TRAPS)
    for case in one:  # every cluster is one the scheduler can read
        for c in case.clusters:
            parse_cluster(c)


def test_the_harness_reports_every_case_trap_and_last_the_headline_ratio():
    cases = corpus.generate(3, 1)
    rows = quality.measure(cases, quality.STRATEGIES, time_limit=10)
    assert [r["case"] for r in rows] == [c.name for c in cases]
    for r in rows:
        assert r["optimal"] >= max(r[s] for s in quality.STRATEGIES)  # nothing beats the optimum
        assert r["overcommits"] == []
    text = quality.render(rows, quality.STRATEGIES)
    for trap in corpus.TRAPS:
        assert f"\n{trap} " in text
    assert "overcommits: 0" in text
    assert "short at arrival" in text
    assert "\nGPUs placed, of the fleet's " in text
    for r in rows:
        assert r["gpus nodewise"] <= r["gpus fleet"] and r["gpus optimal"] <= r["gpus fleet"]
        assert r["nodewise"] <= r["optimal"]  # devices never place fewer than whole nodes
    # The trap asking for more than the fleet has is scored apart, against the in-order optimum.
    apart = [r for r in rows if r["trap"] in corpus.IN_ORDER]
    assert apart and f"over {len(rows) - len(apart)} cases = " in text.splitlines()[-1]
    assert "\nover-demand (asks for more than the fleet has; scored apart, against the " \
        "in-order optimum): Spread " in text
    assert "\ncost per hour, against the least cost of placing the same replicas: Spread " in text
    assert "\ncost per hour, against each deployment's least on the fleet as it arrived: Spread " in text
    for r in rows:
        assert all(r[f"{s} least"] <= r[f"{s} cost"] for s in quality.STRATEGIES)
    for r in rows:
        assert all(r[f"{s} short"] >= 0 for s in quality.STRATEGIES)
    assert text.splitlines()[-1].startswith(f"{quality.STRATEGIES[-1]}: ")


def test_a_missing_solver_fails_loudly(monkeypatch):
    monkeypatch.setitem(sys.modules, "highspy", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "benchmarks.solver")
    with pytest.raises(ImportError):
        importlib.import_module("benchmarks.solver")


def test_the_function_never_imports_the_benchmarks_or_the_solver():
    wrong = []
    for path in sorted((ROOT / "function").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            wrong += [f"{path.relative_to(ROOT)}: {n}" for n in names
                      if n.split(".")[0] in ("benchmarks", "highspy")]
    assert not wrong


def priced(cluster: dict, **per_pool: str) -> dict:
    for p in cluster["spec"]["nodePools"]:
        if p["name"] in per_pool:
            p["costPerNodeHour"] = per_pool[p["name"]]
    return cluster


def test_the_solver_places_the_most_replicas_first_and_then_the_cheapest():
    # Three 8-GPU replicas: the cheap cluster has room for two; the third
    # goes to the dearer one rather than being left out.
    clusters = [priced(corpus.cluster("a", corpus.pool("h100", 2)), h100="1"),
                priced(corpus.cluster("b", corpus.pool("h100", 4)), h100="5.5")]
    opt = best(clusters, [small(3, gpus=8)])
    assert opt.placed == 3
    assert opt.cost == solver.Cost(0, 2 * 10_000 + 55_000)
    # Three 1-GPU replicas share one cheap node: a placement costs the nodes it keeps busy.
    assert best(clusters, [small(3)]).cost == solver.Cost(0, 10_000)


def test_the_solver_puts_unpriced_nodes_after_any_priced_ones():
    clusters = [corpus.cluster("a", corpus.pool("h100", 4)),
                priced(corpus.cluster("b", corpus.pool("h100", 1)), h100="900")]
    assert best(clusters, [small(2, gpus=8)]).cost == solver.Cost(1, 900 * 10_000)
    assert best(clusters, [small(2, gpus=4)]).cost == solver.Cost(0, 900 * 10_000)


def test_the_least_cost_of_what_the_scheduler_placed_is_no_more_than_its_own():
    case = corpus.generate(5, 1)[4]  # mixed: most pools priced
    for strategy in quality.STRATEGIES:
        r = quality.replay(case, strategy)
        got = quality.cost_of(case, r.usage)
        least = quality.least_cost(case, r.placed, 10)
        assert least <= got  # (unpriced nodes, then priced cost), as the scheduler ranks
        assert sum(n for pods in r.usage.values() for _, n in pods) > 0


def test_the_corpus_prices_most_pools_and_leaves_its_fleets_as_they_were():
    cases = corpus.generate(7, 2)
    pools = [p for c in cases for cl in c.clusters for p in cl["spec"]["nodePools"]]
    priced_pools = [p for p in pools if "costPerNodeHour" in p]
    assert 0 < len(priced_pools) < len(pools)
    unpriced = [{**cl, "spec": {**cl["spec"], "nodePools": [
        {k: v for k, v in p.items() if k != "costPerNodeHour"} for p in cl["spec"]["nodePools"]]}}
        for c in cases for cl in c.clusters]
    as_generated = [cl for trap in corpus.TRAPS for i in range(2) for cl in
                    corpus.GENERATORS[trap](random.Random(f"7-{corpus.stream(trap)}-{i}"))[0]]
    assert unpriced == as_generated


def test_the_traps_added_for_devices_leave_the_earlier_traps_cases_as_they_were():
    # seed 19's fleets, deployments and held placements of the first five traps,
    # as generated before #34 added three traps (the held replicas now take a
    # node's GPUs where they took one; the nodes they hold are the same).
    before = corpus.TRAPS[:5]
    cases = [c for c in corpus.generate(19, 12) if c.trap in before]
    text = json.dumps([[c.name, c.clusters, c.deployments,
                        [(h["metadata"]["name"], h["spec"]["clusterName"],
                          h["spec"]["engines"][0]["copies"]) for h in c.held]]
                       for c in cases], sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()
    assert digest == "a17fc909a151a1e3ca8fd1ea84300a61a6bdf66bfaad17ad6214362acdbe2376"


def test_the_over_demand_cases_are_the_mixed_gpus_cases_as_they_were():
    # seed 19's mixed-gpus cases before 2026-11-26 (asking for 100-140% of the
    # fleet's GPUs), now the over-demand trap, drawn from the same streams.
    cases = [c for c in corpus.generate(19, 12) if c.trap == "over-demand"]
    text = json.dumps([[c.name.replace("over-demand", "mixed-gpus"), c.clusters, c.deployments]
                       for c in cases], sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()
    assert digest == "8a66ad6660deba32d80e087dea8e6a0362c005e378846366fc5d47d9667548f6"


def test_the_mixed_gpus_trap_asks_for_no_more_than_fits_so_every_optimum_is_all_of_it():
    # Cut from a packing of every node: the count optimum and the in-order
    # optimum both place every replica asked for, so a shortfall is packing's.
    for case in [c for c in corpus.generate(3, 3) if c.trap == "mixed-gpus"]:
        asked = sum(md["spec"]["replicas"] for md in case.deployments)
        wants = {s for md in case.deployments for e in md["spec"]["template"]["spec"]["engines"]
                 for m in e["members"] for s in (m["nodeSelector"]["devices"][0]["count"],)}
        assert wants <= {1, 2, 4, 8}
        assert quality.optimum(case, 10).placed == asked
        assert quality.optimum(case, 10, in_order=True).placed == asked
        gpus = quality.optimum(case, 10, most_gpus=True).gpus
        assert gpus <= quality.fleet_gpus(case)[0]


def test_the_replay_counts_each_placed_replica_s_own_pods_and_gpus():
    # Two deployments of different shapes: each replica is matched on its own
    # pool again, never mistaken for another's (the Matcher caches by id()).
    case = corpus.Case("hand", "hand", one_node(4), [],
                       [small(3, "d00-one"), small(1, "d01-eight", gpus=8)])
    replay = quality.replay(case, "Pack")
    assert replay.placed == {"d00-one": 3, "d01-eight": 1}
    pods = dict(p for pods in replay.usage.values() for p in pods)
    assert {shape[0][1]: n for shape, n in pods.items()} == {1: 3, 8: 1}
    assert replay.gpus == 3 + 8


def test_the_whole_node_waste_trap_wastes_most_gpus_charged_a_node_per_pod():
    case = next(c for c in corpus.generate(19, 1) if c.trap == "whole-node-waste")
    fleet = quality.fleet_gpus(case)
    by_devices = quality.optimum(case, 10, most_gpus=True).gpus
    by_nodes = quality.optimum(case, 10, accounting=NODE, most_gpus=True).gpus
    assert by_nodes < fleet[0] / 2 <= by_devices


def test_whole_node_accounting_reproduces_the_solver_before_devices():
    # The optima the node-counting solver found on seed 3's first case of each
    # of the five traps it knew (benchmarks/solver.py before #34).
    cases = [c for c in corpus.generate(3, 1) if c.trap in corpus.TRAPS[:5]]
    found = [quality.optimum(c, 10, accounting=NODE) for c in cases]
    assert [o.placed for o in found] == [32, 28, 6, 3, 19]
    assert [o.cost for o in found] == [solver.Cost(0, 73566600), solver.Cost(0, 44517200),
                                       solver.Cost(0, 6241900), solver.Cost(0, 3056100),
                                       solver.Cost(3, 18283300)]
