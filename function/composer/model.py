"""The composer's inputs as small frozen records: the replica and its cluster.

The ModelReplica arrives validated (schema and rules, see `function.contract.validation`);
parsing it once here lets every builder read plain attributes, with the
schema's defaults (copies 1, role Standalone, claim DRA, count 1) applied in
one place, since a hand-written replica or `crossplane render` may not have
had them applied by the API server.

The InferenceCluster is the scheduler's record too (function/contract/records.py);
the composer reads of it only what the replica's objects need: how to reach
the cluster (providerConfigRef), the gateway routes attach to, and the node
taints of the pools the replica's members run on. Anything missing or
malformed raises `Unusable`, and the composer then keeps what exists instead
of composing from half an input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from function.contract import records
from function.contract import serving as modes
from function.contract.api import LABEL_DEPLOYMENT
from function.contract.cacheview import CacheRef, cache_ref
from function.contract.enums import DeviceClaim, MemberRole
from function.contract.models.inferencecluster import InferenceCluster
from function.contract.records import Cluster
from function.contract.validation import model_errors


class Unusable(Exception):
    """The cluster cannot be composed for right now; `reason` is a condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class DeviceRequest:
    name: str
    device_class: str
    count: int
    selectors: tuple[str, ...]
    claim: str  # a DeviceClaim

    @property
    def claimed(self) -> bool:
        # Synthetic devices only steer placement; there is nothing to allocate.
        return self.claim == DeviceClaim.DRA


@dataclass(frozen=True)
class Member:
    role: str  # a MemberRole
    pool: str
    worker_nodes: int  # pods besides the leader; 0 unless role is Worker
    requests: tuple[DeviceRequest, ...]
    template: Mapping[str, Any]  # the curated pod template, as written

    @property
    def claims(self) -> tuple[DeviceRequest, ...]:
        return tuple(r for r in self.requests if r.claimed)

    @property
    def serves(self) -> bool:
        """Standalone pods and gang leaders take requests; workers only compute."""
        return self.role in (MemberRole.STANDALONE, MemberRole.LEADER)


@dataclass(frozen=True)
class Engine:
    name: str
    copies: int
    phase: str | None                       # an EnginePhase; None outside PrefillDecode
    members: tuple[Member, ...]
    recovery_policy: str | None = None      # a gang's LWS restartPolicy; None: the default
    grace_seconds: int | None = None        # the pods' terminationGracePeriodSeconds
    rollout: Mapping[str, Any] | None = None  # maxSurge, maxUnavailable, partition

    @property
    def is_gang(self) -> bool:
        return any(m.role == MemberRole.WORKER for m in self.members)

    def member(self, role: str) -> Member:
        return next(m for m in self.members if m.role == role)


@dataclass(frozen=True)
class Replica:
    namespace: str
    name: str
    cluster: str
    mode: str                         # a ServingMode: serving.mode, defaulted (contract/serving.py)
    router: str                       # a Router: serving.router, defaulted to the mode's
    engines: tuple[Engine, ...]
    labels: Mapping[str, str]
    hostnames: tuple[str, ...] = ()   # serving.hostnames: the HTTPRoute's hostnames
    kv_connector: str | None = None   # a KvConnector (PrefillDecode); None: the default
    cache: CacheRef | None = None     # modelCacheRef: the ModelCache its pods mount

    @property
    def deployment(self) -> str | None:
        return self.labels.get(LABEL_DEPLOYMENT)

    @property
    def pools(self) -> tuple[str, ...]:
        return tuple(sorted({m.pool for e in self.engines for m in e.members}))


def parse_replica(mr: Mapping[str, Any]) -> Replica:
    """A validated ModelReplica as records, schema defaults applied."""
    meta, spec = mr.get("metadata") or {}, mr.get("spec") or {}
    engines = tuple(
        Engine(name=e["name"], copies=int(e.get("copies") or 1), phase=e.get("phase"),
               members=tuple(_member(m) for m in e.get("members") or []),
               recovery_policy=e.get("recoveryPolicy"),
               grace_seconds=e.get("restartGracePeriodSeconds"),
               rollout=dict(e["rollout"]) if e.get("rollout") else None)
        for e in spec.get("engines") or [])
    serving = spec.get("serving") or {}
    return Replica(namespace=meta.get("namespace") or "", name=meta.get("name") or "",
                   cluster=spec.get("clusterName") or "",
                   mode=serving.get("mode") or modes.DEFAULT_MODE,
                   router=modes.router(serving.get("mode"), serving.get("router")),
                   engines=engines, labels=dict(meta.get("labels") or {}),
                   hostnames=tuple(serving.get("hostnames") or ()),
                   kv_connector=serving.get("kvConnector"), cache=cache_ref(spec))


def _member(m: Mapping[str, Any]) -> Member:
    role = m.get("role") or MemberRole.STANDALONE.value
    requests = tuple(
        DeviceRequest(name=r["name"], device_class=r.get("deviceClassName") or "",
                      count=int(r.get("count") or 1),
                      selectors=tuple(s["cel"] for s in r.get("selectors") or []),
                      claim=r.get("claim") or DeviceClaim.DRA.value)
        for r in m.get("deviceRequests") or [])
    nodes = int((m.get("worker") or {}).get("nodes") or 0) if role == MemberRole.WORKER else 0
    return Member(role=role, pool=m["nodePoolName"], worker_nodes=nodes, requests=requests,
                  template=m.get("template") or {})


def parse_cluster(ic: Mapping[str, Any], replica: Replica) -> Cluster:
    """The replica's cluster, or Unusable saying why it cannot host the replica now."""
    name = (ic.get("metadata") or {}).get("name") or replica.cluster
    # The spec only: status is the cluster function's output, not our input.
    errors = model_errors(InferenceCluster, {"spec": ic.get("spec")})
    cluster = None
    if not errors:
        try:
            cluster = records.parse_cluster(ic)
        except records.Malformed as exc:  # what the schema does not say (metadata)
            errors = [str(exc)]
    if cluster is None:
        raise Unusable("ClusterMalformed",
                       f"InferenceCluster {name} is malformed: {'; '.join(errors)}")
    if cluster.gateway is None:
        raise _no_gateway(name)
    missing = [p for p in replica.pools if cluster.pool(p) is None]
    if missing:
        raise _no_pool(name, missing)
    return cluster


def _no_gateway(name: str) -> Unusable:
    # Every serving mode attaches an HTTPRoute to the cluster's gateway.
    return Unusable("NoGateway", f"InferenceCluster {name} names no gateway "
                    "(spec.gateway.name and namespace) for the replica's route")


def _no_pool(name: str, missing: Sequence[str]) -> Unusable:
    return Unusable("PoolNotFound", f"InferenceCluster {name} has no node pool "
                    f"{', '.join(repr(p) for p in missing)}, which the replica runs on")


def cluster_gateway(cluster: Cluster) -> records.Gateway:
    """The gateway of a cluster `parse_cluster` returned: it has one."""
    if cluster.gateway is None:
        raise _no_gateway(cluster.name)
    return cluster.gateway


def cluster_pool(cluster: Cluster, name: str) -> records.Pool:
    """A pool the replica runs on, of a cluster `parse_cluster` returned: it has them all."""
    pool = cluster.pool(name)
    if pool is None:
        raise _no_pool(cluster.name, [name])
    return pool
