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
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from function.contract.records import Cluster
from function.scheduler.ledger import Ledger


@dataclass(frozen=True)
class State:
    """What the plan has decided so far (live: the plan updates both)."""

    hosted: Mapping[str, int]  # cluster -> this deployment's replicas on it
    ledger: Ledger
    warm: frozenset[str] = frozenset()  # clusters where the deployment's ModelCache is Ready


@dataclass(frozen=True)
class Score:
    name: str
    rank: Callable[[Cluster, State], int]  # higher is better


def spread(cluster: Cluster, state: State) -> int:
    """Fewest of this deployment's replicas first: losing one cluster costs least."""
    return -state.hosted.get(cluster.name, 0)


def warm_cache(cluster: Cluster, state: State) -> int:
    """Where the deployment's ModelCache is Ready, a new replica starts without
    waiting for its weights. Ranked after spread: a warm cluster wins among
    those hosting equally few of the deployment's replicas, so caching never
    piles a deployment onto one cluster."""
    return int(cluster.name in state.warm)


SCORES: tuple[Score, ...] = (
    Score("spread", spread),
    Score("warm_cache", warm_cache),
)


class Ranking:
    """Cluster names best first, kept sorted as the plan changes one cluster
    at a time (cheaper than re-sorting a 1000-cluster fleet per replica)."""

    def __init__(self, clusters: Mapping[str, Cluster], state: State) -> None:
        self._clusters, self._state = clusters, state
        self._keys = {name: self._key(c) for name, c in clusters.items()}
        self._order = sorted(clusters, key=self._keys.__getitem__)

    def _key(self, cluster: Cluster) -> tuple:
        return tuple(-score.rank(cluster, self._state) for score in SCORES) + (cluster.name,)

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
