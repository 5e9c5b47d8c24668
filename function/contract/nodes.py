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
replica was placed), `WHOLE` (a replica too malformed to read) and `NODE` (a
pod of an engine that claims no DRA device: capacity.py), take a whole node:
what they hold is unknown, so the most it could be is counted. A vector's last
place is the node itself (1 per node): only a whole-node pod takes it, so a pool
whose nodes offer no DRA device at all still holds one such pod per node.

Placement inside a pool is a model of what kube-scheduler will do, not a
binding: pods are put on the fullest node they fit (best fit), and a ledger
that loads many replicas at once places the largest pods first
(`Bins.load`), the order that packs pods whose sizes divide one another (1,
2, 4 and 8 GPUs on 8-GPU nodes) exactly as tightly as any schedule can.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from function.contract.capacity import WHOLE, Shape
from function.contract.devicecel import CelError
from function.contract.enums import DeviceClaim
from function.contract.quotas import selected
from function.contract.records import Pool

Vector = tuple[int, ...]  # devices per kind, in the pool's devices[] order; then the node

# Per pool shape, across reconciles (a shape's devices never change); bounded.
_LIMIT = 50_000
_RESOLVED: dict[tuple[str, Shape], Vector | None] = {}
_CAPACITY: dict[str, Vector] = {}


def capacity(pool: Pool) -> Vector:
    """What one node of the pool offers of each claimable device kind (0 for the
    synthetic ones, which no pod claims), and then itself (1: see the module's note)."""
    found = _CAPACITY.get(pool.shape)
    if found is None:
        found = tuple(d.count if d.claim == DeviceClaim.DRA else 0 for d in pool.devices) + (1,)
        if len(_CAPACITY) < _LIMIT:
            _CAPACITY[pool.shape] = found
    return found


def resolve(shape: Shape, pool: Pool) -> Vector:
    """The devices one pod of `shape` takes from a node of `pool`: each request
    gets a device kind of its class that its selectors accept, no kind giving more
    than a node has; a whole node when no such assignment exists (or WHOLE)."""
    if not shape:
        return (0,) * (len(pool.devices) + 1)
    key = (pool.shape, shape)
    found = _RESOLVED.get(key)
    if key not in _RESOLVED:
        found = _RESOLVED[key] = None if shape == WHOLE else _assign(shape, pool)
        if len(_RESOLVED) > _LIMIT:
            _RESOLVED.pop(next(iter(_RESOLVED)))
    return found if found is not None else capacity(pool)


def _assign(shape: Shape, pool: Pool) -> Vector | None:
    devices = pool.devices
    candidates = [[i for i, d in enumerate(devices)
                   if d.claim == DeviceClaim.DRA and d.device_class == cls and count <= d.count
                   and _accepts(sels, d)]
                  for cls, sels, count in shape]
    order = sorted(range(len(shape)), key=lambda i: (len(candidates[i]), i))
    cap = capacity(pool)
    left = list(cap)

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
    return tuple(c - free for c, free in zip(cap, left))


def _accepts(selectors: tuple[str, ...], device) -> bool:
    try:
        return selected(selectors, device)
    except CelError:  # an expression that no longer compiles selects nothing
        return False


def vectors(pool: Pool, pods: Mapping[Shape, int]) -> list[Vector]:
    """What each pod of `pods` (shape -> how many) takes of `pool`, one vector per
    pod that claims anything, largest first."""
    out = [v for shape, n in pods.items() for v in [resolve(shape, pool)] * n if any(v)]
    out.sort(reverse=True)
    return out


def units(vector: Vector) -> int:
    """Devices in the vector (its last place, the node itself, is no device)."""
    return sum(vector[:-1])


State = tuple[Vector, tuple[Vector, ...]]  # one node: devices in use, and its pods (sorted)


class Bins:
    """One pool's nodes on one cluster: the devices in use on each and the pods using them.

    The nodes of a pool are alike, so they are kept as a multiset of node states
    (what is used, and the pods using it), most often a handful however many nodes
    the pool has: a 64-node pool nothing runs on is one state held 64 times.
    `over` holds pods that fit on no node (the pool shrank, two schedulers raced):
    the pool is overcommitted while it is not empty."""

    __slots__ = ("pool", "cap", "nodes", "states", "over", "free_units", "_units", "_fits")

    def __init__(self, pool: Pool) -> None:
        # fits() answers while nothing changes: a Bins the ledger shares between
        # reconciles (scheduler/binscache.py) is asked alike for many clusters.
        self._fits: dict[tuple[Vector, ...], bool] = {}
        self.pool = pool
        self.cap = capacity(pool)
        self._units = units(self.cap)
        self.nodes = max(0, pool.nodes)
        names = [d.name for d in pool.devices]
        self.states: dict[State, int] = {}
        taken = 0
        for held in pool.taken[:self.nodes]:
            used = [0] * len(self.cap)
            for name, count in held:
                if name in names:
                    used[names.index(name)] += count
            self._count((tuple(used), ()), 1)
            taken += 1
        if self.nodes > taken:
            self._count(((0,) * len(self.cap), ()), self.nodes - taken)
        self.over: dict[Vector, int] = {}
        self.free_units = sum(n * max(0, self._units - units(st[0]))
                              for st, n in self.states.items())

    def copy(self) -> Bins:
        other = Bins.__new__(Bins)
        other.pool, other.cap, other.nodes, other._units = self.pool, self.cap, self.nodes, \
            self._units
        other.states = dict(self.states)
        other.over = dict(self.over)
        other.free_units = self.free_units
        other._fits = {}
        return other

    # -- reading

    def overcommitted(self) -> bool:
        return any(self.over.values())

    def busy_nodes(self) -> int:
        """Nodes with any device in use."""
        return sum(n for (used, _), n in self.states.items() if any(used))

    def free_devices(self) -> Vector:
        """Free devices of each kind, summed over the nodes."""
        return tuple(sum(n * max(0, c - used[i]) for (used, _), n in self.states.items())
                     for i, c in enumerate(self.cap))

    def largest_free(self, kind: int) -> int:
        """The most devices of one kind free on a single node."""
        return max((self.cap[kind] - used[kind] for used, _ in self.states), default=0)

    def fits(self, vectors: Sequence[Vector]) -> bool:
        """Whether pods taking `vectors` would all fit on top of what is held."""
        key = tuple(vectors)
        known = self._fits.get(key)
        if known is None:
            if len(self._fits) >= 256:
                self._fits.clear()  # bounded: a shared Bins lives across reconciles
            known = self._fits[key] = self._fit(vectors)
        return known

    def _fit(self, vectors: Sequence[Vector]) -> bool:
        wanted = [v for v in vectors if any(v)]
        if not wanted:
            return True
        if self.overcommitted():
            return False
        cap = self.cap
        if len(wanted) <= self.states.get(((0,) * len(cap), ()), 0) and all(
                n <= c for v in wanted for n, c in zip(v, cap)):
            return True  # each pod can have an empty node of its own
        if len(wanted) == 1:
            v = wanted[0]
            return any(all(u + n <= c for u, n, c in zip(used, v, cap)) for used, _ in self.states)
        trial = self.copy()
        for v in sorted(wanted, reverse=True):
            if not trial._place(v):
                return False
        return True

    def room_for(self, vector: Vector, most: int) -> int:
        """How many pods of `vector` fit (at most `most`)."""
        trial = self.copy()
        for placed in range(most):
            if not trial._place(vector):
                return placed
        return most

    # -- changing

    def load(self, vectors: Iterable[Vector]) -> None:
        """Place many pods at once, largest first (see the module's note)."""
        for v in sorted(vectors, reverse=True):
            self.add(v)

    def add(self, vector: Vector) -> None:
        if any(vector) and not self._place(vector):
            self.over[vector] = self.over.get(vector, 0) + 1
            self._fits.clear()

    def remove(self, vector: Vector) -> None:
        if not any(vector):
            return
        if self.over.get(vector):
            self.over[vector] -= 1
            self._fits.clear()
            return
        holding = [st for st in self.states if vector in st[1]]
        if not holding:
            return  # never added here: nothing to give back
        # The emptiest node that holds such a pod gives it back, so what stays
        # stays packed on the fullest nodes.
        used, pods = max(holding, key=lambda st: (self._units - units(st[0]), st))
        self._count((used, pods), -1)
        rest = list(pods)
        rest.remove(vector)
        self._count((tuple(u - n for u, n in zip(used, vector)), tuple(rest)), 1)
        self.free_units += units(vector)

    # -- inside

    def _count(self, state: State, n: int) -> None:
        self._fits.clear()
        left = self.states.get(state, 0) + n
        if left:
            self.states[state] = left
        else:
            del self.states[state]

    def _place(self, vector: Vector) -> bool:
        """Put one pod on the fullest node it fits (fewest free devices left; the
        smallest state breaks ties, so the choice never depends on dict order)."""
        cap = self.cap
        wants = [(i, n) for i, n in enumerate(vector) if n]
        best: State | None = None
        most = -1  # devices in use on the best node so far: the fullest fits best
        for state in self.states:
            used = state[0]
            for i, n in wants:
                if used[i] + n > cap[i]:
                    break
            else:
                held = sum(used)
                if held > most or (held == most and state < best):  # type: ignore[operator]
                    best, most = state, held
        if best is None:
            return False
        used, pods = best
        self._count(best, -1)
        self._count((tuple(u + n for u, n in zip(used, vector)),
                     tuple(sorted((*pods, vector)))), 1)
        self.free_units -= units(vector)
        return True


def packed(pool: Pool, pods: Mapping[Shape, int]) -> Bins:
    """The pool's nodes holding `pods` (shape -> how many), packed as a ledger that
    loads them at once packs them."""
    bins = Bins(pool)
    bins.load(vectors(pool, pods))
    return bins


def kind_name(pool: Pool, i: int) -> str:
    """A vector place's name: a device kind, or the node itself."""
    return pool.devices[i].name if i < len(pool.devices) else "node"


def describe(vector: Vector, pool: Pool) -> str:
    """What a pod takes, for people: "1 gpu", "4 gpu + 1 nic", "a whole node"."""
    if vector and vector[-1]:  # the node's own place: only a whole-node pod takes it
        return "a whole node"
    return " + ".join(f"{n} {kind_name(pool, i)}" for i, n in enumerate(vector) if n) or "none"
