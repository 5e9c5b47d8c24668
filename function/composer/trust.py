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

A replica that fails composes nothing new, and keeps whatever it composed
while it passed (the caller keeps every observed object), with a False
`Scheduled` condition saying what is missing. These checks stop a
hand-written replica; one whose writer also forges the ownerReference
(copying their own ModelDeployment's uid) is stopped by RBAC alone:
docs/security.md says to grant tenants ModelDeployments, never ModelReplicas.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from function.contract.api import (
    GROUP,
    KIND_MODEL_DEPLOYMENT,
    LABEL_CLUSTER,
    LABEL_DEPLOYMENT,
    LABEL_REPLICA_INDEX,
)
from function.contract.validation import dig

SCHEDULED = "Scheduled"


def controller(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The controller ownerReference, or None."""
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return None
    return next((r for r in refs if isinstance(r, Mapping) and r.get("controller") is True),
                None)


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
