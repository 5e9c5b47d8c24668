"""The ModelReplicas as the scheduler reads them: a small frozen record built from a dict.

ModelReplicas arrive as loosely typed dicts; parsing them once into records
lets the plan and the ledger work on plain attributes and lets a malformed one
be skipped with a reason instead of failing the whole reconcile. The cluster
records (Cluster, Pool, Device, Taint) are the composer's too: the scheduler's
modules import them from function/contract/records.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from function.contract.api import LABEL_DEPLOYMENT, LABEL_REPLICA_INDEX
from function.contract.capacity import WHOLE, Usage, add, replica_usage
from function.contract.enums import MemberRole
from function.contract.quotas import Claim, claims
from function.contract.names import is_dns_label
from function.contract.records import Malformed, attempt, expect, malformed_on_error, outcome


@dataclass(frozen=True)
class Replica:
    """A ModelReplica that exists now (ours or another deployment's)."""

    namespace: str
    name: str
    deployment: str
    index: int | None
    cluster: str
    pools: Mapping[str, str]          # engine name -> pool name
    usage: Usage                      # pool name -> its pods there, by shape (capacity.py)
    created: str                      # RFC 3339; "" when unknown (treated as youngest)
    manifest: Mapping[str, Any] = field(compare=False, repr=False)
    # The composed-resource key it is observed under: set for this
    # deployment's own replicas (fleet.py), "" for the ledger's.
    key: str = field(default="", compare=False)
    claims: tuple[Claim, ...] = field(default=(), compare=False)  # devices held, for quotas
    # Deleted and on its way out (metadata.deletionTimestamp): it still holds its nodes and
    # devices, but a repair must not count it, or another replica would leave for it.
    deleting: bool = field(default=False, compare=False)

    @property
    def age_key(self) -> tuple[str, str, str]:
        # Oldest first; an unknown creation time sorts last (youngest).
        return (self.created or "~", self.namespace, self.name)


def _check_meta(meta: Any) -> None:
    expect(meta, Mapping, "metadata", optional=False)
    expect(meta.get("name"), str, "metadata.name", optional=False)
    expect(meta.get("namespace"), str, "metadata.namespace")
    expect(meta.get("labels"), Mapping, "metadata.labels")


def _check_engines(engines: Any) -> None:
    expect(engines, list, "spec.engines", optional=False)
    for e in engines:
        expect(e, Mapping, "an engine", optional=False)
        expect(e.get("name"), str, "an engine's name", optional=False)
        if not is_dns_label(e["name"]):
            raise Malformed(f"engine name {e['name'][:80]!r} is not a DNS label")
        expect(e.get("members"), list, f"engine {e['name']!r} members")
        for m in e.get("members") or []:
            expect(m, Mapping, f"a member of engine {e['name']!r}", optional=False)
            expect(m.get("nodePoolName"), str, f"a nodePoolName in engine {e['name']!r}")
            pool = m.get("nodePoolName")
            if pool is not None and not is_dns_label(pool):
                raise Malformed(f"nodePoolName {pool[:80]!r} is not a DNS label")


@malformed_on_error
def _engine_pools(engines: Any) -> dict[str, str]:
    """Checks `spec.engines`; engine name -> the one pool its members are on."""
    _check_engines(engines)
    pools = {}
    for e in engines:
        member_pools = {m.get("nodePoolName") for m in e.get("members") or []}
        if len(member_pools) != 1 or None in member_pools:
            raise Malformed(f"engine {e.get('name')!r} is not on exactly one pool")
        pools[e["name"]] = member_pools.pop()
    return pools


@malformed_on_error
def _engine_holdings(engines: list) -> tuple[Usage, tuple[Claim, ...]]:
    """(pods held per pool, devices claimed) of checked `spec.engines`."""
    return replica_usage(engines), claims({"engines": engines})


@dataclass(frozen=True)
class Engines:
    """What a replica's `spec.engines` alone decide, each part a value or the
    Malformed it raised. parse_replica raises them where the checks of the rest
    of the replica put them, so a replica wrong in several places is reported
    alike however its Engines were obtained (parsecache.py remembers them by
    the engines' bytes, since replicas of one deployment share them)."""

    pools: dict[str, str] | Malformed
    holdings: tuple[Usage, tuple[Claim, ...]] | Malformed

    @staticmethod
    def of(engines: Any) -> Engines:
        pools = attempt(_engine_pools, engines)
        if isinstance(pools, Malformed):
            return Engines(pools, pools)
        return Engines(pools, attempt(_engine_holdings, engines))


@malformed_on_error
def parse_replica(obj: Mapping[str, Any]) -> Replica:
    spec: Any = obj.get("spec")  # unchecked: assemble checks it before engines_of runs
    return assemble(obj.get("metadata"), spec, lambda: Engines.of(spec.get("engines")), obj)


@malformed_on_error
def assemble(meta: Any, spec: Any, engines_of: Callable[[], Engines],
             manifest: Mapping[str, Any]) -> Replica:
    """A replica from its metadata, its spec (of which only clusterName is read
    here) and, called once those are checked, its spec.engines' Engines."""
    _check_meta(meta)
    expect(spec, Mapping, "spec", optional=False)
    cluster = spec.get("clusterName")
    expect(cluster, str, "spec.clusterName", optional=False)
    engines = engines_of()
    pools = outcome(engines.pools)
    labels = meta.get("labels") or {}
    index = labels.get(LABEL_REPLICA_INDEX)
    # In the order Replica(...)'s arguments had them: the index (whose int() may
    # raise, as for "²") before the holdings.
    number = int(index) if index is not None and str(index).isdigit() else None
    usage, claimed = outcome(engines.holdings)
    return Replica(namespace=meta.get("namespace") or "", name=meta["name"],
                   deployment=labels.get(LABEL_DEPLOYMENT, ""), index=number,
                   cluster=cluster, pools=pools, usage=usage,
                   created=str(meta.get("creationTimestamp") or ""), manifest=manifest,
                   claims=claimed, deleting=bool(meta.get("deletionTimestamp")))


def worst_case(obj: Any) -> Replica | None:
    """A ModelReplica parse_replica refused, charged by the most it can hold.

    The composer runs each member on the pool it names, so that is where its
    pods are: every member of every readable engine is charged `pods x
    copies` pods of a whole node each on its pool (capacity.WHOLE), as if it
    claimed every device of a node (one that claims none costs nothing when
    well formed), and its resolved device requests, where
    they read, count against quotas. An engine on two pools is charged on
    both. A part that does not read at all (not an object, a count that is
    not a number) is charged as its smallest readable reading (one copy, one
    pod): such a replica fails the composer's schema, which composes nothing
    new for it. None when even its cluster does not read: nothing can be
    charged anywhere, and the caller says so.
    """
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    spec = spec if isinstance(spec, Mapping) else {}
    cluster = spec.get("clusterName")
    if not isinstance(cluster, str) or not cluster:
        return None
    engines = spec.get("engines")
    usage: dict[str, dict] = {}
    for engine in engines if isinstance(engines, list) else ():
        if not isinstance(engine, Mapping):
            continue
        copies = _count(engine.get("copies"))
        members = engine.get("members")
        for m in members if isinstance(members, list) else ():
            pool = m.get("nodePoolName") if isinstance(m, Mapping) else None
            if not isinstance(pool, str) or not pool:
                continue
            worker = m.get("worker")
            pods = _count(worker.get("nodes")) if m.get("role") == MemberRole.WORKER \
                and isinstance(worker, Mapping) else 1
            add(usage, pool, WHOLE, pods * copies)
    try:
        claimed = claims(spec)
    except (TypeError, ValueError, AttributeError, KeyError):
        claimed = ()
    labels = meta.get("labels")
    labels = labels if isinstance(labels, Mapping) else {}
    deployment = labels.get(LABEL_DEPLOYMENT)
    return Replica(namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
                   deployment=deployment if isinstance(deployment, str) else "", index=None,
                   cluster=cluster, pools={}, usage=usage,
                   created=str(meta.get("creationTimestamp") or ""), manifest={},
                   claims=claimed, deleting=bool(meta.get("deletionTimestamp")))


def _count(value: Any) -> int:
    """A positive whole count (a Struct's numbers are floats), or 1 when it does not read
    as one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 1
    return int(value) if value >= 1 and float(value).is_integer() else 1
