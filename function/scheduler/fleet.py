"""Reading the fleet: the clusters, this deployment's ModelReplicas, everyone else's.

The required InferenceClusters and ModelReplicas come through the parse
caches (parsecache.py); this deployment's own replicas come from the observed
composed resources, each with the composed-resource key it lives under. A
malformed object never fails the read: a cluster is skipped; a replica is
counted in the ledger by the most it can hold (model.worst_case), and one of
ours is besides kept as it is (`broken`); each with a warning saying why.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from function.contract.api import (
    LABEL_REPLICA_INDEX,
    REQUIRE_CLUSTERS,
    REQUIRE_REPLICAS,
)
from function.contract.capacity import Usage
from function.contract.records import Cluster, Malformed
from function.contract.names import replica_resource_key
from function.kit.request import Request
from function.scheduler import parsecache
from function.kit import structs, wire
from function.scheduler.model import Replica, parse_replica, worst_case

# How a warning names a ModelReplica of another namespace.
ANOTHER_REPLICA = "a ModelReplica in another namespace"


@dataclass(frozen=True)
class Broken:
    """One of our ModelReplicas the scheduler cannot read: kept as it is."""

    key: str                      # its composed-resource key
    manifest: Mapping[str, Any]   # as observed
    why: str


@dataclass
class Fleet:
    clusters: list[Cluster] = field(default_factory=list)
    malformed_clusters: dict[str, str] = field(default_factory=dict)  # name -> why
    own: list[Replica] = field(default_factory=list)     # ours, each with its `key`
    others: list[Replica] = field(default_factory=list)  # every other replica (the ledger)
    broken: list[Broken] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # (cluster, index) -> our oldest replica there (see key()).
    _holders: dict[tuple[str, int], Replica] = field(default_factory=dict, repr=False)

    def key(self, cluster: str, index: int) -> str:
        """The composed-resource key of a placement: the replica's it replaces, if
        any (two of one index on one cluster: the oldest, which plan keeps), else new."""
        held = self._holders.get((cluster, index))
        return held.key if held is not None else replica_resource_key(cluster, index)

    @property
    def reserved(self) -> frozenset[int]:
        """Indexes our malformed replicas may still hold: never given to a new one."""
        return frozenset(i for b in self.broken for i in _broken_indexes(b.key, b.manifest))


def read(req: Request, observed: Mapping[str, Mapping[str, Any]],
         namespace: str, deployment: str) -> Fleet:
    """The fleet as the plan needs it; `observed` holds our ModelReplicas by key."""
    parsecache.new_request()
    fleet = Fleet()
    for item in req.required_items(REQUIRE_CLUSTERS):
        try:
            fleet.clusters.append(parsecache.CLUSTERS.get(item))
        except Malformed as exc:
            name = parsecache.identity(item)[1] or "?"
            fleet.malformed_clusters[name] = str(exc)
            fleet.warnings.append(f"InferenceCluster {name} is malformed and skipped: {exc}")

    for key, mr in observed.items():
        try:
            r = dataclasses.replace(parse_replica(mr), key=key)
        except Malformed as exc:
            fleet.broken.append(Broken(key, mr, str(exc)))
            # Kept as it is, so it holds what it holds: counted by the most it can.
            held = worst_case(mr)
            if held is not None:
                fleet.others.append(held)
            continue
        if r.index is None:
            # Without its index it cannot be retained, moved or scaled down:
            # keep it as is, but count the nodes it holds.
            fleet.broken.append(Broken(key, mr, f"it has no {LABEL_REPLICA_INDEX} label"))
            fleet.others.append(r)
            continue
        fleet.own.append(r)
        held = fleet._holders.get((r.cluster, r.index))
        if held is None or r.age_key < held.age_key:
            fleet._holders[(r.cluster, r.index)] = r

    own_names = {(r.namespace, r.name) for r in fleet.own} | {
        _identity(b.manifest) for b in fleet.broken}
    for item in req.required_items(REQUIRE_REPLICAS):
        try:
            r = parsecache.REPLICAS.get(item)
        except Malformed as exc:
            mr_ns, mr_name, _ = parsecache.identity(item)
            if (mr_ns, mr_name) in own_names:
                continue  # ours, counted above
            # Left out, its nodes would look free to every scheduler: count it
            # by the most it can hold (model.worst_case).
            held = worst_case(structs.to_dict(wire.resource(item).resource))
            # The warning goes onto this deployment: another namespace's replica is
            # not named, nor what is wrong inside it.
            who, why = ((f"ModelReplica {mr_ns}/{mr_name}", f": {exc}") if mr_ns == namespace
                        else (ANOTHER_REPLICA, ""))
            if held is None:
                fleet.warnings.append(f"{who} is malformed and names no cluster, so holds "
                                      f"nothing anywhere{why}")
                continue
            fleet.others.append(held)
            fleet.warnings.append(f"{who} is malformed and counted by the most it can hold on "
                                  f"{held.cluster} ({_nodes(held.usage)}){why}")
            continue
        if (r.namespace, r.name) in own_names:
            continue  # ours: counted through `own` (observed as composed)
        # Any other, even one labelled as this deployment's (written by hand, or on
        # its way out and no longer among our composed resources): it holds its nodes.
        fleet.others.append(r)
    return fleet


def _nodes(usage: Usage) -> str:
    """The pods a worst-case reading charges, each a whole node."""
    return ", ".join(f"{n} node{'s' if n != 1 else ''} of pool {p}"
                     for p, n in sorted((p, sum(pods.values())) for p, pods in usage.items())
                     ) or "no nodes"


def _identity(mr: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of a ModelReplica, hashable whatever it holds."""
    m = mr.get("metadata")
    m = m if isinstance(m, Mapping) else {}
    return str(m.get("namespace") or ""), str(m.get("name"))


def _broken_indexes(key: str, mr: Mapping[str, Any]) -> set[int]:
    """Indexes a malformed ModelReplica may still occupy (its label, its key),
    so that no new replica is given its name or its composed-resource key."""
    out = set()
    meta = mr.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    index = labels.get(LABEL_REPLICA_INDEX) if isinstance(labels, Mapping) else None
    if isinstance(index, str) and index.isdigit():
        out.add(int(index))
    m = re.fullmatch(r"replica-(\d+)-.*", key)
    if m:
        out.add(int(m[1]))
    return out
