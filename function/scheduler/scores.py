"""Named score steps: which of the clusters that can take a replica gets it.

As in kube-scheduler, filters say which clusters may take a replica and
scores rank them. A `Score` gives a cluster a number, higher is better;
clusters rank by each score in SCORES order, then by name, so the ranking
is total and deterministic. The plan tries clusters best first and places a
replica on the first one its capacity fits, which is the best one that fits.

A score reads the cluster and the plan's `State` of that cluster (this
deployment's replicas on it, its free nodes). The plan re-ranks a cluster
whenever a replica lands on it or leaves it, so a score must depend on
nothing else (not on other clusters' state).

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
rank every cluster alike), and per firstAvailable priority level: the plan
keeps one ranking per level it reaches, so a cheaper pool that needs a later
alternative never beats a pricier one the first alternative fits.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from function.contract import cost as prices
from function.contract.enums import PlacementStrategy
from function.contract.records import Cluster, Pool
from function.scheduler.ledger import Ledger


@dataclass(frozen=True)
class State:
    """What the plan has decided so far (live: the plan updates both)."""

    hosted: Mapping[str, int]  # cluster -> this deployment's replicas on it
    ledger: Ledger
    warm: frozenset[str] = frozenset()  # clusters where the deployment's ModelCache is Ready
    # Pack only: cluster -> its pools one of the deployment's engines fits a node of.
    usable: Mapping[str, tuple[Pool, ...]] = field(default_factory=dict)
    # With some pool priced: pool shape -> the nodes each engine takes on one
    # such pool at the ranking's priority level (None: it does not fit there).
    # Empty: no pool of the fleet has a price.
    nodes: Mapping[str, tuple[int | None, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Score:
    name: str
    rank: Callable[[Cluster, State], int]  # higher is better
    strategy: PlacementStrategy | None = None  # the strategy it ranks for; None: every one
    # Whether it ranks at all for this plan (None: always); one that would give
    # every cluster the same number is left out rather than computed.
    applies: Callable[[State], bool] | None = None


def spread(cluster: Cluster, state: State) -> int:
    """Fewest of this deployment's replicas first: losing one cluster costs least."""
    return -state.hosted.get(cluster.name, 0)


def pack(cluster: Cluster, state: State) -> int:
    """Fewest free nodes first, counting only the pools the deployment can use
    (most allocated, as kube-scheduler's MostAllocated): replicas fill the
    fullest cluster that still fits them and leave the emptiest clusters'
    large free blocks to multi-node gangs. A cluster that cannot fit the
    replica is passed over by the plan's walk, however it ranks."""
    ledger, name = state.ledger, cluster.name
    return -sum(max(0, ledger.free(name, p)) for p in state.usable.get(name, ()))


def pack_cluster(cluster: Cluster, state: State) -> int:
    """Pack's tie-break: fewest free nodes on all the cluster's pools, so a
    cluster already partly used fills up before an untouched one is opened."""
    ledger, name = state.ledger, cluster.name
    return -sum(max(0, ledger.free(name, p)) for p in cluster.pools)


def cost(cluster: Cluster, state: State) -> int:
    """Cheapest first: what the replica costs per hour on the cluster if each
    engine takes the cheapest pool it fits that has the nodes for it (exact
    for one engine; for several, a floor: they may contend for one pool, and
    capacity then finds the cheapest that fits them together). Unpriced pools
    and clusters without room rank after every priced placement."""
    ledger, name, nodes = state.ledger, cluster.name, state.nodes
    best: list[int] = []
    for pool in cluster.pools:
        price = pool.cost
        if price is None:
            continue  # unknown: no better than no room at all
        per_engine = nodes.get(pool.shape, ())
        if not best:
            best = [prices.UNKNOWN] * len(per_engine)
        free = ledger.free(name, pool)
        for i, n in enumerate(per_engine):
            # Inline (prices.of): the L fleet ranks 1000 clusters of 8 pools.
            if n is not None and n <= free and price * n < best[i]:
                best[i] = price * n
    return -prices.total(best) if best else -prices.UNKNOWN


def _priced(state: State) -> bool:
    return bool(state.nodes)


def warm_cache(cluster: Cluster, state: State) -> int:
    """Where the deployment's ModelCache is Ready, a new replica starts without
    waiting for its weights. Ranked after the strategy's scores and before cost
    (a cheaper cluster would stage the weights again): under Spread
    a warm cluster wins among those hosting equally few of the deployment's
    replicas, so caching never piles a deployment onto one cluster."""
    return int(cluster.name in state.warm)


SCORES: tuple[Score, ...] = (
    Score("spread", spread, PlacementStrategy.SPREAD),
    Score("pack", pack, PlacementStrategy.PACK),
    Score("pack_cluster", pack_cluster, PlacementStrategy.PACK),
    Score("warm_cache", warm_cache),
    Score("cost", cost, applies=_priced),
)


class Ranking:
    """Cluster names best first, kept sorted as the plan changes one cluster
    at a time (cheaper than re-sorting a 1000-cluster fleet per replica)."""

    def __init__(self, clusters: Mapping[str, Cluster], state: State,
                 strategy: PlacementStrategy = PlacementStrategy.SPREAD) -> None:
        self._clusters, self._state = clusters, state
        self._scores = tuple(s for s in SCORES if s.strategy in (None, strategy)
                             and (s.applies is None or s.applies(state)))
        self._keys = {name: self._key(c) for name, c in clusters.items()}
        self._order = sorted(clusters, key=self._keys.__getitem__)

    def _key(self, cluster: Cluster) -> tuple:
        return tuple(-score.rank(cluster, self._state) for score in self._scores) + (cluster.name,)

    def __iter__(self):
        return iter(self._order)

    def changed(self, name: str) -> None:
        """Re-rank one cluster after a replica landed on it or left it."""
        cluster = self._clusters.get(name)
        if cluster is None:
            return  # gone or unreadable: never ranked
        self._order.pop(bisect.bisect_left(self._order, self._keys[name], key=self._keys.__getitem__))
        self._keys[name] = self._key(cluster)
        bisect.insort(self._order, name, key=self._keys.__getitem__)
