"""The quota ledger: devices a namespace may still take under its InferenceQuotas.

Like the node ledger (ledger.py), a `QuotaLedger` starts from what every
replica of the quotas' namespaces holds now and reserves what each placement
adds; a placement that would take a limit past its devices is refused on that
cluster with a reason, and the plan tries the next cluster (another cluster
may fit a fungible alternative that the limit does not count) and then the
next firstAvailable level. The quota budget step (budgets.py) keeps it per
cycle and asks it per candidate, after capacity, since what a replica would
hold depends on the pool and alternative it got.

Replicas already placed are never judged: a lowered quota leaves them where
they are (the quota's status says the namespace is over). A quota whose limit
does not compile blocks every new placement in its namespaces, saying why, and
so does a quota that fails validation (contract/quotas.invalid_quota): failing
closed is the only safe reading of a cap nobody can evaluate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from function.contract import devicecel
from function.contract.capacity import member_pods
from function.contract.enums import DeviceClaim
from function.contract.quotas import Claim, Limit, Quota, devices, usage
from function.contract.records import Cluster, Device


@dataclass
class QuotaLedger:
    limits: list[tuple[str, Limit]]                  # (quota, limit) that apply
    used: dict[tuple[str, str], int] = field(default_factory=dict)
    invalid: str = ""                                # why every placement is refused

    def admit(self, held: Sequence[tuple[Device, int]]) -> str | None:
        """Why a placement holding `held` would break a limit (a reason phrase), or None."""
        if self.invalid:
            return self.invalid
        for quota, limit in self.limits:
            add = usage(limit, held)
            used = self.used.get((quota, limit.name), 0)
            if add and used + add > limit.devices:
                return (f"{{has}} no room under quota {quota}/{limit.name} ({used} of "
                        f"{limit.devices} devices in use, needs {add})")
        return None

    def reserve(self, held: Iterable[tuple[Device, int]], sign: int = 1) -> None:
        held = list(held)
        for quota, limit in self.limits:
            add = usage(limit, held)
            if add:
                self.used[(quota, limit.name)] = self.used.get((quota, limit.name), 0) + sign * add

    def release(self, held: Iterable[tuple[Device, int]]) -> None:
        self.reserve(held, sign=-1)


def ledger(quotas: Sequence[Quota], namespace: str, namespace_labels: Mapping[str, Mapping[str, str]],
           replicas: Iterable[tuple[str, tuple[Claim, ...], str]],
           clusters: Mapping[str, Cluster]) -> QuotaLedger | None:
    """The ledger of the quotas that apply to `namespace`, or None when none does.

    `namespace_labels` maps every namespace to its labels (for namespaceSelector);
    `replicas` are (namespace, claims, cluster name) of every ModelReplica now.
    """
    applying = [q for q in quotas if q.applies(namespace, namespace_labels.get(namespace, {}))]
    if not applying:
        return None
    out = QuotaLedger([(q.name, limit) for q in applying for limit in q.limits])
    broken = next((q for q in applying if q.invalid), None)
    if broken is not None:
        out.invalid = (f"{{is}} closed to namespace {namespace}: InferenceQuota {broken.name} "
                       f"is invalid ({broken.invalid})")
        return out
    bad = [f"{q.name}/{limit.name}" for q in applying for limit in q.limits
           if not _compiles(limit)]
    if bad:
        out.invalid = (f"{{is}} closed to namespace {namespace}: quota limit {bad[0]} has an "
                       "invalid CEL selector")
        return out
    held_by_ns: dict[str, list[tuple[Device, int]]] = {}
    for ns, claimed, cluster_name in replicas:
        cluster = clusters.get(cluster_name)
        if cluster is not None:
            held_by_ns.setdefault(ns, []).extend(devices(claimed, cluster))
    for q in applying:
        held = [h for ns, hs in held_by_ns.items()
                if q.applies(ns, namespace_labels.get(ns, {})) for h in hs]
        for limit in q.limits:
            out.used[(q.name, limit.name)] = usage(limit, held)
    return out


def _compiles(limit: Limit) -> bool:
    try:
        for expr in limit.selectors:
            devicecel.compile_selector(expr)
    except devicecel.CelError:
        return False
    return True


def fit_devices(engines: Sequence[Mapping[str, Any]], fit: Mapping[str, Any]) -> list[tuple[Device, int]]:
    """(device kind, how many) a new placement (engine name -> EnginePlacement) would hold."""
    out = []
    for engine in engines:
        placed = fit[engine["name"]]
        copies = int(engine.get("copies") or 1)
        for member, member_fit in zip(engine.get("members") or [], placed.fit.members):
            pods = member_pods(member) * copies
            for choice in member_fit.choices.values():
                if choice.device.claim == DeviceClaim.DRA:
                    out.append((choice.device, choice.count * pods))
    return out


def held_by(replica: Any, clusters: Mapping[str, Cluster]) -> list[tuple[Device, int]]:
    """What a placed replica (scheduler/model.Replica) holds on its cluster now."""
    cluster = clusters.get(replica.cluster)
    return list(devices(replica.claims, cluster)) if cluster is not None else []
