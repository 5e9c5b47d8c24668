"""Named filter steps: each says why a cluster cannot host a replica.

The steps mirror kube-scheduler's framework. Each `Filter` judges a cluster
twice over: `admit` for a replica that would be new there (a reason phrase,
or None when the cluster passes), `evict` for a replica already there (an
`Eviction`, or None when it may stay). Every filter must say both, so a new
filter can never silently skip the replicas that are already placed.

Filter steps depend only on the deployment and the cluster, so the plan runs
them once per cluster per reconcile. Capacity and quota depend on what the
replicas placed so far hold, so they run per candidate: they are budget
steps (budgets.py), which use `capacity()` below.

Reasons are verb phrases with `{is}`/`{has}`/`{does}` placeholders
(reasons.py), so "1 is tainted" and "2 are tainted" read right.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from function.contract import cost
from function.contract.cacheview import Cache
from function.contract import nodes
from function.contract.capacity import Shape, add, engine_shapes, member_pods, shape
from function.contract.enums import DeviceClaim, PlacementStrategy, TaintEffect, TolerationOperator
from function.contract.nodes import Bins, Vector, vectors
from function.contract.records import Cluster, Pool, Taint, selects
from function.scheduler.ledger import Ledger
from function.scheduler.matching import EngineFit, Matcher


@dataclass(frozen=True)
class Deployment:
    """What the filters need from a ModelDeployment's template spec."""

    match_labels: Mapping[str, str]
    tolerations: Sequence[Mapping[str, Any]]
    engines: Sequence[Mapping[str, Any]]
    cache: Cache | None = None  # the ModelCache its replicas mount (modelCacheRef)
    strategy: PlacementStrategy = PlacementStrategy.SPREAD  # placement.strategy
    namespace: str = ""  # the deployment's own namespace
    # Its Namespace's labels, for clusters' spec.namespaceSelector; None: the
    # Namespace is missing (or unknown: another deployment's, room.py), which
    # no cluster with a selector admits.
    namespace_labels: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Eviction:
    """Why a replica already on a cluster must leave it."""

    reason: str           # a sentence, e.g. "cluster a no longer matches clusterSelector"
    drain: bool = False   # leave even without a new place (NoExecute: the platform asked)


@dataclass(frozen=True)
class Filter:
    name: str
    admit: Callable[[Deployment, Cluster, Matcher], str | None]
    evict: Callable[[Deployment, Cluster], Eviction | None]


def stays(_: Deployment, __: Cluster) -> None:
    """`evict` of a filter whose verdict never moves a placed replica."""
    return None


def _selected(dep: Deployment, cluster: Cluster) -> bool:
    return selects(dep.match_labels, cluster.labels)


def cluster_labels(dep: Deployment, cluster: Cluster, _: Matcher) -> str | None:
    return None if _selected(dep, cluster) else "{does} not match clusterSelector"


def unselected(dep: Deployment, cluster: Cluster) -> Eviction | None:
    if _selected(dep, cluster):
        return None
    return Eviction(f"cluster {cluster.name} no longer matches clusterSelector")


def tolerated(taint: Taint, tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """Kubernetes toleration semantics (key/operator/value/effect)."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.effect:
            continue
        op = t.get("operator") or TolerationOperator.EQUAL
        if op == TolerationOperator.EXISTS and (not t.get("key") or t["key"] == taint.key):
            return True
        if (op == TolerationOperator.EQUAL and t.get("key") == taint.key
                and (t.get("value") or "") == taint.value):
            return True
    return False


def untolerated(cluster: Cluster, tolerations, effects: tuple[str, ...]) -> list[Taint]:
    return [t for t in cluster.taints if t.effect in effects and not tolerated(t, tolerations)]


def namespace(dep: Deployment, cluster: Cluster, _: Matcher) -> str | None:
    """The platform's word, not the tenant's: spec.namespaceSelector is no taint, so
    no toleration (not even a key-less Exists) gets past it. Replicas already placed
    stay when a selector narrows (like NoSchedule); only new ones are kept away."""
    if cluster.admits(dep.namespace_labels):
        return None
    missing = "; its Namespace was not found" if dep.namespace_labels is None else ""
    return f"{{does}} not admit namespace {dep.namespace} (spec.namespaceSelector{missing})"


def taints(dep: Deployment, cluster: Cluster, _: Matcher) -> str | None:
    bad = untolerated(cluster, dep.tolerations, (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE))
    return f"{{is}} tainted ({bad[0]})" if bad else None


def drained(dep: Deployment, cluster: Cluster) -> Eviction | None:
    """NoExecute drains placed replicas; NoSchedule only keeps new ones away."""
    bad = untolerated(cluster, dep.tolerations, (TaintEffect.NO_EXECUTE,))
    return Eviction(f"cluster {cluster.name} is tainted {bad[0]}", drain=True) if bad else None


def readiness(_: Deployment, cluster: Cluster, __: Matcher) -> str | None:
    return None if cluster.ready else "{is} not ready"


def stack(_: Deployment, cluster: Cluster, __: Matcher) -> str | None:
    """A cluster whose declared serving stack (spec.stack) is not ready takes no new
    replica: what it would compose may have no API to land on. Replicas already there
    stay: their objects are there."""
    return f"{{is}} not serving-ready (stack: {cluster.stack_unready})" \
        if cluster.stack_unready else None


def model_cache(dep: Deployment, cluster: Cluster, _: Matcher) -> str | None:
    """A replica that mounts a ModelCache goes only where the cache can live: inside
    its footprint (clusterSelector) and on a cluster with storage for it. Replicas
    already placed stay when the footprint narrows: their volume stays too."""
    return dep.cache.excludes(cluster) if dep.cache is not None else None


def device_match(dep: Deployment, cluster: Cluster, matcher: Matcher) -> str | None:
    for engine in dep.engines:
        if not any(matcher.engine_fit(engine, p) for p in cluster.pools):
            return f'{{has}} no pool matching engine "{engine["name"]}"'
    return None


# In the order reasons are reported: a cluster's verdict is its first reason.
# A NotReady cluster keeps its replicas running; a placed replica whose pools
# no longer match is re-fit within its cluster by the plan (`capacity()` below).
FILTERS: tuple[Filter, ...] = (
    Filter("cluster_labels", cluster_labels, unselected),
    Filter("namespace", namespace, stays),
    Filter("taints", taints, drained),
    Filter("readiness", readiness, stays),
    Filter("stack", stack, stays),
    Filter("model_cache", model_cache, stays),
    Filter("device_match", device_match, stays),
)


def admit(dep: Deployment, cluster: Cluster, matcher: Matcher) -> str | None:
    """The first reason a filter step gives against a new replica, or None."""
    for step in FILTERS:
        why = step.admit(dep, cluster, matcher)
        if why:
            return why
    return None


def evict(dep: Deployment, cluster: Cluster) -> Eviction | None:
    """Why a replica on `cluster` must leave it, or None: a drain before a move,
    else the first filter step's word."""
    found = [e for e in (step.evict(dep, cluster) for step in FILTERS) if e is not None]
    return next((e for e in found if e.drain), found[0] if found else None)


@dataclass(frozen=True)
class EnginePlacement:
    pool: Pool
    fit: EngineFit
    pods: Mapping[Shape, int]  # the device-claiming pods it runs on the pool, by shape
    weight: Fraction           # node-hours per hour: each pod's share of its node, summed
    vectors: Sequence[Vector]  # each pod's devices on the pool, largest first (nodes.vectors)
    cost: int                  # per hour at the pool's price (cost.UNKNOWN: unpriced)


def place_engine(engine: Mapping[str, Any], pool: Pool, fit: EngineFit,
                 memo: dict | None = None) -> EnginePlacement:
    """Where `engine` would run on `pool` with `fit`. `memo` (Matcher.memo: it
    lives as long as the engines and fits it is keyed by) keeps the pods, their
    devices and their share of nodes, which depend on the pool's devices only:
    capacity asks for them per cluster, and the L fleet's pools share a few shapes."""
    key = (id(engine), id(fit))
    found = memo.get(key) if memo is not None else None
    if found is None:
        pods = engine_pods(engine, fit)
        found = (pods, weight(pool, pods), vectors(pool, pods))
        if memo is not None:
            memo[key] = found
    pods, share, each = found
    return EnginePlacement(pool, fit, pods, share, each, cost.of(pool.cost, share))


def engine_pods(engine: Mapping[str, Any], fit: EngineFit) -> dict[Shape, int]:
    """The pods of one replica's engine the ledger charges, by shape: its device-claiming
    ones, or each of its pods a whole node when none claims a DRA device (capacity.py)."""
    out: dict[Shape, int] = {}
    copies = int(engine.get("copies") or 1)
    members = engine.get("members") or []
    shapes = engine_shapes([
        shape((c.device.device_class, tuple(s.get("cel", "") for s in c.selectors), c.count)
              for c in member_fit.choices.values() if c.device.claim == DeviceClaim.DRA)
        for member_fit in fit.members])
    for member, pod in zip(members, shapes):
        n = member_pods(member) * copies
        if pod and n > 0:
            out[pod] = out.get(pod, 0) + n
    return out


def weight(pool: Pool, pods: Mapping[Shape, int]) -> Fraction:
    """What the pods cost in nodes: each pod the share of a node its scarcest
    device kind takes (one of eight GPUs: an eighth)."""
    cap = nodes.capacity(pool)
    total = Fraction(0)
    for pod, n in pods.items():
        v = nodes.resolve(pod, pool)
        share = max((Fraction(x, c) for x, c in zip(v, cap) if c), default=Fraction(0))
        total += share * n
    return total


def pool_pods(engines: Mapping[str, EnginePlacement]) -> dict[str, dict[Shape, int]]:
    """Pool name -> the pods the engines placed on it run (what the ledger reserves)."""
    usage: dict[str, dict[Shape, int]] = {}
    for e in engines.values():
        for pod, n in e.pods.items():
            add(usage, e.pool.name, pod, n)
    return usage


def placement_cost(engines: Mapping[str, EnginePlacement]) -> int:
    """A replica's cost per hour: each engine's share of its nodes times its
    pool's costPerNodeHour, summed (cost.UNKNOWN when some pool has no price)."""
    return cost.total(e.cost for e in engines.values())


def capacity(dep: Deployment, cluster: Cluster, matcher: Matcher, ledger: Ledger,
             budget: int = 20000, level: int | None = None,
             ) -> tuple[dict[str, EnginePlacement] | None, str | None]:
    """Place every engine of one replica on a pool of the cluster, or say why not.

    An engine fits a pool when every pod it runs finds a node with the devices
    it takes free (the ledger's bins); two engines of the replica on one pool
    are judged together. A backtracking search over pool choices finds a
    placement whenever one exists. Pools are tried in the order the platform
    team listed them; under Pack, fewest free devices first, then the
    cheapest (costPerNodeHour), so an engine takes the fullest pool it fits
    and leaves larger blocks whole. Under Spread, where some pool is priced,
    the search goes on to the cheapest placement of all the replica's engines
    together (the listed order breaking ties): one engine's cheap pool may be
    worth leaving to another that needs more of it. An engine is never split
    across pools.
    """
    options = []
    priced = False
    name = cluster.name
    for engine in dep.engines:
        opts = []
        for pool in cluster.pools:
            fit = matcher.engine_fit(engine, pool, level)
            if fit is not None:
                opts.append(place_engine(engine, pool, fit, matcher.memo))
                priced = priced or pool.cost is not None
        if dep.strategy == PlacementStrategy.PACK:
            # Stable: the listed order breaks what both leave tied.
            opts.sort(key=lambda o: (ledger.free(name, o.pool), o.cost))
        elif priced:
            opts.sort(key=lambda o: o.cost)
        options.append(opts)
    trial: dict[str, list[Vector]] = {}
    chosen: dict[str, EnginePlacement] = {}
    steps = 0
    # Spread with prices: every placement is weighed, the first found of the
    # least cost kept; none can cost less than each engine's cheapest pool.
    cheapest = priced and dep.strategy != PlacementStrategy.PACK
    floor = cost.total(o[0].cost for o in options if o) if cheapest else 0
    best: list = []  # [cost, placement] once one is found

    def search(i: int) -> bool:
        nonlocal steps
        if i == len(dep.engines):
            if not cheapest:
                return True
            found = placement_cost(chosen)
            if not best or found < best[0]:
                best[:] = [found, dict(chosen)]
            return found <= floor  # nothing cheaper exists: stop
        for opt in options[i]:
            steps += 1
            if steps > budget:
                return False
            held = trial.get(opt.pool.name, [])
            if ledger.fits(name, opt.pool, [*held, *opt.vectors]):
                trial[opt.pool.name] = [*held, *opt.vectors]
                chosen[dep.engines[i]["name"]] = opt
                if search(i + 1):
                    return True
                trial[opt.pool.name] = held
                del chosen[dep.engines[i]["name"]]
        return False

    if search(0):
        return dict(chosen), None
    if best:
        return best[1], None
    return None, _capacity_reason(dep, cluster, options, ledger)


def _capacity_reason(dep: Deployment, cluster: Cluster, options, ledger: Ledger) -> str:
    for engine, opts in zip(dep.engines, options):
        if not opts:
            return f'{{has}} no pool matching engine "{engine["name"]}"'
        if not any(ledger.fits(cluster.name, o.pool, o.vectors) for o in opts):
            best = max(opts, key=lambda o: (ledger.free(cluster.name, o.pool), -opts.index(o)))
            return short_of(ledger.bins(cluster.name, best.pool), best)
    names = ", ".join(f'"{e["name"]}"' for e in dep.engines)
    return f"{{has}} too few free devices for engines {names} together"


def short_of(bins: Bins, placed: EnginePlacement) -> str:
    """Why the engine's pods do not fit the pool's free devices, naming them: the
    first pod (largest first) that finds no node, and the most one node has free."""
    pool = placed.pool
    wanted = list(placed.vectors)
    if bins.overcommitted():
        return f'{{has}} pool "{pool.name}" overcommitted (its pods exceed its nodes)'
    for v in dict.fromkeys(wanted):
        many = wanted.count(v)
        room = bins.room_for(v, many)
        if room < many:
            needs = nodes.describe(v, pool)
            kind = max(range(len(v)), key=lambda i: (v[i] - bins.largest_free(i), -i))
            largest = max(0, bins.largest_free(kind))
            if room == 0:
                return (f'{{has}} no node of pool "{pool.name}" with {needs} free (a pod needs '
                        f"them on one node; the most free on one is {largest} "
                        f"{nodes.kind_name(pool, kind)})")
            return (f'{{has}} room on pool "{pool.name}" for {room} of the {many} pods that '
                    f"each need {needs} on one node")
    return f'{{has}} too few free devices on pool "{pool.name}" for its pods together'
