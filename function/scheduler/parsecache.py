"""Parse each required resource once per content, across reconciles.

The scheduler's request carries the whole fleet: every InferenceCluster and
every ModelReplica (10 MB at 1000 clusters and 5000 replicas). Converting
all of it from protobuf Structs to Python on every reconcile costs far more
than the placement itself, yet between two reconciles almost nothing
changes. So each item is keyed by its serialized bytes (as they came off
the wire: see wire.py) and decoded and parsed only when that content is new;
the parsed records are frozen, so sharing them between reconciles is safe.
Keying by the bytes themselves rather than a digest of them is faster (one
SipHash and a memcmp on a hit) and cannot collide; the keys cost about as
much memory as the request once. A parse failure (Malformed) is cached too,
and raised again for the same content. An entry no recent request used is
forgotten (ParseCache), so the cache holds about one fleet, whatever churns.

The function serves one request at a time per process (the gRPC server runs
RunFunction on its event loop), so the cache needs no lock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from google.protobuf import struct_pb2

from function.contract.records import Cluster, Malformed, Pool, parse_cluster, parse_pool
from function.runtime import structs, wire
from function.runtime.lru import Lru
from function.scheduler.model import Replica, parse_replica

T = TypeVar("T")


class ParseCache(Generic[T]):
    """Parsed items by their bytes, for as long as recent requests use them.

    An item that changes (a ModelReplica's status, a cluster's capacity) comes
    back as new bytes and its old entry is never used again. So an entry that
    none of the last `keep_requests` scheduler requests used is forgotten:
    every request carries the whole replica ledger, so the cache holds about
    one fleet, not its history. `limit` is a backstop on the count.
    """

    def __init__(self, parse: Callable[[struct_pb2.Struct], T], limit: int,
                 keep_requests: int = 32) -> None:
        self._parse = parse
        self._keep = keep_requests
        self._request = 0
        # Values are (parsed record or Malformed, the request that last used it).
        self._entries: Lru[bytes, tuple[T | Malformed, int]] = Lru(limit)

    def new_request(self) -> None:
        """Called once per scheduler request, before any get()."""
        self._request += 1
        cutoff = self._request - self._keep
        # Least recently used first, so the stale entries are at the front.
        self._entries.evict_while(lambda entry: entry[1] <= cutoff)

    def get(self, item: bytes) -> T:
        """The parsed record of a serialized `Resource`; raises Malformed as the parser did."""
        hit = self._entries.get(item)
        parsed = _attempt(self._parse, wire.resource(item).resource) if hit is None else hit[0]
        self._entries.put(item, (parsed, self._request))
        return _outcome(parsed)

    def __len__(self) -> int:
        return len(self._entries)


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
        hit = _attempt(parse_pool, structs.value(v))
        POOLS.put(key, hit)
    return _outcome(hit)


def _attempt(parse: Callable[[Any], T], arg: Any) -> T | Malformed:
    """`parse(arg)`, or what a cache keeps of its failure: the message. Never
    the raised exception, whose traceback and cause hold the frames (and the
    request) it passed through."""
    try:
        return parse(arg)
    except Malformed as exc:
        return Malformed(str(exc))


def _outcome(parsed: T | Malformed) -> T:
    """A remembered parse: the record, or a fresh Malformed raised again."""
    if isinstance(parsed, Malformed):
        raise Malformed(str(parsed))
    return parsed


# Backstops sized for fleets well beyond the benchmark's L (1000 clusters, 5000 replicas).
CLUSTERS: ParseCache[Cluster] = ParseCache(_cluster, 20_000)
REPLICAS: ParseCache[Replica] = ParseCache(
    lambda s: _ledger_entry(parse_replica(structs.to_dict(s))), 100_000)


def new_request() -> None:
    CLUSTERS.new_request()
    REPLICAS.new_request()


def _ledger_entry(replica: Replica) -> Replica:
    """A replica as the capacity ledger needs it: without its manifest (memory)."""
    return dataclasses.replace(replica, manifest={})


def identity(item: bytes) -> tuple[str, str, Mapping[str, str]]:
    """(namespace, name, labels) of a serialized resource, without converting all of it."""
    fields = wire.resource(item).resource.fields
    meta = fields["metadata"].struct_value.fields if "metadata" in fields else {}
    labels = meta["labels"].struct_value.fields if "labels" in meta else {}
    return (meta["namespace"].string_value if "namespace" in meta else "",
            meta["name"].string_value if "name" in meta else "",
            {k: v.string_value for k, v in labels.items()})
