"""Replicas on their way out drain before they go.

A replica the plan no longer places (scaled down, moved, making room) would be
deleted at once, and its ModelEndpoint with it. But a ModelService reaches
replicas through a route it composes from those endpoints, and Crossplane
looks at a service's endpoints again only when it next reconciles it (it
requires them, it does not watch them: the service asks to be called again
every requeue.FOLLOW, 15 s). Until then the route
still sends that replica its share of the requests, and every one of them fails
on a gateway whose route for the replica is gone (measured on `make cluster`:
e2e/tests/test_services.py, docs/front-door.md).

So a leaving replica that serves is kept as it is, without its ModelEndpoint,
while a ModelService of its namespace still lists it among the endpoints its
route sends to (`status.entries[].endpoints`, and each rule's); it goes on the
first reconcile after none does. What the route sends it meanwhile is served.
A service being deleted holds nothing. The deployment is called again soon
while a replica drains, and its ReplicasScheduled condition names each
draining replica and the services that still route to it.

Nothing here reads a clock: a replica drains for as long as a service's status
says it is routed to, which is what decides whether deleting it would fail
requests. A service that is never reconciled again holds its replicas; its
own conditions say why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from function.contract.enums import ReplicaPhase
from function.contract.validation import dig


def routed(service: Mapping[str, Any]) -> frozenset[str]:
    """The endpoints (named like their replicas) a ModelService's status says its
    route sends to: its own entries' and every rule's. A service being deleted,
    or a status of the wrong shape, routes to none."""
    if dig(service, "metadata").get("deletionTimestamp"):
        return frozenset()
    status = dig(service, "status")
    parts = [status, *(r for r in _list(status.get("rules")) if isinstance(r, Mapping))]
    return frozenset(name for part in parts for entry in _list(part.get("entries"))
                     if isinstance(entry, Mapping)
                     for name in _list(entry.get("endpoints")) if isinstance(name, str))


def holding(leaving: Mapping[str, Mapping[str, Any]],
            services: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Of the observed replicas leaving the plan (by composed key), those that drain:
    serving, and still routed to by a service; each with the names of those services."""
    routes = sorted((dig(s, "metadata").get("name") or "", routed(s)) for s in services)
    out: dict[str, list[str]] = {}
    for key, mr in sorted(leaving.items()):
        if dig(mr, "status").get("phase") != ReplicaPhase.SERVING:
            continue  # nothing it could answer; nothing to drain
        name = dig(mr, "metadata").get("name")
        held_by = [service for service, names in routes if name in names]
        if held_by:
            out[key] = held_by
    return out


def note(leaving: Mapping[str, Mapping[str, Any]], held: Mapping[str, Sequence[str]]) -> str:
    """What the deployment says of its draining replicas."""
    return "; ".join(
        f"replica {dig(leaving[key], 'metadata').get('name')} drains: ModelService "
        f"{', '.join(services)} still routes to it" for key, services in sorted(held.items()))


def _list(value: Any) -> Iterable[Any]:
    return value if isinstance(value, list) else ()
