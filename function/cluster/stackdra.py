"""The serving stack's DRA driver entry (spec.stack.draDriver, External only).

A pool's DRA devices are claimed through the DeviceClass each names, and
allocated from what its driver publishes in ResourceSlices: without the class a
claim is refused, without the driver's slices it never allocates, and a replica
placed there waits forever. The stack observes both with the cluster's nodes
(observe.py: the inventory report of a remote cluster, the control-plane
cluster's own objects read directly; published.py reduces them alike):

* every DeviceClass a pool's declared DRA device names exists on the cluster;
* each such device's driver publishes devices on the pool's nodes (its Ready
  ones, or all while none is Ready; a pool with no node is not judged);
* a cluster whose pools declare no DRA device has some pool publishing devices
  (pools that leave `devices` out count what the drivers publish).

Failed names what is missing and what to do; Progressing while nothing is
observed yet. A stale report is judged as it stands: its staleness is the
CapacityObserved condition's to say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from function.cluster import stackstatus
from function.contract.enums import DeviceClaim, StackMode, StackPhase
from function.contract.inventory_report import Observation, count
from function.contract.records import Pool
from function.contract.stack import DRA_DRIVER

NAMED_MAX = 3      # problems named in a Failed message


def declared(spec: Mapping[str, Any]) -> bool:
    """Whether spec.stack declares the DRA driver (External: admission refuses Managed)."""
    stack = spec.get("stack")
    return isinstance(stack, Mapping) and isinstance(stack.get(DRA_DRIVER.field), Mapping)


def _entry(phase: StackPhase, reason: str, message: str) -> dict[str, Any]:
    return stackstatus.entry(DRA_DRIVER.field, DRA_DRIVER.version, StackMode.EXTERNAL,
                             phase, reason, message)


def missing(pools: Sequence[Pool], observation: Observation) -> list[tuple[str, str]]:
    """What the pools' declared DRA devices need and the cluster lacks: (reason, what)."""
    classes = set(observation.classes or ())
    drivers = observation.drivers or {}
    out: list[tuple[str, str]] = []
    for pool in pools:
        ready, _ = count(observation.pools.get(pool.name, ()), pool.taints)
        nodes = sum(g.nodes for g in observation.pools.get(pool.name, ()))
        for d in pool.devices:
            if d.claim != DeviceClaim.DRA:
                continue
            if d.device_class not in classes:
                out.append(("DeviceClassMissing",
                            f"pool {pool.name}'s device {d.name} names DeviceClass "
                            f"{d.device_class}, which the cluster does not have: install the "
                            "driver that provides it, or correct deviceClassName"))
            driver = str(d.spec.get("driver") or "")
            if nodes and driver not in drivers.get(pool.name, ()):
                out.append(("NotPublished",
                            f"driver {driver} publishes no device on pool {pool.name}'s "
                            f"{ready if ready else nodes} {'Ready ' if ready else ''}nodes: run "
                            "its kubelet plugin there"))
    return out


def entry(pools: Sequence[Pool], observation: Observation | str | None) -> dict[str, Any]:
    """status.stack.components[]'s draDriver entry. `observation` as observe.py has it:
    a string saying why there is none (None: spec.inventory.source Declared, which
    admission refuses with a draDriver)."""
    if not isinstance(observation, Observation):
        return _entry(StackPhase.PROGRESSING, "NotObservedYet",
                      f"the cluster's devices are not observed yet: "
                      f"{observation or 'spec.inventory.source is Declared'}")
    if observation.classes is None or observation.drivers is None:
        return _entry(StackPhase.PROGRESSING, "NotReported",
                      "the inventory report does not list DeviceClasses and drivers yet (a "
                      "reporter older than this release)")
    problems = missing(pools, observation)
    if problems:
        said = "; ".join(what for _, what in problems[:NAMED_MAX])
        more = f" (and {len(problems) - NAMED_MAX} more)" if len(problems) > NAMED_MAX else ""
        return _entry(StackPhase.FAILED, problems[0][0], said + more)
    publishing = [p.name for p in pools if observation.drivers.get(p.name)]
    drivers = sorted({d for p in publishing for d in observation.drivers[p]})
    dra = any(d.claim == DeviceClaim.DRA for p in pools for d in p.devices)
    if not dra and not publishing:
        return _entry(StackPhase.FAILED, "NoDevices",
                      "no pool declares a DRA device and no driver publishes devices on the "
                      "pools' nodes: install the accelerators' DRA driver, or take draDriver "
                      "out of the stack")
    return _entry(StackPhase.OBSERVED, "Published",
                  f"{', '.join(drivers) or 'no driver'} publishing on "
                  f"{len(publishing)} of {len(pools)} pools; "
                  f"{len(observation.classes)} DeviceClasses")
