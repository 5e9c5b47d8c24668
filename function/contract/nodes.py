"""What a pool's nodes hold, device by device: the bins the capacity ledger packs.

DRA allocates one ResourceClaim's devices on one node, so a pod takes every
device its requests got from a single node, and pods of any deployment or
namespace share a node while its devices last. A pool's nodes are alike
(each offers the pool's `devices[]`), so what matters is how much of each
node is used: `Bins` keeps, per node, the devices in use and the pods that
use them, and answers whether more pods fit.

A pod is described by its `Shape`: what its DRA requests ask for (device
class, CEL selectors, count), the way a ModelReplica records it. `resolve`
turns a shape into the devices it takes of one pool's device kinds, with the
same exact assignment matching uses (two requests may compete for a kind).
A shape the pool cannot serve any more (its devices changed since the
replica was placed), and `WHOLE` (a replica too malformed to read), take a
whole node: what they hold is unknown, so the most it could be is counted.

Placement inside a pool is a model of what kube-scheduler will do, not a
binding: pods are put on the fullest node they fit (best fit), and a ledger
that loads many replicas at once places the largest pods first
(`Bins.load`), the order that packs pods whose sizes divide one another (1,
2, 4 and 8 GPUs on 8-GPU nodes) exactly as tightly as any schedule can.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from function.contract.capacity import WHOLE, Shape
from function.contract.enums import DeviceClaim
from function.contract.quotas import selected
from function.contract.records import Pool

Vector = tuple[int, ...]  # devices per kind, in the pool's devices[] order

_RESOLVED: dict[tuple[str, Shape], Vector | None] = {}
_RESOLVED_LIMIT = 50_000


def capacity(pool: Pool) -> Vector:
    """What one node of the pool offers of each claimable device kind (0 for the
    synthetic ones, which no pod claims)."""
    return tuple(d.count if d.claim == DeviceClaim.DRA else 0 for d in pool.devices)


def resolve(shape: Shape, pool: Pool) -> Vector:
    """The devices one pod of `shape` takes from a node of `pool`: each request
    gets a device kind of its class that its selectors accept, no kind giving more
    than a node has; a whole node when no such assignment exists (or WHOLE)."""
    if not shape:
        return (0,) * len(pool.devices)
    key = (pool.shape, shape)
    found = _RESOLVED.get(key)
    if key not in _RESOLVED:
        found = _RESOLVED[key] = None if shape == WHOLE else _assign(shape, pool)
        if len(_RESOLVED) > _RESOLVED_LIMIT:
            _RESOLVED.pop(next(iter(_RESOLVED)))
    return found if found is not None else capacity(pool)


def _assign(shape: Shape, pool: Pool) -> Vector | None:
    devices = pool.devices
    candidates = [[i for i, d in enumerate(devices)
                   if d.claim == DeviceClaim.DRA and d.device_class == cls and count <= d.count
                   and _accepts(sels, d)]
                  for cls, sels, count in shape]
    order = sorted(range(len(shape)), key=lambda i: (len(candidates[i]), i))
    left = [d.count if d.claim == DeviceClaim.DRA else 0 for d in devices]

    def search(k: int) -> bool:
        if k == len(order):
            return True
        i = order[k]
        count = shape[i][2]
        for kind in candidates[i]:
            if left[kind] >= count:
                left[kind] -= count
                if search(k + 1):
                    return True
                left[kind] += count
        return False

    if not search(0):
        return None
    return tuple(d.count - free if d.claim == DeviceClaim.DRA else 0
                 for d, free in zip(devices, left))


def _accepts(selectors: tuple[str, ...], device) -> bool:
    try:
        return selected(selectors, device)
    except Exception:  # an expression that no longer compiles selects nothing
        return False


def units(vector: Vector) -> int:
    return sum(vector)


class Bins:
    """One pool's nodes on one cluster: devices used per node and the pods on each.

    `over` holds pods that fit on no node (the pool shrank, two schedulers raced):
    the pool is overcommitted while it is not empty."""

    __slots__ = ("pool", "cap", "used", "pods", "over", "free_units")

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.cap = capacity(pool)
        names = [d.name for d in pool.devices]
        self.used: list[list[int]] = [[0] * len(self.cap) for _ in range(max(0, pool.nodes))]
        for node, taken in zip(self.used, pool.taken):
            for name, count in taken:
                if name in names:
                    node[names.index(name)] += count
        self.pods: list[dict[Vector, int]] = [{} for _ in self.used]
        self.over: dict[Vector, int] = {}
        self.free_units = sum(max(0, units(self.cap) - sum(u)) for u in self.used)

    def copy(self) -> Bins:
        other = Bins.__new__(Bins)
        other.pool, other.cap = self.pool, self.cap
        other.used = [list(u) for u in self.used]
        other.pods = [dict(p) for p in self.pods]
        other.over = dict(self.over)
        other.free_units = self.free_units
        return other

    # -- reading

    def overcommitted(self) -> bool:
        return any(self.over.values())

    def busy_nodes(self) -> int:
        """Nodes with any device in use."""
        return sum(1 for u in self.used if any(u))

    def free_devices(self) -> Vector:
        """Free devices of each kind, summed over the nodes."""
        return tuple(sum(max(0, c - u[i]) for u in self.used) for i, c in enumerate(self.cap))

    def largest_free(self, kind: int) -> int:
        """The most devices of one kind free on a single node."""
        return max((self.cap[kind] - u[kind] for u in self.used), default=0)

    def fits(self, vectors: Sequence[Vector]) -> bool:
        """Whether pods taking `vectors` would all fit on top of what is held."""
        if not vectors:
            return True
        if self.overcommitted():
            return not any(any(v) for v in vectors)
        extra: dict[int, list[int]] = {}
        for v in sorted(vectors, reverse=True):
            if not any(v):
                continue
            node = self._best(v, extra)
            if node is None:
                return False
            e = extra.setdefault(node, [0] * len(v))
            for i, n in enumerate(v):
                e[i] += n
        return True

    def room_for(self, vector: Vector, most: int) -> int:
        """How many pods of `vector` fit (at most `most`)."""
        extra: dict[int, list[int]] = {}
        for placed in range(most):
            node = self._best(vector, extra)
            if node is None:
                return placed
            e = extra.setdefault(node, [0] * len(vector))
            for i, n in enumerate(vector):
                e[i] += n
        return most

    # -- changing

    def load(self, vectors: Iterable[Vector]) -> None:
        """Place many pods at once, largest first (see the module's note)."""
        for v in sorted(vectors, reverse=True):
            self.add(v)

    def add(self, vector: Vector) -> None:
        if not any(vector):
            return
        node = self._best(vector, {})
        if node is None:
            self.over[vector] = self.over.get(vector, 0) + 1
            return
        used = self.used[node]
        for i, n in enumerate(vector):
            used[i] += n
        self.pods[node][vector] = self.pods[node].get(vector, 0) + 1
        self.free_units -= units(vector)

    def remove(self, vector: Vector) -> None:
        if not any(vector):
            return
        if self.over.get(vector):
            self.over[vector] -= 1
            return
        holding = [i for i, p in enumerate(self.pods) if p.get(vector)]
        if not holding:
            return  # never added here: nothing to give back
        # The emptiest node that holds such a pod gives it back, so what stays
        # stays packed on the fullest nodes.
        node = max(holding, key=lambda i: (self._free(i, {}), -i))
        used = self.used[node]
        for i, n in enumerate(vector):
            used[i] -= n
        self.pods[node][vector] -= 1
        self.free_units += units(vector)

    # -- inside

    def _free(self, node: int, extra: Mapping[int, Sequence[int]]) -> int:
        e = extra.get(node)
        used = sum(self.used[node]) + (sum(e) if e else 0)
        return units(self.cap) - used

    def _best(self, vector: Vector, extra: Mapping[int, Sequence[int]]) -> int | None:
        """The fullest node the pod fits on (fewest free devices left), lowest index first."""
        best, best_free = None, 0
        cap = self.cap
        for node, used in enumerate(self.used):
            e = extra.get(node)
            ok = True
            for i, n in enumerate(vector):
                if n and used[i] + (e[i] if e else 0) + n > cap[i]:
                    ok = False
                    break
            if ok:
                free = self._free(node, extra)
                if best is None or free < best_free:
                    best, best_free = node, free
        return best


def packed(pool: Pool, pods: Mapping[Shape, int]) -> Bins:
    """The pool's nodes holding `pods` (shape -> how many), packed as a ledger that
    loads them at once packs them."""
    bins = Bins(pool)
    bins.load(v for shape, n in pods.items() for v in [resolve(shape, pool)] * n)
    return bins


def describe(vector: Vector, pool: Pool) -> str:
    """What a pod takes, for people: "1 gpu", "4 gpu + 1 nic"."""
    return " + ".join(f"{n} {pool.devices[i].name}" for i, n in enumerate(vector) if n) or "none"
