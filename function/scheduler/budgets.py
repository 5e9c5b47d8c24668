"""Budget steps: what a placement may still take, judged per replica.

A filter's verdict depends on the deployment and the cluster alone, so the
cycle asks it once per cluster. A budget's depends on what the replicas
placed so far hold, so the cycle asks it per candidate (cluster, level),
after the filters admit the cluster, in BUDGETS order: the first reason is
the cluster's verdict. When every budget admits, the replica lands and each
budget counts what it holds; when a replica leaves, each stops counting it.

Capacity comes first: it finds where the replica's engines would run
(filters.capacity), and the budgets after it judge that placement.
"""

from __future__ import annotations

import dataclasses

from function.scheduler import filters
from function.scheduler.framework import Attempt, Budget, CycleState, Held
from function.scheduler.matching import levels
from function.scheduler.quotas import (
    QuotaLedger,
    fit_devices,
    held_by,
    replica_pods,
    template_pods,
)


class CapacityTally:
    """Devices: each engine on a pool of the cluster whose nodes have the devices
    its pods take free, counted in the cycle's device ledger (ledger.py)."""

    def __init__(self, state: CycleState) -> None:
        self._state = state
        self._levels = range(levels(state.deployment.engines))
        # (cluster, level) -> why capacity refused this deployment's replica there.
        # Its replicas are alike, so the verdict holds until that cluster's
        # ledger changes (reserve and release forget it): without it, Pack's walk
        # (fullest first) re-ran capacity on every full cluster for every
        # replica (L: 3x).
        self._unfit: dict[tuple[str, int], str] = {}

    def admit(self, attempt: Attempt) -> str | None:
        key = (attempt.cluster.name, attempt.level)
        known = self._unfit.get(key)
        if known is not None:
            return known
        st = self._state
        fit, reason = filters.capacity(st.deployment, attempt.cluster, st.matcher, st.ledger,
                                       level=attempt.level)
        if fit is None:
            self._unfit[key] = reason = reason or "{has} no room"
            return reason
        attempt.engines = fit
        return None

    def reserve(self, held: Held) -> None:
        self._state.ledger.reserve(held.cluster, held.pods)
        self._forget(held.cluster)

    def release(self, held: Held) -> None:
        self._state.ledger.release(held.cluster, held.pods)
        self._forget(held.cluster)

    def snapshot(self) -> object:
        return self._state.ledger.snapshot()

    def restore(self, saved: object) -> None:
        self._state.ledger.restore(saved)  # type: ignore[arg-type]
        self._unfit.clear()

    def _forget(self, cluster: str) -> None:
        for level in self._levels:
            self._unfit.pop((cluster, level), None)


class QuotaTally:
    """Devices, replicas and pods: the namespace's InferenceQuotas (quotas.py), on a
    copy of their ledger so the plan stays a pure function of its inputs."""

    def __init__(self, state: CycleState, quota: QuotaLedger) -> None:
        self._state = state
        self._ledger = dataclasses.replace(quota, used=dict(quota.used))

    def admit(self, attempt: Attempt) -> str | None:
        assert attempt.engines is not None, "capacity, which places the engines, runs first"
        engines = self._state.deployment.engines
        return self._ledger.admit(fit_devices(engines, attempt.engines), template_pods(engines))

    def reserve(self, held: Held) -> None:
        if not held.foreign:  # another deployment's: its own quota counts it
            self._ledger.reserve(self._devices(held), self._pods(held))

    def release(self, held: Held) -> None:
        if not held.foreign:
            self._ledger.release(self._devices(held), self._pods(held))

    def snapshot(self) -> object:
        return dict(self._ledger.used)

    def restore(self, saved: object) -> None:
        self._ledger.used.clear()
        self._ledger.used.update(saved)  # type: ignore[call-overload]

    def _pods(self, held: Held) -> int:
        if held.replica is not None:
            return replica_pods(held.replica)
        return template_pods(self._state.deployment.engines)

    def _devices(self, held: Held):
        if held.replica is not None:
            return held_by(held.replica, self._state.clusters)
        return fit_devices(self._state.deployment.engines, held.engines or {})


def _quota(state: CycleState) -> QuotaTally | None:
    return QuotaTally(state, state.quota) if state.quota is not None else None


# In the order the cycle asks them: a cluster's verdict is the first reason.
BUDGETS: tuple[Budget, ...] = (
    Budget("capacity", CapacityTally),
    Budget("quota", _quota),
)
