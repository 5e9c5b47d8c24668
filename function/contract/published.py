"""The devices a cluster's DRA drivers publish, as an InferenceCluster pool's devices.

A pool may leave `devices` out of its spec; the scheduler then counts what the
cluster publishes in its ResourceSlices (resource.k8s.io/v1). Both readers of a
cluster reduce its ResourceSlices and DeviceClasses with `pool_devices` (the
InferenceCluster function for the control-plane cluster, the inventory reporter
for a remote one), so a device counts the same wherever it runs. The reduction:

* Only node-local slices count (`spec.nodeName`): a slice for all nodes or a
  node selector describes network-attached devices, which no pool owns. Of each
  driver's resource pool only the newest generation counts, and only once all
  its slices are there (`resourceSliceCount`), as kube-scheduler reads them.
* A node's devices of one driver are one kind when their capacity and their
  attributes agree, leaving out identity attributes: those that tell a node's
  devices apart (no two of its devices of that driver share a value: uuid,
  index, minor, PCI address). With one device per node, an attribute whose
  value differs on every node is one (uuid). A pool that mixes models on one
  node one device each is better declared in the spec.
* The pool offers, per kind, the count every Ready node has (the least): a
  pool is a group of identical nodes, and counting what only some nodes have is
  the promised-capacity bug this exists to avoid. Disagreeing nodes are noted.
* A kind's deviceClassName is the first DeviceClass, by name, whose selectors
  all select it (a class with selectors before one without, which selects
  everything); a kind no class selects cannot be claimed and is left out, noted.
* Every device must pass the XRD's own schema (the generated model), since it
  lands in the InferenceCluster's status: one that does not is left out, noted.

Beside the devices it says what the serving stack's DRA driver entry judges
(cluster/stackdra.py): per pool, the drivers that publish any device on those
nodes, and the names of the cluster's DeviceClasses.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import pydantic

from function.contract.api import LABEL_POOL
from function.contract.devicecel import (
    CelBudgetError,
    CelCompileError,
    CelEvalError,
    compile_selector,
    device_activation,
)
from function.contract.inventory_report import ready
from function.contract.models.inferencecluster import PublishedDevice as Device
from function.contract.validation import dig

MAX_KINDS = 16    # spec.nodePools[].devices maxItems
MAX_COUNT = 128   # a device's count maximum
MAX_NOTES = 8
MAX_CLASSES = 256  # DeviceClass names reported (a name is at most 253 characters)
_NAME_CHARS = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True)
class Published:
    devices: Mapping[str, tuple[dict[str, Any], ...]]  # pool -> devices in the API shape
    notes: tuple[str, ...] = ()                         # what was left out, and why
    # pool -> the drivers publishing any device on its nodes (its Ready ones, or
    # all while none is Ready), by name
    drivers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    classes: tuple[str, ...] = ()  # the cluster's DeviceClasses, by name (MAX_CLASSES)


def pool_devices(nodes: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]],
                 classes: Iterable[Mapping[str, Any]]) -> Published:
    """The devices every node of each pool publishes (pools by label modelplane.ai/pool)."""
    pool_of: dict[str, str] = {}
    ready_nodes: set[str] = set()
    for node in nodes:
        meta = dig(node, "metadata")
        name, pool = meta.get("name"), dig(meta, "labels").get(LABEL_POOL)
        if isinstance(name, str) and isinstance(pool, str) and pool:
            pool_of[name] = pool
            if ready(dig(node, "status")):
                ready_nodes.add(name)
    notes: list[str] = []
    # node -> driver -> its devices, from the complete, newest slices only
    by_node: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
    for s in _current(slices, notes):
        node = s["spec"]["nodeName"]
        if node in pool_of:
            by_node.setdefault(node, {}).setdefault(s["spec"]["driver"], []).extend(
                d for d in s["spec"].get("devices") or [] if isinstance(d, Mapping))
    classes = list(classes)
    ordered_classes = _classes(classes)
    members: dict[str, list[str]] = {}  # pool -> its nodes, by name
    for name in sorted(pool_of):
        members.setdefault(pool_of[name], []).append(name)
    out: dict[str, tuple[dict[str, Any], ...]] = {}
    drivers: dict[str, tuple[str, ...]] = {}
    for pool in sorted(members):
        reference = [n for n in members[pool] if n in ready_nodes] or members[pool]
        out[pool] = _pool(pool, reference, by_node, ordered_classes, notes)
        drivers[pool] = tuple(sorted({d for n in reference
                                      for d, ds in by_node.get(n, {}).items() if ds}))
    names = sorted({n for c in classes if isinstance(n := dig(c, "metadata").get("name"), str)})
    if len(names) > MAX_CLASSES:
        notes.append(f"{len(names)} DeviceClasses; reporting the first {MAX_CLASSES} by name")
    return Published(out, tuple(notes[:MAX_NOTES]), drivers, tuple(names[:MAX_CLASSES]))


def _current(slices: Iterable[Mapping[str, Any]], notes: list[str]) -> list[Mapping[str, Any]]:
    """Node-local slices of each resource pool's newest, complete generation."""
    pools: dict[tuple[str, str], list[tuple[int, int, Mapping[str, Any]]]] = {}
    for s in slices:
        spec = dig(s, "spec")
        node, driver, pool = spec.get("nodeName"), spec.get("driver"), dig(spec, "pool")
        generation, count = pool.get("generation"), pool.get("resourceSliceCount")
        if not (isinstance(node, str) and node and isinstance(driver, str) and driver
                and isinstance(pool.get("name"), str) and _int(generation) and _int(count)):
            continue
        pools.setdefault((driver, pool["name"]), []).append((generation, count, s))
    out = []
    for (driver, name), entries in sorted(pools.items()):
        newest = max(g for g, _, _ in entries)
        current = [(c, s) for g, c, s in entries if g == newest]
        if len(current) < current[0][0]:
            notes.append(f"resource pool {name!r} of driver {driver} has {len(current)} of "
                         f"its {current[0][0]} slices: left out until it is complete")
            continue
        out += [s for _, s in current]
    return out


def _int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _classes(classes: Iterable[Mapping[str, Any]]) -> list[tuple[str, list[Any]]]:
    """DeviceClasses with compiled selectors, in the order they are tried."""
    out = []
    for c in classes:
        name = dig(c, "metadata").get("name")
        selectors = dig(c, "spec").get("selectors")
        if not isinstance(name, str) or not isinstance(selectors or [], list):
            continue
        try:
            compiled = [compile_selector(dig(s, "cel").get("expression")) for s in selectors or []]
        except CelCompileError:
            continue  # kube-scheduler cannot allocate through it either
        out.append((name, compiled))
    return sorted(out, key=lambda c: (not c[1], c[0]))


def _class_for(device: Mapping[str, Any], classes: Sequence[tuple[str, list[Any]]]) -> str:
    activation = device_activation(dict(device))
    for name, selectors in classes:
        try:
            if all(s.matches(activation) for s in selectors):
                return name
        except (CelEvalError, CelBudgetError):  # kube-scheduler cannot allocate through it
            continue
    return ""


def _pool(pool: str, reference: Sequence[str],
          by_node: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]],
          classes: Sequence[tuple[str, list[Any]]], notes: list[str]) -> tuple[dict, ...]:
    drivers = sorted({d for n in reference for d in by_node.get(n, {})})
    kinds: dict[str, dict[str, Any]] = {}   # kind key -> a representative device
    names: dict[str, set[str]] = {}          # kind key -> device names seen
    per_node: list[Counter] = [Counter() for _ in reference]
    for driver in drivers:
        devices = [by_node.get(n, {}).get(driver, ()) for n in reference]
        identity = identity_attributes(devices)
        for counter, node_devices in zip(per_node, devices):
            for d in node_devices:
                attributes = {k: v for k, v in (d.get("attributes") or {}).items()
                              if k not in identity}
                kind = {"driver": driver, "attributes": attributes,
                        "capacity": dict(d.get("capacity") or {})}
                key = json.dumps(kind, sort_keys=True)
                kinds.setdefault(key, kind)
                names.setdefault(key, set()).add(str(d.get("name") or ""))
                counter[key] += 1
    out: list[dict[str, Any]] = []
    taken: set[str] = set()
    for key in sorted(kinds, key=lambda k: (kinds[k]["driver"], _base(names[k]), k)):
        counts = [c[key] for c in per_node]
        count = min(counts)
        if max(counts) != count:
            notes.append(f"pool {pool}: its nodes publish {min(counts)} to {max(counts)} "
                         f"{_base(names[key])} devices of {kinds[key]['driver']}; counting "
                         f"{count}, what every node has")
        if count == 0:
            continue
        kind = kinds[key]
        device_class = _class_for(kind, classes)
        if not device_class:
            notes.append(f"pool {pool}: no DeviceClass selects its {_base(names[key])} devices "
                         f"of {kind['driver']}, so pods cannot claim them: left out")
            continue
        if len(out) == MAX_KINDS:
            notes.append(f"pool {pool}: more than {MAX_KINDS} kinds of devices; "
                         f"counting the first {MAX_KINDS}")
            break
        if count > MAX_COUNT:
            notes.append(f"pool {pool}: {count} {_base(names[key])} devices per node; "
                         f"counting {MAX_COUNT}, the most a pool's device may have")
        name = _unique(_base(names[key]), taken)
        device = {"name": name, "driver": kind["driver"], "deviceClassName": device_class,
                  "count": min(count, MAX_COUNT)}
        device.update({k: kind[k] for k in ("attributes", "capacity") if kind[k]})
        misfit = _misfit(device)
        if misfit:
            notes.append(f"pool {pool}: the kind of its {name} devices of "
                         f"{kind['driver']} {misfit}")
            continue
        taken.add(name)
        out.append(device)
    return tuple(out)


def _misfit(device: Any) -> str:
    """Why a device cannot land in the InferenceCluster's status, or ""."""
    try:
        Device.model_validate(device)
    except pydantic.ValidationError as exc:
        return f"does not fit an InferenceCluster device ({exc.error_count()} errors): left out"
    return ""


def identity_attributes(devices: Sequence[Sequence[Mapping[str, Any]]]) -> set[str]:
    """Attribute names that tell devices of one driver apart (see the module's note)."""
    names = {k for node in devices for d in node for k in (d.get("attributes") or {})}

    def distinct(group: Sequence[Mapping[str, Any]], name: str) -> bool:
        values = [json.dumps((d.get("attributes") or {}).get(name), sort_keys=True)
                  for d in group]
        return len(set(values)) == len(values)

    several = [node for node in devices if len(node) >= 2]
    if several:
        return {n for n in names if all(distinct(node, n) for node in several)}
    single = [d for node in devices for d in node]
    return {n for n in names if len(single) >= 2 and distinct(single, n)}


def _base(names: Iterable[str]) -> str:
    """A DNS-label name for a kind from its devices' names: their common prefix,
    without a trailing index ("gpu-0".."gpu-7" -> "gpu")."""
    ordered = sorted(names)
    prefix = ordered[0] if ordered else ""
    for n in ordered[1:]:
        while not n.startswith(prefix):
            prefix = prefix[:-1]
    base = _NAME_CHARS.sub("-", prefix.lower())
    base = re.sub(r"(-[0-9]*)+$", "", base).strip("-")[:55].strip("-")
    return base or "device"


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    i = 2
    while f"{name}-{i}" in taken:
        i += 1
    return f"{name}-{i}"


def checked(pool: str, devices: Sequence[Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """A report's devices for a pool that pass the XRD's schema, and notes on the
    rest: a report read back may come from another version of the reporter,
    and one bad device must not fail the InferenceCluster's status update."""
    out: list[dict[str, Any]] = []
    notes: list[str] = []
    for d in devices:
        misfit = _misfit(d)
        if misfit:
            notes.append(f"pool {pool}: a reported device {misfit}")
            continue
        if len(out) == MAX_KINDS or any(o["name"] == d["name"] for o in out):
            notes.append(f"pool {pool}: reported device {d['name']!r} is one too many "
                         "or named twice: left out")
            continue
        out.append(dict(d))
    return out, notes
