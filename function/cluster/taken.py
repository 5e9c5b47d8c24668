"""What other claims hold on each pool's counted nodes, for `status.nodePools[].takenDevices`.

Both readers of a cluster report, per pool, the devices other claims hold on
its Ready, uncordoned nodes, grouped by kind (contract/allocated.py). Here the
pool is in hand, so:

* only the nodes the pool counts remain: those repelling none of its pods
  (every NoSchedule/NoExecute taint is one of the pool's own), as
  inventory_report.count judges them;
* each kind becomes one of the pool's devices, the ones the scheduler counts
  (declared, or published when the spec leaves them out): the device of the
  same driver whose every attribute and capacity the kind has (the most
  specific one when several do); failing that, the pool's only DRA device of
  that driver, since a device of it taken on the node is one the pool's pods
  cannot have. A kind that is neither is none of the pool's devices.

The scheduler reads the result back (records.parse_cluster) while the
observation counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from function.contract.allocated import MAX_NODES
from function.contract.devicecel.library import parse_quantity
from function.contract.enums import DeviceClaim
from function.contract.inventory_report import PoolTaken, Taken
from function.contract.records import Pool

MAX_COUNT = 128  # a device's count maximum, as in spec.nodePools[].devices[]


def entries(pools: Sequence[Pool], devices: Mapping[str, Sequence[Mapping[str, Any]]],
            taken: Taken) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """Per pool, its counted nodes' devices held by others, and notes. `devices`
    are the pools' devices in the API shape, by pool name."""
    out: dict[str, list[dict[str, Any]]] = {}
    notes: list[str] = list(taken.notes)
    for pool in pools:
        reported = taken.pools.get(pool.name)
        out[pool.name] = [] if reported is None else \
            _pool(pool, devices.get(pool.name) or (), reported, notes)
    return out, notes


def _pool(pool: Pool, devices: Sequence[Mapping[str, Any]], reported: PoolTaken,
          notes: list[str]) -> list[dict[str, Any]]:
    names = [device_for(kind, devices) for kind in reported.kinds]
    for kind, name in zip(reported.kinds, names):
        if name is None:
            notes.append(f"pool {pool.name}: other claims hold {kind['driver']} devices that "
                         "are none of its devices: not counted")
    own = {str(t) for t in pool.taints}
    out = []
    for node in reported.nodes:
        if not own.issuperset(node.taints):
            continue  # a node the pool does not count
        counts: dict[str, int] = {}
        for index, n in node.devices:
            name = names[index] if index < len(names) else None
            if name is not None:
                counts[name] = counts.get(name, 0) + n
        if counts:
            out.append({"node": node.node, "devices": [
                {"name": name, "count": min(n, MAX_COUNT)} for name, n in sorted(counts.items())]})
    return out[:MAX_NODES]  # the reducer kept at most as many already


def device_for(kind: Mapping[str, Any], devices: Sequence[Mapping[str, Any]]) -> str | None:
    """The name of the pool device a kind of device is (see the module's note), or None."""
    driver = kind.get("driver")
    candidates = [d for d in devices if d.get("driver") == driver
                  and (d.get("claim") or DeviceClaim.DRA.value) == DeviceClaim.DRA.value]
    fitting = [d for d in candidates if _has(kind, d, driver)]
    if fitting:
        best = max(fitting, key=lambda d: len(d.get("attributes") or {})
                   + len(d.get("capacity") or {}))
        return str(best["name"])
    return str(candidates[0]["name"]) if len(candidates) == 1 else None


def _has(kind: Mapping[str, Any], device: Mapping[str, Any], driver: Any) -> bool:
    """Whether the kind has every attribute and capacity the device names."""
    attributes = {_local(k, driver): v for k, v in (kind.get("attributes") or {}).items()}
    if any(attributes.get(_local(k, driver)) != v
           for k, v in (device.get("attributes") or {}).items()):
        return False
    capacity = {_local(k, driver): v for k, v in (kind.get("capacity") or {}).items()}
    for k, v in (device.get("capacity") or {}).items():
        want = _quantity(v)
        if want is None or _quantity(capacity.get(_local(k, driver))) != want:
            return False
    return True


def _local(name: str, driver: Any) -> str:
    """An attribute's name without its driver's domain, which it may be written with."""
    prefix = f"{driver}/"
    return name[len(prefix):] if name.startswith(prefix) else name


def _quantity(capacity: Any) -> Decimal | None:
    value = capacity.get("value") if isinstance(capacity, Mapping) else None
    try:
        return parse_quantity(str(value)) if value is not None else None
    except ValueError:
        return None
