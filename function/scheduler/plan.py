"""The placement plan: retain, scale down, repair overcommit, re-place, fill.

`plan()` is a pure function of its inputs (no I/O, no clock, no randomness):
the same inputs give the same plan. Existing replicas are inputs, not
decisions: a healthy replica keeps its cluster. The order of the steps is the
policy:

1. retain   - a replica stays on its cluster while the cluster exists, no
              filter step evicts it (filters.py: the selector no longer
              matches, a NoExecute taint drains it), and its engines still fit.
2. scale down - surplus replicas go first from drained or lost clusters, then
              from the cluster hosting most of this deployment, highest index
              first.
3. repair   - where a pool's live usage exceeds its nodes, the youngest
              replicas on it are re-placed; the oldest keep their place.
4. place    - displaced replicas (same index) and then new ones (lowest free
              index) go one at a time to the best-ranked cluster (scores.py:
              by placement.strategy, Spread the fewest of this deployment's
              replicas, Pack the fewest free nodes on the pools it can use;
              then where its ModelCache is Ready; then the cheapest by
              nodePools[].costPerNodeHour; ties by name) that every filter step
              admits and whose free nodes (ledger.py) fit, each engine on a
              pool of it (filters.capacity: Spread the cheapest placement,
              else the listed order; Pack the fullest that fits, then the
              cheapest). firstAvailable priority levels come before all of
              it: cost chooses only within the level the walk is at.
5. make room - Pack only, once every replica is placed and none moved: when
              another deployment waits with a replica that fits on no cluster,
              move the fewest of ours off one cluster so that it fits there,
              each to a place elsewhere (room.py).

Never destructive: a displaced replica is removed only once it has a new
place, except a NoExecute drain, which the platform team asked for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from function.contract.enums import PlacementStrategy
from function.contract.records import Cluster
from function.scheduler import filters, reasons, room
from function.scheduler.filters import Deployment, EnginePlacement, capacity, engine_cost
from function.scheduler.ledger import Ledger
from function.scheduler.matching import Matcher, levels
from function.scheduler.model import Replica
from function.scheduler.quotas import QuotaLedger, fit_devices, held_by
from function.scheduler.scores import Ranking, State


@dataclass(frozen=True)
class Inputs:
    replicas: int
    deployment: Deployment
    clusters: Sequence[Cluster]           # parsed, in any order
    malformed_clusters: Mapping[str, str]  # name -> why it cannot be used
    own: Sequence[Replica]                # this deployment's ModelReplicas now
    others: Sequence[Replica]             # every other ModelReplica (the ledger)
    # Indexes held by this deployment's malformed ModelReplicas (kept as they
    # are): a new replica never takes one, so never their name or key.
    reserved: frozenset[int] = frozenset()
    # The InferenceQuotas of the deployment's namespace (quotas.py); None: none applies.
    quota: QuotaLedger | None = None
    # Other deployments short of capacity (Pack reads them: room.py).
    waiting: Sequence[room.Waiting] = ()


@dataclass(frozen=True)
class Placement:
    index: int
    cluster: str
    # Engine name -> where it runs; None when the existing ModelReplica is
    # kept exactly as it is (its cluster is unreadable, or it found no new
    # place), in which case `existing` holds it and `note` says why.
    engines: Mapping[str, EnginePlacement] | None
    existing: Replica | None = None
    note: str = ""


@dataclass
class Plan:
    placements: list[Placement] = field(default_factory=list)
    unscheduled: dict[int, reasons.Shortfall] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # reasons nothing new was placed
    notes: list[str] = field(default_factory=list)


@dataclass
class _Candidate:
    replica: Replica
    engines: dict[str, EnginePlacement] | None = None
    displaced: str = ""     # why it must move ("" when it stays)
    drained: bool = False   # NoExecute: leave even without a new place
    unknown: str = ""       # its cluster is unreadable: keep as is


def plan(inp: Inputs) -> Plan:
    result = Plan()
    matcher = Matcher()
    dep = inp.deployment
    clusters = {c.name: c for c in inp.clusters}
    total = len(clusters) + len(inp.malformed_clusters)

    result.errors = matcher.compile_all(dep.engines)
    if result.errors:
        # A bad selector decides nothing: keep every replica exactly as it is.
        for r in sorted(_dedupe(inp.own), key=lambda r: r.index):
            result.placements.append(Placement(r.index, r.cluster, None, r, "selector invalid"))
        return result

    static = {name: filters.admit(dep, c, matcher) for name, c in sorted(clusters.items())}
    candidates = [_classify(r, clusters, inp.malformed_clusters, dep, matcher)
                  for r in _dedupe(inp.own)]
    candidates = _scale_down(candidates, inp.replicas)

    ledger = Ledger()
    for r in inp.others:
        ledger.reserve(r.cluster, r.usage)
    for c in candidates:
        ledger.reserve(c.replica.cluster, _usage(c))
    _repair_overcommit(candidates, inp.others, clusters, ledger)

    # A replica that has to move holds its nodes until it has a new place (it
    # is removed only then): nothing else may take them meanwhile. Each one
    # releases its own nodes only while it looks for its new place.
    moving = [c for c in candidates if c.engines is None and not c.unknown]
    for c in moving:
        ledger.reserve(c.replica.cluster, c.replica.usage)

    # Replicas whose recorded pools no longer match try the rest of their cluster.
    for c in moving:
        if not c.displaced:
            ledger.release(c.replica.cluster, c.replica.usage)
            fit, why = capacity(dep, clusters[c.replica.cluster], matcher, ledger)
            if fit is None:
                c.displaced = f"its engines no longer fit on cluster {c.replica.cluster}: " \
                              + reasons.plain(why or "")
                ledger.reserve(c.replica.cluster, c.replica.usage)
            else:
                c.engines = fit
                ledger.reserve(c.replica.cluster, _usage(c))

    hosted: dict[str, int] = {}
    for c in candidates:
        if not c.displaced:
            hosted[c.replica.cluster] = hosted.get(c.replica.cluster, 0) + 1
    warm = frozenset(n for n in clusters if dep.cache is not None and dep.cache.ready_on(n))
    usable = _usable(dep, clusters, static, matcher) \
        if dep.strategy == PlacementStrategy.PACK else {}
    state = State(hosted, ledger, warm, usable)
    priced = any(p.cost is not None for c in clusters.values() for p in c.pools)
    # One ranking per firstAvailable level the walk reaches when the fleet has
    # prices (the cost score depends on the level: scores.py); else one for all.
    rankings: dict[int, Ranking] = {}

    def ranking(level: int) -> Ranking:
        key = level if priced else 0
        if key not in rankings:
            at = dataclasses.replace(state, nodes=_nodes(dep, clusters, matcher, level)) \
                if priced else state
            rankings[key] = Ranking(clusters, at, dep.strategy)
        return rankings[key]
    # A copy: the plan reserves in it, and stays a pure function of its inputs.
    quota = dataclasses.replace(inp.quota, used=dict(inp.quota.used)) if inp.quota else None

    # (cluster, level) -> why capacity refused this deployment's replica there.
    # Its replicas are alike, so the verdict holds until that cluster's ledger
    # changes, which `changed` hears of: without it, Pack's walk (fullest
    # first) re-ran capacity on every full cluster for every replica (L: 3x).
    unfit: dict[tuple[str, int], str] = {}

    def changed(name: str) -> None:
        for r in rankings.values():
            r.changed(name)
        for level in range(levels(dep.engines)):
            unfit.pop((name, level), None)

    def land(name: str, usage: Mapping[str, int]) -> None:
        ledger.reserve(name, usage)
        hosted[name] = hosted.get(name, 0) + 1
        changed(name)

    def place(index: int, avoid: str = "") -> Placement | reasons.Shortfall:
        # firstAvailable: the first alternative that fits anywhere in the
        # fleet wins before any cluster falls back to the next; the scores
        # rank clusters within each priority level.
        for level in range(levels(dep.engines)):
            verdicts = []
            for name in ranking(level):
                if name == avoid:
                    continue  # being cleared for another deployment (room.py)
                if static[name]:
                    verdicts.append((name, static[name]))
                    continue
                if (name, level) in unfit:
                    verdicts.append((name, unfit[(name, level)]))
                    continue
                fit, reason = capacity(dep, clusters[name], matcher, ledger, level=level)
                if fit is None:
                    unfit[(name, level)] = reason
                    verdicts.append((name, reason))
                    continue
                if quota is not None:
                    held = fit_devices(dep.engines, fit)
                    reason = quota.admit(held)
                    if reason:
                        verdicts.append((name, reason))
                        continue
                    quota.reserve(held)
                land(name, _pool_nodes(fit))  # re-ranks `name`: fine, this walk is over
                return Placement(index, name, fit)
        verdicts += [(name, "{is} malformed") for name in inp.malformed_clusters]
        return reasons.summarize(verdicts, total)

    for c in sorted((c for c in candidates if c.displaced), key=lambda c: c.replica.index):
        r = c.replica
        ledger.release(r.cluster, r.usage)
        changed(r.cluster)
        held = held_by(r, clusters) if quota is not None else []
        if quota is not None:
            quota.release(held)  # what it holds now is freed by its move
        outcome = place(r.index)
        if quota is not None and not isinstance(outcome, Placement) and not c.drained:
            quota.reserve(held)  # it stays: it keeps holding it
        if isinstance(outcome, Placement):
            result.placements.append(outcome)
            result.notes.append(f"replica {r.index} moved from {r.cluster} to {outcome.cluster}: "
                                f"{c.displaced}")
        elif c.drained:
            result.unscheduled[r.index] = dataclasses.replace(
                outcome, prefix=f"drained from {r.cluster} ({c.displaced})")
        else:
            land(r.cluster, r.usage)
            result.placements.append(Placement(r.index, r.cluster, None, r, c.displaced))
            result.notes.append(f"replica {r.index} stays on {r.cluster} although {c.displaced}; "
                                + outcome.message("it elsewhere"))

    for c in candidates:
        if not c.displaced:
            r = c.replica
            result.placements.append(Placement(r.index, r.cluster, c.engines, r, c.unknown))

    taken = {p.index for p in result.placements} | set(result.unscheduled) | set(inp.reserved)
    index = 0
    while len(result.placements) + len(result.unscheduled) < inp.replicas:
        while index in taken:
            index += 1
        outcome = place(index)
        if isinstance(outcome, Placement):
            result.placements.append(outcome)
        else:
            result.unscheduled[index] = outcome
        taken.add(index)
    if dep.strategy == PlacementStrategy.PACK and inp.waiting and _settled(result, inp):
        ours: dict[str, list[tuple[int, Mapping[str, int]]]] = {}
        for p in sorted(result.placements, key=lambda p: -p.index):
            ours.setdefault(p.cluster, []).append((p.index, _pool_nodes(p.engines)))
        for clearing in room.clearings(inp.waiting, clusters, ledger, ours):
            if _clear(clearing, result, ledger, hosted, quota, clusters, changed, place):
                break
    result.placements.sort(key=lambda p: p.index)
    return result


def _settled(result: Plan, inp: Inputs) -> bool:
    """Every replica placed where it already was, and nothing moved: only then
    may a deployment move replicas for another one."""
    return (not result.unscheduled and not result.notes and not inp.reserved
            and len(result.placements) == inp.replicas
            and all(p.existing is not None and p.engines is not None
                    for p in result.placements))


def _clear(clearing: room.Clearing, result: Plan, ledger: Ledger, hosted: dict[str, int],
           quota: QuotaLedger | None, clusters: Mapping[str, Cluster], changed, place) -> bool:
    """Move the clearing's replicas off its cluster, each to a place elsewhere;
    all or none (the ledger, hosted counts and quota are restored when one
    finds no place)."""
    saved = (ledger.snapshot(), dict(hosted), dict(quota.used) if quota else None)
    by_index = {p.index: p for p in result.placements}
    here = clearing.cluster
    for index in clearing.movers:
        p = by_index[index]
        ledger.release(here, _pool_nodes(p.engines))
        hosted[here] -= 1
        if quota is not None:
            quota.release(held_by(p.existing, clusters))
    changed(here)
    moves = []
    for index in clearing.movers:
        outcome = place(index, avoid=here)
        if not isinstance(outcome, Placement):
            ledger.restore(saved[0])
            hosted.clear()
            hosted.update(saved[1])
            if quota is not None:
                quota.used.clear()
                quota.used.update(saved[2])
            for name in {here, *(m.cluster for m in moves)}:
                changed(name)
            return False
        moves.append(outcome)
    moved = {m.index for m in moves}
    result.placements[:] = [p for p in result.placements if p.index not in moved] + moves
    result.notes += [room.note(clearing, m.index, m.cluster) for m in moves]
    return True


def _usable(dep: Deployment, clusters: Mapping[str, Cluster], static: Mapping[str, str | None],
            matcher: Matcher) -> dict[str, tuple]:
    """What the pack score counts (scores.py): each admitted cluster's pools
    one of the engines fits a node of, worked out once per pool shape."""
    fits: dict[str, bool] = {}

    def fit(pool) -> bool:
        ok = fits.get(pool.shape)
        if ok is None:
            ok = fits[pool.shape] = any(matcher.engine_fit(e, pool) is not None
                                        for e in dep.engines)
        return ok
    return {name: tuple(p for p in c.pools if fit(p))
            for name, c in clusters.items() if not static[name]}


def _nodes(dep: Deployment, clusters: Mapping[str, Cluster], matcher: Matcher,
           level: int) -> dict[str, tuple[int | None, ...]]:
    """What the cost score weighs (scores.py): per pool shape in the fleet, the
    nodes each engine takes on one such pool at `level` (None: it does not fit)."""
    shapes = {p.shape: p for c in clusters.values() for p in c.pools}
    out = {}
    for shape, pool in shapes.items():
        fits = (matcher.engine_fit(e, pool, level) for e in dep.engines)
        out[shape] = tuple(None if f is None else engine_cost(e, f)
                           for e, f in zip(dep.engines, fits))
    return out


def _dedupe(own: Sequence[Replica]) -> list[Replica]:
    """One replica per index, the oldest; indexless ones are not ours to count."""
    by_index: dict[int, Replica] = {}
    for r in sorted(own, key=lambda r: (r.index if r.index is not None else -1, r.age_key)):
        if r.index is not None and r.index not in by_index:
            by_index[r.index] = r
    return [by_index[i] for i in sorted(by_index)]


def _classify(r: Replica, clusters: Mapping[str, Cluster], malformed: Mapping[str, str],
              dep: Deployment, matcher: Matcher) -> _Candidate:
    c = _Candidate(r)
    if r.cluster in malformed:
        c.unknown = f"cluster {r.cluster} is unreadable ({malformed[r.cluster]}); kept as is"
        return c
    cluster = clusters.get(r.cluster)
    if cluster is None:
        c.displaced = f"cluster {r.cluster} is gone or no longer selected"
        return c
    eviction = filters.evict(dep, cluster)
    if eviction is not None:
        c.displaced, c.drained = eviction.reason, eviction.drain
        return c
    engines = {}
    for engine in dep.engines:
        pool = cluster.pool(r.pools.get(engine["name"], ""))
        fit = matcher.engine_fit(engine, pool) if pool else None
        if fit is None:
            return c  # re-fit within the cluster once the ledger is known
        engines[engine["name"]] = EnginePlacement(pool, fit, engine_cost(engine, fit))
    c.engines = engines
    return c


def _usage(c: _Candidate) -> Mapping[str, int]:
    if c.engines is None:
        return c.replica.usage if c.unknown else {}
    return _pool_nodes(c.engines)


def _pool_nodes(engines: Mapping[str, EnginePlacement]) -> dict[str, int]:
    """Pool name -> nodes the engines placed on it take (what the ledger reserves)."""
    usage: dict[str, int] = {}
    for e in engines.values():
        usage[e.pool.name] = usage.get(e.pool.name, 0) + e.nodes
    return usage


def _scale_down(candidates: list[_Candidate], want: int) -> list[_Candidate]:
    keep = list(candidates)
    while len(keep) > want:
        load: dict[str, int] = {}
        for c in keep:
            load[c.replica.cluster] = load.get(c.replica.cluster, 0) + 1
        victim = max(keep, key=lambda c: (c.drained, bool(c.displaced),
                                          load[c.replica.cluster], c.replica.index))
        keep.remove(victim)
    return keep


def _repair_overcommit(candidates: list[_Candidate], others: Sequence[Replica],
                       clusters: Mapping[str, Cluster], ledger: Ledger) -> None:
    """Where a pool holds more than its nodes, the youngest own replicas move."""
    ours = {id(c.replica): c for c in candidates if not c.displaced and not c.unknown}
    for cluster_name, pool_name, used in ledger.in_use():
        cluster = clusters.get(cluster_name)
        pool = cluster.pool(pool_name) if cluster else None
        if pool is None or used <= pool.nodes:
            continue
        holders = [(r, r.usage.get(pool_name, 0)) for r in others
                   if r.cluster == cluster_name and r.usage.get(pool_name)]
        holders += [(c.replica, _usage(c).get(pool_name, 0)) for c in ours.values()
                    if c.replica.cluster == cluster_name and _usage(c).get(pool_name)]
        filled = 0
        for replica, nodes in sorted(holders, key=lambda h: h[0].age_key):
            filled += nodes
            c = ours.get(id(replica))
            if filled > pool.nodes and c is not None and not c.displaced:
                c.displaced = (f"pool {pool_name} on {cluster_name} is overcommitted "
                               f"({used} nodes used of {pool.nodes}) and it is among the youngest")
                ledger.release(cluster_name, _usage(c))
                c.engines = None
