"""The capacity ledger: the devices every placed pod holds, node by node.

Every ModelReplica holds pods on its pools: other deployments' replicas, this
deployment's where they are, and each new placement. The ledger keeps one
`Bins` per (cluster, pool) (contract/nodes.py): the devices in use on each
node, starting from what claims this project did not compose hold
(`Pool.taken`). The plan loads what exists, reserves a replica's pods when
it counts the replica and releases them when the replica leaves or looks for
a new place, so `fits` is always what one more placement may take. Pods may
fit nowhere (a pool shrank, two schedulers raced): `overcommitted` lets the
plan find those pools and repair them.

Pods are packed by what they take, not by whose they are: a release gives
back a pod of the same shape, which is the same thing to every later count.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from function.contract.capacity import Shape, Usage
from function.contract.nodes import Bins, Vector, vectors
from function.contract.records import Cluster, Pool
from function.scheduler import binscache


class Ledger:
    def __init__(self, clusters: Mapping[str, Cluster], cache: bool = True) -> None:
        self._clusters = clusters
        self._bins: dict[tuple[str, str], Bins] = {}
        self._cache = cache  # binscache: a pool loaded alike before is shared, not packed
        # Keys whose Bins is binscache's own (shared, never changed): read as it is,
        # copied on the first change (most pools are only read in a reconcile).
        self._shared: set[tuple[str, str]] = set()
        self._empty: dict[tuple, Bins] = {}  # (shape, nodes, taken) -> nothing held

    def bins(self, cluster: str, pool: Pool) -> Bins:
        """The pool's bins, to read: a pool nothing was loaded on or placed on reads
        as the shared empty pool of its shape (one per shape, not one per pool: Pack
        ranks every pool of a 1000-cluster fleet)."""
        found = self._bins.get((cluster, pool.name))
        if found is not None:
            return found
        key = (pool.shape, pool.nodes, pool.taken)
        empty = self._empty.get(key)
        if empty is None:
            empty = self._empty[key] = binscache.loaded(pool, {}, self._cache)
        return empty

    def _mutable(self, cluster: str, pool: Pool) -> Bins:
        """The pool's bins, to change: its own, copied if it was shared."""
        key = (cluster, pool.name)
        found = self._bins.get(key)
        if found is None:
            found = self._bins[key] = Bins(pool)
        elif key in self._shared:
            self._shared.discard(key)
            found = self._bins[key] = found.copy()
        return found

    def _pool(self, cluster: str, pool: str) -> Pool | None:
        c = self._clusters.get(cluster)
        return c.pool(pool) if c is not None else None

    def load(self, holdings: Iterable[tuple[str, Usage]]) -> None:
        """Count what many replicas hold at once, largest pods first per pool, so
        the count does not depend on the order they are listed in."""
        per_pool: dict[tuple[str, str], dict[Shape, int]] = {}
        for cluster, usage in holdings:
            for pool_name, pods in usage.items():
                key = (cluster, pool_name)
                counted = per_pool.get(key)
                if counted is None:
                    counted = per_pool[key] = {}
                for shape, n in pods.items():
                    counted[shape] = counted.get(shape, 0) + n
        for key in per_pool:  # each pool on its own: the order changes nothing
            pool = self._pool(*key)
            if pool is None:
                continue
            if key in self._bins:
                self._mutable(key[0], pool).load(vectors(pool, per_pool[key]))
            else:
                self._bins[key] = binscache.loaded(pool, per_pool[key], self._cache)
                if self._cache:
                    self._shared.add(key)

    def reserve(self, cluster: str, usage: Usage) -> None:
        """Count `usage` (pool name -> pods) as held on `cluster`. A pool the
        cluster no longer has holds nothing any placement could want."""
        for bins, v in self._pods(cluster, usage):
            bins.add(v)

    def release(self, cluster: str, usage: Usage) -> None:
        """Give back what `reserve` counted."""
        for bins, v in self._pods(cluster, usage):
            bins.remove(v)

    def _pods(self, cluster: str, usage: Usage) -> Iterator[tuple[Bins, Vector]]:
        """Each pod of `usage` with the bins of its pool, to change."""
        for pool_name, pods in usage.items():
            pool = self._pool(cluster, pool_name)
            if pool is not None:
                bins = self._mutable(cluster, pool)
                for v in vectors(pool, pods):
                    yield bins, v

    def fits(self, cluster: str, pool: Pool, pods: Sequence[Vector]) -> bool:
        """Whether pods taking `pods` fit on the pool now, on top of what is held."""
        return self.bins(cluster, pool).fits(pods)

    def free(self, cluster: str, pool: Pool) -> int:
        """Devices of `pool` on `cluster` nothing holds, summed over its nodes."""
        return self.bins(cluster, pool).free_units

    def snapshot(self) -> tuple[dict[tuple[str, str], Bins], frozenset[tuple[str, str]]]:
        """What is held now, for `restore` to put back (a trial that failed)."""
        shared = self._shared
        return ({key: b if key in shared else b.copy() for key, b in self._bins.items()},
                frozenset(shared))

    def restore(self, snapshot: tuple[Mapping[tuple[str, str], Bins],
                                      frozenset[tuple[str, str]]]) -> None:
        saved, shared = snapshot
        self._bins = {key: b if key in shared else b.copy() for key, b in saved.items()}
        self._shared = set(shared)

    def overcommitted(self) -> list[tuple[str, str]]:
        """(cluster, pool) of every pool holding pods that fit on none of its nodes, sorted."""
        return sorted(key for key, b in self._bins.items() if b.overcommitted())
