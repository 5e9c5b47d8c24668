"""The replica's phase and conditions, from what its composed objects report.

Phase (status.phase):
* Pending: none of the replica's objects exists yet.
* Failed: an object reports failure (a Deployment past its progress deadline
  or unable to create pods, an Object that cannot be applied).
* Serving: every workload and what it needs is ready (Deployments and
  LeaderWorkerSets Available with every pod ready) and the routing layer's
  objects are ready (the Service exists, the HTTPRoute is accepted).
* Loading: anything in between.

Conditions (never type Ready, which Crossplane derives from the composed
resources' readiness): `WorkloadsReady` over workloads and their claims (and
the remote namespace), `Routed` over the routing layer's objects (False with
the layer's own reason when it composed no route, see `NotRouted`), and
`ClusterResolved` (written by the caller) about the InferenceCluster, and
`Scheduled` (trust.py) about who made the replica.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crossplane.function import resource

from function.composer.composed import Role
from function.composer.readiness import State
from function.contract.enums import ReplicaPhase

MAX_MESSAGE = 1000

WORKLOADS_READY = "WorkloadsReady"
ROUTED = "Routed"
CLUSTER_RESOLVED = "ClusterResolved"


@dataclass(frozen=True)
class NotRouted:
    """Why a routing layer composed no route: the `Routed` condition's reason and message."""

    reason: str
    message: str


@dataclass(frozen=True)
class Observed:
    key: str
    role: Role
    state: State


@dataclass(frozen=True)
class Summary:
    phase: ReplicaPhase
    conditions: tuple[resource.Condition, ...]


def summarize(items: Sequence[Observed], *, not_routed: NotRouted | None = None) -> Summary:
    backend = [i for i in items if i.role is not Role.ROUTE]
    routes = [i for i in items if i.role is Role.ROUTE]
    workloads = _condition(WORKLOADS_READY, backend, ready_reason="Available",
                           what="workloads")
    if not_routed is not None:
        routed = resource.Condition(typ=ROUTED, status="False", reason=not_routed.reason,
                                    message=cap(not_routed.message))
    else:
        routed = _condition(ROUTED, routes, ready_reason="Accepted", what="routing objects")

    if not any(i.state.exists for i in items):
        phase = ReplicaPhase.PENDING
    elif any(i.state.failure for i in items):
        phase = ReplicaPhase.FAILED
    elif workloads.status == "True" and routed.status == "True":
        phase = ReplicaPhase.SERVING
    else:
        phase = ReplicaPhase.LOADING
    return Summary(phase, (workloads, routed))


def _condition(typ: str, items: Sequence[Observed], *, ready_reason: str,
               what: str) -> resource.Condition:
    failed = [i for i in items if i.state.failure]
    if failed:
        return resource.Condition(typ=typ, status="False", reason="Failed",
                                  message=cap(_list(failed)))
    if not items:
        return resource.Condition(typ=typ, status="False", reason="Pending",
                                  message=f"no {what} composed")
    if not any(i.state.exists for i in items):
        return resource.Condition(typ=typ, status="False", reason="Pending",
                                  message=cap(f"not created yet: "
                                               f"{', '.join(i.key for i in items)}"))
    waiting = [i for i in items if not i.state.ready]
    if waiting:
        return resource.Condition(typ=typ, status="False",
                                  reason="Loading" if typ == WORKLOADS_READY else "NotReady",
                                  message=cap(_list(waiting)))
    return resource.Condition(typ=typ, status="True", reason=ready_reason,
                              message=f"{len(items)}/{len(items)} {what} ready")


def _list(items: Sequence[Observed]) -> str:
    return "; ".join(f"{i.key}: {i.state.describe()}" for i in items)


def cap(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
