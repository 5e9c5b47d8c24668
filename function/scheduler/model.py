"""The scheduler's view of its inputs: small frozen records built from dicts.

InferenceClusters and ModelReplicas arrive as loosely typed dicts; parsing
them once into these records lets every filter and score step work on plain
attributes and lets a malformed object be skipped with a reason instead of
failing the whole reconcile.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from function.api import LABEL_DEPLOYMENT, LABEL_REPLICA_INDEX
from function.capacity import replica_usage
from function.names import is_dns_label, is_dns_subdomain




class Malformed(Exception):
    """An input object the scheduler cannot use; the message says why."""


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True)
class Device:
    """One kind of device every node of a pool offers, `count` of them."""

    name: str
    claim: str            # DRA or Synthetic
    device_class: str
    count: int
    spec: Mapping[str, Any]  # the API shape, for the CEL activation
    # The spec as canonical JSON: what a selector's verdict depends on, so
    # verdicts can be remembered across reconciles (see matching.py).
    key: str = field(default="", compare=False)


@dataclass(frozen=True)
class Pool:
    name: str
    nodes: int
    devices: tuple[Device, ...]
    # Pools with identical devices match identically: the key lets matching
    # run once per distinct shape instead of once per pool.
    shape: str


@dataclass(frozen=True)
class Cluster:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    ready: bool
    pools: tuple[Pool, ...]

    def pool(self, name: str) -> Pool | None:
        return next((p for p in self.pools if p.name == name), None)


@dataclass(frozen=True)
class Replica:
    """A ModelReplica that exists now (ours or another deployment's)."""

    namespace: str
    name: str
    deployment: str
    index: int | None
    cluster: str
    pools: Mapping[str, str]          # engine name -> pool name
    usage: Mapping[str, int]          # pool name -> nodes held
    created: str                      # RFC 3339; "" when unknown (treated as youngest)
    manifest: Mapping[str, Any] = field(compare=False, repr=False)
    # The composed-resource key it is observed under: set for this
    # deployment's own replicas (fleet.py), "" for the ledger's.
    key: str = field(default="", compare=False)

    @property
    def age_key(self) -> tuple[str, str, str]:
        # Oldest first; an unknown creation time sorts last (youngest).
        return (self.created or "~", self.namespace, self.name)


def _expect(value: Any, kind: type | tuple[type, ...], what: str, optional: bool = True) -> None:
    """Raise Malformed unless value has the type the API schema gives it.

    The scheduler sorts and keys by names and hands device data to CEL, so a
    wrongly typed field (which admission would reject) must make the object
    malformed here rather than fail the whole reconcile later.
    """
    if (value is None and optional) or (isinstance(value, kind) and not isinstance(value, bool)):
        return
    raise Malformed(f"{what} is {type(value).__name__}, not {getattr(kind, '__name__', kind)}")


def _check_cluster(obj: Mapping[str, Any]) -> None:
    """Everything of a cluster but its pools (`parse_pool` checks each)."""
    meta, spec = obj.get("metadata"), obj.get("spec")
    _expect(meta, Mapping, "metadata", optional=False)
    _expect(meta.get("name"), str, "metadata.name", optional=False)
    _expect(meta.get("labels"), Mapping, "metadata.labels")
    _expect(spec, Mapping, "spec")
    spec = spec or {}
    _expect(spec.get("nodePools"), list, "spec.nodePools")
    _expect(spec.get("taints"), list, "spec.taints")
    for t in spec.get("taints") or []:
        _expect(t, Mapping, "a taint", optional=False)
        for field in ("key", "effect", "value"):
            _expect(t.get(field), str, f"a taint's {field}", optional=field == "value")


def _check_pool(p: Any) -> None:
    _expect(p, Mapping, "a node pool", optional=False)
    _expect(p.get("name"), str, "a node pool's name", optional=False)
    if not is_dns_label(p["name"]):
        # Pools are named in ModelReplicas and node labels: a DNS label.
        raise Malformed(f"node pool name {p['name']!r} is not a DNS label")
    _expect(p.get("devices"), list, f"pool {p['name']!r} devices")
    for d in p.get("devices") or []:
        _expect(d, Mapping, f"a device of pool {p['name']!r}", optional=False)
        for field in ("name", "driver", "deviceClassName"):
            _expect(d.get(field), str, f"a device's {field} in pool {p['name']!r}",
                    optional=field != "name")
        dc = d.get("deviceClassName")
        if dc and not is_dns_subdomain(dc):
            # It becomes a ResourceClaimTemplate's deviceClassName.
            raise Malformed(f"deviceClassName {dc[:80]!r} in pool {p['name']!r} is not a "
                            "DNS subdomain")
        for field in ("attributes", "capacity"):
            _expect(d.get(field), Mapping, f"a device's {field} in pool {p['name']!r}")
        if d.get("claim") not in (None, "DRA", "Synthetic"):
            raise Malformed(f"a device's claim in pool {p['name']!r} is {d['claim']!r}, "
                            "not DRA or Synthetic")


def _malformed_on_error(parse):
    """Any lookup or type error while parsing means the object is malformed."""
    @functools.wraps(parse)
    def wrapped(*args):
        try:
            return parse(*args)
        except Malformed:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise Malformed(f"{type(exc).__name__}: {exc}") from exc
    return wrapped


@_malformed_on_error
def parse_pool(p: Any) -> Pool:
    """One node pool of an InferenceCluster (a pool depends on nothing else)."""
    _check_pool(p)
    devices = tuple(
        Device(name=d["name"], claim=d.get("claim") or "DRA",
               device_class=d.get("deviceClassName") or "", count=int(d.get("count", 1)),
               spec=d, key=json.dumps(d, sort_keys=True))
        for d in p.get("devices") or [])
    if any(d.claim == "DRA" and not d.device_class for d in devices):
        raise Malformed(f"pool {p.get('name')!r} has a DRA device without deviceClassName")
    return Pool(name=p["name"], nodes=int(p.get("nodes") or 0), devices=devices,
                shape=json.dumps(p.get("devices") or [], sort_keys=True))


@_malformed_on_error
def parse_cluster(obj: Mapping[str, Any],
                  parse_pools: Callable[[], Sequence[Pool]] | None = None) -> Cluster:
    """A cluster; `parse_pools()` may stand in for parsing each pool of
    `spec.nodePools` with `parse_pool`, in order (parsecache.py remembers pools).
    It is called after the rest of the cluster is checked, so a cluster wrong in
    several places is reported alike either way."""
    _check_cluster(obj)
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    pools = tuple(parse_pools() if parse_pools is not None
                  else (parse_pool(p) for p in spec.get("nodePools") or []))
    taints = tuple(Taint(t["key"], t.get("value") or "", t["effect"])
                   for t in spec.get("taints") or [])
    return Cluster(name=meta["name"], labels=dict(meta.get("labels") or {}), taints=taints,
                   ready=_ready(obj), pools=pools)


def _ready(obj: Mapping[str, Any]) -> bool:
    """A cluster is unready only when its Ready condition says so explicitly."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") != "False"
    return True


def _check_replica(obj: Mapping[str, Any]) -> None:
    meta, spec = obj.get("metadata"), obj.get("spec")
    _expect(meta, Mapping, "metadata", optional=False)
    _expect(meta.get("name"), str, "metadata.name", optional=False)
    _expect(meta.get("namespace"), str, "metadata.namespace")
    _expect(meta.get("labels"), Mapping, "metadata.labels")
    _expect(spec, Mapping, "spec", optional=False)
    _expect(spec.get("clusterName"), str, "spec.clusterName", optional=False)
    _expect(spec.get("engines"), list, "spec.engines", optional=False)
    for e in spec["engines"]:
        _expect(e, Mapping, "an engine", optional=False)
        _expect(e.get("name"), str, "an engine's name", optional=False)
        if not is_dns_label(e["name"]):
            raise Malformed(f"engine name {e['name'][:80]!r} is not a DNS label")
        _expect(e.get("members"), list, f"engine {e['name']!r} members")
        for m in e.get("members") or []:
            _expect(m, Mapping, f"a member of engine {e['name']!r}", optional=False)
            _expect(m.get("nodePoolName"), str, f"a nodePoolName in engine {e['name']!r}")
            pool = m.get("nodePoolName")
            if pool is not None and not is_dns_label(pool):
                raise Malformed(f"nodePoolName {pool[:80]!r} is not a DNS label")


@_malformed_on_error
def parse_replica(obj: Mapping[str, Any]) -> Replica:
    _check_replica(obj)
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    labels = meta.get("labels") or {}
    index = labels.get(LABEL_REPLICA_INDEX)
    engines = spec["engines"]
    pools = {}
    for e in engines:
        member_pools = {m.get("nodePoolName") for m in e.get("members") or []}
        if len(member_pools) != 1 or None in member_pools:
            raise Malformed(f"engine {e.get('name')!r} is not on exactly one pool")
        pools[e["name"]] = member_pools.pop()
    return Replica(namespace=meta.get("namespace") or "", name=meta["name"],
                   deployment=labels.get(LABEL_DEPLOYMENT, ""),
                   index=int(index) if index is not None and str(index).isdigit() else None,
                   cluster=spec["clusterName"], pools=pools, usage=replica_usage(engines),
                   created=str(meta.get("creationTimestamp") or ""), manifest=obj)
