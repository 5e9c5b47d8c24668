"""Only a replica the scheduler made is composed: tenants are untrusted.

A ModelReplica is a namespaced composite, so whoever may create one in a
namespace could name any cluster and pool in it and skip everything only
the scheduler judges: quota, taints, clusterSelector, capacity. The
composer therefore composes a replica only when it carries what Crossplane
and the scheduler put on every replica a ModelDeployment composes (the
stage-1 render in tests/golden/ shows one):

* a controller ownerReference to a ModelDeployment of group modelplane.ai
  (an ownerReference names an object of the dependent's own namespace):
  Crossplane sets it on every resource a composite composes;
* the scheduler's labels (scheduler/output.py): modelplane.ai/deployment
  naming that ModelDeployment, modelplane.ai/cluster equal to
  spec.clusterName, modelplane.ai/replica-index a number;

Not `crossplane.io/composite`: a check that it names another object than the
replica failed a replica its ModelDeployment had just composed on `make e2e`
(Crossplane labels a composite nobody composed with its own name, and a
composed one's own reconcile can get there first), which then composed
nothing new: its pods waited for a ResourceClaimTemplate that never came.

Then the deployment it names must own it (`unplaced`), read from the
ModelDeployment itself (a required resource, by name, in the replica's
namespace): its uid is the ownerReference's, and its status, which only the
platform's controllers write, names the replica among its placements or among
the replicas it drains. A writer who forges every label and the ownerReference,
uid included, is stopped there: the scheduler never placed that replica. A
replica just composed may reach its own reconcile before its deployment's
status says so; it waits a moment (requeue.soon) and is composed then.

A replica that fails composes nothing new, and keeps whatever it composed
while it passed (the caller keeps every observed object), with a False
`Scheduled` condition saying what is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from function.contract.api import (
    GROUP,
    KIND_MODEL_DEPLOYMENT,
    LABEL_CLUSTER,
    LABEL_DEPLOYMENT,
    LABEL_REPLICA_INDEX,
)
from function.contract.validation import controller, dig

SCHEDULED = "Scheduled"


def owner_name(mr: Mapping[str, Any]) -> str:
    """The ModelDeployment the replica's controller ownerReference names ("" if none)."""
    name = (controller(dig(mr, "metadata")) or {}).get("name")
    return name if isinstance(name, str) else ""


def unplaced(mr: Mapping[str, Any], owners: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why the ModelDeployment the replica names does not own it (empty: it does).
    `owners`: what the requirement for that deployment resolved to."""
    meta = dig(mr, "metadata")
    ref = controller(meta) or {}
    name = owner_name(mr)
    md = next((o for o in owners if dig(o, "metadata").get("name") == name
               and dig(o, "metadata").get("namespace") == meta.get("namespace")), None)
    if md is None:
        return [f"its controller, ModelDeployment {name[:63]!r}, does not exist"]
    if not ref.get("uid") or ref.get("uid") != dig(md, "metadata").get("uid"):
        return [f"its controller ownerReference's uid {str(ref.get('uid'))[:40]!r} is not "
                f"ModelDeployment {name[:63]!r}'s"]
    status = dig(md, "status")
    placements = status.get("placements")
    draining = status.get("draining")
    placed = {p.get("name") for p in placements if isinstance(p, Mapping)} \
        if isinstance(placements, list) else set()
    placed |= {d for d in draining if isinstance(d, str)} if isinstance(draining, list) else set()
    if meta.get("name") not in placed:
        return [f"ModelDeployment {name[:63]!r} does not place it: its status lists it neither "
                "among its placements nor among the replicas it drains"]
    return []


def untrusted(mr: Mapping[str, Any]) -> list[str]:
    """Why the replica is not one the scheduler made (empty: it is)."""
    meta = dig(mr, "metadata")
    labels = dig(meta, "labels")
    deployment = labels.get(LABEL_DEPLOYMENT)
    problems = []
    ref = controller(meta)
    group = str((ref or {}).get("apiVersion") or "").split("/")[0]
    if ref is None or group != GROUP or ref.get("kind") != KIND_MODEL_DEPLOYMENT:
        problems.append("its controller is not a ModelDeployment "
                        "(no controller ownerReference of kind ModelDeployment, group modelplane.ai)")
    elif not deployment or ref.get("name") != deployment:
        problems.append(f"its label {LABEL_DEPLOYMENT}={str(deployment)[:63]!r} does not name "
                        f"its controller, ModelDeployment {str(ref.get('name'))[:63]!r}")
    cluster = dig(mr, "spec").get("clusterName")
    if labels.get(LABEL_CLUSTER) != cluster:
        problems.append(f"its label {LABEL_CLUSTER} is not its spec.clusterName "
                        f"{str(cluster)[:63]!r}")
    index = labels.get(LABEL_REPLICA_INDEX)
    if not (isinstance(index, str) and index.isascii() and index.isdigit()):
        problems.append(f"its label {LABEL_REPLICA_INDEX} is not a replica index")
    return problems
