"""Named score steps: which of the clusters that can take a replica gets it.

As in kube-scheduler, filters say which clusters may take a replica and
scores rank them. A `Score` gives a cluster a number, higher is better;
clusters rank by each score in SCORES order, then by name, so the ranking
is total and deterministic. The plan tries clusters best first and places a
replica on the first one its capacity fits, which is the best one that fits.

A score owns its preparation (kube-scheduler's PreScore): `prepare` makes,
once per cycle, what `rank` reads of the cycle's state (framework.py); a
score without one reads the state itself (this deployment's replicas per
cluster, the device ledger). The cycle re-ranks a cluster whenever a replica
lands on it or leaves it, so a rank must depend on nothing else (not on
other clusters' live counts).

A score may belong to one placement strategy (the deployment's
`placement.strategy`); the ranking uses the scores of its strategy and those
of none. In SCORES order, the key of a cluster is:

  Spread (default): spread, warm_cache, cost, name
  Pack:             pack, pack_cluster, warm_cache, cost, name

so a strategy decides first, then where the deployment's ModelCache is
warm (the replica serves without downloading its weights, and no second
copy of them is staged), then cost (nodePools[].costPerNodeHour) among the
clusters still ranked equal.
Cost ranks only where some pool of the fleet is priced (elsewhere it would
rank every cluster alike), and per firstAvailable priority level (`by_level`:
the cycle keeps one ranking per level it reaches), so a cheaper pool that
needs a later alternative never beats a pricier one the first alternative fits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from function.contract import cost as prices
from function.contract.enums import PlacementStrategy
from function.contract.records import Cluster, Pool
from function.contract.nodes import Vector
from function.scheduler.filters import place_engine
from function.scheduler.framework import CycleState, Score
from function.scheduler.ledger import Ledger

__all__ = ["SCORES", "Score"]


def spread(cluster: Cluster, state: CycleState) -> int:
    """Fewest of this deployment's replicas first: losing one cluster costs least."""
    return -state.hosted.get(cluster.name, 0)


@dataclass(frozen=True)
class Usable:
    """What pack reads: the live ledger, and per admitted cluster its pools one
    of the deployment's engines fits a node of."""

    ledger: Ledger
    pools: Mapping[str, tuple[Pool, ...]]


def usable(state: CycleState, _level: int) -> Usable:
    """pack's preparation, worked out once per pool shape."""
    engines, matcher = state.deployment.engines, state.matcher
    fits: dict[str, bool] = {}

    def fit(pool: Pool) -> bool:
        ok = fits.get(pool.shape)
        if ok is None:
            ok = fits[pool.shape] = any(matcher.engine_fit(e, pool) is not None for e in engines)
        return ok
    return Usable(state.ledger, {name: tuple(p for p in c.pools if fit(p))
                                 for name, c in state.clusters.items() if not state.refused[name]})


def pack(cluster: Cluster, fits: Usable) -> int:
    """Fewest free devices first, counting only the pools the deployment can use
    (most allocated, as kube-scheduler's MostAllocated): replicas fill the
    fullest cluster that still fits them and leave the emptiest clusters'
    large free blocks to multi-node gangs. A cluster that cannot fit the
    replica is passed over by the plan's walk, however it ranks."""
    ledger, name = fits.ledger, cluster.name
    return -sum(max(0, ledger.free(name, p)) for p in fits.pools.get(name, ()))


def pack_cluster(cluster: Cluster, state: CycleState) -> int:
    """Pack's tie-break: fewest free devices on all the cluster's pools, so a
    cluster already partly used fills up before an untouched one is opened."""
    ledger, name = state.ledger, cluster.name
    return -sum(max(0, ledger.free(name, p)) for p in cluster.pools)


@dataclass(frozen=True)
class Prices:
    """What cost reads: the live ledger, and per pool shape in the fleet what
    each engine takes on one such pool at the ranking's firstAvailable level:
    its share of nodes (what it is charged) and its pods' devices (None: it
    does not fit there)."""

    ledger: Ledger
    nodes: Mapping[str, tuple[tuple[Fraction, list[Vector]] | None, ...]]
    _charged: dict[tuple[int, int], int] = field(default_factory=dict)

    def charged(self, price: int, took: tuple[Fraction, list[Vector]]) -> int:
        """prices.of for what an engine takes (a value of `nodes`, alive as long as
        this record, so its id names it), remembered: rank asks it per pool of every
        cluster it ranks, and Fractions are slow to multiply and to hash."""
        key = (price, id(took))
        found = self._charged.get(key)
        if found is None:
            found = self._charged[key] = prices.of(price, took[0])
        return found


def engine_nodes(state: CycleState, level: int) -> Prices:
    """cost's preparation, per level."""
    dep, matcher = state.deployment, state.matcher
    shapes = {p.shape: p for c in state.clusters.values() for p in c.pools}
    out = {}
    for shape, pool in shapes.items():
        fits = (matcher.engine_fit(e, pool, level) for e in dep.engines)
        placed = (None if f is None else place_engine(e, pool, f, matcher.memo)
                  for e, f in zip(dep.engines, fits))
        out[shape] = tuple(None if p is None else (p.weight, list(p.vectors)) for p in placed)
    return Prices(state.ledger, out)


def priced(state: CycleState) -> bool:
    """Some pool of the fleet has a price: else cost would rank every cluster alike."""
    return any(p.cost is not None for c in state.clusters.values() for p in c.pools)


def cost(cluster: Cluster, fleet: Prices) -> int:
    """Cheapest first: what the replica costs per hour on the cluster if each
    engine takes the cheapest pool it fits that has the devices free for it (exact
    for one engine; for several, a floor: they may contend for one pool, and
    capacity then finds the cheapest that fits them together). Unpriced pools
    and clusters without room rank after every priced placement."""
    ledger, name, nodes = fleet.ledger, cluster.name, fleet.nodes
    best: list[int] = []
    for pool in cluster.pools:
        price = pool.cost
        if price is None:
            continue  # unknown: no better than no room at all
        per_engine = nodes.get(pool.shape, ())
        if not best:
            best = [prices.UNKNOWN] * len(per_engine)
        for i, took in enumerate(per_engine):
            if took is None:
                continue
            charged = fleet.charged(price, took)
            if charged < best[i] and ledger.fits(name, pool, took[1]):
                best[i] = charged
    return -prices.total(best) if best else -prices.UNKNOWN


def cached(state: CycleState) -> bool:
    """The deployment mounts a ModelCache: else warm_cache ranks every cluster alike."""
    return state.deployment.cache is not None


def warm(state: CycleState, _level: int) -> frozenset[str]:
    """warm_cache's preparation: the clusters where the ModelCache is Ready."""
    cache = state.deployment.cache
    return frozenset(n for n in state.clusters if cache is not None and cache.ready_on(n))


def warm_cache(cluster: Cluster, ready: frozenset[str]) -> int:
    """Where the deployment's ModelCache is Ready, a new replica starts without
    waiting for its weights. Ranked after the strategy's scores and before cost
    (a cheaper cluster would stage the weights again): under Spread
    a warm cluster wins among those hosting equally few of the deployment's
    replicas, so caching never piles a deployment onto one cluster."""
    return int(cluster.name in ready)


SCORES: tuple[Score, ...] = (
    Score("spread", spread, PlacementStrategy.SPREAD),
    Score("pack", pack, PlacementStrategy.PACK, prepare=usable),
    Score("pack_cluster", pack_cluster, PlacementStrategy.PACK),
    Score("warm_cache", warm_cache, applies=cached, prepare=warm),
    Score("cost", cost, applies=priced, prepare=engine_nodes, by_level=True),
)
