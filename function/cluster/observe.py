"""Which nodes of each pool exist now, and whether that observation counts.

An InferenceCluster's `nodePools[].nodes` is what a person typed; the nodes
the scheduler counts should be the ones a pod can land on now. The function
observes them two ways (contract/inventory_report.py reduces both alike):

* the control-plane cluster (no providerConfigRef): its Nodes, read directly
  through Crossplane's required resources, one requirement per pool label.
  A live read on every reconcile, so never stale; its `observedAt` is when the
  counts last changed, kept from the previous status while they hold (a time
  that moved on every reconcile would rewrite the status every time).
* a remote cluster: the inventory reporter's report (reporter.py composes
  it), read back through an observe-only Object. Its `observedAt` is the
  reporter's heartbeat: older than `spec.inventory.staleAfterSeconds`, the
  report no longer counts.

`judge` says, per pool, what the scheduler counts: the observed schedulable
nodes, never more than declared, while the observation counts; otherwise the
declared nodes, with the CapacityObserved condition saying why. The
scheduler reads that verdict back from the cluster's status
(records.parse_cluster), so the clock is read here only, and the scheduler
stays a pure function of its inputs.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from function.contract import allocated, inventory_report, published
from function.contract.inventory_report import Observation
from function.contract.records import Malformed, Pool
from function.contract.validation import dig

CONDITION = "CapacityObserved"
MAX_MESSAGE = 2000  # its message, the published devices' notes included


@dataclass(frozen=True)
class PoolCount:
    name: str
    declared: int
    counted: int                  # what the scheduler counts
    ready: int | None = None      # observed; None: no observation of the pool
    schedulable: int | None = None


@dataclass(frozen=True)
class Verdict:
    pools: tuple[PoolCount, ...]
    observed_at: str   # "" without an observation
    status: str        # the condition's: "True" when the observation counts
    reason: str
    message: str


def local(nodes: Sequence[Mapping[str, Any]], pools: Sequence[Pool],
          previous: Mapping[str, Any], now: datetime.datetime,
          slices: Sequence[Mapping[str, Any]] = (),
          classes: Sequence[Mapping[str, Any]] = (),
          claims: Sequence[Mapping[str, Any]] = ()) -> Observation:
    """The control-plane cluster's own Nodes (the devices its ResourceSlices
    publish, and those its ResourceClaims hold), observed now; `observedAt`
    stays as the previous status had it while every pool's counts are unchanged."""
    found = published.pool_devices(nodes, slices, classes)
    observation = Observation(inventory_report.summarize(nodes), inventory_report.rfc3339(now),
                              found.devices, found.notes,
                              allocated.taken(nodes, slices, allocated.held(claims)),
                              found.drivers, found.classes)
    before = _previous_pools(previous)
    since = next((p.get("observedAt") for p in before.values()), None)
    # parse_time is None for anything but a string.
    if not isinstance(since, str) or inventory_report.parse_time(since) is None:
        return observation
    unchanged = all(
        (before.get(p.name) or {}).get(k) == v
        for p in pools
        for k, v in zip(("readyNodes", "schedulableNodes"),
                        inventory_report.count(observation.pools.get(p.name, ()), p.taints)))
    return dataclasses.replace(observation, observed_at=since) if unchanged else observation


def _previous_pools(previous: Mapping[str, Any]) -> dict[Any, Mapping[str, Any]]:
    """The previous status's pools by name (the status is this function's own output)."""
    listed = previous.get("nodePools") if isinstance(previous, Mapping) else None
    return {p.get("name"): p for p in listed if isinstance(p, Mapping)} \
        if isinstance(listed, list) else {}


def remote(report_object: Mapping[str, Any] | None) -> Observation | str:
    """The reporter's report from the observed Object, or why there is none."""
    if report_object is None:
        return "the inventory reporter's report is not observed yet"
    data = dig(report_object, "status", "atProvider", "manifest", "data")
    if inventory_report.REPORT_KEY not in data:
        return (f"the inventory reporter has not reported yet (no ConfigMap "
                f"{inventory_report.REPORT_NAMESPACE}/{inventory_report.REPORT_NAME} on the cluster)")
    try:
        return inventory_report.parse(data[inventory_report.REPORT_KEY])
    except Malformed as exc:
        return f"the inventory report is unreadable: {exc}"


def judge(pools: Sequence[Pool], observation: Observation | str | None,
          now: datetime.datetime, stale_after: int, live: bool) -> Verdict:
    """What to count per pool. `observation` is None when the cluster's nodes
    are declared only, a string saying why when nothing was observed; `live`
    when it was read now (never stale)."""
    if observation is None:
        return _declared(pools, "Declared", "spec.inventory.source is Declared: "
                         "counting nodePools[].nodes as written")
    if isinstance(observation, str):
        return _declared(pools, "NotObserved", f"{observation}; counting the declared nodes")
    counts = [(p, *inventory_report.count(observation.pools.get(p.name, ()), p.taints)) for p in pools]
    at = inventory_report.parse_time(observation.observed_at)
    age = (now - at).total_seconds() if at is not None else float("inf")
    if not live and age > stale_after:
        return Verdict(tuple(PoolCount(p.name, p.nodes, p.nodes, r, s) for p, r, s in counts),
                       observation.observed_at, "False", "Stale",
                       f"the inventory report is from {observation.observed_at}, older than "
                       f"{stale_after}s (spec.inventory.staleAfterSeconds); counting the "
                       "declared nodes until the reporter reports again")
    short = [f"{p.name} {s}/{p.nodes}" for p, _, s in counts if s < p.nodes]
    message = ("every pool has its declared nodes schedulable" if not short else
               "schedulable of declared: " + ", ".join(short))
    return Verdict(tuple(PoolCount(p.name, p.nodes, min(p.nodes, s), r, s) for p, r, s in counts),
                   observation.observed_at, "True", "Observed", message)


def _declared(pools: Sequence[Pool], reason: str, message: str) -> Verdict:
    return Verdict(tuple(PoolCount(p.name, p.nodes, p.nodes) for p in pools), "",
                   "False", reason, message)



def devices(pools: Sequence[Pool], observation: Observation | str | None,
            previous: Mapping[str, Any]) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """Per pool, the devices its nodes publish, for `status.nodePools[].publishedDevices`,
    and notes on what was left out. Without a fresh word on a pool (no observation,
    or none of its nodes in it), the previous status's devices stay: devices that
    vanished from the status would move running replicas off a pool whose
    reporter merely paused, and a stale report's node counts fall back to the
    declared ones anyway."""
    before = {name: p.get("publishedDevices") for name, p in _previous_pools(previous).items()}
    out: dict[str, list[dict[str, Any]]] = {}
    notes: list[str] = list(observation.notes) if isinstance(observation, Observation) else []
    for p in pools:
        reported = observation.devices.get(p.name) \
            if isinstance(observation, Observation) else None
        if reported is not None:
            out[p.name], bad = published.checked(p.name, reported)
            notes += bad
        elif isinstance(kept := before.get(p.name), list):
            out[p.name], _ = published.checked(p.name, kept)
    return out, notes
