"""`make placement-quality`: the real scheduler's placements against the optimum.

For every case of the seeded corpus (benchmarks/corpus.py) it replays the
deployments in arrival order through RunFunction, as Crossplane calls it:
each deployment's first reconcile sees the fleet and every ModelReplica
placed before it (other deployments' and the corpus's earlier ones), and the
ModelReplicas it composes join the ledger for the next. It then compares the
replicas placed with the reference solver's optimum for the same set
(benchmarks/solver.py), and checks that no pool ended overcommitted, device
by device (the pods fit some arrangement on the pool's nodes).

Capacity is counted as kube-scheduler and DRA allocate it, per node and
device (benchmarks/packing.py). Beside it, the optimum with every pod charged
a whole node (the scheduler before #34), and the share of the fleet's GPUs
each placement puts to work: the device-wise optimum's (the most GPUs among
its placements of the most replicas), the node-wise optimum's, each strategy's.

Prints (benchmarks/qualityreport.py) a row per case, a row per trap, the cost
per hour of what each strategy placed against the least cost of placing the
same replicas (solver.least_cost; the pools' costPerNodeHour), the
overcommits, and last the ratio over the whole corpus. Beside the optimum, the "in order" optimum: the most a
scheduler serving deployments first come, first served could place knowing
what comes next (solver.solve_in_order); the part of a strategy's loss that it
shares is the arrival order's, not the strategy's. A measurement, not a test: nothing here asserts a
target (benchmarks/README.md records a run against the targets).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from benchmarks import corpus, packing, solver
from benchmarks.bench import build_request
from benchmarks.packing import DEVICE, NODE
from benchmarks.qualityreport import render, sum_costs
from function.contract.api import KIND_MODEL_REPLICA, REQUIRE_DEPLOYMENTS
from function.contract.records import parse_cluster
from function.runtime import fn

# The strategies measured, in column order; the last is the headline.
STRATEGIES: tuple[str, ...] = ("Spread", "Pack")


# Rounds of reconciles after the last arrival, at most: Crossplane reconciles
# every ModelDeployment again on its poll interval, and a settled Pack
# deployment may then move replicas to make room for one that waits
# (function/scheduler/room.py). The replay stops at the first round that
# changes nothing.
SETTLE_ROUNDS = 8


@dataclass
class Replay:
    placed: dict[str, int] = field(default_factory=dict)  # deployment -> replicas placed, settled
    # deployment -> replicas placed after its first reconcile (arrival order only).
    first: dict[str, int] = field(default_factory=dict)
    moves: int = 0   # replicas moved to another cluster while settling
    rounds: int = 0  # rounds of reconciles after the arrivals until nothing changed
    overcommitted: list[str] = field(default_factory=list)  # "cluster/pool: used > nodes"
    # deployment -> the most of its replicas the fleet had room for when it
    # arrived (the solver on the ModelReplicas its reconcile saw); empty unless asked.
    possible: dict[str, int] = field(default_factory=dict)
    # (cluster, pool) -> pods the case's deployments put there (not the held replicas'),
    # by what each takes from its node (benchmarks/packing.py).
    usage: dict[tuple[str, str], packing.Pods] = field(default_factory=dict)
    gpus: int = 0  # GPUs the case's replicas are allocated, once settled
    # Summed over the deployments, each on the fleet as it arrived: what the
    # replicas it got cost, and the least they could have cost there (empty
    # Costs unless asked, as `possible`). The gap is the scheduler's own
    # choice plus its strategy's (spreading or packing is not free); the rest
    # of the gap to `least_cost` is earlier placements that later ones paid for.
    arrival_cost: solver.Cost = field(default_factory=solver.Cost)
    arrival_least: solver.Cost = field(default_factory=solver.Cost)

    @property
    def short_at_arrival(self) -> int:
        """Replicas a deployment could have had when it arrived and did not get:
        the loss that is the scheduler's own. The rest of a strategy's loss to
        the optimum is placements that fitted every replica then and left a
        later deployment short (the next deployment's shape is in no reconcile)."""
        return sum(max(0, self.possible[d] - n) for d, n in self.first.items()
                   if d in self.possible)


def reconcile(md: dict, clusters: Sequence[dict], ledger: Sequence[dict],
              own: dict[str, dict] | None = None, deployments: Sequence[dict] = (),
              ) -> tuple[dict[str, dict], dict]:
    """One reconcile of `md`, as Crossplane calls it: `own` its ModelReplicas by
    composed-resource key (observed), `ledger` every other ModelReplica and
    `deployments` every ModelDeployment (required). Returns the ModelReplicas it
    composes, by key, and the status it writes."""
    req = build_request(md, list(clusters), list(ledger))
    for key, mr in (own or {}).items():
        req.observed.resources[key].resource.CopyFrom(resource.dict_to_struct(mr))
    items = req.required_resources[REQUIRE_DEPLOYMENTS].items
    for other in deployments:
        items.add().resource.CopyFrom(resource.dict_to_struct(other))
    rsp = fn.run_serialized(req.SerializeToString())
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    if fatal:
        # A corpus deployment the function refuses is a bug in the corpus: say so loudly.
        raise SystemExit(f"RunFunction refused {md['metadata']['name']}: {fatal[0]}")
    out = {}
    for key, r in sorted(rsp.desired.resources.items()):
        obj = resource.struct_to_dict(r.resource)
        if obj.get("kind") == KIND_MODEL_REPLICA:
            out[key] = obj
    status = resource.struct_to_dict(rsp.desired.composite.resource).get("status") or {}
    return out, status


def replay(case: corpus.Case, strategy: str | None, time_limit: float | None = None,
           settle: bool = True) -> Replay:
    """The case's deployments in arrival order, each reconciled once as it
    arrives, then (`settle`) every one again in that order, round after round,
    until a round changes nothing; with a `time_limit`, also the solver's
    answer to how many of each the fleet had room for on arrival."""
    result = Replay()
    clusters = [parse_cluster(c) for c in case.clusters]
    price = solver.prices(clusters)
    mds: dict[str, dict] = {}          # name -> the ModelDeployment, with its status
    owned: dict[str, dict[str, dict]] = {}  # name -> its ModelReplicas by key

    def others(name: str) -> list[dict]:
        return list(case.held) + [mr for d, mrs in owned.items() if d != name
                                  for mr in mrs.values()]

    def step(n: int, name: str) -> bool:
        """Reconcile one deployment; whether its ModelReplicas changed."""
        before = owned.get(name, {})
        out, status = reconcile(mds[name], case.clusters, others(name), before,
                                list(mds.values()))
        for i, (key, mr) in enumerate(out.items()):
            # Stamped as the API server would: later arrivals are younger; a
            # kept replica keeps its time.
            mr["metadata"]["creationTimestamp"] = (
                before[key]["metadata"]["creationTimestamp"] if key in before
                else f"2026-02-01T{n:02d}:{result.rounds:02d}:{i % 60:02d}Z")
        mds[name] = {**mds[name], "status": status}
        owned[name] = out
        # A move: a replica gone from its cluster, or one on the same cluster
        # whose engines changed pools (making room on another pool of it).
        moved = [k for k in before if k not in out or _pools(out[k]) != _pools(before[k])]
        result.moves += len(moved)
        return set(out) != set(before) or bool(moved)

    for n, md in enumerate(case.deployments):
        name = md["metadata"]["name"]
        md = corpus.with_strategy(md, strategy)
        mds[name] = {**md, "metadata": {**md["metadata"],
                                         "creationTimestamp": f"2026-02-01T{n:02d}:00:00Z"}}
        free = solver.fleet(clusters, others(name)) if time_limit is not None else {}
        if time_limit is not None:
            room = solver.solve(free, [solver.demand(md, clusters)], time_limit)
            result.possible[name] = room.placed
        step(n, name)
        result.first[name] = len(owned[name])
        if time_limit is not None:
            usage, _ = solver.placed_pods(clusters, list(owned[name].values()))
            least = solver.least_cost(free, [solver.demand(md, clusters)],
                                      {name: len(owned[name])}, price, time_limit).cost
            result.arrival_cost = sum_costs([result.arrival_cost,
                                        solver.placement_cost(free, usage, price)])
            result.arrival_least = sum_costs([result.arrival_least, least])
    while settle and result.rounds < SETTLE_ROUNDS:
        result.rounds += 1
        changed = [step(n, md["metadata"]["name"]) for n, md in enumerate(case.deployments)]
        if not any(changed):
            break
    mine = [mr for mrs in owned.values() for mr in mrs.values()]
    result.placed = {name: len(mrs) for name, mrs in owned.items()}
    result.usage, result.gpus = solver.placed_pods(clusters, mine)
    result.overcommitted = overcommits(case.clusters, others(""))
    return result


def _pools(mr: dict) -> list[str]:
    """The pools a ModelReplica's members run on."""
    return [m.get("nodePoolName", "") for e in mr["spec"].get("engines") or []
            for m in e.get("members") or []]


def overcommits(clusters: Sequence[dict], ledger: Sequence[dict],
                accounting: str = DEVICE) -> list[str]:
    """The pools whose ModelReplicas' pods fit on no arrangement of its nodes,
    device by device (`accounting` NODE: a node per pod), as "cluster/pool:
    nodes they need > nodes it has"."""
    parsed = [parse_cluster(c) for c in clusters]
    room = solver.fleet(parsed, [], accounting)
    pods, _ = solver.placed_pods(parsed, ledger, accounting)
    out = []
    for (c, p), placed in sorted(pods.items()):
        if solver.nodes_needed(room[(c, p)], placed) is None:
            need = solver.nodes_needed(room[(c, p)], placed, unbounded=True)
            out.append(f"{c}/{p}: {'no node fits' if need is None else need} > "
                       f"{room[(c, p)].nodes}")
    return out


def optimum(case: corpus.Case, time_limit: float, in_order: bool = False,
            accounting: str = DEVICE, most_gpus: bool = False) -> solver.Optimum:
    """The most replicas the case's deployments can place, and the least cost
    of placing that many (in_order: first come, first served,
    solver.solve_in_order, without cost; most_gpus: the most GPUs among
    placements of the most replicas, without cost), with capacity counted
    by devices or by whole nodes (`accounting`)."""
    clusters = [parse_cluster(c) for c in case.clusters]
    demands = [solver.demand(md, clusters, accounting) for md in case.deployments]
    free = solver.fleet(clusters, case.held, accounting)
    if in_order:
        return solver.solve_in_order(free, demands, time_limit)
    if most_gpus:
        return solver.solve(free, demands, time_limit, most_gpus=True)
    return solver.solve(free, demands, time_limit, price=solver.prices(clusters))


def fleet_gpus(case: corpus.Case) -> tuple[int, int]:
    """The GPUs on the case's fleet, and those other deployments' replicas hold."""
    clusters = [parse_cluster(c) for c in case.clusters]
    return (sum(p.nodes * d.count for c in clusters for p in c.pools
                for d in p.devices if d.spec.get("driver") in packing.GPU_DRIVERS),
            solver.placed_pods(clusters, case.held)[1])


def least_cost(case: corpus.Case, placed: dict[str, int], time_limit: float) -> solver.Cost:
    """The least cost of placing exactly `placed` replicas of each deployment."""
    clusters = [parse_cluster(c) for c in case.clusters]
    demands = [solver.demand(md, clusters) for md in case.deployments]
    best = solver.least_cost(solver.fleet(clusters, case.held), demands, placed,
                             solver.prices(clusters), time_limit)
    return best.cost


def cost_of(case: corpus.Case, usage: dict[tuple[str, str], packing.Pods]) -> solver.Cost:
    """What the pods a strategy placed cost per hour, beside the held ones."""
    clusters = [parse_cluster(c) for c in case.clusters]
    return solver.placement_cost(solver.fleet(clusters, case.held), usage, solver.prices(clusters))


def prices(case: corpus.Case) -> solver.Prices:
    return solver.prices([parse_cluster(c) for c in case.clusters])


def measure(cases: Sequence[corpus.Case], strategies: Sequence[str],
            time_limit: float = 30.0) -> list[dict]:
    rows = []
    for case in cases:
        best = optimum(case, time_limit)
        row = {"case": case.name, "trap": case.trap,
               "asked": sum(int(md["spec"]["replicas"]) for md in case.deployments),
               "deployments": len(case.deployments),
               "optimal": best.placed, "bound": best.bound, "solver": best.status,
               "in_order": optimum(case, time_limit, in_order=True).placed,
               "optimal cost": best.cost, "overcommits": [],
               "nodewise": optimum(case, time_limit, accounting=NODE).placed,
               "gpus fleet": fleet_gpus(case)[0], "gpus held": fleet_gpus(case)[1],
               "gpus optimal": optimum(case, time_limit, most_gpus=True).gpus,
               "gpus nodewise": optimum(case, time_limit, accounting=NODE, most_gpus=True).gpus}
        for s in strategies:
            r = replay(case, s, time_limit)
            row[s] = sum(r.placed.values())
            row[f"{s} gpus"] = r.gpus
            row[f"{s} first"] = sum(r.first.values())
            row[f"{s} moves"], row[f"{s} rounds"] = r.moves, r.rounds
            row[f"{s} short"] = r.short_at_arrival
            row[f"{s} cost"] = cost_of(case, r.usage)
            row[f"{s} least"] = least_cost(case, r.placed, time_limit)
            row[f"{s} arrival cost"], row[f"{s} arrival least"] = r.arrival_cost, r.arrival_least
            row["overcommits"] += [f"{s}: {o}" for o in r.overcommitted]
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="placement quality against an exact solver")
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--per-trap", type=int, default=12)
    ap.add_argument("--time-limit", type=float, default=30.0, help="solver seconds per case")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    cases = corpus.generate(args.seed, args.per_trap)
    rows = measure(cases, STRATEGIES, args.time_limit)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))  # a Cost as it prints
        return 0
    print(f"corpus: seed {args.seed}, {len(cases)} cases, "
          f"{sum(len(c.deployments) for c in cases)} deployments "
          f"({time.perf_counter() - started:.1f} s)\n")
    print(render(rows, STRATEGIES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
