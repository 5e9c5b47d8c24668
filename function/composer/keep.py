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
returned, which claims nothing a controller changes afterwards. The labels
include the role the object was composed for (`kinds.LABEL_PURPOSE`), so the
replica's conditions mean the same whether it is composed or kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.composer import kinds
from function.composer.status import Observed
from function.kit.request import desired_ready

KEPT_METADATA = ("name", "namespace", "labels")
KEPT_ANNOTATION_PREFIX = "crossplane.io/"


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
        state = kinds.judge(obj)
        resource.update(rsp.desired.resources[key], as_desired(obj))
        rsp.desired.resources[key].ready = desired_ready(state.ready)
        # The role each object recorded when it was composed (its labels are kept):
        # WorkloadsReady and Routed cover what they cover when composing.
        out.append(Observed(key, kinds.role_of(obj), state))
    return out
