"""The composer's inputs as small frozen records: the replica and its cluster.

The ModelReplica arrives validated (schema and rules, see `function.validation`);
parsing it once here lets every builder read plain attributes, with the
schema's defaults (copies 1, role Standalone, claim DRA, count 1) applied in
one place, since a hand-written replica or `crossplane render` may not have
had them applied by the API server.

The InferenceCluster is read only for what the replica's objects need: how
to reach the cluster (providerConfigRef), the gateway routes attach to, and
the node taints of the pools the replica's members run on. Anything missing
or malformed raises `Unusable`, and the composer then keeps what exists
instead of composing from half an input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from function import serving as modes
from function.api import LABEL_DEPLOYMENT
from function.models.inferencecluster import InferenceCluster
from function.validation import model_errors

STANDALONE, LEADER, WORKER = "Standalone", "Leader", "Worker"


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
    claim: str  # DRA or Synthetic

    @property
    def claimed(self) -> bool:
        # Synthetic devices only steer placement; there is nothing to allocate.
        return self.claim == "DRA"


@dataclass(frozen=True)
class Member:
    role: str
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
        return self.role in (STANDALONE, LEADER)


@dataclass(frozen=True)
class Engine:
    name: str
    copies: int
    phase: str | None
    members: tuple[Member, ...]
    recovery_policy: str | None = None      # a gang's LWS restartPolicy; None: the default
    grace_seconds: int | None = None        # the pods' terminationGracePeriodSeconds
    rollout: Mapping[str, Any] | None = None  # maxSurge, maxUnavailable, partition

    @property
    def is_gang(self) -> bool:
        return any(m.role == WORKER for m in self.members)

    def member(self, role: str) -> Member:
        return next(m for m in self.members if m.role == role)


@dataclass(frozen=True)
class Replica:
    namespace: str
    name: str
    cluster: str
    mode: str                         # serving.mode, defaulted (function/serving.py)
    router: str                       # serving.router, defaulted to the mode's
    engines: tuple[Engine, ...]
    labels: Mapping[str, str]
    hostnames: tuple[str, ...] = ()   # serving.hostnames: the HTTPRoute's hostnames
    kv_connector: str | None = None   # serving.kvConnector (PrefillDecode); None: nixl

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
                   kv_connector=serving.get("kvConnector"))


def _member(m: Mapping[str, Any]) -> Member:
    role = m.get("role") or STANDALONE
    requests = tuple(
        DeviceRequest(name=r["name"], device_class=r.get("deviceClassName") or "",
                      count=int(r.get("count") or 1),
                      selectors=tuple(s["cel"] for s in r.get("selectors") or []),
                      claim=r.get("claim") or "DRA")
        for r in m.get("deviceRequests") or [])
    nodes = int((m.get("worker") or {}).get("nodes") or 0) if role == WORKER else 0
    return Member(role=role, pool=m["nodePoolName"], worker_nodes=nodes, requests=requests,
                  template=m.get("template") or {})


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class Gateway:
    name: str
    namespace: str
    address: str  # "" when the cluster does not publish one


@dataclass(frozen=True)
class ProviderConfig:
    name: str
    kind: str


@dataclass(frozen=True)
class Cluster:
    name: str
    provider_config: ProviderConfig | None  # None: the control-plane cluster itself
    gateway: Gateway
    pool_taints: Mapping[str, tuple[Taint, ...]]

    @property
    def remote(self) -> bool:
        return self.provider_config is not None


def parse_cluster(ic: Mapping[str, Any], replica: Replica) -> Cluster:
    """The replica's cluster, or Unusable saying why it cannot host the replica now."""
    name = (ic.get("metadata") or {}).get("name") or replica.cluster
    # The spec only: status is the cluster function's output, not our input.
    errors = model_errors(InferenceCluster, {"spec": ic.get("spec")})
    if errors:
        raise Unusable("ClusterMalformed",
                       f"InferenceCluster {name} is malformed: {'; '.join(errors)}")
    spec = ic.get("spec") or {}
    gateway = spec.get("gateway") or {}
    if not gateway.get("name") or not gateway.get("namespace"):
        # Every serving mode attaches an HTTPRoute to the cluster's gateway.
        raise Unusable("NoGateway", f"InferenceCluster {name} names no gateway "
                       "(spec.gateway.name and namespace) for the replica's route")
    pools = {p["name"]: p for p in spec.get("nodePools") or []}
    missing = [p for p in replica.pools if p not in pools]
    if missing:
        raise Unusable("PoolNotFound", f"InferenceCluster {name} has no node pool "
                       f"{', '.join(repr(p) for p in missing)}, which the replica runs on")
    ref = spec.get("providerConfigRef") or None
    return Cluster(
        name=name,
        provider_config=ProviderConfig(ref["name"], ref.get("kind") or "ClusterProviderConfig")
        if ref else None,
        gateway=Gateway(gateway["name"], gateway["namespace"], gateway.get("address") or ""),
        pool_taints={p: tuple(Taint(t["key"], t.get("value") or "", t["effect"])
                              for t in pools[p].get("taints") or [])
                     for p in replica.pools})
