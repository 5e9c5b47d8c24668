"""The capacity ledger: nodes in use per (cluster, pool).

Every ModelReplica holds nodes: other deployments' replicas, this
deployment's where they are, and each new placement. The plan reserves a
replica's nodes when it counts the replica and releases them when the
replica leaves or looks for a new place, so `free` is always what one more
placement may take. Usage may exceed a pool (a pool shrank, two schedulers
raced): `in_use` lets the plan find those pools and repair them.
"""

from __future__ import annotations

from collections.abc import Mapping

from function.contract.records import Pool


class Ledger:
    def __init__(self) -> None:
        self._used: dict[tuple[str, str], int] = {}

    def reserve(self, cluster: str, usage: Mapping[str, int]) -> None:
        """Count `usage` (pool name -> nodes) as held on `cluster`."""
        used = self._used
        for pool, nodes in usage.items():
            key = (cluster, pool)
            used[key] = used.get(key, 0) + nodes

    def release(self, cluster: str, usage: Mapping[str, int]) -> None:
        """Give back what `reserve` counted."""
        used = self._used
        for pool, nodes in usage.items():
            key = (cluster, pool)
            used[key] = used.get(key, 0) - nodes

    def free(self, cluster: str, pool: Pool) -> int:
        """Nodes of `pool` on `cluster` nothing holds (negative when overcommitted)."""
        return pool.nodes - self._used.get((cluster, pool.name), 0)

    def snapshot(self) -> dict[tuple[str, str], int]:
        """What is held now, for `restore` to put back (a trial that failed)."""
        return dict(self._used)

    def restore(self, snapshot: Mapping[tuple[str, str], int]) -> None:
        self._used = dict(snapshot)

    def in_use(self) -> list[tuple[str, str, int]]:
        """(cluster, pool, nodes used) for every pool anything was charged to,
        sorted: a snapshot, so the caller may reserve and release meanwhile."""
        return sorted((cluster, pool, used) for (cluster, pool), used in self._used.items())
