"""How many nodes a member, engine or replica costs on its pool.

Capacity is counted in whole nodes: every device-claiming pod takes a node of
its pool. A member costs `pods x copies`, where pods is 1 for a Standalone or
Leader and `worker.nodes` for a Worker. A member that claims no DRA device
costs nothing: it rides on a node of its engine's pool (a CPU-only leader
co-scheduled with its GPU workers, say).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from function.contract.enums import DeviceClaim, MemberRole


def member_pods(member: Mapping[str, Any]) -> int:
    """Pods of one copy of the member: worker.nodes for a Worker, else 1."""
    if member.get("role") == MemberRole.WORKER:
        return int((member.get("worker") or {}).get("nodes") or 0)
    return 1


def claims_devices(member: Mapping[str, Any]) -> bool:
    """Whether the member's pods claim any DRA device.

    On a ModelReplica the resolved deviceRequests say it (claim DRA); a
    member with none resolved (or only requests, not yet placed) claims
    whatever it requests.
    """
    resolved = member.get("deviceRequests")
    if resolved is not None:
        return any((r.get("claim") or DeviceClaim.DRA) == DeviceClaim.DRA for r in resolved)
    return bool(((member.get("nodeSelector") or {}).get("devices")) or [])


def member_cost(member: Mapping[str, Any], copies: int) -> int:
    """Nodes one member of an engine with `copies` copies takes on its pool."""
    if not claims_devices(member):
        return 0
    return member_pods(member) * copies


def replica_usage(engines: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Nodes a placed replica takes, by pool name (from ModelReplica engines)."""
    usage: dict[str, int] = {}
    for engine in engines:
        copies = int(engine.get("copies") or 1)
        for member in engine.get("members") or []:
            pool = member.get("nodePoolName")
            cost = member_cost(member, copies)
            if pool and cost:
                usage[pool] = usage.get(pool, 0) + cost
    return usage
