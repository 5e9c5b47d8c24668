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
"""

from __future__ import annotations

import datetime

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

WAITING = datetime.timedelta(seconds=10)
FOLLOW = datetime.timedelta(seconds=15)


def soon(rsp: fnv1.RunFunctionResponse) -> None:
    """Ask to be called again after WAITING rather than the default TTL."""
    rsp.meta.ttl.FromTimedelta(WAITING)


def follow(rsp: fnv1.RunFunctionResponse) -> None:
    """Ask to be called again after FOLLOW: what is composed follows what is required."""
    rsp.meta.ttl.FromTimedelta(FOLLOW)
