"""The placement plan: retain, scale down, repair overcommit, re-place, fill.

`plan()` is a pure function of its inputs (no I/O, no clock, no randomness):
the same inputs give the same plan. (Selectors are evaluated in a worker
process with a computing budget, contract/devicecel/sandbox.py; a selector
past that budget, or no verdict at all, keeps every replica as it is.) Existing replicas are inputs, not
decisions: a healthy replica keeps its cluster. The order of the steps is the
policy:

1. retain   - a replica stays on its cluster while the cluster exists, no
              filter step evicts it (filters.py: the selector no longer
              matches, a NoExecute taint drains it), and its engines still fit.
2. scale down - surplus replicas go first from drained or lost clusters, then
              from the cluster hosting most of this deployment, highest index
              first.
3. repair   - where the namespace's replicas hold more than a quota limit
              allows (deployments placed from one snapshot, a lowered
              limit), the youngest beyond it leave and wait, listed
              unscheduled with the quota named (`_repair_quota`); then,
              where a pool's pods need more devices than its nodes have,
              the youngest replicas on it are re-placed. The oldest keep their place.
4. place    - displaced replicas (same index) and then new ones (lowest free
              index) go one at a time, through the cycle (cycle.py), to the
              best-ranked cluster (the scores of scores.py) that every filter
              (filters.py) and budget (budgets.py: capacity, quota) admits.
              firstAvailable priority levels come before all of it.
5. make room - Pack only, once every replica is placed and none moved: when
              another deployment waits with a replica that fits on no cluster,
              move the fewest of ours off one cluster so that it fits there,
              each to another cluster or, where none has room, another pool
              of that cluster (room.py).

Never destructive: a displaced replica is removed only once it has a new
place, except a NoExecute drain and a quota overrun, the two limits the
platform team set: there, staying is what must not happen.

The plan knows the steps' kinds (framework.py), never a step by name: what a
score reads, it prepares itself; what a budget counts, it counts itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from function.contract import devicecel
from function.contract.capacity import Usage
from function.contract.enums import DeviceClaim, PlacementStrategy
from function.contract.nodes import Bins, vectors
from function.contract.quotas import count_usage, usage
from function.contract.records import Cluster
from function.kit import deadline
from function.scheduler import filters, reasons, room
from function.scheduler.cycle import Cycle, Found
from function.scheduler.filters import (
    Deployment,
    EnginePlacement,
    capacity,
    place_engine,
    pool_pods,
)
from function.scheduler.framework import CycleState, Held
from function.scheduler.ledger import Ledger
from function.scheduler.matching import Matcher
from function.scheduler.model import Replica
from function.scheduler import quotas
from function.scheduler.quotas import Holder, QuotaLedger


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
    # Selector digest -> why: the selectors the deployment's status remembers
    # exceeded their evaluation budget (contract/devicecel/sandbox.py).
    over_budget: Mapping[str, str] = field(default_factory=dict)


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
    undecided: bool = False  # the errors are no selector's fault: retried as they are
    notes: list[str] = field(default_factory=list)


@dataclass
class _Candidate:
    index: int              # the replica's index (_dedupe keeps only replicas with one)
    replica: Replica
    engines: dict[str, EnginePlacement] | None = None
    displaced: str = ""     # why it must move ("" when it stays)
    drained: bool = False   # NoExecute, over quota: leave even without a new place
    removal: str = ""       # why it left without one, when not a drain
    unknown: str = ""       # its cluster is unreadable: keep as is


def plan(inp: Inputs) -> Plan:
    result = Plan()
    matcher = Matcher(inp.over_budget)
    result.errors = matcher.compile_all(inp.deployment.engines)
    if not result.errors:
        deadline.check("after compiling the device selectors")
        try:
            return _plan(inp, matcher)
        except (devicecel.CelBudgetError, devicecel.CelSandboxError) as exc:
            # Found while matching: a selector (the deployment's or a quota's) ran
            # past its evaluation budget, or none could be evaluated.
            result = Plan(errors=[str(exc)],
                          undecided=isinstance(exc, devicecel.CelSandboxError))
    # A bad selector decides nothing: keep every replica exactly as it is.
    for index, r in _dedupe(inp.own).items():
        result.placements.append(Placement(index, r.cluster, None, r, "selector invalid"))
    return result


def _plan(inp: Inputs, matcher: Matcher) -> Plan:
    result = Plan()
    dep = inp.deployment
    clusters = {c.name: c for c in inp.clusters}

    refused = {name: filters.admit(dep, c, matcher) for name, c in sorted(clusters.items())}
    candidates = [_classify(index, r, clusters, inp.malformed_clusters, dep, matcher)
                  for index, r in _dedupe(inp.own).items()]
    candidates = _scale_down(candidates, inp.replicas)

    ledger = Ledger(clusters)
    ledger.load([*((r.cluster, r.usage) for r in inp.others),
                 *((c.replica.cluster, _usage(c)) for c in candidates)])
    if inp.quota is not None:
        _repair_quota(candidates, inp.own, inp.quota, ledger)
    _repair_overcommit(candidates, inp.others, clusters, ledger)

    # A replica that has to move holds its devices until it has a new place (it
    # is removed only then): nothing else may take them meanwhile. Each one
    # releases its own only while it looks for its new place.
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
    cycle = Cycle(CycleState(dep, clusters, inp.malformed_clusters, matcher, refused, ledger,
                             hosted, inp.quota))

    for c in sorted((c for c in candidates if c.displaced), key=lambda c: c.index):
        r = c.replica
        held = Held(r.cluster, r.usage, replica=r)
        cycle.release(held)  # what it holds now is freed by its move
        outcome = cycle.place()
        if isinstance(outcome, Found):
            result.placements.append(Placement(c.index, outcome.cluster, outcome.engines))
            result.notes.append(f"replica {c.index} moved from {r.cluster} to {outcome.cluster}: "
                                f"{c.displaced}")
        elif c.drained:
            result.unscheduled[c.index] = dataclasses.replace(
                outcome, prefix=c.removal or f"drained from {r.cluster} ({c.displaced})")
        else:
            cycle.land(held)  # it stays: it keeps holding it
            result.placements.append(Placement(c.index, r.cluster, None, r, c.displaced))
            result.notes.append(f"replica {c.index} stays on {r.cluster} although {c.displaced}; "
                                + outcome.message("it elsewhere"))

    for c in candidates:
        if not c.displaced:
            r = c.replica
            result.placements.append(Placement(c.index, r.cluster, c.engines, r, c.unknown))

    taken = {p.index for p in result.placements} | set(result.unscheduled) | set(inp.reserved)
    index = 0
    while len(result.placements) + len(result.unscheduled) < inp.replicas:
        while index in taken:
            index += 1
        deadline.check(f"placing replica {index}")
        outcome = cycle.place()
        if isinstance(outcome, Found):
            result.placements.append(Placement(index, outcome.cluster, outcome.engines))
        else:
            result.unscheduled[index] = outcome
        taken.add(index)
    if dep.strategy == PlacementStrategy.PACK and inp.waiting and _settled(result, inp):
        ours: dict[str, list[tuple[int, Usage]]] = {}
        for p in sorted(result.placements, key=lambda p: -p.index):
            ours.setdefault(p.cluster, []).append((p.index, pool_pods(p.engines or {})))
        for clearing in room.clearings(inp.waiting, clusters, ledger, ours):
            if _clear(clearing, result, cycle):
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


def _clear(clearing: room.Clearing, result: Plan, cycle: Cycle) -> bool:
    """Move the clearing's replicas off its cluster, each to a place on another
    cluster or, where none has room, on another pool of this one (the block
    held for the waiting replica meanwhile); all or none (the cycle's counts
    are restored when one finds no place)."""
    saved = cycle.snapshot()
    by_index = {p.index: p for p in result.placements}
    here = clearing.cluster
    for index in clearing.movers:
        p = by_index[index]
        cycle.leave(Held(here, pool_pods(p.engines or {}), replica=p.existing))
    block = Held(here, clearing.block, foreign=True)
    cycle.hold(block)
    moves = []
    for index in clearing.movers:
        outcome = cycle.place(avoid=here)
        if not isinstance(outcome, Found):
            outcome = cycle.place()  # the block is held: only another pool of `here`
        # Back on the pools it ran on would move nothing (the ledger's nodes are a model);
        # another pool of `here` is the same ModelReplica, whose ResourceClaimTemplates
        # cannot change: only a move that claims the same devices there can be carried out.
        if not isinstance(outcome, Found) or (
                outcome.cluster == here
                and (_pools(outcome.engines) == _pools(by_index[index].engines or {})
                     or _claims(outcome.engines) != _claims(by_index[index].engines))):
            cycle.restore(saved)
            return False
        moves.append(Placement(index, outcome.cluster, outcome.engines))
    cycle.release(block)
    moved = {m.index for m in moves}
    result.placements[:] = [p for p in result.placements if p.index not in moved] + moves
    result.notes += [room.note(clearing, m.index, m.cluster,
                               list(dict.fromkeys(_pools(m.engines or {})))) for m in moves]
    return True


def _pools(engines: Mapping[str, EnginePlacement]) -> list[str]:
    """The pools a replica's engines run on, in engine order."""
    return [e.pool.name for e in engines.values()]


def _claims(engines: Mapping[str, EnginePlacement] | None) -> list | None:
    """What a replica's ResourceClaimTemplates ask for (per engine and member, each DRA
    request's device class, count, firstAvailable alternative and selectors): a
    template's spec is immutable, so a replica re-placed under the same name must ask
    for the same. None where it is not known (never equal: nothing moves in place)."""
    if engines is None:
        return None
    return [(name, [[(req, c.device.device_class, c.count, c.alternative, c.selectors)
                     for req, c in sorted(m.choices.items()) if c.device.claim == DeviceClaim.DRA]
                    for m in e.fit.members])
            for name, e in engines.items()]


def _dedupe(own: Sequence[Replica]) -> dict[int, Replica]:
    """One replica per index, the oldest, by index in increasing order; indexless
    ones are not ours to count."""
    by_index: dict[int, Replica] = {}
    for r in sorted(own, key=lambda r: (r.index if r.index is not None else -1, r.age_key)):
        if r.index is not None and r.index not in by_index:
            by_index[r.index] = r
    return {i: by_index[i] for i in sorted(by_index)}


def _classify(index: int, r: Replica, clusters: Mapping[str, Cluster],
              malformed: Mapping[str, str], dep: Deployment, matcher: Matcher) -> _Candidate:
    c = _Candidate(index, r)
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
        fit = matcher.engine_fit(engine, pool) if pool is not None else None
        if pool is None or fit is None:
            return c  # re-fit within the cluster once the ledger is known
        engines[engine["name"]] = place_engine(engine, pool, fit, matcher.memo)
    c.engines = engines
    return c


def _usage(c: _Candidate) -> Usage:
    if c.engines is None:
        return c.replica.usage if c.unknown else {}
    return pool_pods(c.engines)


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
    """Where a pool's pods need more devices than its nodes have, the youngest own
    replicas move: its holders are packed again oldest first, and ours that no
    longer fit are displaced (every deployment packs them alike, so each moves
    only its own and the oldest stay)."""
    ours = {id(c.replica): c for c in candidates if not c.displaced and not c.unknown}
    for cluster_name, pool_name in ledger.overcommitted():
        pool = clusters[cluster_name].pool(pool_name)
        assert pool is not None  # the ledger keeps only pools its clusters have
        holders: list[tuple[Replica, Usage]] = [
            (r, r.usage) for r in others if r.cluster == cluster_name and r.usage.get(pool_name)]
        holders += [(c.replica, _usage(c)) for c in ours.values()
                    if c.replica.cluster == cluster_name and _usage(c).get(pool_name)]
        # Without what other claims hold: that is an observation, which may count
        # one of ours as another's; it keeps new pods away, it never moves one.
        packed = Bins(dataclasses.replace(pool, taken=()))
        for replica, held in sorted(holders, key=lambda h: h[0].age_key):
            pods = vectors(pool, held[pool_name])
            if packed.fits(pods):
                packed.load(pods)
                continue
            c = ours.get(id(replica))
            if c is not None and not c.displaced:
                c.displaced = (f"pool {pool_name} on {cluster_name} is overcommitted (its "
                               f"pods need more devices than its {pool.nodes} "
                               f"node{'' if pool.nodes == 1 else 's'} {'has' if pool.nodes == 1 else 'have'}) "
                               "and it is among the youngest")
                ledger.release(cluster_name, _usage(c))
                c.engines = None


def _repair_quota(candidates: list[_Candidate], own: Sequence[Replica], quota: QuotaLedger,
                  ledger: Ledger) -> None:
    """Where a quota's namespaces hold more than a limit allows, our youngest replicas
    beyond the limit leave, even without a new place: holders oldest first, every
    deployment ordering them alike, so each repairs only its own and the oldest stay.

    What a limit counts is what the quota ledger read now, less the replicas already
    leaving: ours that scale-down removes and any being deleted (they still hold their
    devices, and new placements count them, but repairing for them would remove a
    replica for an overrun that is ending by itself). `maxReplicas` and `maxPods` are
    repaired alike, each replica counting one replica and its pods."""
    ours = {(c.replica.namespace, c.replica.name): c for c in candidates}
    gone = {(r.namespace, r.name) for r in own} - set(ours)

    def repair(quota_name: str, cap_name: str, cap: int, noun: str,
               counted: list[tuple[Holder, int]]) -> None:
        held = [(h, n) for h, n in counted if h.ident not in gone and not h.deleting]
        total = sum(n for _, n in held)
        if total <= cap:
            return
        filled = 0
        for holder, n in held:
            filled += n
            c = ours.get(holder.ident)
            # One on an unreadable cluster is kept as is: what it holds is unknown.
            if n and filled > cap and c is not None and not c.drained and not c.unknown:
                why = (f"quota {quota_name}/{cap_name} is over its limit ({total} of "
                       f"{cap} {noun} in use) and it is among the youngest")
                c.displaced, c.drained = why, True
                c.removal = f"removed from {c.replica.cluster}: {why}"
                ledger.release(c.replica.cluster, _usage(c))
                c.engines = None

    for quota_name, what, cap in quota.counts:
        repair(quota_name, what, cap, quotas.noun(what),
               [(h, count_usage(what, 1, h.pods)) for h in quota.holders.get(quota_name, ())])
    for quota_name, limit in quota.limits:
        repair(quota_name, limit.name, limit.devices, "devices",
               [(h, usage(limit, h.held)) for h in quota.holders.get(quota_name, ())])
