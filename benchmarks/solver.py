"""The reference solver: the most replicas a set of deployments can place, exactly.

An integer program over the same problem the scheduler solves one replica
at a time (never imported by function/; `make placement-quality` only):

- every replica goes to one cluster, every engine of it to one node pool of
  that cluster, all its members and copies on that pool (an engine is never
  split), costing `engine_cost` nodes there: pods x copies of the members
  that claim DRA devices, so a Leader + Worker gang takes 1 + worker.nodes
  whole nodes of one pool;
- a pool's free nodes are its nodes less what other deployments' replicas
  already hold, and no pool is overcommitted;
- firstAvailable alternatives are fungible: an engine may use any
  alternative a pool offers. The scheduler prefers, fleet-wide, the first
  alternative that fits anywhere; the solver ignores that preference, so its
  optimum is an upper bound on any priority-respecting placement.

Whether one engine fits one node of a pool (DRA device requests, CEL
selectors, firstAvailable) is the scheduler's own exact answer
(`Matcher.engine_fit`, a backtracking assignment), as is whether a cluster
admits the deployment at all (`filters.admit`: selector, taints, readiness):
both are per-node and per-cluster facts, not placement decisions. Everything
across replicas and clusters (which cluster, which pool, how many) is the
solver's own.

Replicas of one deployment are interchangeable, so the variables are counts:
x[d, c, s] replicas of deployment d on cluster c taking pool usage s (one
distinct usage vector per way of putting its engines on c's pools).
Maximize the sum of x subject to every pool's free nodes and every
deployment's replicas. HiGHS solves it; a missing highspy is an ImportError,
never a skipped measurement.

With the pools' prices (`prices`: nodePools[].costPerNodeHour) the objective
is lexicographic, as the scheduler's is: the most replicas first; among
placements of that many, the fewest nodes on unpriced pools (the scheduler
ranks an unknown price after every known one); among those, the least cost
per hour. Each stage is solved exactly (no relative gap) with the earlier
stages' optima fixed as constraints; `Cost` is then summed in integers from
the solution, never read back from a float objective.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import highspy

from function.contract import cost
from function.contract.capacity import replica_usage
from function.contract.records import Cluster
from function.scheduler import filters
from function.scheduler.filters import Deployment, engine_cost
from function.scheduler.matching import Matcher

Usage = tuple[tuple[str, int], ...]  # (pool, nodes), sorted: one replica's footprint on a cluster


@dataclass(frozen=True)
class Demand:
    """One deployment as the solver sees it."""

    name: str
    replicas: int
    shapes: Mapping[str, tuple[Usage, ...]]  # cluster -> the distinct footprints a replica may take


Prices = Mapping[tuple[str, str], "int | None"]  # (cluster, pool) -> cost.UNIT per node-hour


@dataclass(frozen=True, order=True)
class Cost:
    """A placement's cost per hour, compared as the scheduler compares them."""

    unpriced_nodes: int = 0  # nodes on pools with no costPerNodeHour
    priced: int = 0          # cost.UNIT ten-thousandths per hour on the priced ones

    def __str__(self) -> str:
        text = cost.text(self.priced)
        return text + (f" + {self.unpriced_nodes} unpriced nodes" if self.unpriced_nodes else "")


@dataclass(frozen=True)
class Optimum:
    placed: int                  # replicas in the best placement found
    bound: int                   # no placement places more (== placed when proven)
    per_deployment: Mapping[str, int]
    status: str                  # HiGHS's model status
    cost: Cost | None = None     # the least cost of placing `placed` (when priced)

    @property
    def proven(self) -> bool:
        return self.placed == self.bound


def demand(md: Mapping, clusters: Sequence[Cluster]) -> Demand:
    tspec = md["spec"]["template"]["spec"]
    dep = Deployment(match_labels=(tspec.get("clusterSelector") or {}).get("matchLabels") or {},
                     tolerations=tspec.get("tolerations") or [], engines=tspec["engines"])
    matcher = Matcher()
    errors = matcher.compile_all(dep.engines)
    if errors:
        raise ValueError(f"deployment {md['metadata']['name']}: {'; '.join(errors)}")
    shapes: dict[str, tuple[Usage, ...]] = {}
    for c in clusters:
        if filters.admit(dep, c, matcher):
            continue
        options = []
        for engine in dep.engines:
            options.append([(p.name, engine_cost(engine, fit)) for p in c.pools
                            if (fit := matcher.engine_fit(engine, p)) is not None])
        footprints = set()
        for combo in itertools.product(*options):
            usage: dict[str, int] = {}
            for pool_name, nodes in combo:
                usage[pool_name] = usage.get(pool_name, 0) + nodes
            footprints.add(tuple(sorted(usage.items())))
        if footprints:
            shapes[c.name] = tuple(sorted(footprints))
    return Demand(md["metadata"]["name"], int(md["spec"].get("replicas", 1)), shapes)


def free_nodes(clusters: Sequence[Cluster], held: Sequence[Mapping]) -> dict[tuple[str, str], int]:
    """(cluster, pool) -> nodes no other deployment's replica holds."""
    free = {(c.name, p.name): p.nodes for c in clusters for p in c.pools}
    for r in held:
        name = r["spec"]["clusterName"]
        for pool_name, nodes in replica_usage(r["spec"]["engines"]).items():
            if (name, pool_name) in free:
                free[(name, pool_name)] -= nodes
    return {k: max(0, v) for k, v in free.items()}


def prices(clusters: Sequence[Cluster]) -> dict[tuple[str, str], int | None]:
    """(cluster, pool) -> its costPerNodeHour in cost.UNIT (None: unpriced)."""
    return {(c.name, p.name): p.cost for c in clusters for p in c.pools}


def cost_of(usage: Mapping[tuple[str, str], int], price: Prices) -> Cost:
    """What nodes held on (cluster, pool)s cost per hour."""
    return Cost(sum(n for k, n in usage.items() if price.get(k) is None),
                sum(n * price[k] for k, n in usage.items() if price.get(k) is not None))


def solve(free: Mapping[tuple[str, str], int], demands: Sequence[Demand],
          time_limit: float = 30.0, *, count: frozenset[str] | None = None,
          floors: Mapping[str, int] | None = None, price: Prices | None = None) -> Optimum:
    """The most replicas of the deployments in `count` (None: all) that can be
    placed while every deployment in `floors` keeps at least that many; with
    `price`, the least cost of placing that many (module docstring)."""
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", time_limit)
    h.setOptionValue("threads", 1)
    h.setOptionValue("mip_rel_gap", 0.0)  # costs are integers: exact, not within 0.01%
    cols: list[tuple[str, str, Usage]] = []
    for d in demands:
        for cluster_name, footprints in sorted(d.shapes.items()):
            for usage in footprints:
                cols.append((d.name, cluster_name, usage))
    if not cols:
        return Optimum(0, 0, {d.name: 0 for d in demands}, "no placement possible",
                       None if price is None else Cost())
    replicas = {d.name: d.replicas for d in demands}
    h.addVars(len(cols), [0.0] * len(cols), [float(replicas[d]) for d, _, _ in cols])
    h.changeColsIntegrality(len(cols), list(range(len(cols))),
                            [highspy.HighsVarType.kInteger] * len(cols))
    h.changeColsCost(len(cols), list(range(len(cols))),
                     [1.0 if count is None or d in count else 0.0 for d, _, _ in cols])
    h.changeObjectiveSense(highspy.ObjSense.kMaximize)

    by_pool: dict[tuple[str, str], list[tuple[int, int]]] = {}
    by_dep: dict[str, list[int]] = {}
    for j, (d, cluster_name, usage) in enumerate(cols):
        by_dep.setdefault(d, []).append(j)
        for pool_name, nodes in usage:
            by_pool.setdefault((cluster_name, pool_name), []).append((j, nodes))
    for key, entries in sorted(by_pool.items()):
        h.addRow(0.0, float(free.get(key, 0)), len(entries), [j for j, _ in entries],
                 [float(n) for _, n in entries])
    for d, js in sorted(by_dep.items()):
        h.addRow(float((floors or {}).get(d, 0)), float(replicas[d]), len(js), js, [1.0] * len(js))

    h.run()
    status = h.modelStatusToString(h.getModelStatus())
    counts = [round(v) for v in h.getSolution().col_value]
    _check(cols, counts, free, replicas)
    per: dict[str, int] = {d.name: 0 for d in demands}
    for (d, _, _), n in zip(cols, counts):
        per[d] += n
    placed = sum(n for d, n in per.items() if count is None or d in count)
    info = h.getInfo()
    bound = placed if status == "Optimal" else int(info.mip_dual_bound + 1e-6)
    if price is None:
        return Optimum(placed, max(bound, placed), per, status)

    # Keep `placed`, then the fewest unpriced nodes, then the least cost.
    counted = [j for j, (d, _, _) in enumerate(cols) if count is None or d in count]
    h.addRow(float(placed), float(placed), len(counted), counted, [1.0] * len(counted))
    h.changeObjectiveSense(highspy.ObjSense.kMinimize)
    for stage in (0, 1):
        weights = [float(_stage_costs(usage, cluster_name, price)[stage])
                   for _, cluster_name, usage in cols]
        h.changeColsCost(len(cols), list(range(len(cols))), weights)
        h.run()
        stage_status = h.modelStatusToString(h.getModelStatus())
        if stage_status != "Optimal":
            status = f"{status}; cost stage {stage}: {stage_status}"
        found = [round(v) for v in h.getSolution().col_value]
        _check(cols, found, free, replicas)
        if sum(found[j] for j in counted) == placed:
            counts = found
        least = sum(round(w) * n for w, n in zip(weights, counts))
        h.addRow(-highspy.kHighsInf, float(least), len(cols), list(range(len(cols))), weights)
    per = {d.name: 0 for d in demands}
    usage_total: dict[tuple[str, str], int] = {}
    for (d, cluster_name, usage), n in zip(cols, counts):
        per[d] += n
        for pool_name, nodes in usage:
            key = (cluster_name, pool_name)
            usage_total[key] = usage_total.get(key, 0) + nodes * n
    return Optimum(placed, max(bound, placed), per, status, cost_of(usage_total, price))


def _stage_costs(usage: Usage, cluster_name: str, price: Prices) -> tuple[int, int]:
    """One replica's (unpriced nodes, priced cost) for the footprint `usage`."""
    c = cost_of({(cluster_name, p): n for p, n in usage}, price)
    return c.unpriced_nodes, c.priced


def _check(cols, counts, free, replicas) -> None:
    """The solution must itself be a placement: no pool over, no deployment over."""
    used: dict[tuple[str, str], int] = {}
    per: dict[str, int] = {}
    for (d, cluster_name, usage), n in zip(cols, counts):
        if n < 0:
            raise AssertionError(f"solver returned {n} replicas of {d} on {cluster_name}")
        per[d] = per.get(d, 0) + n
        for pool_name, nodes in usage:
            used[(cluster_name, pool_name)] = used.get((cluster_name, pool_name), 0) + nodes * n
    over = [k for k, v in used.items() if v > free.get(k, 0)]
    if over or any(per[d] > replicas[d] for d in per):
        raise AssertionError(f"solver solution is not a placement: over on {over}")


def least_cost(free: Mapping[tuple[str, str], int], demands: Sequence[Demand],
               placed: Mapping[str, int], price: Prices, time_limit: float = 30.0) -> Optimum:
    """The cheapest placement of exactly `placed[d]` replicas of each deployment
    (what the scheduler placed): its cost is the least any placement of the
    same replicas could cost, the yardstick of the scheduler's own."""
    exact = [dataclasses.replace(d, replicas=placed.get(d.name, 0)) for d in demands]
    return solve(free, exact, time_limit, floors=placed, price=price)


def solve_in_order(free: Mapping[tuple[str, str], int], demands: Sequence[Demand],
                   time_limit: float = 30.0) -> Optimum:
    """The best a scheduler that serves deployments first come, first served can
    do, knowing what comes next: the most replicas of the first deployment,
    then, keeping those, the most of the second, and so on (lexicographic).

    The count optimum (`solve`) may leave an earlier deployment short to place
    more of a later one; no scheduler that places every replica that fits when
    it arrives can. The gap between the two is the arrival order's, not the
    placement choices'.
    """
    floors: dict[str, int] = {}
    statuses = []
    for d in demands:
        best = solve(free, demands, time_limit, count=frozenset({d.name}), floors=floors)
        floors[d.name] = best.placed
        statuses.append(best.status)
    proven = all(s in ("Optimal", "no placement possible") for s in statuses)
    total = sum(floors.values())
    return Optimum(total, total, floors, "Optimal" if proven else "not proven")
