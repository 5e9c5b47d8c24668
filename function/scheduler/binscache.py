"""Pools loaded alike before: a fenced cache for the ledger's `load`.

Every reconcile loads every replica of the fleet into the ledger (ledger.py),
packing each pool's pods onto its nodes: on the L fleet, thousands of pools,
most of them holding what they held at the last reconcile. Packing depends only
on the pool (its devices, its counted nodes, what other claims hold on them)
and the pods' devices, so the packed result is kept by exactly that and copied
out on the next load of the same content; `loaded(..., cache=False)` is the
plain path, which tests compare this one with (tests/test_scheduler_binscache.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from function.contract.capacity import Shape
from function.contract.nodes import Bins, packed
from function.contract.records import Pool
from function.kit.lru import Lru

# (pool shape, counted nodes, taken, pods by shape) -> packed: shared, never changed.
_LOADED: Lru[tuple, Bins] = Lru(20_000)


def loaded(pool: Pool, pods: Mapping[Shape, int], cache: bool = True) -> Bins:
    """A Bins of `pool` holding `pods` (shape -> how many), as `nodes.packed` packs
    them. With `cache`, it may be shared with every caller that asked for the
    same: the caller must copy it before changing it (ledger.Ledger does). Its `pool`
    may then be another pool of the same devices and nodes."""
    key = (pool.shape, pool.nodes, pool.taken, tuple(sorted(pods.items())))
    found = _LOADED.get(key) if cache else None
    if found is None:
        found = packed(pool, pods)
        if cache:
            _LOADED.put(key, found)
    return found


def clear() -> None:
    _LOADED.clear()
