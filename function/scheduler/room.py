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
on another cluster or, failing that, on another pool of the same cluster
(the waiting replica's block held meanwhile, so a mover never lands on it).
It takes the cluster needing the fewest moves (then by name), moves those
replicas (each keeps its index; its old ModelReplica goes once the new one
is composed, as any move; one moved to another pool of its cluster is the
same ModelReplica, its pools changed), and leaves the block free for the
waiting deployment's next reconcile. One such clearing per reconcile.

Why another pool of the same cluster: an engine that fits several kinds of
node (a selector accepting A100 or H100) takes, under Pack, the fullest
pool, which may be the only kind a later deployment accepts; where every
other cluster is full, the block can only be cleared by moving it to the
other kind beside it.

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
from function.scheduler.filters import Deployment, pool_pods
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
    """Moving `movers` (our replicas' indexes) off `cluster` makes room for `waiting`,
    whose next replica would then hold `block` there (pool name -> its pods)."""

    waiting: Waiting
    cluster: str
    movers: tuple[int, ...]
    block: Usage


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
        if any(_fits(w.deployment, c, matcher, ledger) is not None for c in admitted):
            continue  # it has room: its own reconcile will take it
        quota = w.quota() if w.quota is not None else None
        if quota is not None and quota.admit((), template_pods(w.deployment.engines)):
            continue  # its quota keeps it waiting (or its namespace is closed)
        found = []
        for c in admitted:
            movers, block = _movers(w.deployment, c, matcher, ledger, ours.get(c.name, ()),
                                    quota)
            if movers:
                found.append(Clearing(w, c.name, movers, block))
        if found:
            return sorted(found, key=lambda f: (len(f.movers), f.cluster))
    return []


def _fits(dep: Deployment, cluster: Cluster, matcher: Matcher, ledger: Ledger,
          quota: QuotaLedger | None = None) -> Usage | None:
    """What `dep`'s next replica would hold on `cluster` (pool name -> pods) if it
    fits there and (given its quota ledger) its quota admits it; None if not."""
    fit = filters.capacity(dep, cluster, matcher, ledger)[0]
    if fit is None:
        return None
    if quota is not None and quota.admit(fit_devices(dep.engines, fit),
                                         template_pods(dep.engines)) is not None:
        return None
    return pool_pods(fit)


def _movers(dep: Deployment, cluster: Cluster, matcher: Matcher, ledger: Ledger,
            ours: Sequence[tuple[int, Usage]], quota: QuotaLedger | None,
            ) -> tuple[tuple[int, ...], Usage]:
    """The fewest of our replicas on `cluster`, highest index first, whose
    leaving lets `dep`'s replica fit there within its quota (empty: none do),
    and what that replica would then hold there. Once enough have left, each
    whose return still lets it fit stays (one on a pool the waiting replica
    cannot use frees nothing for it)."""
    released: list[tuple[int, Usage]] = []
    try:
        for index, usage in ours:
            ledger.release(cluster.name, usage)
            released.append((index, usage))
            block = _fits(dep, cluster, matcher, ledger, quota)
            if block is not None:
                break
        else:
            return (), {}
        movers = []
        for index, usage in released[:-1]:  # the last one's leaving made it fit
            ledger.reserve(cluster.name, usage)
            kept = _fits(dep, cluster, matcher, ledger, quota)
            if kept is None:
                ledger.release(cluster.name, usage)
                movers.append(index)
            else:
                block = kept
                released.remove((index, usage))
        return (*movers, released[-1][0]), block
    finally:
        for _, usage in released:
            ledger.reserve(cluster.name, usage)


def note(clearing: Clearing, index: int, to: str, pools: Sequence[str] = ()) -> str:
    """Why replica `index` moved: to cluster `to`, or (`to` the cleared cluster)
    to `pools` of it."""
    where = (f"to pool {', '.join(pools)} on {to}" if to == clearing.cluster
             else f"from {clearing.cluster} to {to}")
    return (f"replica {index} moved {where}: making room on "
            f"{clearing.cluster} for {clearing.waiting.shown}, whose next "
            f"replica fits on no cluster")
