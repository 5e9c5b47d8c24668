"""How soon Crossplane should call again while we wait on what it does not watch.

Crossplane watches the resources a composite composes (realtime compositions)
but not the ones it merely requires. An InferenceCluster waiting for its
ClusterProviderConfig, or a ModelDeployment waiting for capacity somewhere in
the fleet, would otherwise be looked at again only when the response's TTL
runs out (the SDK's default: a minute). While waiting, we ask for sooner.
Crossplane requeues a composite after the shortest TTL of its pipeline.

A ModelReplica that is not serving yet asks for sooner too: its composed
objects are watched, but their burst of events at creation opens Crossplane's
per-composite watch circuit breaker, after which it lets one event through
every 30 s for five minutes; a requeue is not an event and is never held back.

A ModelService asks to be called again every FOLLOW, whatever it waits on: its
route follows ModelEndpoints it requires and cannot watch, and each reconcile it
lags behind one that a replica withdrew is traffic sent to a replica leaving or
lost (the scheduler holds a leaving replica until the services' statuses let it
go: scheduler/drain.py). A reconcile of one service is small: its endpoints and
one route.

A composite whose watch circuit is open asks for sooner too, for as long as the
breaker stays open: Crossplane then drops every watch event of the composite
but one per 30 s, its own included, so an edit of its spec (a ModelDeployment
scaled by one) waits for the next requeue, which for a settled composite is the
TTL of a minute. Crossplane says so in the composite's `Responsive` condition
(False, `WatchCircuitOpen`), which the function reads from the observed
composite (`while_circuit_open`).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

WAITING = datetime.timedelta(seconds=10)
FOLLOW = datetime.timedelta(seconds=15)

# Crossplane v2.3's per-composite watch circuit breaker: the condition it sets on
# the composite, and how long the breaker stays open after it trips (the default
# of `crossplane core start --circuit-breaker-cooldown`).
RESPONSIVE = "Responsive"
CIRCUIT_OPEN = "WatchCircuitOpen"
CIRCUIT_COOLDOWN = datetime.timedelta(minutes=5)


def now() -> datetime.datetime:
    """The clock (tests set it): only the circuit's age reads it."""
    return datetime.datetime.now(datetime.UTC)


def soon(rsp: fnv1.RunFunctionResponse) -> None:
    """Ask to be called again after WAITING rather than the default TTL."""
    rsp.meta.ttl.FromTimedelta(WAITING)


def follow(rsp: fnv1.RunFunctionResponse) -> None:
    """Ask to be called again after FOLLOW: what is composed follows what is required."""
    rsp.meta.ttl.FromTimedelta(FOLLOW)


def while_circuit_open(composite: Mapping[str, Any], rsp: fnv1.RunFunctionResponse) -> None:
    """Ask to be called again after WAITING at the latest while Crossplane reports
    the composite's watch circuit open, for CIRCUIT_COOLDOWN after it opened: its
    events are dropped then, and a requeue is not an event. Past the cooldown the
    breaker closes on the next event, and the TTL is left as the handler set it,
    so a composite that tripped once is not polled for ever. A TTL already
    shorter is kept."""
    opened = circuit_opened_at(composite)
    if opened is None or now() - opened >= CIRCUIT_COOLDOWN:
        return
    ttl = rsp.meta.ttl.ToTimedelta() if rsp.meta.HasField("ttl") else datetime.timedelta(0)
    if ttl <= datetime.timedelta(0) or ttl > WAITING:
        soon(rsp)


def circuit_opened_at(composite: Mapping[str, Any]) -> datetime.datetime | None:
    """When the composite's watch circuit opened, as its Responsive condition says;
    None while it is closed (or the condition is absent). An open circuit whose
    time cannot be read counts as opened now: its events are being dropped."""
    status = composite.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for c in conditions if isinstance(conditions, list) else []:
        if not (isinstance(c, Mapping) and c.get("type") == RESPONSIVE):
            continue
        if c.get("status") != "False" or c.get("reason") != CIRCUIT_OPEN:
            return None
        try:
            opened = datetime.datetime.fromisoformat(str(c.get("lastTransitionTime")))
        except ValueError:
            return now()
        return opened if opened.tzinfo else opened.replace(tzinfo=datetime.UTC)
    return None
