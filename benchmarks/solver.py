"""The reference solver: the most replicas a set of deployments can place, exactly.

An integer program over the same problem the scheduler solves one replica
at a time (never imported by function/; `make placement-quality` only):

- every replica goes to one cluster, every engine of it to one node pool of
  that cluster, all its members and copies on that pool (an engine is never
  split across pools; its pods may be on different nodes of the pool);
- capacity is counted per node, by devices (packing.py: a pod takes the
  devices its DRA requests got from ONE node; pods of anyone share a node
  while devices remain) or, for comparison, by whole nodes (every
  device-claiming pod takes a node: the scheduler before #34);
- the pods of other deployments' ModelReplicas (`held`) must still fit: the
  solver packs them with the new ones, as best it can (where kube-scheduler
  put them is not in the ledger, so the optimum is an upper bound);
- firstAvailable alternatives are fungible: an engine may use any
  alternative a pool offers. The scheduler prefers, fleet-wide, the first
  alternative that fits anywhere; the solver ignores that preference, so its
  optimum is an upper bound on any priority-respecting placement.

Whether one engine fits one node of a pool (DRA device requests, CEL
selectors, firstAvailable) is the scheduler's own exact answer
(`Matcher.engine_fit`), as is whether a cluster admits the deployment at all
(`filters.admit`): both are per-node and per-cluster facts, not placement
decisions. Everything across replicas, clusters, pools and nodes is the
solver's own.

Variables: x[d, c, f], replicas of deployment d on cluster c with footprint f
(the pods by shape each of its engines puts on which pool), and y[c, p, k, q],
nodes of class k (what a node has left) of pool p using pattern q (a maximal
multiset of pod shapes fitting such a node). Per pool and shape, the
patterns' slots cover the new pods plus the held ones; per class, no more
nodes than it has. Maximize the sum of x. HiGHS solves it; a missing highspy
is an ImportError, never a skipped measurement.

With the pools' prices (`prices`: nodePools[].costPerNodeHour) the objective
is lexicographic, as the scheduler's is: the most replicas first; among
placements of that many, the fewest nodes on unpriced pools (the scheduler
ranks an unknown price after every known one); among those, the least cost
per hour. A placement costs the nodes its pods need beyond those the held
pods alone need (`nodes_needed`), at the pool's price. Each stage is solved
exactly (no relative gap) with the earlier stages' optima fixed; `Cost` is
summed in integers, never read back from a float objective.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import highspy

from benchmarks import packing
from benchmarks.packing import DEVICE, Classes, Pods, Shape
from function.contract import cost
from function.contract.records import Cluster
from function.scheduler import filters
from function.scheduler.filters import Deployment
from function.scheduler.matching import Matcher

Key = tuple[str, str]  # (cluster, pool)


@dataclass(frozen=True, order=True)
class Footprint:
    """One replica on a cluster: its pods by shape on each pool, and their GPUs."""

    usage: tuple[tuple[str, Pods], ...]  # (pool, pods), by pool
    gpus: int


@dataclass(frozen=True)
class Demand:
    """One deployment as the solver sees it."""

    name: str
    replicas: int
    shapes: Mapping[str, tuple[Footprint, ...]]  # cluster -> the distinct footprints a replica may take


@dataclass(frozen=True)
class PoolRoom:
    """One pool as the solver sees it."""

    nodes: int
    classes: Classes   # its nodes by what each has left
    held: Pods = ()    # pods of other deployments' replicas, which must still fit


Fleet = Mapping[Key, PoolRoom]
Prices = Mapping[Key, "int | None"]  # (cluster, pool) -> cost.UNIT per node-hour


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
    gpus: int = 0                # GPUs the placement's pods are allocated

    @property
    def proven(self) -> bool:
        return self.placed == self.bound


def demand(md: Mapping, clusters: Sequence[Cluster], accounting: str = DEVICE) -> Demand:
    tspec = md["spec"]["template"]["spec"]
    dep = Deployment(match_labels=(tspec.get("clusterSelector") or {}).get("matchLabels") or {},
                     tolerations=tspec.get("tolerations") or [], engines=tspec["engines"])
    matcher = Matcher()
    errors = matcher.compile_all(dep.engines)
    if errors:
        raise ValueError(f"deployment {md['metadata']['name']}: {'; '.join(errors)}")
    shapes: dict[str, tuple[Footprint, ...]] = {}
    for c in clusters:
        if filters.admit(dep, c, matcher):
            continue
        options = []
        for engine in dep.engines:
            options.append([(p.name, *packing.engine_pods(engine, fit.members, accounting))
                            for p in c.pools if (fit := matcher.engine_fit(engine, p)) is not None])
        footprints = set()
        for combo in itertools.product(*options):
            usage: dict[str, list[tuple[Shape, int]]] = {}
            for pool_name, pods, _ in combo:
                usage.setdefault(pool_name, []).extend(pods)
            footprints.add(Footprint(tuple(sorted((p, packing.merge(pods))
                                                  for p, pods in usage.items() if pods)),
                                     sum(g for _, _, g in combo)))
        if footprints:
            shapes[c.name] = tuple(sorted(footprints))
    return Demand(md["metadata"]["name"], int(md["spec"].get("replicas", 1)), shapes)


def placed_pods(clusters: Sequence[Cluster], replicas: Sequence[Mapping],
                accounting: str = DEVICE) -> tuple[dict[Key, Pods], int]:
    """(cluster, pool) -> the pods the ModelReplicas put there, and their GPUs."""
    by_name = {c.name: c for c in clusters}
    matcher = Matcher()
    alive: list[Any] = []  # see packing.replica_pods
    out: dict[Key, list[tuple[Shape, int]]] = {}
    gpus = 0
    for r in replicas:
        c = by_name.get(r["spec"].get("clusterName", ""))
        if c is None:
            continue
        pods, g = packing.replica_pods(r, c, matcher, accounting, alive)
        gpus += g
        for pool_name, p in pods.items():
            out.setdefault((c.name, pool_name), []).extend(p)
    return {k: packing.merge(v) for k, v in sorted(out.items())}, gpus


def fleet(clusters: Sequence[Cluster], held: Sequence[Mapping], accounting: str = DEVICE) -> Fleet:
    """Every pool's nodes by what they have left, and the pods `held` (other
    deployments' ModelReplicas) keep there."""
    pods, _ = placed_pods(clusters, held, accounting)
    return {(c.name, p.name): PoolRoom(p.nodes, packing.node_classes(p, accounting),
                                       pods.get((c.name, p.name), ()))
            for c in clusters for p in c.pools}


def prices(clusters: Sequence[Cluster]) -> dict[Key, int | None]:
    """(cluster, pool) -> its costPerNodeHour in cost.UNIT (None: unpriced)."""
    return {(c.name, p.name): p.cost for c in clusters for p in c.pools}


def cost_of(nodes: Mapping[Key, int], price: Prices) -> Cost:
    """What nodes held on (cluster, pool)s cost per hour."""
    return Cost(sum(n for k, n in nodes.items() if price.get(k) is None),
                sum(n * (price.get(k) or 0) for k, n in nodes.items()))


class _Model:
    """The integer program for one set of demands on one fleet (module docstring)."""

    def __init__(self, room: Fleet, demands: Sequence[Demand], time_limit: float) -> None:
        self.h = h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("time_limit", time_limit)
        h.setOptionValue("threads", 1)
        h.setOptionValue("mip_rel_gap", 0.0)  # costs are integers: exact, not within 0.01%
        self.replicas = {d.name: d.replicas for d in demands}
        self.xs = [(d.name, c, f) for d in demands for c, fs in sorted(d.shapes.items()) for f in fs]
        # The pools some replica may use, and the pod shapes that may land on each.
        shapes: dict[Key, set[Shape]] = {}
        for _, c, f in self.xs:
            for pool_name, pods in f.usage:
                shapes.setdefault((c, pool_name), set()).update(s for s, _ in pods)
        self.ys: list[tuple[Key, int, tuple[tuple[Shape, int], ...]]] = []
        self.pools = {}
        for key in sorted(shapes):
            pool = room.get(key, PoolRoom(0, ()))
            self.pools[key] = pool
            kinds = sorted(shapes[key] | {s for s, _ in pool.held})
            for k, (left, _) in enumerate(pool.classes):
                for counts in packing.patterns(left, kinds):
                    self.ys.append((key, k, tuple((s, n) for s, n in zip(kinds, counts) if n)))
        nx, ny = len(self.xs), len(self.ys)
        h.addVars(nx + ny, [0.0] * (nx + ny),
                  [float(self.replicas[d]) for d, _, _ in self.xs]
                  + [float(self.pools[key].classes[k][1]) for key, k, _ in self.ys])
        h.changeColsIntegrality(nx + ny, list(range(nx + ny)), [highspy.HighsVarType.kInteger] * (nx + ny))
        # Per pool and shape: pattern slots - new pods >= held pods.
        cover: dict[tuple[Key, Shape], list[tuple[int, int]]] = {}
        for j, (_, c, f) in enumerate(self.xs):
            for pool_name, pods in f.usage:
                for shape, n in pods:
                    cover.setdefault(((c, pool_name), shape), []).append((j, -n))
        for j, (key, _, q) in enumerate(self.ys):
            for shape, n in q:
                cover.setdefault((key, shape), []).append((nx + j, n))
        for (key, s), entries in sorted(cover.items()):
            held = dict(self.pools[key].held).get(s, 0)
            h.addRow(float(held), highspy.kHighsInf, len(entries),
                     [j for j, _ in entries], [float(n) for _, n in entries])
        classes: dict[tuple[Key, int], list[int]] = {}
        for j, (key, k, _) in enumerate(self.ys):
            classes.setdefault((key, k), []).append(nx + j)
        for (key, k), js in sorted(classes.items()):
            h.addRow(0.0, float(self.pools[key].classes[k][1]), len(js), js, [1.0] * len(js))

    def run(self, weights: Sequence[float], sense) -> tuple[str, list[int]]:
        h = self.h
        h.changeColsCost(len(weights), list(range(len(weights))), list(weights))
        h.changeObjectiveSense(sense)
        h.run()
        status = h.modelStatusToString(h.getModelStatus())
        if status == "Infeasible":
            raise ValueError("the held replicas' pods do not fit their pools: "
                             + ", ".join(f"{c}/{p}" for (c, p), pool in self.pools.items()
                                         if nodes_needed(pool, pool.held) is None))
        found = [round(v) for v in h.getSolution().col_value]
        self.check(found)
        return status, found

    def fix(self, weights: Sequence[float], lower: float, upper: float) -> None:
        js = [j for j, w in enumerate(weights) if w]
        if js:
                self.h.addRow(lower, upper, len(js), js, [weights[j] for j in js])

    def check(self, found: Sequence[int]) -> None:
        """The solution must itself be a placement: every pod on a node that has room."""
        nx = len(self.xs)
        need: dict[tuple[Key, Shape], int] = {}
        per: dict[str, int] = {}
        used: dict[tuple[Key, int], int] = {}
        for (d, c, f), n in zip(self.xs, found):
            if n < 0:
                raise AssertionError(f"solver returned {n} replicas of {d} on {c}")
            per[d] = per.get(d, 0) + n
            for pool_name, pods in f.usage:
                for s, m in pods:
                    need[((c, pool_name), s)] = need.get(((c, pool_name), s), 0) + m * n
        for key, pool in self.pools.items():
            for s, m in pool.held:
                need[(key, s)] = need.get((key, s), 0) + m
        for (key, k, q), n in zip(self.ys, found[nx:]):
            used[(key, k)] = used.get((key, k), 0) + n
            for s, m in q:
                need[(key, s)] = need.get((key, s), 0) - m * n
        over = sorted({f"{c}/{p}" for ((c, p), _), v in need.items() if v > 0}
                      | {f"{c}/{p}" for ((c, p), k), v in used.items()
                         if v > self.pools[(c, p)].classes[k][1]})
        if over or any(per[d] > self.replicas[d] for d in per):
            raise AssertionError(f"solver solution is not a placement: over on {over}")

    def nodes(self, found: Sequence[int]) -> dict[Key, int]:
        out: dict[Key, int] = {}
        for (key, _, _), n in zip(self.ys, found[len(self.xs):]):
            out[key] = out.get(key, 0) + n
        return out


def solve(room: Fleet, demands: Sequence[Demand], time_limit: float = 30.0, *,
          count: frozenset[str] | None = None, floors: Mapping[str, int] | None = None,
          price: Prices | None = None, most_gpus: bool = False) -> Optimum:
    """The most replicas of the deployments in `count` (None: all) that can be
    placed while every deployment in `floors` keeps at least that many; with
    `price`, the least cost of placing that many; with `most_gpus`, the most
    GPUs among placements of that many (module docstring)."""
    m = _Model(room, demands, time_limit)
    if not m.xs:
        return Optimum(0, 0, {d.name: 0 for d in demands}, "no placement possible",
                       None if price is None else Cost())
    for d, js in sorted(_by_dep(m).items()):
        m.h.addRow(float((floors or {}).get(d, 0)), float(m.replicas[d]), len(js), js, [1.0] * len(js))
    zeros = [0.0] * len(m.ys)
    counted = [1.0 if count is None or d in count else 0.0 for d, _, _ in m.xs]
    status, found = m.run(counted + zeros, highspy.ObjSense.kMaximize)
    placed = sum(n for w, n in zip(counted, found) if w)
    bound = placed if status == "Optimal" else int(m.h.getInfo().mip_dual_bound + 1e-6)
    m.fix(counted, float(placed), float(placed))
    if most_gpus:
        gpus = [float(f.gpus) for _, _, f in m.xs] + zeros
        stage, better = m.run(gpus, highspy.ObjSense.kMaximize)
        if stage != "Optimal":
            status = f"{status}; GPU stage: {stage}"
        found = better if sum(n for w, n in zip(counted, better) if w) == placed else found
    least = None
    if price is not None:
        # The fewest unpriced nodes, then the least cost (the x's weigh nothing).
        for stage_no in (0, 1):
            weights = [0.0] * len(m.xs) + [
                float(1 if price.get(key) is None else 0) if stage_no == 0
                else float(price.get(key) or 0) for key, _, _ in m.ys]
            stage, better = m.run(weights, highspy.ObjSense.kMinimize)
            if stage != "Optimal":
                status = f"{status}; cost stage {stage_no}: {stage}"
            if sum(n for w, n in zip(counted, better) if w) == placed:
                found = better
            m.fix(weights, -highspy.kHighsInf, float(sum(round(w) * n for w, n in zip(weights, found))))
        nodes = m.nodes(found)
        held = {key: nodes_needed(pool, pool.held) or 0 for key, pool in m.pools.items()}
        least = cost_of({k: n - held[k] for k, n in nodes.items()}, price)
    per = {d.name: 0 for d in demands}
    for (d, _, _), n in zip(m.xs, found):
        per[d] += n
    gpus_placed = sum(f.gpus * n for (d, _, f), n in zip(m.xs, found) if count is None or d in count)
    return Optimum(placed, max(bound, placed), per, status, least, gpus_placed)


def _by_dep(m: _Model) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for j, (d, _, _) in enumerate(m.xs):
        out.setdefault(d, []).append(j)
    return out


def nodes_needed(pool: PoolRoom, pods: Pods, time_limit: float = 30.0,
                 unbounded: bool = False) -> int | None:
    """The fewest of the pool's nodes `pods` fit on; None: they fit on none
    (`unbounded`: as many nodes of each class as it takes, None only when some
    pod fits no node)."""
    if not pods:
        return 0
    kinds = sorted(s for s, _ in pods)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", time_limit)
    h.setOptionValue("threads", 1)
    ys = [(k, q) for k, (left, _) in enumerate(pool.classes) for q in packing.patterns(left, kinds)]
    if not ys:
        return None
    most = sum(n for _, n in pods)
    h.addVars(len(ys), [0.0] * len(ys),
              [float(most if unbounded else pool.classes[k][1]) for k, _ in ys])
    h.changeColsIntegrality(len(ys), list(range(len(ys))), [highspy.HighsVarType.kInteger] * len(ys))
    h.changeColsCost(len(ys), list(range(len(ys))), [1.0] * len(ys))
    for i, (_, n) in enumerate(sorted(pods)):
        js = [j for j, (_, q) in enumerate(ys) if q[i]]
        h.addRow(float(n), highspy.kHighsInf, len(js), js, [float(ys[j][1][i]) for j in js])
    if not unbounded:
        for k, (_, n) in enumerate(pool.classes):
            js = [j for j, (kk, _) in enumerate(ys) if kk == k]
            h.addRow(0.0, float(n), len(js), js, [1.0] * len(js))
    h.run()
    if h.modelStatusToString(h.getModelStatus()) != "Optimal":
        return None
    return round(h.getInfo().objective_function_value)


def placement_cost(room: Fleet, pods: Mapping[Key, Pods], price: Prices) -> Cost:
    """What a placement costs per hour: on each pool, the nodes its pods and the
    held ones need beyond those the held ones alone need."""
    nodes = {}
    for key, p in pods.items():
        pool = room[key]
        both = packing.merge(pool.held, p)
        need = nodes_needed(pool, both)
        if need is None:  # overcommitted (quality.overcommits says so): as many as it takes
            need = nodes_needed(pool, both, unbounded=True) or 0
        nodes[key] = need - (nodes_needed(pool, pool.held) or 0)
    return cost_of(nodes, price)


def least_cost(room: Fleet, demands: Sequence[Demand], placed: Mapping[str, int],
               price: Prices, time_limit: float = 30.0) -> Optimum:
    """The cheapest placement of exactly `placed[d]` replicas of each deployment
    (what the scheduler placed): its cost is the least any placement of the
    same replicas could cost, the yardstick of the scheduler's own."""
    exact = [dataclasses.replace(d, replicas=placed.get(d.name, 0)) for d in demands]
    return solve(room, exact, time_limit, floors=placed, price=price)


def solve_in_order(room: Fleet, demands: Sequence[Demand], time_limit: float = 30.0) -> Optimum:
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
        best = solve(room, demands, time_limit, count=frozenset({d.name}), floors=floors)
        floors[d.name] = best.placed
        statuses.append(best.status)
    proven = all(s in ("Optimal", "no placement possible") for s in statuses)
    total = sum(floors.values())
    return Optimum(total, total, floors, "Optimal" if proven else "not proven")
