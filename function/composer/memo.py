"""What the composer remembers between reconciles of a ModelReplica.

Crossplane calls the composer for a replica on every reconcile: each time a
composed object's status changes, and at every poll. Between those calls the
replica's spec and its InferenceCluster almost never change, and what the
composer builds from them is a pure function of them. So:

- `cluster`: the InferenceCluster's record (or why it is unusable), keyed by
  the bytes of the required item and what the replica asks of it;
- `composed`: the composed objects, already serialized as protobuf Structs,
  with the routing verdict and notes, keyed by the bytes of the replica's
  identity, labels and spec, the cluster record (what composing reads of the
  cluster: not its status, which changes with every placement on it), and
  the process's MODELPLANE_* settings (routing/serving_config.py reads them).

A hit merges the remembered Structs into the response in C instead of
composing and converting again. Readiness and status depend on the observed
objects and are worked out afresh on every call. Both caches are bounded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.composer.composed import Role
from function.composer.model import Replica, Unusable, cluster_pool
from function.composer.routing import NotRouted
from function.contract.api import REQUIRE_CLUSTER
from function.contract.records import Cluster
from function.kit.lru import Lru
from function.kit.request import Request, decode

if TYPE_CHECKING:  # function.composer imports this module
    from function.composer import Placed


@dataclass(frozen=True)
class Composition:
    objects: tuple[tuple[str, Role, bytes], ...]  # (key, role, serialized Struct)
    endpoint: str | None
    not_routed: NotRouted | None
    notes: tuple[str, ...]
    composes: frozenset[tuple[str, str]]  # the API groups and kinds of the objects, unwrapped


_NOT_THIS_ONE = "not-this-one"  # a required item that is not the replica's cluster

CLUSTERS: Lru[tuple, Cluster | Unusable | str] = Lru(4096)
COMPOSED: Lru[tuple, Composition] = Lru(1024)


def cluster(req: Request, replica: Replica,
            parse: Callable[[dict, Replica], Cluster]) -> Cluster:
    """The replica's cluster record; raises Unusable as `parse` does."""
    if not req.resolved(REQUIRE_CLUSTER):
        raise Unusable("Resolving", f"waiting for Crossplane to resolve InferenceCluster "
                       f"{replica.cluster}")
    for item in req.required_items(REQUIRE_CLUSTER):
        key = (item, replica.cluster, replica.pools)
        hit = CLUSTERS.get(key)
        if hit is None:
            ic = decode(item)
            if (ic.get("metadata") or {}).get("name") != replica.cluster:
                hit = _NOT_THIS_ONE
            else:
                try:
                    hit = parse(ic, replica)
                except Unusable as why:
                    # The message only: a raised exception's traceback holds
                    # the frames (and the request) it passed through.
                    hit = Unusable(why.reason, why.message)
            CLUSTERS.put(key, hit)
        if isinstance(hit, Unusable):
            raise Unusable(hit.reason, hit.message)
        if isinstance(hit, Cluster):
            return hit
    raise Unusable("ClusterNotFound", f"InferenceCluster {replica.cluster} does not exist")


def replica_key(req: Request) -> tuple:
    """Everything of the observed replica that composing reads, as bytes."""
    return (*(req.composite_part("metadata", k) for k in ("namespace", "name", "labels")),
            req.composite_part("spec"))


def cluster_key(c: Cluster, replica: Replica) -> tuple:
    """What composing reads of the cluster: how to reach it, its gateway, its pod
    security level and the node taints of the replica's pools (not capacity or readiness, which change
    with every placement and condition)."""
    return (c.name, c.provider_config, c.gateway, c.pod_security, c.pod_metadata_prefixes,
            tuple((p, cluster_pool(c, p).taints) for p in replica.pools))


def settings() -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("MODELPLANE_")))


def composed(key: tuple, compose: Callable[[], Placed]) -> Composition:
    """The remembered composition under `key`, or `compose()`'s, remembered."""
    key = (*key, settings())
    hit = COMPOSED.get(key)
    if hit is None:
        placed = compose()
        hit = Composition(
            objects=tuple((c.key, c.role, resource.dict_to_struct(c.manifest).SerializeToString())
                          for c in placed.objects),
            endpoint=placed.routing.endpoint, not_routed=placed.routing.not_routed,
            notes=tuple(placed.notes), composes=placed.composes)
        COMPOSED.put(key, hit)
    return hit


def write(rsp: fnv1.RunFunctionResponse, key: str, serialized: bytes) -> None:
    """`resource.update` of a remembered object: a Struct merge replaces each
    top-level field, as `update` does."""
    rsp.desired.resources[key].resource.MergeFromString(serialized)
