"""The quota ledger: devices a namespace may still take under its InferenceQuotas.

Like the node ledger (ledger.py), a `QuotaLedger` starts from what every
replica of the quotas' namespaces holds now and reserves what each placement
adds; a placement that would take a limit past its devices is refused on that
cluster with a reason, and the plan tries the next cluster (another cluster
may fit a fungible alternative that the limit does not count) and then the
next firstAvailable level. The quota budget step (budgets.py) keeps it per
cycle and asks it per candidate, after capacity, since what a replica would
hold depends on the pool and alternative it got.

A limit is judged per placement on what the scheduler reads now, so
deployments reconciled from one snapshot can each take the last devices, and
a lowered limit leaves the namespaces over it. The ledger therefore also
keeps who holds what (`holders`, with their ages): when the replicas of a
quota's namespaces hold more than a limit allows, the plan makes the
youngest of them beyond the limit wait (plan.py, `_repair_quota`), as it
makes the youngest beyond a pool's nodes move. Each deployment repairs only
its own replicas, and every deployment orders the holders alike (oldest
first, by creationTimestamp, namespace and name), so the oldest are never
touched. The quotas' `maxReplicas` and `maxPods` are counted beside the limits,
in the same `used` map under those names (which no limit, a DNS label, can
have): a new replica adds one replica and its template's pods whatever devices
it claims, every replica of the namespaces is a holder of one replica and its
pods, and an overrun is repaired alike. A quota whose limit does not compile,
or that fails validation (contract/quotas.invalid_quota), blocks every new
placement in its namespaces, saying why: failing closed is the only safe reading of a cap
nobody can evaluate; nothing is repaired under it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from function.contract import devicecel
from function.contract.capacity import member_pods
from function.contract.enums import DeviceClaim
from function.contract.quotas import (
    MAX_REPLICAS,
    Limit,
    Quota,
    applicable,
    count_usage,
    devices,
    engine_pods,
    in_scope,
    usage,
)
from function.contract.records import Cluster, Device


@dataclass(frozen=True)
class Holder:
    """One replica of a quota's namespaces: the devices it holds and its pods."""

    age_key: tuple[str, str, str]        # model.Replica.age_key: oldest first
    ident: tuple[str, str]               # (namespace, name)
    held: tuple[tuple[Device, int], ...]
    deleting: bool = False               # on its way out: never a reason for a repair
    pods: int = 0                        # its engine pods (maxPods)


@dataclass
class QuotaLedger:
    limits: list[tuple[str, Limit]]                  # (quota, limit) that apply
    used: dict[tuple[str, str], int] = field(default_factory=dict)
    invalid: str = ""                                # why every placement is refused
    # quota name -> every replica of its namespaces, as read now.
    holders: dict[str, list[Holder]] = field(default_factory=dict)
    # (quota, MAX_REPLICAS or MAX_PODS, cap) that apply; counted in `used` too.
    counts: list[tuple[str, str, int]] = field(default_factory=list)

    def admit(self, held: Sequence[tuple[Device, int]], pods: int) -> str | None:
        """Why a placement of one replica of `pods` pods holding `held` would break a
        limit or a count cap (a reason phrase), or None."""
        if self.invalid:
            return self.invalid
        for quota, what, cap in self.counts:
            add = count_usage(what, 1, pods)
            used = self.used.get((quota, what), 0)
            if used + add > cap:
                return (f"{{has}} no room under quota {quota}/{what} ({used} of {cap} "
                        f"{noun(what)} in use, needs {add})")
        for quota, limit in self.limits:
            add = usage(limit, held)
            used = self.used.get((quota, limit.name), 0)
            if add and used + add > limit.devices:
                return (f"{{has}} no room under quota {quota}/{limit.name} ({used} of "
                        f"{limit.devices} devices in use, needs {add})")
        return None

    def reserve(self, held: Iterable[tuple[Device, int]], pods: int, sign: int = 1) -> None:
        held = list(held)
        for quota, what, _ in self.counts:
            self.used[(quota, what)] = (self.used.get((quota, what), 0)
                                        + sign * count_usage(what, 1, pods))
        for quota, limit in self.limits:
            add = usage(limit, held)
            if add:
                self.used[(quota, limit.name)] = self.used.get((quota, limit.name), 0) + sign * add

    def release(self, held: Iterable[tuple[Device, int]], pods: int) -> None:
        self.reserve(held, pods, sign=-1)


def noun(what: str) -> str:
    return "replicas" if what == MAX_REPLICAS else "pods"


def ledger(quotas: Sequence[Quota], namespace: str, namespace_labels: Mapping[str, Mapping[str, str]],
           replicas: Iterable[Any], clusters: Mapping[str, Cluster]) -> QuotaLedger | None:
    """The ledger of the quotas that apply to `namespace`, or None when none does.

    `namespace_labels` maps every namespace to its labels (for namespaceSelector);
    `replicas` are every ModelReplica now (model.Replica: namespace, name, claims,
    cluster, age_key, manifest).
    """
    applying = applicable(quotas, namespace, namespace_labels.get(namespace, {}))
    if not applying:
        return None
    out = QuotaLedger([(q.name, limit) for q in applying for limit in q.limits],
                      counts=[(q.name, what, cap) for q in applying for what, cap in q.counts()])
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
    counting = any(q.counts() for q in applying)
    by_ns: dict[str, list[Holder]] = {}
    # Only the quotas' namespaces hold anything here: what the others' replicas
    # hold is never read (one pass, each namespace judged once).
    covered: dict[str, bool] = {}
    for r in replicas:
        inside = covered.get(r.namespace)
        if inside is None:
            inside = covered[r.namespace] = any(
                in_scope(q, namespace, r.namespace, namespace_labels.get(r.namespace, {}))
                for q in applying)
        if not inside:
            continue
        cluster = clusters.get(r.cluster)
        held = tuple(devices(r.claims, cluster)) if cluster is not None else ()
        # Replicas and pods count wherever they run: a replica on a cluster that is
        # gone or unreadable still exists, and its pods may still run.
        if held or counting:
            by_ns.setdefault(r.namespace, []).append(
                Holder(r.age_key, (r.namespace, r.name), held, r.deleting, replica_pods(r)))
    for q in applying:
        holders = sorted((h for ns, hs in by_ns.items()
                          if in_scope(q, namespace, ns, namespace_labels.get(ns, {}))
                          for h in hs),
                         key=lambda h: (h.age_key, h.ident))
        out.holders[q.name] = holders
        for limit in q.limits:
            out.used[(q.name, limit.name)] = usage(limit, [d for h in holders for d in h.held])
        for what, _ in q.counts():
            out.used[(q.name, what)] = count_usage(what, len(holders),
                                                   sum(h.pods for h in holders))
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


def template_pods(engines: Sequence[Mapping[str, Any]]) -> int:
    """The pods one new replica of a deployment's engines runs."""
    return engine_pods(engines)


def replica_pods(replica: Any) -> int:
    """The pods a placed replica (scheduler/model.Replica) runs, from its spec."""
    return engine_pods(((replica.manifest or {}).get("spec") or {}).get("engines"))


def held_by(replica: Any, clusters: Mapping[str, Cluster]) -> list[tuple[Device, int]]:
    """What a placed replica (scheduler/model.Replica) holds on its cluster now."""
    cluster = clusters.get(replica.cluster)
    return list(devices(replica.claims, cluster)) if cluster is not None else []
