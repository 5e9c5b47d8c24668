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

Prints a row per case, a row per trap, the cost per hour of what each
strategy placed against the least cost of placing the same replicas
(solver.least_cost; the pools' costPerNodeHour), the overcommits, and last
the ratio over the whole corpus. Beside the optimum, the "in order" optimum: the most a
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
            result.arrival_cost = _sum([result.arrival_cost,
                                        solver.placement_cost(free, usage, price)])
            result.arrival_least = _sum([result.arrival_least, least])
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


def ratio(placed: int, optimal: int) -> float:
    return 1.0 if optimal == 0 else placed / optimal


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render(rows: Sequence[dict], strategies: Sequence[str]) -> str:
    lines = ["per case (replicas placed once settled, and on first reconciles; "
             "% of the solver's optimum)"]
    cols = ["case", "asked", "optimal", "in order", "node-wise"] + [
        c for s in strategies for c in (s, f"{s} %", f"{s} first", f"{s} moves")]
    cells = [[r["case"], str(r["asked"]),
              str(r["optimal"]) + ("" if r["bound"] == r["optimal"] else f" (<= {r['bound']})"),
              str(r["in_order"]), str(r["nodewise"])]
             + [c for s in strategies for c in (str(r[s]), pct(ratio(r[s], r["optimal"])),
                                                str(r[f"{s} first"]), str(r[f"{s} moves"]))]
             for r in rows]
    lines += _table(cols, cells)
    lines += ["", "per trap (sums over its cases; worst case)"]
    cols = ["trap", "cases", "optimal", "in order"] + [
        c for s in strategies for c in (s, f"{s} %", f"{s} worst", f"{s} loss")]
    cells = []
    for trap in dict.fromkeys(r["trap"] for r in rows):
        group = [r for r in rows if r["trap"] == trap]
        opt = sum(r["optimal"] for r in group)
        cell = [trap, str(len(group)), str(opt), str(sum(r["in_order"] for r in group))]
        for s in strategies:
            got = sum(r[s] for r in group)
            worst = min(ratio(r[s], r["optimal"]) for r in group)
            cell += [str(got), pct(ratio(got, opt)), pct(worst), str(opt - got)]
        cells.append(cell)
    lines += _table(cols, cells)
    lines += ["", "GPUs placed, share of the fleet's (held ones included): the most replicas "
                  "counted by devices (then the most GPUs) and by whole nodes, and each strategy's"]
    cols = ["trap", "fleet GPUs", "held", "device-wise", "node-wise",
            "node-wise replicas"] + list(strategies)
    cells = []
    for trap in dict.fromkeys(r["trap"] for r in rows):
        group = [r for r in rows if r["trap"] == trap]
        cells.append([trap] + gpu_cells(group, strategies))
    scored = [r for r in rows if r["trap"] not in corpus.IN_ORDER]
    cells.append([_corpus(rows)] + gpu_cells(scored, strategies))
    lines += _table(cols, cells)
    lines += ["", "cost per hour of the replicas placed (unpriced pools' nodes apart), against "
                  "the least cost of placing the same replicas; the optimum's: of placing the most"]
    cols = ["trap", "optimum's"] + [c for s in strategies
                                    for c in (f"{s} cost", f"{s} least", f"{s} over")]
    cells = []
    for trap in dict.fromkeys(r["trap"] for r in rows):
        group = [r for r in rows if r["trap"] == trap]
        cell = [trap, str(_sum(r["optimal cost"] for r in group))]
        for s in strategies:
            got, least = _sum(r[f"{s} cost"] for r in group), _sum(r[f"{s} least"] for r in group)
            cell += [str(got), str(least), excess(got, least)]
        cells.append(cell)
    lines += _table(cols, cells)
    unproven = [r["case"] for r in rows if r["bound"] != r["optimal"]]
    over = [o for r in rows for o in r["overcommits"]]
    lines += ["", f"solver: {len(rows) - len(unproven)}/{len(rows)} optima proven"
              + (f" (not proven: {', '.join(unproven)}; the ratio uses the best found)"
                 if unproven else ""),
              f"overcommits: {len(over)}" + (" (" + "; ".join(over[:10]) + ")" if over else "")]
    deployments = sum(r["deployments"] for r in rows)
    lines.append(f"short at arrival (replicas a deployment could have had when it arrived, over "
                 f"{deployments} deployments): " + ", ".join(
                     f"{s} {sum(r[f'{s} short'] for r in rows)}" for s in strategies)
                 + "; the rest of the loss is placements that fitted everything then and "
                   "left a later deployment short")
    for what, cost_key, least_key in (
            ("the least cost of placing the same replicas", "cost", "least"),
            ("each deployment's least on the fleet as it arrived", "arrival cost",
             "arrival least")):
        lines.append(f"cost per hour, against {what}: " + ", ".join(
            f"{s} {_sum(r[f'{s} {cost_key}'] for r in rows)} for "
            f"{_sum(r[f'{s} {least_key}'] for r in rows)}, "
            + excess(_sum(r[f"{s} {cost_key}"] for r in rows),
                     _sum(r[f"{s} {least_key}"] for r in rows))
            for s in strategies))
    opt, first_come = sum(r["optimal"] for r in scored), sum(r["in_order"] for r in scored)
    lines.append(f"in order (first come, first served, knowing what comes next), "
                 f"{_corpus(rows)}: {first_come}/{opt} of the optimum "
                 f"({sum(1 for r in scored if r['in_order'] < r['optimal'])} cases below it); "
                 + ", ".join(f"{s} {pct(ratio(sum(r[s] for r in scored), first_come))} of it"
                             for s in strategies))
    lines.append(f"on first reconciles only (each deployment once, as it arrives; nothing "
                 f"settled), {_corpus(rows)}: " + ", ".join(
                     f"{s} {sum(r[f'{s} first'] for r in scored)}/{opt} = "
                     f"{pct(ratio(sum(r[f'{s} first'] for r in scored), opt))}"
                     for s in strategies))
    lines.append("settling (every deployment reconciled again until a round changes nothing): "
                 + ", ".join(f"{s} moved {sum(r[f'{s} moves'] for r in rows)} replicas, "
                             f"at most {max(r[f'{s} rounds'] for r in rows)} rounds"
                             for s in strategies))
    fleet = sum(r["gpus fleet"] for r in scored)
    lines.append(f"GPUs placed, of the fleet's {fleet} ({_corpus(rows)}): device accounting "
                 f"{pct(ratio(sum(r['gpus optimal'] for r in scored), fleet))} at the optimum, "
                 f"whole-node accounting "
                 f"{pct(ratio(sum(r['gpus nodewise'] for r in scored), fleet))}; "
                 + ", ".join(f"{s} {pct(ratio(sum(r[f'{s} gpus'] for r in scored), fleet))}"
                             for s in strategies))
    apart = [r for r in rows if r["trap"] in corpus.IN_ORDER]
    if apart:
        lines.append(f"{', '.join(sorted(corpus.IN_ORDER))} (asks for more than the fleet "
                     f"has; scored apart, against the in-order optimum): "
                     + "; ".join(f"{s} " + headline(apart, s, "in_order") for s in strategies)
                     + " (the in-order optimum bounds no count: a strategy that gives an "
                       "early deployment fewer may place more in all)")
    for s in strategies:
        lines.append(f"{s}: " + headline(scored, s, "optimal"))
    return "\n".join(lines)


def _corpus(rows: Sequence[dict]) -> str:
    """The name of the rows the headline scores."""
    apart = sorted({r["trap"] for r in rows} & corpus.IN_ORDER)
    return "corpus" + (f" without {', '.join(apart)}" if apart else "")


def headline(rows: Sequence[dict], s: str, against: str) -> str:
    """Strategy `s`'s replicas over `rows` against their `against` optimum
    ("optimal" or "in_order"), with the worst case and the cases below 90%."""
    got, opt = sum(r[s] for r in rows), sum(r[against] for r in rows)
    worst = min(rows, key=lambda r: ratio(r[s], r[against]))
    below = sum(1 for r in rows if ratio(r[s], r[against]) < 0.9)
    return (f"{got}/{opt} replicas of the {'optimum' if against == 'optimal' else 'in-order optimum'}"
            f" over {len(rows)} cases = {pct(ratio(got, opt))} (worst case {worst['case']} "
            f"{pct(ratio(worst[s], worst[against]))}, {below} cases < 90%)")


def gpu_cells(group: Sequence[dict], strategies: Sequence[str]) -> list[str]:
    """A row of the GPU table: the fleet's GPUs, and the share each placement got."""
    fleet = sum(r["gpus fleet"] for r in group)
    return [str(fleet), pct(ratio(sum(r["gpus held"] for r in group), fleet)),
            pct(ratio(sum(r["gpus optimal"] for r in group), fleet)),
            pct(ratio(sum(r["gpus nodewise"] for r in group), fleet)),
            str(sum(r["nodewise"] for r in group))] + [
        pct(ratio(sum(r[f"{s} gpus"] for r in group), fleet)) for s in strategies]


def _sum(costs) -> solver.Cost:
    total = solver.Cost()
    for c in costs:
        total = solver.Cost(total.unpriced_nodes + c.unpriced_nodes, total.priced + c.priced)
    return total


def excess(got: solver.Cost, least: solver.Cost) -> str:
    """How much more the priced nodes cost than the least (unpriced ones apart)."""
    if least.priced == 0:
        return "+0.0%" if got.priced == 0 else "n/a"
    return f"{100 * (got.priced - least.priced) / least.priced:+.1f}%"


def _table(cols: Sequence[str], cells: Sequence[Sequence[str]]) -> list[str]:
    rows = [list(cols)] + [list(c) for c in cells]
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    return ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
            for r in rows]


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
