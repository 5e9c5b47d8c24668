"""Making room: a settled Pack deployment clears a block for one that waits.

Placing one replica at a time cannot see the next deployment coming: small
replicas that arrived first can leave every cluster a few nodes short of a
later gang (benchmarks/corpus.py's traps), and no order of scores fixes that
without knowing the future. As Kubernetes' descheduler does for
MostAllocated scoring, the fix is to move what already runs, once the
shortage is known:

A deployment under `placement.strategy: Pack` whose replicas are all placed
reads the ModelDeployments that wait for capacity (status.replicas.scheduled
below spec.replicas). For the oldest one whose next replica fits on no
cluster, it looks for a cluster where moving some of its own replicas away
alone would let that replica fit, and where each moved replica has a place
on another cluster. It takes the cluster needing the fewest moves (then by
name), moves those replicas (each keeps its index; its old ModelReplica goes
once the new one is composed, as any move), and leaves the block free for
the waiting deployment's next reconcile. One such clearing per reconcile.

Why this settles: a deployment only makes room for one whose replica fits
nowhere, and after the moves it fits on the cleared cluster, so the next
reconcile moves nothing for it; every clearing lets one more replica be
placed in the fleet. A clearing is made only for a replica the waiting
deployment's own InferenceQuotas admit (its namespace's maxReplicas and
maxPods, and the device limits for what it would hold on the cleared
cluster): otherwise a tenant over its quota could make other tenants'
replicas move for nothing. What is not modelled (a ModelCache it mounts)
could make one clearing go unused, so a deployment that mounts a ModelCache
is never made room for.

A note names the waiting deployment only when it is of the namespace making
room; another namespace's is "a deployment in another namespace", so no
tenant learns another's object names from its own events.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from function.contract.capacity import Usage
from function.contract.records import Cluster
from function.scheduler import filters
from function.scheduler.filters import Deployment
from function.scheduler.ledger import Ledger
from function.scheduler.matching import Matcher
from function.scheduler.quotas import QuotaLedger, fit_devices, template_pods

# Waiting deployments considered per reconcile, oldest first: each costs a
# capacity check per cluster.
MAX_WAITING = 8
# How a note names a waiting deployment of another namespace.
ANOTHER = "a deployment in another namespace"


@dataclass(frozen=True)
class Waiting:
    """Another ModelDeployment with replicas no cluster had room for."""

    name: str                 # namespace/name
    age_key: tuple            # oldest first (creationTimestamp, namespace, name)
    deployment: Deployment
    # How the note of the deployment making room names it: "ModelDeployment
    # namespace/name" in that deployment's own namespace, else ANOTHER.
    shown: str = ANOTHER
    # The ledger of its namespace's InferenceQuotas (None: none applies), asked
    # only when a clearing is weighed for it; unset: no InferenceQuota exists.
    quota: Callable[[], QuotaLedger | None] | None = None


@dataclass(frozen=True)
class Clearing:
    """Moving `movers` (our replicas' indexes) off `cluster` makes room for `waiting`."""

    waiting: Waiting
    cluster: str
    movers: tuple[int, ...]


def clearings(waiting: Sequence[Waiting], clusters: Mapping[str, Cluster], ledger: Ledger,
              ours: Mapping[str, Sequence[tuple[int, Usage]]],
              ) -> list[Clearing]:
    """The clearings worth trying, best first: for the oldest waiting deployment
    whose next replica fits on no cluster, each cluster where moving some of our
    replicas (`ours`: cluster -> (index, usage), highest index first) lets it
    fit, fewest moves first, then by name. The ledger is left as it was."""
    for w in sorted(waiting, key=lambda w: w.age_key)[:MAX_WAITING]:
        if w.deployment.cache is not None:
            continue
        matcher = Matcher()
        if matcher.compile_all(w.deployment.engines):
            continue
        admitted = [c for name, c in sorted(clusters.items())
                    if filters.admit(w.deployment, c, matcher) is None]
        if any(_fits(w.deployment, c, matcher, ledger) for c in admitted):
            continue  # it has room: its own reconcile will take it
        quota = w.quota() if w.quota is not None else None
        if quota is not None and quota.admit((), template_pods(w.deployment.engines)):
            continue  # its quota keeps it waiting (or its namespace is closed)
        found = []
        for c in admitted:
            movers = _movers(w.deployment, c, matcher, ledger, ours.get(c.name, ()), quota)
            if movers:
                found.append(Clearing(w, c.name, movers))
        if found:
            return sorted(found, key=lambda f: (len(f.movers), f.cluster))
    return []


def _fits(dep: Deployment, cluster: Cluster, matcher: Matcher, ledger: Ledger,
          quota: QuotaLedger | None = None) -> bool:
    """Whether `dep`'s next replica fits on `cluster`, and (given its quota ledger)
    its quota admits what it would hold there."""
    fit = filters.capacity(dep, cluster, matcher, ledger)[0]
    if fit is None or quota is None:
        return fit is not None
    return quota.admit(fit_devices(dep.engines, fit), template_pods(dep.engines)) is None


def _movers(dep: Deployment, cluster: Cluster, matcher: Matcher, ledger: Ledger,
            ours: Sequence[tuple[int, Usage]], quota: QuotaLedger | None) -> tuple[int, ...]:
    """The fewest of our replicas on `cluster`, highest index first, whose
    leaving lets `dep`'s replica fit there within its quota (empty: none do)."""
    released: list[tuple[int, Usage]] = []
    try:
        for index, usage in ours:
            ledger.release(cluster.name, usage)
            released.append((index, usage))
            if _fits(dep, cluster, matcher, ledger, quota):
                return tuple(i for i, _ in released)
        return ()
    finally:
        for _, usage in released:
            ledger.reserve(cluster.name, usage)


def note(clearing: Clearing, index: int, to: str) -> str:
    return (f"replica {index} moved from {clearing.cluster} to {to}: making room on "
            f"{clearing.cluster} for {clearing.waiting.shown}, whose next "
            f"replica fits on no cluster")
