"""What an observed composed object says about itself: exists, ready, failed.

One judge per kind, and for the kinds a provider-kubernetes `Object` wraps
on a remote cluster, a CEL readiness query that says the same thing (the
Object's `spec.readiness.celQuery`; tests/test_composer_placement.py runs
both over the same observed objects and requires agreement). The registry
of composed kinds (`kinds.py`) says which judge and query each kind has, and
judges an observed object with them (`kinds.judge`).

* Deployment: ready when Available=True and every copy is updated and
  ready (Available alone tolerates maxUnavailable missing pods, and the
  replica is Loading until every pod is ready). Failed when its rollout
  exceeded the progress deadline or its pods cannot be created.
* LeaderWorkerSet: ready when Available=True (LWS sets it when every group,
  leader and workers, is ready) and readyReplicas covers every group: a
  gang is ready as a whole, never by its leader alone.
* HTTPRoute: ready once a parent (the gateway) reports Accepted=True.
* InferencePool: ready once a parent (the gateway) reports Accepted=True
  and does not report ResolvedRefs=False (its endpoint picker Service is
  resolved). A gateway that does not support InferencePool never accepts it,
  so a PrefillDecode replica never claims to serve through one.
* Object (`provider_object`): ready when its Ready condition is True (the query above, evaluated
  by provider-kubernetes on the remote object); failed when Synced=False
  (the remote API server refused it, or the cluster is unreachable) or the
  remote object itself reports failure (`status.atProvider.manifest`), except
  while its namespace does not exist yet (see NAMESPACE_NOT_FOUND).
* Job (a ModelCache's hydration): ready when Complete=True; failed when
  Failed=True (the reason and message say why: BackoffLimitExceeded after the
  download kept failing, a volume too small for the model).
* PersistentVolumeClaim: ready once Bound; Lost is a failure.
* Anything else (Service, ResourceClaimTemplate, Namespace, ConfigMap,
  ServiceAccount, Role, RoleBinding, Secret): ready once it exists.

Routing layers that compose new kinds write a judge (and a query) here and
register them in `kinds.py`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard


@dataclass(frozen=True)
class State:
    exists: bool
    ready: bool = False
    failure: str | None = None  # why the object failed; None unless it did
    detail: str = ""            # how far along it is, for messages

    def describe(self) -> str:
        if not self.exists:
            return "not created yet"
        if self.failure:
            return f"failed: {self.failure}"
        return "ready" if self.ready else (self.detail or "not ready")


ABSENT = State(exists=False)

Judge = Callable[[Mapping[str, Any]], State]


def conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    status = obj.get("status") or {}
    out = {}
    for c in (status.get("conditions") or []) if isinstance(status, Mapping) else []:
        if isinstance(c, Mapping) and c.get("type"):
            out[c["type"]] = c
    return out


def _is(cond: Mapping[str, Any] | None, status: str) -> TypeGuard[Mapping[str, Any]]:
    return cond is not None and cond.get("status") == status


def _num(value: Any, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else default


def _said(cond: Mapping[str, Any]) -> str:
    reason, message = cond.get("reason") or "", cond.get("message") or ""
    return f"{reason}: {message}" if reason and message else reason or message


def deployment(obj: Mapping[str, Any]) -> State:
    conds = conditions(obj)
    status, spec = obj.get("status") or {}, obj.get("spec") or {}
    want = _num(spec.get("replicas"), 1)
    ready = _num(status.get("readyReplicas"), 0)
    updated = _num(status.get("updatedReplicas"), 0)
    progressing, failure = conds.get("Progressing"), conds.get("ReplicaFailure")
    if _is(progressing, "False") and progressing.get("reason") == "ProgressDeadlineExceeded":
        return State(True, failure=_said(progressing))
    if _is(failure, "True"):
        return State(True, failure=_said(failure))
    detail = f"{int(ready)}/{int(want)} pods ready"
    return State(True, ready=_is(conds.get("Available"), "True") and ready >= want
                 and updated >= want, detail=detail)


_REPLICAS = "(has(object.spec) && has(object.spec.replicas) ? double(object.spec.replicas) : 1.0)"
_AVAILABLE = ("has(object.status) && has(object.status.conditions) && object.status.conditions"
              ".exists(c, c.type == 'Available' && c.status == 'True')")

DEPLOYMENT_READY = (
    f"{_AVAILABLE}"
    " && has(object.status.readyReplicas) && has(object.status.updatedReplicas)"
    f" && double(object.status.readyReplicas) >= {_REPLICAS}"
    f" && double(object.status.updatedReplicas) >= {_REPLICAS}"
)


def leaderworkerset(obj: Mapping[str, Any]) -> State:
    conds = conditions(obj)
    status, spec = obj.get("status") or {}, obj.get("spec") or {}
    want = _num(spec.get("replicas"), 1)
    ready = _num(status.get("readyReplicas"), 0)
    detail = f"{int(ready)}/{int(want)} groups ready"
    return State(True, ready=_is(conds.get("Available"), "True") and ready >= want,
                 detail=detail)


LEADERWORKERSET_READY = (
    f"{_AVAILABLE}"
    f" && has(object.status.readyReplicas) && double(object.status.readyReplicas) >= {_REPLICAS}"
)


def httproute(obj: Mapping[str, Any]) -> State:
    parents = (obj.get("status") or {}).get("parents") or []
    said = []
    for p in (p for p in parents if isinstance(p, Mapping)):
        for c in (c for c in p.get("conditions") or [] if isinstance(c, Mapping)):
            if c.get("type") == "Accepted":
                if c.get("status") == "True":
                    return State(True, ready=True)
                said.append(_said(c))
    return State(True, detail="; ".join(s for s in said if s) or "no gateway accepted it yet")


HTTPROUTE_READY = (
    "has(object.status) && has(object.status.parents) && object.status.parents.exists(p,"
    " has(p.conditions) && p.conditions.exists(c, c.type == 'Accepted' && c.status == 'True'))"
)


def inferencepool(obj: Mapping[str, Any]) -> State:
    parents = (obj.get("status") or {}).get("parents") or []
    said = []
    for p in (p for p in parents if isinstance(p, Mapping)):
        conds = {c.get("type"): c for c in p.get("conditions") or [] if isinstance(c, Mapping)}
        accepted, resolved = conds.get("Accepted"), conds.get("ResolvedRefs")
        if _is(accepted, "True") and not _is(resolved, "False"):
            return State(True, ready=True)
        said += [_said(c) for c in (accepted, resolved) if c is not None and
                 c.get("status") != "True"]
    return State(True, detail="; ".join(s for s in said if s) or "no gateway accepted it yet")


INFERENCEPOOL_READY = (
    "has(object.status) && has(object.status.parents) && object.status.parents.exists(p,"
    " has(p.conditions) && p.conditions.exists(c, c.type == 'Accepted' && c.status == 'True')"
    " && !p.conditions.exists(c, c.type == 'ResolvedRefs' && c.status == 'False'))"
)


def job(obj: Mapping[str, Any]) -> State:
    conds = conditions(obj)
    if _is(conds.get("Failed"), "True"):
        return State(True, failure=_said(conds["Failed"]))
    if _is(conds.get("Complete"), "True"):
        return State(True, ready=True)
    active = int(_num((obj.get("status") or {}).get("active"), 0))
    return State(True, detail=f"{active} pod running" if active else "no pod running yet")


JOB_READY = ("has(object.status) && has(object.status.conditions) && object.status.conditions"
             ".exists(c, c.type == 'Complete' && c.status == 'True')")


def persistentvolumeclaim(obj: Mapping[str, Any]) -> State:
    phase = (obj.get("status") or {}).get("phase") or "Pending"
    if phase == "Lost":
        return State(True, failure="its volume is lost (phase Lost)")
    return State(True, ready=phase == "Bound", detail=f"phase {phase}")


PVC_READY = "has(object.status) && has(object.status.phase) && object.status.phase == 'Bound'"


# The remote API server's answer for an object whose namespace does not exist
# yet. The composer creates that namespace itself, through another Object that
# provider-kubernetes may reconcile a moment later: waiting, not failing.
NAMESPACE_NOT_FOUND = re.compile(r'namespaces "[^"]*" not found')


def provider_object(obj: Mapping[str, Any], inner_judge: Judge) -> State:
    """A provider-kubernetes Object; `inner_judge` judges the remote object it observed."""
    conds = conditions(obj)
    inner_observed = ((obj.get("status") or {}).get("atProvider") or {}).get("manifest")
    inner = inner_judge(inner_observed) if isinstance(inner_observed, Mapping) and \
        inner_observed else ABSENT
    synced = conds.get("Synced")
    if _is(synced, "False"):
        said = _said(synced) or "not synced"
        if NAMESPACE_NOT_FOUND.search(said):
            return State(True, detail=f"waiting for its namespace ({said})")
        return State(True, failure=said)
    if inner.failure:
        return State(True, failure=inner.failure)
    ready = _is(conds.get("Ready"), "True")
    detail = inner.detail if inner.exists else "not created on the cluster yet"
    return State(True, ready=ready, detail="" if ready else detail)
