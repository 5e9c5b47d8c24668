"""What a cluster's nodes say about its pools: the inventory report.

Two readers observe a cluster's Nodes: the InferenceCluster function reads the
control-plane cluster's directly (Crossplane's required resources), and the
inventory reporter (`function-model-serving inventory`, composed onto each
remote cluster) lists its cluster's and writes a report the function reads
back. Both reduce the Nodes to the same report with `summarize`, so a node
counts the same wherever it runs.

The report groups a pool's nodes by what decides whether a replica's pods can
land on them: Ready, cordoned, and the NoSchedule/NoExecute taints they carry.
It does not judge them, because only the InferenceCluster knows the pool's own
taints, which its pods tolerate: `count` does that with the pool in hand. A
report holds one group per distinct state, not one entry per node, so it stays
small (a ConfigMap holds at most 1 MiB) on a cluster of thousands of nodes.
Beside the node groups it carries, per pool, the devices every Ready node
publishes in the cluster's ResourceSlices (published.py), at most 16 per pool,
the drivers publishing on each pool's nodes and the cluster's DeviceClasses (what
the serving stack's DRA driver entry judges, cluster/stackdra.py).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from function.contract.api import LABEL_POOL
from function.contract.enums import TaintEffect
from function.contract.records import Malformed, Taint
from function.contract.validation import dig  # Nodes arrive unvalidated

VERSION = 1
# Where the reporter writes its report on the workload cluster.
REPORT_NAMESPACE = "modelplane-system"
REPORT_NAME = "modelplane-inventory"
REPORT_KEY = "inventory.json"
# Taints that keep pods off a node (PreferNoSchedule is advice, as kube-scheduler reads it).
_REPELLING = (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)


@dataclass(frozen=True)
class NodeGroup:
    """Nodes of one pool in one state."""

    ready: bool
    unschedulable: bool        # cordoned (spec.unschedulable)
    taints: tuple[str, ...]    # NoSchedule/NoExecute taints, as `Taint.__str__`, sorted
    nodes: int


@dataclass(frozen=True)
class NodeTaken:
    """One Ready, uncordoned node and the devices other claims hold on it (allocated.py)."""


    node: str
    taints: tuple[str, ...]               # NoSchedule/NoExecute, as NodeGroup's
    devices: tuple[tuple[int, int], ...]  # (index into the pool's kinds, count), by index


@dataclass(frozen=True)
class PoolTaken:
    kinds: tuple[dict[str, Any], ...]     # {"driver", "attributes", "capacity"}
    nodes: tuple[NodeTaken, ...]          # by node name


@dataclass(frozen=True)
class Taken:
    pools: Mapping[str, PoolTaken]        # pool name -> what others hold on its nodes
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Observation:
    pools: Mapping[str, tuple[NodeGroup, ...]]  # pool name -> its nodes, grouped
    observed_at: str                            # RFC 3339, UTC
    # pool name -> the devices every node of it publishes (published.py); a
    # pool without an entry publishes none, or the report predates devices.
    devices: Mapping[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what the device reduction left out, and why
    # The devices other claims hold on each pool's nodes (allocated.py); None
    # when the report predates them: nothing known, nothing taken.
    taken: Taken | None = None
    # pool -> the drivers publishing devices on its nodes, and the cluster's
    # DeviceClasses by name (published.py); None when the report predates them.
    drivers: Mapping[str, tuple[str, ...]] | None = None
    classes: tuple[str, ...] | None = None


def summarize(nodes: Iterable[Mapping[str, Any]]) -> dict[str, tuple[NodeGroup, ...]]:
    """Nodes grouped by pool (label modelplane.ai/pool) and state; nodes without
    the label belong to no pool and are left out."""
    counts: dict[str, dict[tuple[bool, bool, tuple[str, ...]], int]] = {}
    for node in nodes:
        pool = dig(node, "metadata", "labels").get(LABEL_POOL)
        if not isinstance(pool, str) or not pool:
            continue
        spec, status = dig(node, "spec"), dig(node, "status")
        state = (ready(status), spec.get("unschedulable") is True,
                 repelling(spec.get("taints")))
        groups = counts.setdefault(pool, {})
        groups[state] = groups.get(state, 0) + 1
    return {pool: tuple(NodeGroup(r, u, t, n) for (r, u, t), n in sorted(groups.items()))
            for pool, groups in sorted(counts.items())}


def ready(status: Mapping[str, Any]) -> bool:
    conditions = status.get("conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions)


def repelling(taints: Any) -> tuple[str, ...]:
    out = set()
    for t in taints if isinstance(taints, list) else ():
        if isinstance(t, Mapping) and t.get("effect") in _REPELLING and t.get("key"):
            out.add(str(Taint(str(t["key"]), str(t.get("value") or ""), str(t["effect"]))))
    return tuple(sorted(out))


def count(groups: Iterable[NodeGroup], pool_taints: Iterable[Taint]) -> tuple[int, int]:
    """(ready, schedulable) nodes of a pool: schedulable is Ready, not cordoned,
    and repelling no pod of the pool (every taint is one of the pool's own,
    which its pods tolerate)."""
    own = {str(t) for t in pool_taints}
    ready = schedulable = 0
    for g in groups:
        if g.ready:
            ready += g.nodes
            if not g.unschedulable and own.issuperset(g.taints):
                schedulable += g.nodes
    return ready, schedulable


def render(pools: Mapping[str, tuple[NodeGroup, ...]], observed_at: datetime.datetime,
           devices: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
           notes: Sequence[str] = (), taken: Taken | None = None,
           drivers: Mapping[str, Sequence[str]] | None = None,
           classes: Sequence[str] | None = None) -> str:
    """The report as the reporter writes it: canonical JSON. `devices`, `notes`,
    `drivers` and `classes` are published.py's, `taken` allocated.py's (optional: a
    reader of version 1 without them counts nodes alone)."""
    extra: dict[str, Any] = {} if taken is None else {"taken": {
        "pools": {pool: {"kinds": list(t.kinds),
                         "nodes": [{"node": n.node, "taints": list(n.taints),
                                    "devices": [{"kind": k, "count": c} for k, c in n.devices]}
                                   for n in t.nodes]}
                  for pool, t in sorted(taken.pools.items())},
        "notes": list(taken.notes)}}
    if drivers is not None:
        extra["drivers"] = {pool: list(ds) for pool, ds in sorted(drivers.items())}
    if classes is not None:
        extra["deviceClasses"] = list(classes)
    return json.dumps({
        **extra,
        "version": VERSION,
        "observedAt": rfc3339(observed_at),
        "pools": {pool: [{"ready": g.ready, "unschedulable": g.unschedulable,
                          "taints": list(g.taints), "nodes": g.nodes} for g in groups]
                  for pool, groups in sorted(pools.items())},
        "devices": {pool: list(ds) for pool, ds in sorted((devices or {}).items())},
        "notes": list(notes),
    }, sort_keys=True, separators=(",", ":"))


def parse(text: Any) -> Observation:
    """A report read back; raises Malformed saying what is wrong with it."""
    if not isinstance(text, str):
        raise Malformed(f"the report is {type(text).__name__}, not a string")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise Malformed(f"the report is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise Malformed(f"the report is not version {VERSION} of the inventory report")
    observed_at = doc.get("observedAt")
    # parse_time is None for anything but a string.
    if not isinstance(observed_at, str) or parse_time(observed_at) is None:
        raise Malformed(f"the report's observedAt {str(observed_at)[:40]!r} is not RFC 3339")
    pools = doc.get("pools")
    if not isinstance(pools, dict):
        raise Malformed("the report's pools is not an object")
    out = {}
    for pool, groups in pools.items():
        if not isinstance(groups, list):
            raise Malformed(f"the report's pool {pool[:63]!r} is not a list")
        out[pool] = tuple(_group(pool, g) for g in groups)
    devices, notes = doc.get("devices") or {}, doc.get("notes") or []
    if not isinstance(devices, dict) or not all(
            isinstance(ds, list) and all(isinstance(d, dict) for d in ds)
            for ds in devices.values()):
        raise Malformed("the report's devices is not an object of lists of devices")
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise Malformed("the report's notes is not a list of strings")
    drivers, classes = doc.get("drivers"), doc.get("deviceClasses")
    if drivers is not None and not (isinstance(drivers, dict)
                                    and all(_strings(ds) for ds in drivers.values())):
        raise Malformed("the report's drivers is not an object of lists of names")
    if classes is not None and not _strings(classes):
        raise Malformed("the report's deviceClasses is not a list of names")
    return Observation(out, observed_at, {p: tuple(ds) for p, ds in devices.items()},
                       tuple(notes), _taken(doc.get("taken")),
                       None if drivers is None else {p: tuple(ds) for p, ds in drivers.items()},
                       None if classes is None else tuple(classes))


def _taken(doc: Any) -> Taken | None:
    """The report's `taken`, None when it has none (a reporter older than it)."""
    if doc is None:
        return None
    bad = Malformed("the report's taken devices are malformed")
    if not isinstance(doc, dict) or not isinstance(doc.get("pools"), dict) \
            or not _strings(doc.get("notes", [])):
        raise bad
    pools = {}
    for pool, t in doc["pools"].items():
        kinds = t.get("kinds") if isinstance(t, dict) else None
        nodes = t.get("nodes") if isinstance(t, dict) else None
        if not isinstance(kinds, list) or not all(
                isinstance(k, dict) and isinstance(k.get("driver"), str)
                and isinstance(k.get("attributes"), dict) and isinstance(k.get("capacity"), dict)
                for k in kinds) or not isinstance(nodes, list):
            raise bad
        entries = []
        for n in nodes:
            held = n.get("devices") if isinstance(n, dict) else None
            if not isinstance(n, dict) or not isinstance(n.get("node"), str) \
                    or not _strings(n.get("taints")) or not isinstance(held, list) \
                    or not all(isinstance(d, dict) and _count(d.get("kind"), len(kinds) - 1)
                               and _count(d.get("count"), None) for d in held):
                raise bad
            entries.append(NodeTaken(n["node"], tuple(n["taints"]),
                                     tuple((d["kind"], d["count"]) for d in held)))
        pools[pool] = PoolTaken(tuple(kinds), tuple(entries))
    return Taken(pools, tuple(doc.get("notes", [])))


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _count(value: Any, most: int | None) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        and (most is None or value <= most)


def _group(pool: str, g: Any) -> NodeGroup:
    if not isinstance(g, dict) or not isinstance(g.get("ready"), bool) \
            or not isinstance(g.get("unschedulable"), bool) \
            or not isinstance(g.get("nodes"), int) or isinstance(g.get("nodes"), bool) \
            or g["nodes"] < 0 or not isinstance(g.get("taints"), list) \
            or not all(isinstance(t, str) for t in g["taints"]):
        raise Malformed(f"a node group of pool {pool[:63]!r} in the report is malformed")
    return NodeGroup(g["ready"], g["unschedulable"], tuple(g["taints"]), g["nodes"])


def rfc3339(t: datetime.datetime) -> str:
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> datetime.datetime | None:
    """An RFC 3339 time as Kubernetes writes it, or None."""
    if not isinstance(value, str):
        return None
    try:
        t = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return t if t.tzinfo is not None else None
