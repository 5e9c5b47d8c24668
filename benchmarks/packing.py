"""What one pod takes from its node, and the ways pods can share a node.

The reference solver (solver.py) counts capacity one of two ways:

- device accounting (issue #34, what kube-scheduler and DRA allocate): a pool
  has `nodes` identical nodes, each offering the pool's `devices[]` (`count`
  of each kind). A pod takes, from ONE node, the devices its DRA requests got
  (the scheduler's own assignment, `Matcher.engine_fit`: per request a device
  kind and a count; only `claim: DRA` devices count). Pods of any engines,
  deployments and namespaces share a node while devices remain, two workers
  of one gang included (LeaderWorkerSet sets no anti-affinity). Devices other
  claims already hold on a node (`Pool.taken`) are gone from that node.
- node accounting (the scheduler before #34): every device-claiming pod takes
  a whole node, and a node with any device taken offers nothing.

Either way a member claiming no DRA device rides free, and a member's pods
are 1 for a Standalone or Leader, `worker.nodes` for a Worker, times its
engine's copies. Both accountings are the same code: under node accounting a
pod's shape is one unit of the one-unit resource `node`.

A pool's nodes are identical up to what is taken on them, so a placement is
described by how many nodes of each kind ("class": what a node has left) use
each pattern, a multiset of pod shapes that fits one node. Only maximal
patterns (no further pod fits) are enumerated: with pods covered by at least
the patterns' slots, any packing is a sub-multiset of maximal ones, so
nothing is lost. Enumeration is capped (PATTERN_LIMIT); past it the solver
fails loudly, never approximates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from function.contract.enums import DeviceClaim, MemberRole
from function.contract.records import Cluster, Pool
from function.scheduler.matching import Matcher, MemberFit

DEVICE, NODE = "device", "node"
ACCOUNTINGS = (DEVICE, NODE)
# Devices counted as GPUs in the report (the corpus's; the solver counts every DRA device).
GPU_DRIVERS = frozenset({"gpu.nvidia.com"})
PATTERN_LIMIT = 20_000  # maximal patterns per node class; more is an error
_WALK_LIMIT = 50 * PATTERN_LIMIT  # partial multisets visited while enumerating them

Shape = tuple[tuple[str, int], ...]   # (device name, count) by name: what one pod takes
Pods = tuple[tuple[Shape, int], ...]  # shape -> how many pods, sorted
Classes = tuple[tuple[Shape, int], ...]  # what a node has left -> how many such nodes
WHOLE_NODE: Shape = (("node", 1),)


class PatternLimit(RuntimeError):
    """Too many ways to share one node to enumerate exactly."""


def member_pods(member: Mapping[str, Any]) -> int:
    """Pods of one copy of the member: worker.nodes for a Worker, else 1."""
    if member.get("role") == MemberRole.WORKER:
        return int((member.get("worker") or {}).get("nodes") or 0)
    return 1


def pod_shape(fit: MemberFit, accounting: str) -> Shape | None:
    """What one pod of the member takes from its node; None: it claims no DRA device."""
    took: Counter[str] = Counter()
    for choice in fit.choices.values():
        if choice.device.claim == DeviceClaim.DRA and choice.count > 0:
            took[choice.device.name] += choice.count
    if not took:
        return None
    return WHOLE_NODE if accounting == NODE else tuple(sorted(took.items()))


def pod_gpus(fit: MemberFit) -> int:
    """GPUs one pod of the member is allocated (the same under either accounting)."""
    return sum(c.count for c in fit.choices.values()
               if c.device.claim == DeviceClaim.DRA and c.device.spec.get("driver") in GPU_DRIVERS)


def merge(*many: Iterable[tuple[Shape, int]]) -> Pods:
    total: Counter[Shape] = Counter()
    for pods in many:
        for shape, n in pods:
            total[shape] += n
    return tuple(sorted((s, n) for s, n in total.items() if n))


def engine_pods(engine: Mapping[str, Any], members: Sequence[MemberFit],
                accounting: str) -> tuple[Pods, int]:
    """An engine's pods on its pool by shape, and the GPUs they are allocated."""
    copies = int(engine.get("copies") or 1)
    pods: list[tuple[Shape, int]] = []
    gpus = 0
    for member, fit in zip(engine.get("members") or [], members):
        shape = pod_shape(fit, accounting)
        if shape is not None:
            n = member_pods(member) * copies
            pods.append((shape, n))
            gpus += n * pod_gpus(fit)
    return merge(pods), gpus


def capacity(pool: Pool, accounting: str) -> Shape:
    """What one untouched node of the pool offers."""
    if accounting == NODE:
        return WHOLE_NODE
    return tuple(sorted((d.name, d.count) for d in pool.devices
                        if d.claim == DeviceClaim.DRA and d.count > 0))


def node_classes(pool: Pool, accounting: str) -> Classes:
    """The pool's nodes by what they have left after `Pool.taken`."""
    if len(pool.taken) > pool.nodes:
        raise ValueError(f"pool {pool.name}: {len(pool.taken)} nodes with devices taken, "
                         f"more than its {pool.nodes} nodes")
    full = capacity(pool, accounting)
    left: Counter[Shape] = Counter({full: pool.nodes - len(pool.taken)})
    for taken in pool.taken:
        held = dict(taken)
        if accounting == NODE:
            rest = () if any(n > 0 for n in held.values()) else full
        else:
            rest = tuple((name, n - held.get(name, 0)) for name, n in full
                         if n - held.get(name, 0) > 0)
        left[rest] += 1
    return tuple(sorted((s, n) for s, n in left.items() if s and n))


def fits(shape: Shape, room: Mapping[str, int]) -> bool:
    return all(room.get(name, 0) >= n for name, n in shape)


def patterns(room: Shape, shapes: Sequence[Shape],
             limit: int = PATTERN_LIMIT) -> list[tuple[int, ...]]:
    """Every maximal multiset of `shapes` (multiplicities, in their order) that
    fits one node with `room` left; raises PatternLimit past `limit`."""
    left = dict(room)
    usable = [i for i, s in enumerate(shapes) if fits(s, left)]
    counts = [0] * len(shapes)
    out: list[tuple[int, ...]] = []
    visited = 0

    def walk(k: int) -> None:
        nonlocal visited
        visited += 1
        if visited > _WALK_LIMIT:
            raise PatternLimit(f"more than {_WALK_LIMIT} partial patterns on a node of {room}")
        if k == len(usable):
            if any(counts) and not any(fits(shapes[i], left) for i in usable):
                out.append(tuple(counts))
                if len(out) > limit:
                    raise PatternLimit(f"more than {limit} ways to share a node of {room} "
                                       f"among {len(shapes)} pod shapes")
            return
        i = usable[k]
        most = min(left[name] // n for name, n in shapes[i])
        for c in range(most, -1, -1):
            for name, n in shapes[i]:
                left[name] -= c * n
            counts[i] = c
            walk(k + 1)
            for name, n in shapes[i]:
                left[name] += c * n
        counts[i] = 0

    walk(0)
    for p in out:  # every pattern must itself fit: a wrong one would overstate the optimum
        used: Counter[str] = Counter()
        for s, c in zip(shapes, p):
            for name, n in s:
                used[name] += c * n
        if not fits(tuple(used.items()), dict(room)):
            raise AssertionError(f"pattern {p} does not fit a node of {room}")
    return out


def _as_resolved(member: Mapping[str, Any]) -> Mapping[str, Any]:
    """A placed member whose firstAvailable requests keep only the alternative
    its ModelReplica records (deviceRequests[].alternative)."""
    chosen = {r.get("name"): r.get("alternative") for r in member.get("deviceRequests") or []}
    requests = []
    for r in (member.get("nodeSelector") or {}).get("devices") or []:
        alt = chosen.get(r.get("name"))
        if alt and r.get("firstAvailable"):
            r = {**r, "firstAvailable": [a for a in r["firstAvailable"] if a.get("name") == alt]}
        requests.append(r)
    return {**member, "nodeSelector": {**(member.get("nodeSelector") or {}), "devices": requests}}


def replica_pods(replica: Mapping[str, Any], cluster: Cluster, matcher: Matcher,
                 accounting: str, alive: list[Any]) -> tuple[dict[str, Pods], int]:
    """A placed ModelReplica's pods by pool name, and the GPUs they hold.

    Each member is matched again on the pool it names (its recorded
    firstAvailable alternative kept), so its pods take what the scheduler's
    matcher assigns there. A member that fits its pool no more is an error.
    The Matcher caches by the engine's id(): the engines built here go into
    `alive`, which the caller keeps as long as the Matcher, so no id is reused.
    """
    pools = {p.name: p for p in cluster.pools}
    out: dict[str, list[tuple[Shape, int]]] = {}
    gpus = 0
    for engine in replica["spec"].get("engines") or []:
        for member in engine.get("members") or []:
            pool = pools.get(member.get("nodePoolName") or "")
            if pool is None:
                continue
            one = {**engine, "members": [_as_resolved(member)]}
            alive.append(one)
            errors = matcher.compile_all([one])
            fit = None if errors else matcher.engine_fit(one, pool)
            if fit is None:
                raise ValueError(f"ModelReplica {replica['metadata']['name']}: a "
                                 f"{member.get('role')} fits pool {pool.name} no more "
                                 f"{'; '.join(errors)}")
            pods, g = engine_pods(one, fit.members, accounting)
            out.setdefault(pool.name, []).extend(pods)
            gpus += g
    return {p: merge(pods) for p, pods in out.items()}, gpus
