"""The registry of composed kinds: what each kind is for and how it reports readiness.

Per kind: the role an object of it plays for the replica's phase (`Role`),
its readiness judge (`readiness.py`; none: ready once it exists) and the CEL
query provider-kubernetes evaluates on the remote object when the kind is
wrapped in an `Object` (none: ready once created). Builders write a kind's
`apiVersion` and `kind` from here, placement reads the query, the composer
and `keep` judge observed objects with `judge`. A kind not registered here
is never composed (tests/test_composer_golden.py checks every rendered one).

An object's role is recorded on it, in the label `modelplane.ai/purpose`:
a Deployment may be an engine (a workload) or the endpoint picker (routing),
so when the composer must keep what exists without composing it (`keep`),
the kind alone could not say what `WorkloadsReady` and `Routed` cover. The
kind's role is the fallback for objects composed before the label existed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from function.composer import readiness
from function.composer.composed import Composed, Role
from function.composer.readiness import Judge, State
from function.contract.api import DRA_API_VERSION, GROUP
from function.contract.stack import OBJECT_API_VERSION

LABEL_PURPOSE = f"{GROUP}/purpose"  # the object's Role, as composed


@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str
    role: Role                     # when the object does not record its own
    judge: Judge | None = None     # None: ready once it exists
    cel_ready: str | None = None   # wrapped in an Object; None: ready once created

    @property
    def key(self) -> tuple[str, str]:
        return self.api_version, self.kind

    def header(self) -> dict[str, str]:
        """The first two fields of a manifest of this kind."""
        return {"apiVersion": self.api_version, "kind": self.kind}


DEPLOYMENT = Kind("apps/v1", "Deployment", Role.WORKLOAD, readiness.deployment,
                  readiness.DEPLOYMENT_READY)
LEADERWORKERSET = Kind("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", Role.WORKLOAD,
                       readiness.leaderworkerset, readiness.LEADERWORKERSET_READY)
RESOURCECLAIMTEMPLATE = Kind(DRA_API_VERSION, "ResourceClaimTemplate", Role.SUPPORT)
NAMESPACE = Kind("v1", "Namespace", Role.SUPPORT)
SERVICE = Kind("v1", "Service", Role.ROUTE)
HTTPROUTE = Kind("gateway.networking.k8s.io/v1", "HTTPRoute", Role.ROUTE, readiness.httproute,
                 readiness.HTTPROUTE_READY)
INFERENCEPOOL = Kind("inference.networking.k8s.io/v1", "InferencePool", Role.ROUTE,
                     readiness.inferencepool, readiness.INFERENCEPOOL_READY)
# The endpoint picker's own objects, composed by routing layers only.
CONFIGMAP = Kind("v1", "ConfigMap", Role.ROUTE)
SERVICEACCOUNT = Kind("v1", "ServiceAccount", Role.ROUTE)
RBAC_ROLE = Kind("rbac.authorization.k8s.io/v1", "Role", Role.ROUTE)
ROLEBINDING = Kind("rbac.authorization.k8s.io/v1", "RoleBinding", Role.ROUTE)
# A ModelCache's objects on each cluster (function/composer/modelcache/).
JOB = Kind("batch/v1", "Job", Role.WORKLOAD, readiness.job, readiness.JOB_READY)
PERSISTENTVOLUMECLAIM = Kind("v1", "PersistentVolumeClaim", Role.SUPPORT,
                             readiness.persistentvolumeclaim, readiness.PVC_READY)
SECRET = Kind("v1", "Secret", Role.SUPPORT)
# A ModelService's route on the front door (function/composer/modelservice/):
# Envoy Gateway's extensions, ready once created.
BACKEND = Kind("gateway.envoyproxy.io/v1alpha1", "Backend", Role.ROUTE)
BACKENDTRAFFICPOLICY = Kind("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", Role.ROUTE)
HTTPROUTEFILTER = Kind("gateway.envoyproxy.io/v1alpha1", "HTTPRouteFilter", Role.ROUTE)
SECURITYPOLICY = Kind("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy", Role.ROUTE)
# provider-kubernetes' wrapper for a remote cluster: its role is its manifest's.
OBJECT = Kind(OBJECT_API_VERSION, "Object", Role.SUPPORT,
              lambda obj: readiness.provider_object(obj, judge))

KINDS: dict[tuple[str, str], Kind] = {k.key: k for k in (
    DEPLOYMENT, LEADERWORKERSET, RESOURCECLAIMTEMPLATE, NAMESPACE, SERVICE, HTTPROUTE,
    INFERENCEPOOL, CONFIGMAP, SERVICEACCOUNT, RBAC_ROLE, ROLEBINDING, JOB, PERSISTENTVOLUMECLAIM,
    SECRET, BACKEND, BACKENDTRAFFICPOLICY, HTTPROUTEFILTER, SECURITYPOLICY, OBJECT)}


def kind_of(obj: Mapping[str, Any]) -> Kind | None:
    return KINDS.get((obj.get("apiVersion", ""), obj.get("kind", "")))


def judge(observed: Mapping[str, Any] | None) -> State:
    if not observed:
        return readiness.ABSENT
    kind = kind_of(observed)
    return kind.judge(observed) if kind and kind.judge else State(True, ready=True)


def cel_ready(manifest: Mapping[str, Any]) -> str | None:
    kind = kind_of(manifest)
    return kind.cel_ready if kind else None


def wrapped(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The object itself, or the manifest an Object wraps."""
    if kind_of(obj) is OBJECT:
        return ((obj.get("spec") or {}).get("forProvider") or {}).get("manifest") or {}
    return obj


def record_role(manifest: dict[str, Any], role: Role) -> None:
    meta = manifest["metadata"]
    meta["labels"] = dict(sorted({**(meta.get("labels") or {}),
                                  LABEL_PURPOSE: role.value}.items()))


def role_of(obj: Mapping[str, Any]) -> Role:
    """What an observed object is for: as recorded on it, else as its kind says."""
    for candidate in (obj, wrapped(obj)):
        recorded = ((candidate.get("metadata") or {}).get("labels") or {}).get(LABEL_PURPOSE)
        if recorded in {r.value for r in Role}:
            return Role(recorded)
    kind = kind_of(wrapped(obj))
    return kind.role if kind else Role.SUPPORT


def recorded(composed: list[Composed]) -> list[Composed]:
    """Each object with its role recorded on it."""
    for c in composed:
        record_role(c.manifest, c.role)
    return composed
