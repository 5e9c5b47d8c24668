"""Never destructive: keep what exists when the replica cannot be composed now.

Crossplane deletes every composed resource a function leaves out of its
desired state. So when the InferenceCluster is not resolved yet, missing, or
malformed, the composer returns each observed composed resource as desired,
as it is, and says why in a condition; a brief outage of the cluster object
never takes a serving replica down.

An observed object carries what servers and controllers wrote: status,
identity (uid, resourceVersion, managedFields, ownerReferences) and
controller annotations (a Deployment's revision). Those are dropped; the
rest (labels, Crossplane's annotations, spec with its server defaults) is
returned, which claims nothing a controller changes afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.composer.composed import Role
from function.composer.readiness import judge, wrapped_kind
from function.composer.status import Observed

KEPT_METADATA = ("name", "namespace", "labels")
KEPT_ANNOTATION_PREFIX = "crossplane.io/"

# Without the composer's own record of what an object was for, its kind says.
ROLE_BY_KIND: dict[tuple[str, str], Role] = {
    ("apps/v1", "Deployment"): Role.WORKLOAD,
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): Role.WORKLOAD,
    ("v1", "Service"): Role.ROUTE,
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): Role.ROUTE,
}


def as_desired(observed: Mapping[str, Any]) -> dict[str, Any]:
    meta = observed.get("metadata") or {}
    kept_meta = {k: meta[k] for k in KEPT_METADATA if meta.get(k)}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k.startswith(KEPT_ANNOTATION_PREFIX)}
    if annotations:
        kept_meta["annotations"] = dict(sorted(annotations.items()))
    out = {k: v for k, v in observed.items() if k not in ("metadata", "status")}
    out["metadata"] = kept_meta
    return out


def keep_observed(rsp: fnv1.RunFunctionResponse,
                  observed: Mapping[str, Mapping[str, Any]]) -> list[Observed]:
    """Copy every observed composed resource into the desired state, with its readiness."""
    out = []
    for key, obj in sorted(observed.items()):
        state = judge(obj)
        resource.update(rsp.desired.resources[key], as_desired(obj))
        rsp.desired.resources[key].ready = fnv1.READY_TRUE if state.ready else fnv1.READY_FALSE
        out.append(Observed(key, ROLE_BY_KIND.get(wrapped_kind(obj), Role.SUPPORT), state))
    return out
