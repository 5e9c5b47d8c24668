"""The scheduling framework's step kinds and the state they share.

Placement is built from registered steps of three kinds, as kube-scheduler
is from plugins at its extension points; the plan (plan.py) runs them
through a `Cycle` (cycle.py) and names none of them:

- a **filter** (`filters.Filter`, registered in `filters.FILTERS`) judges a
  cluster from the deployment and the cluster alone: for a new replica, once
  per cluster per reconcile, and for a replica already there (evict);
- a **budget** (`Budget`, registered in `budgets.BUDGETS`) judges a
  candidate placement against what it has counted so far (capacity: the
  devices every replica's pods hold, node by node; quota: the devices a namespace holds), and
  counts what each replica holds (kube-scheduler's Filter and
  Reserve/Unreserve in one step);
- a **score** (`Score`, registered in `scores.SCORES`) ranks the clusters:
  it may prepare what it reads once per cycle (kube-scheduler's PreScore;
  the Inference Extension's `Consumes()`), then ranks one cluster at a time.

Every step reads the `CycleState`: what this reconcile read (the deployment,
the fleet, the filters' verdicts) and the live counts the cycle keeps
(the device ledger, this deployment's replicas per cluster). Steps never
write it; the cycle changes the live parts as replicas land and leave.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from function.contract.capacity import Usage
from function.contract.enums import PlacementStrategy
from function.contract.records import Cluster
from function.scheduler.filters import Deployment, EnginePlacement
from function.scheduler.ledger import Ledger
from function.scheduler.matching import Matcher
from function.scheduler.model import Replica
from function.scheduler.quotas import QuotaLedger


@dataclass(frozen=True)
class CycleState:
    """One reconcile of one deployment, as every step reads it (kube-scheduler's
    CycleState, typed). `hosted` and `ledger` are live: the cycle updates them
    as replicas land and leave; the rest holds for the whole cycle."""

    deployment: Deployment
    clusters: Mapping[str, Cluster]        # parsed, by name
    malformed: Mapping[str, str]           # unreadable clusters: name -> why
    matcher: Matcher                       # the deployment's engines, compiled
    # cluster -> the first filter's reason against a new replica there (None: admitted)
    refused: Mapping[str, str | None]
    ledger: Ledger                         # devices held per node of each (cluster, pool)
    hosted: dict[str, int]                 # cluster -> this deployment's replicas on it
    quota: QuotaLedger | None = None       # the namespace's InferenceQuotas; None: none applies


@dataclass(frozen=True)
class Score:
    """A score step: `rank(cluster, prepared)`, higher is better.

    `prepared` is what `prepare(state, level)` returned, computed once per
    cycle (per firstAvailable level with `by_level`); without `prepare` it is
    the CycleState itself. A preparation reads only what holds for the whole
    cycle; the live counts (ledger, hosted) are read in `rank`, through the
    state or a reference the preparation keeps to them.
    """

    name: str
    rank: Callable[[Cluster, Any], int]
    strategy: PlacementStrategy | None = None  # the strategy it ranks for; None: every one
    # Whether it ranks at all this cycle (None: always); one that would give
    # every cluster the same number is left out rather than computed.
    applies: Callable[[CycleState], bool] | None = None
    prepare: Callable[[CycleState, int], Any] | None = None
    # Its preparation depends on the firstAvailable level: the cycle then keeps
    # one ranking per level it reaches instead of one for all.
    by_level: bool = False


@dataclass(slots=True)
class Attempt:
    """One candidate for a replica: a cluster at a firstAvailable level. The
    capacity budget fills in `engines` (where each engine would run); the
    budgets after it judge that placement. The walk refills one record per
    cluster it tries: a budget reads it while judging, and keeps no reference."""

    cluster: Cluster
    level: int
    engines: dict[str, EnginePlacement] | None = None


@dataclass(frozen=True)
class Held:
    """What one replica holds on a cluster, as each budget counts it: pods
    per pool, and the devices of a new placement (`engines`) or of an existing
    ModelReplica (`replica`, whose recorded claims win when both are given)."""

    cluster: str
    pods: Usage                            # pool name -> the pods it runs there, by shape
    engines: Mapping[str, EnginePlacement] | None = None
    replica: Replica | None = None
    # Another deployment's replica whose devices the cycle keeps free (making
    # room, room.py): capacity counts its pods, this deployment's quota does not.
    foreign: bool = False


class Tally(Protocol):
    """A budget's count for one cycle (started by `Budget.start`)."""

    def admit(self, attempt: Attempt) -> str | None:
        """Why the attempt would break the budget (a reason phrase), or None."""

    def reserve(self, held: Held) -> None:
        """Count what a replica holds (it landed, or stays)."""

    def release(self, held: Held) -> None:
        """Stop counting it (it leaves, or looks for a new place)."""

    def snapshot(self) -> object:
        """The count now, for `restore` (a trial that failed)."""

    def restore(self, saved: object) -> None: ...


@dataclass(frozen=True)
class Budget:
    """A budget step: `start(state)` begins its count for a cycle, or returns
    None when it counts nothing this cycle (no quota applies)."""

    name: str
    start: Callable[[CycleState], Tally | None]
