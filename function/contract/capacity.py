"""What a member, engine or replica takes of its pool: pods, each with its devices.

A device-claiming pod takes the devices its DRA requests got from one node of
its pool (contract/nodes.py packs them). A member runs `pods x copies` pods,
where pods is 1 for a Standalone or Leader and `worker.nodes` for a Worker.
A member that claims no DRA device takes nothing: it rides on a node of its
engine's pool (a CPU-only leader co-scheduled with its GPU workers, say). An
engine none of whose members claims a DRA device (Synthetic devices only, or
none) has nothing to ride on: each of its pods takes a whole node (`NODE`),
since a pool's capacity is its nodes; before, forty such replicas of eight
pods each landed on a pool of two nodes under a quota of zero devices.
CPU and memory are not counted.

What one pod takes is its `Shape`: its DRA requests as (device class, CEL
selectors, count), sorted, the way a ModelReplica's `deviceRequests` record
them, so a new placement and the replica it becomes are charged alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from function.contract.enums import DeviceClaim, MemberRole

Request = tuple[str, tuple[str, ...], int]  # (device class, CEL selectors, count)
Shape = tuple[Request, ...]                 # one pod's DRA requests, sorted; () claims none
Pods = Mapping[Shape, int]                  # shape -> how many pods
Usage = Mapping[str, Pods]                  # pool name -> the pods placed on it

# A pod whose requests cannot be read: charged a whole node (nodes.resolve).
WHOLE: Shape = (("", (), 0),)
# A pod of an engine that claims no DRA device at all: a whole node too.
NODE: Shape = WHOLE


def engine_shapes(shapes: list[Shape]) -> list[Shape]:
    """Each member's pod shape as the ledger charges it: as claimed, or, when no member
    of the engine claims a DRA device, a whole node each (`NODE`)."""
    return shapes if any(shapes) else [NODE] * len(shapes)


def member_pods(member: Mapping[str, Any]) -> int:
    """Pods of one copy of the member: worker.nodes for a Worker, else 1."""
    if member.get("role") == MemberRole.WORKER:
        return int((member.get("worker") or {}).get("nodes") or 0)
    return 1


def shape(requests: Iterable[Request]) -> Shape:
    return tuple(sorted(requests))


def recorded_shape(member: Mapping[str, Any]) -> Shape:
    """One pod's shape from a ModelReplica member's resolved deviceRequests."""
    return shape((r.get("deviceClassName") or "",
                  tuple(s["cel"] for s in r.get("selectors") or ()), int(r.get("count") or 1))
                 for r in member.get("deviceRequests") or ()
                 if (r.get("claim") or DeviceClaim.DRA) == DeviceClaim.DRA)


def add(usage: dict[str, dict[Shape, int]], pool: str, pod: Shape, pods: int) -> None:
    if pod and pods > 0:
        on = usage.setdefault(pool, {})
        on[pod] = on.get(pod, 0) + pods


def replica_usage(engines: Iterable[Mapping[str, Any]]) -> dict[str, dict[Shape, int]]:
    """The pods a placed replica runs, by pool name and shape (from ModelReplica engines)."""
    usage: dict[str, dict[Shape, int]] = {}
    for engine in engines:
        copies = int(engine.get("copies") or 1)
        members = engine.get("members") or []
        for member, pod in zip(members, engine_shapes([recorded_shape(m) for m in members])):
            pool = member.get("nodePoolName")
            if pool:
                add(usage, pool, pod, member_pods(member) * copies)
    return usage


def merged(parts: Iterable[Usage]) -> dict[str, dict[Shape, int]]:
    out: dict[str, dict[Shape, int]] = {}
    for part in parts:
        for pool, pods in part.items():
            for pod, n in pods.items():
                add(out, pool, pod, n)
    return out
