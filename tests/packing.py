"""An exact check, written apart from the scheduler, that pods fit a pool's nodes.

DRA allocates one pod's devices on one node, so pods fit a pool when their
device vectors (devices of each kind a pod takes) can be split among the
pool's nodes without any node giving more of a kind than it has. That is
vector bin packing; the sizes the property tests generate are small (a few
nodes, a few dozen pods), so a depth-first search over every assignment,
with identical nodes tried once and states memoized, answers exactly. It
knows nothing of the scheduler's ledger or of its best-fit order.

`pod_vectors` reads a ModelReplica the way the contract charges it: each
member runs `worker.nodes` pods (a Worker) or one, times the engine's copies;
a pod takes, of each device kind of its pool, the count its DRA requests of
that kind's DeviceClass name; a pod the pool cannot serve (a class it does
not offer, more than a node has) takes a whole node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Vector = tuple[int, ...]


def packs(pods: Iterable[Sequence[int]], per_node: Sequence[int], nodes: int) -> bool:
    """Whether every pod fits on one of `nodes` nodes offering `per_node` each."""
    cap = tuple(per_node)
    todo = sorted((tuple(p) for p in pods if any(p)), reverse=True)
    if not todo:
        return True
    if any(any(x > c for x, c in zip(p, cap)) for p in todo):
        return False
    if any(sum(p[i] for p in todo) > cap[i] * nodes for i in range(len(cap))):
        return False
    failed: set[tuple[int, tuple[Vector, ...]]] = set()

    def place(i: int, free: tuple[Vector, ...]) -> bool:
        if i == len(todo):
            return True
        state = (i, tuple(sorted(free)))
        if state in failed:
            return False
        pod, tried = todo[i], set()
        for n, left in enumerate(free):
            if left in tried or any(x > y for x, y in zip(pod, left)):
                continue
            tried.add(left)
            after = free[:n] + (tuple(y - x for x, y in zip(pod, left)),) + free[n + 1:]
            if place(i + 1, after):
                return True
        failed.add(state)
        return False

    return place(0, (cap,) * nodes)


def dra_kinds(pool: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(DeviceClass name, count per node) of each DRA device kind of a pool spec."""
    return [(d.get("deviceClassName") or "", int(d.get("count") or 0))
            for d in pool.get("devices") or [] if d.get("claim", "DRA") == "DRA"]


def pod_vectors(mr: Mapping[str, Any], pool: Mapping[str, Any]) -> list[Vector]:
    """The device vectors of the pods ModelReplica `mr` runs on `pool` (a pool spec
    of its cluster), one per device-claiming pod."""
    kinds = dra_kinds(pool)
    whole = tuple(n for _, n in kinds)
    out: list[Vector] = []
    for engine in mr["spec"].get("engines") or []:
        copies = int(engine.get("copies") or 1)
        for m in engine.get("members") or []:
            if m.get("nodePoolName") != pool["name"]:
                continue
            wants: dict[str, int] = {}
            for r in m.get("deviceRequests") or []:
                if r.get("claim", "DRA") == "DRA":
                    cls = r.get("deviceClassName") or ""
                    wants[cls] = wants.get(cls, 0) + int(r.get("count") or 1)
            if not wants:
                continue  # claims nothing: rides free
            classes = [c for c, _ in kinds]
            servable = all(c in classes and n <= whole[classes.index(c)]
                           for c, n in wants.items())
            vector = tuple(wants.get(c, 0) for c in classes) if servable else whole
            pods = int((m.get("worker") or {}).get("nodes") or 0) \
                if m.get("role") == "Worker" else 1
            out += [vector] * (pods * copies)
    return out
