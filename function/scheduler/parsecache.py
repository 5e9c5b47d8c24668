"""Parse each required resource once per content, across reconciles.

The scheduler's request carries the whole fleet: every InferenceCluster and
every ModelReplica (10 MB at 1000 clusters and 5000 replicas). Converting
all of it from protobuf Structs to Python on every reconcile costs far more
than the placement itself, yet between two reconciles almost nothing
changes. So each item is decoded and parsed only when its content is new.
An object read from an API server is keyed by its uid and resourceVersion
(lazy.version), which name one content exactly: its bytes do not, because
Go's protobuf (Crossplane's gRPC client) writes every map in a new random
order on each request. Anything else (render's inputs, which carry no
resourceVersion) is keyed by its serialized bytes (as they came off the
wire: see wire.py);
the parsed records are frozen, so sharing them between reconciles is safe.
Keying by the bytes themselves rather than a digest of them is faster (one
SipHash and a memcmp on a hit) and cannot collide; the keys cost about as
much memory as the request once. A parse failure (Malformed) is cached too,
and raised again for the same content. An entry no recent request used is
forgotten (ParseCache), so the cache holds about one fleet, whatever churns.

The server runs requests on a few worker threads (runtime/fn.py); every
operation on the underlying map is locked (kit/lru.py), and two requests at
once can at worst parse the same item twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from google.protobuf import struct_pb2
from google.protobuf.message import DecodeError

from function.contract.api import LABEL_DEPLOYMENT, LABEL_REPLICA_INDEX
from function.contract.capacity import Usage
from function.contract.records import (
    Cluster,
    Malformed,
    Pool,
    attempt,
    outcome,
    parse_cluster,
    parse_pool,
)
from function.kit import lazy, structs, wire
from function.kit.lru import Lru
from function.scheduler import demand
from function.scheduler.model import Engines, Replica, parse_replica

T = TypeVar("T")


class ParseCache(Generic[T]):
    """Parsed items by their version (or bytes), for as long as recent requests use them.

    An item that changes (a ModelReplica's status, a cluster's capacity) comes
    back with a new resourceVersion (or new bytes) and its old entry is never
    used again. So an entry that
    none of the last `keep_requests` scheduler requests used is forgotten:
    every request carries the whole replica ledger, so the cache holds about
    one fleet, not its history. `limit` is a backstop on the count.
    """

    def __init__(self, parse: Callable[..., T], limit: int,
                 keep_requests: int = 32, *, serialized: bool = False) -> None:
        # `parse` takes the decoded Struct, or (serialized) the item's bytes and
        # its top-level fields as lazy.resource decodes them (None: not decodable).
        self._read: Callable[[bytes, Any], T] = parse if serialized \
            else lambda item, _: parse(wire.resource(item).resource)
        self._keep = keep_requests
        self._request = 0
        # Values are (parsed record or Malformed, the request that last used it),
        # by (uid, resourceVersion) or, for an item without them, by its bytes.
        self._entries: Lru[bytes | tuple[str, str], tuple[T | Malformed, int]] = Lru(limit)

    def new_request(self) -> None:
        """Called once per scheduler request, before any get()."""
        self._request += 1
        cutoff = self._request - self._keep
        # Least recently used first, so the stale entries are at the front.
        self._entries.evict_while(lambda entry: entry[1] <= cutoff)

    def get(self, item: bytes) -> T:
        """The parsed record of a serialized `Resource`; raises Malformed as the parser did."""
        # The bytes first: a hit costs a hash (render's inputs, and whatever a
        # sender writes alike twice); an item with a version is kept by it alone,
        # or every request's new byte order would be kept too.
        key: bytes | tuple[str, str] = item
        hit = self._entries.get(item)
        top = None
        if hit is None:
            top = _top(item)
            key = (lazy.version(top) if top is not None else None) or item
            hit = self._entries.get(key) if key is not item else None
        parsed = attempt(lambda i: self._read(i, top), item) if hit is None else hit[0]
        self._entries.put(key, (parsed, self._request))
        return outcome(parsed)

    def __len__(self) -> int:
        return len(self._entries)


def _top(item: bytes) -> Mapping[str, Any] | None:
    """An item's top-level fields, decoded once for its key and its reader; None
    when it does not decode (the plain reader then says what is wrong)."""
    try:
        return lazy.resource(item)
    except DecodeError:
        return None


# Pools, by the bytes of their Struct. A fleet has many clusters but few pool
# shapes (the L benchmark: 8000 pools, 160 distinct), and the pools are most
# of a cluster's bytes: a new cluster converts and checks only its new pools.
POOLS: Lru[bytes, Pool | Malformed] = Lru(20_000)


def _cluster(s: struct_pb2.Struct) -> Cluster:
    spec = s.fields["spec"] if "spec" in s.fields else None
    pools = spec.struct_value.fields["nodePools"] \
        if spec is not None and spec.HasField("struct_value") \
        and "nodePools" in spec.struct_value.fields else None
    if pools is None or not pools.HasField("list_value"):
        return parse_cluster(structs.to_dict(s))  # no pools to remember
    rest = struct_pb2.Struct()
    rest.CopyFrom(s)
    rest.fields["spec"].struct_value.fields["nodePools"].list_value.Clear()
    return parse_cluster(structs.to_dict(rest), lambda: [_pool(v) for v in pools.list_value.values])


def _pool(v: struct_pb2.Value) -> Pool:
    key = v.SerializeToString(deterministic=True)
    hit = POOLS.get(key)
    if hit is None:
        # parse_pool's decorator (malformed_on_error) is untyped: say what attempt returns.
        parsed: Pool | Malformed = attempt(parse_pool, structs.value(v))
        POOLS.put(key, parsed)
        return outcome(parsed)
    return outcome(hit)


def plain_cluster(item: bytes, top: Any = None) -> Cluster:
    """A serialized InferenceCluster's record, each distinct pool parsed once."""
    return _cluster(wire.resource(item).resource)


def plain_replica(item: bytes, top: Any = None) -> Replica:
    """A serialized ModelReplica's record as the ledger keeps it."""
    return _ledger_entry(parse_replica(structs.to_dict(wire.resource(item).resource)))


def _ledger_entry(replica: Replica) -> Replica:
    """A replica as the capacity ledger needs it: without its manifest (memory)."""
    return dataclasses.replace(replica, manifest={})


# --- A fresh process's path: every item new ---------------------------------
#
# The readers below equal the plain ones above (tests/test_parse_fast.py holds
# them equal, map order shuffled and shapes bent too) and decode an item only
# one level at a time (function/kit/lazy.py): what the scheduler does not
# read stays bytes, and a pool or a replica's engines (shared by many items)
# is found by its bytes before anything of it is decoded. An item of another
# shape than the API's takes the plain reader, which says what is wrong.

# Pools by the bytes of their Value as they came (POOLS: as protobuf writes
# them deterministically, whatever order the sender wrote the maps in).
RAW_POOLS: Lru[bytes, Pool | Malformed] = Lru(20_000)
# Engines (model.py: what a replica's spec.engines alone decide), by the bytes
# of that ListValue as they came and as protobuf writes it deterministically.
# Replicas of one deployment share engines but for the pool (the L benchmark:
# 5000 replicas, 8 distinct).
RAW_ENGINES: Lru[bytes, Engines] = Lru(20_000)
ENGINES: Lru[bytes, Engines] = Lru(20_000)


def fast_cluster(item: bytes, top: Mapping[str, Any] | None = None) -> Cluster:
    top = lazy.resource(item) if top is None else top
    spec = top.get("spec")
    if spec is None or spec.WhichOneof("kind") != "struct_value":
        return plain_cluster(item)
    spec_fields = spec.struct_value.fields
    pools = spec_fields.get("nodePools")
    if pools is None or pools.WhichOneof("kind") != "list_value":
        return plain_cluster(item)
    # What parse_cluster reads of the rest, as _cluster converts it:
    # metadata, status, and spec with nodePools emptied.
    rest = {k: lazy.value(v) for k in ("metadata", "status")
            if (v := top.get(k)) is not None and v.WhichOneof("kind") != "null_value"}
    rest["spec"] = lazy.to_dict(spec_fields, _no_pools)
    raw = lazy.items(pools.list_value)
    return parse_cluster(rest, lambda: [_raw_pool(v) for v in raw])


def _no_pools(key: str, _: Any) -> list | None:
    return [] if key == "nodePools" else None


def _raw_pool(raw: bytes) -> Pool:
    hit = RAW_POOLS.get(raw)
    if hit is None:
        try:
            hit = _pool(lazy.canonical_value(raw))
        except Malformed as exc:
            hit = Malformed(str(exc))
        RAW_POOLS.put(raw, hit)
    return outcome(hit)


def fast_replica(item: bytes, top: Mapping[str, Any] | None = None) -> Replica:
    top = lazy.resource(item) if top is None else top
    # parse_replica reads these of metadata and its labels, and only
    # clusterName of spec beside its engines: the rest is never converted.
    # An item whose fields are all of the API's types (every one Crossplane
    # sends) is read straight from the decoded Values; any other takes the
    # plain reader, which says what is wrong.
    meta, spec = _struct(top, "metadata"), _struct(top, "spec")
    if meta is None or spec is None:
        return plain_replica(item)
    name, cluster = _string(meta, "name"), _string(spec, "clusterName")
    namespace, created = _string(meta, "namespace", ""), _string(meta, "creationTimestamp", "")
    deleted = _string(meta, "deletionTimestamp", "")
    engines = _list(spec, "engines")
    labels = meta.get("labels")
    deployment: str | None
    index: str | None
    if labels is None or labels.WhichOneof("kind") == "null_value":
        deployment = index = ""
    else:
        labels = _struct(meta, "labels")
        deployment = index = None
        if labels is not None:
            deployment = _string(labels, LABEL_DEPLOYMENT, "")
            index = _string(labels, LABEL_REPLICA_INDEX, "")
    # Tested one by one rather than `None in (...)`: as fast (faster, in fact), and mypy
    # narrows each.
    if name is None or cluster is None or namespace is None or created is None \
            or deleted is None or deployment is None or index is None or engines is None \
            or not index.isascii():
        return plain_replica(item)
    found = _raw_engines(engines)
    pools, holdings = outcome(found.pools), outcome(found.holdings)
    return _replica(namespace, name, deployment, int(index) if index.isdigit() else None,
                    cluster, pools, holdings[0], created, holdings[1], bool(deleted))


# Reading a decoded Value: a oneof member that is not empty is the one set, so
# only an empty one costs the call that asks which kind it is.

def _struct(fields: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    """The fields of a Struct-valued field; None when absent or of another kind."""
    v = fields.get(key)
    if v is None:
        return None
    got = v.struct_value.fields
    return got if got or v.WhichOneof("kind") == "struct_value" else None


def _list(fields: Mapping[str, Any], key: str) -> bytes | None:
    """The serialized ListValue of a list-valued field; None when absent or of another kind."""
    v = fields.get(key)
    if v is None:
        return None
    got = v.list_value
    return got if got or v.WhichOneof("kind") == "list_value" else None


def _string(fields: Mapping[str, Any], key: str, absent: str | None = None) -> str | None:
    """A string field's value; `absent` when it is absent or null, None when of another kind."""
    v = fields.get(key)
    if v is None:
        return absent
    got = v.string_value
    if got:
        return got
    kind = v.WhichOneof("kind")
    if kind == "string_value":
        return ""
    return absent if kind == "null_value" else None


_new = object.__new__


def _replica(namespace: str, name: str, deployment: str, index: int | None, cluster: str,
             pools: Mapping[str, str], usage: Usage, created: str,
             claims: tuple, deleting: bool) -> Replica:
    """Replica(...) as the ledger keeps it (no manifest, no key), without the
    frozen dataclass's checked __init__: a third of its cost, 5000 times over
    in a fresh process. The fields are exactly the ones __init__ would set."""
    r = _new(Replica)
    r.__dict__.update(namespace=namespace, name=name, deployment=deployment, index=index,
                      cluster=cluster, pools=pools, usage=usage, created=created,
                      manifest={}, key="", claims=claims, deleting=deleting)
    return r


def _some(fields: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """`{k: structs.to_dict(...)[k]}` for those of `keys` the Struct has."""
    out = {}
    for k in keys:
        v = fields.get(k)
        if v is not None:
            kind = v.WhichOneof("kind")
            if kind == "string_value":
                out[k] = v.string_value
            elif kind != "null_value":
                out[k] = lazy.value(v)
    return out


def _raw_engines(raw: bytes) -> Engines:
    hit = RAW_ENGINES.get(raw)
    if hit is None:
        lv = struct_pb2.ListValue.FromString(raw)
        key = lv.SerializeToString(deterministic=True)
        hit = ENGINES.get(key)
        if hit is None:
            hit = Engines.of([structs.value(v) for v in lv.values])
            ENGINES.put(key, hit)
        RAW_ENGINES.put(raw, hit)
    return hit


def plain_deployment(item: bytes, top: Any = None) -> demand.Demand:
    """A serialized ModelDeployment as a Pack deployment reads it (demand.py)."""
    return demand.parse(structs.to_dict(wire.resource(item).resource))


def fast_deployment(item: bytes, top: Mapping[str, Any] | None = None) -> demand.Demand:
    """plain_deployment, converting only metadata, status and spec.replicas of a
    deployment that does not wait (nearly all of them): its template stays bytes."""
    top = lazy.resource(item) if top is None else top
    head = {k: lazy.value(top[k]) for k in ("metadata", "status") if k in top}
    spec = top.get("spec")
    if spec is not None:
        if spec.WhichOneof("kind") != "struct_value":
            return plain_deployment(item)
        head["spec"] = _some(spec.struct_value.fields, ("replicas",))
    if demand.short(head):
        return plain_deployment(item)
    return demand.parse(head)


# Backstops sized for fleets well beyond the benchmark's L (1000 clusters, 5000 replicas).
CLUSTERS: ParseCache[Cluster] = ParseCache(fast_cluster, 20_000, serialized=True)
REPLICAS: ParseCache[Replica] = ParseCache(fast_replica, 100_000, serialized=True)
DEPLOYMENTS: ParseCache[demand.Demand] = ParseCache(fast_deployment, 20_000, serialized=True)


def new_request() -> None:
    CLUSTERS.new_request()
    REPLICAS.new_request()
    DEPLOYMENTS.new_request()


def identity(item: bytes) -> tuple[str, str, Mapping[str, str]]:
    """(namespace, name, labels) of a serialized resource, without converting all of it."""
    fields = wire.resource(item).resource.fields
    meta = fields["metadata"].struct_value.fields if "metadata" in fields else {}
    labels = meta["labels"].struct_value.fields if "labels" in meta else {}
    return (meta["namespace"].string_value if "namespace" in meta else "",
            meta["name"].string_value if "name" in meta else "",
            {k: v.string_value for k, v in labels.items()})
