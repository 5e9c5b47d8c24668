"""An InferenceQuota as the scheduler and the quota function read it.

A quota caps, per limit, the devices that match the limit's CEL selectors,
summed over every ModelReplica of the namespaces it selects (by name or by
namespace labels): a replica holds `count x pods x copies` of the device each
resolved request got on its pool. The device is the pool's device kind the
request was resolved to (same DeviceClass, satisfying the request's
selectors), so a limit reads the same attributes and capacity the
placement read. Synthetic devices are never claimed and never counted.

`maxReplicas` and `maxPods` cap what no device limit sees: the ModelReplicas
of those namespaces and their pods (`copies x pods per copy`, every engine),
wherever they run, whatever they claim. A replica of claimless or Synthetic
devices costs nodes and pods but no device, so without them a namespace with
a zero device limit could still fill pools.

A default quota (`spec.default: true`) selects no namespace: it applies to every
namespace that no other quota selects, to each one on its own (`applicable`,
`in_scope`), so the platform caps a tenant it has not written a quota for yet.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from function.contract import devicecel, rules
from function.contract.capacity import member_pods
from function.contract.enums import DeviceClaim
from function.contract.models.inferencequota import InferenceQuota
from function.contract.records import Cluster, Device, selects
from function.contract.validation import dig, model_errors


@dataclass(frozen=True)
class Limit:
    name: str
    devices: int
    selectors: tuple[str, ...]  # CEL expressions, ANDed


# The names the count caps go by in reasons and the ledger: spec field names,
# which no limit (a DNS label, lowercase) can share.
MAX_REPLICAS, MAX_PODS = "maxReplicas", "maxPods"


@dataclass(frozen=True)
class Quota:
    name: str
    namespaces: frozenset[str]
    match_labels: Mapping[str, str] | None  # None: no namespaceSelector
    limits: tuple[Limit, ...]
    max_replicas: int | None = None  # None: replicas are not capped
    max_pods: int | None = None      # None: pods are not capped

    def counts(self) -> tuple[tuple[str, int], ...]:
        """(MAX_REPLICAS or MAX_PODS, cap) of the count caps the quota sets."""
        return tuple((what, cap) for what, cap in ((MAX_REPLICAS, self.max_replicas),
                                                   (MAX_PODS, self.max_pods))
                     if cap is not None)

    # An invalid quota closes the namespaces it selects (invalid_quota): why, and
    # whether its selection could not be read, so it may select any namespace.
    invalid: str = ""
    everyone: bool = False
    # spec.default: it applies, one namespace at a time, where no other quota does.
    default: bool = False

    def applies(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether it selects the namespace (a default quota selects none)."""
        if self.everyone or namespace in self.namespaces:
            return True
        return self.match_labels is not None and selects(self.match_labels, labels)


def applicable(quotas: Iterable[Quota], namespace: str, labels: Mapping[str, str]) -> list[Quota]:
    """The quotas that cap `namespace`: those that select it, or, where none does,
    the default ones."""
    quotas = list(quotas)
    selecting = [q for q in quotas if not q.default and q.applies(namespace, labels)]
    return selecting or [q for q in quotas if q.default]


def in_scope(quota: Quota, capped: str, namespace: str, labels: Mapping[str, str]) -> bool:
    """Whether a replica of `namespace` counts against `quota` as it caps `capped`:
    every namespace it selects counts together; a default quota counts each one alone."""
    return namespace == capped if quota.default else quota.applies(namespace, labels)


def parse_quota(obj: Mapping[str, Any]) -> Quota:
    """A validated InferenceQuota as a record."""
    spec = obj.get("spec") or {}
    selector = spec.get("namespaceSelector")
    return Quota(
        name=(obj.get("metadata") or {}).get("name") or "",
        namespaces=frozenset(spec.get("namespaces") or ()),
        match_labels=dict((selector or {}).get("matchLabels") or {}) if selector is not None
        else None,
        limits=tuple(Limit(lim["name"], int(lim["devices"]),
                           tuple(s["cel"] for s in lim.get("selectors") or ()))
                     for lim in spec.get("limits") or ()),
        max_replicas=_count(spec.get(MAX_REPLICAS)), max_pods=_count(spec.get(MAX_PODS)),
        default=spec.get("default") is True)


def _count(value: Any) -> int | None:
    return None if value is None else int(value)


def engine_pods(engines: Iterable[Mapping[str, Any]] | None) -> int:
    """The pods of a ModelReplica's (or a template's) engines: every member's pods
    per copy, times the engine's copies."""
    return sum(member_pods(m) * int(e.get("copies") or 1)
               for e in engines or () for m in e.get("members") or ())


def count_usage(what: str, replicas: int, pods: int) -> int:
    """What `replicas` replicas holding `pods` pods use of a count cap."""
    return replicas if what == MAX_REPLICAS else pods


def read_quota(obj: Mapping[str, Any]) -> tuple[Quota, list[str]]:
    """An InferenceQuota object as its record: parsed when it passes its schema and
    rules, else the namespaces it closes (`invalid_quota`); and its errors."""
    errors = model_errors(InferenceQuota, obj) or rules.quota_errors(dig(obj, "spec"))
    return (invalid_quota(obj, errors) if errors else parse_quota(obj)), errors


def invalid_quota(obj: Mapping[str, Any], errors: Iterable[str]) -> Quota:
    """An InferenceQuota that fails validation, as the namespaces it closes.

    A cap nobody can evaluate is no cap at all: skipping it would open its namespaces
    to unlimited devices, so it closes them instead (the scheduler places nothing new
    there; what runs stays). Its selection is read leniently: the names that are
    strings, a matchLabels of strings. A selection that cannot be read at all could
    select any namespace, so it closes every one.
    """
    meta, spec = obj.get("metadata"), obj.get("spec")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    why = "; ".join(errors)
    spec = spec if isinstance(spec, Mapping) else {}
    names, selector = spec.get("namespaces"), spec.get("namespaceSelector")
    if spec.get("default") is True and names is None and selector is None:
        # A default quota closes the namespaces it would cap: every one no other selects.
        return Quota(str(name), frozenset(), None, (), invalid=why, default=True)
    labels = selector.get("matchLabels") if isinstance(selector, Mapping) else None
    readable = (isinstance(names, list) and all(isinstance(n, str) for n in names)
                or names is None) and (selector is None or (
                    isinstance(selector, Mapping) and set(selector) <= {"matchLabels"}
                    and (labels is None or isinstance(labels, Mapping) and all(
                        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()))))
    if not readable or (names is None and selector is None):
        return Quota(str(name), frozenset(), None, (), invalid=why, everyone=True)
    return Quota(str(name), frozenset(names or ()),
                 dict(labels or {}) if selector is not None else None, (), invalid=why)


# (expression, device key) -> verdict, across reconciles; bounded. Remembered
# for the reason scheduler/matching.py remembers its own: cel-expr-python
# keeps what its extension functions return alive, so repeating evaluations
# every reconcile would grow memory.
_VERDICTS: OrderedDict[tuple[str, str], bool] = OrderedDict()
_LIMIT = 50_000


def selected(expressions: Iterable[str], device: Device) -> bool:
    """Whether the device satisfies every expression (an erroring one does not, as in DRA).
    Raises devicecel.CelError for an expression that does not compile."""
    for expr in expressions:
        key = (expr, device.key)
        verdict = _VERDICTS.get(key)
        if verdict is None:
            compiled = devicecel.compile_selector(expr)
            try:
                verdict = compiled.matches(devicecel.device_activation(dict(device.spec)))
            except devicecel.CelEvalError:  # as in DRA: selects nothing
                verdict = False
            # Over its budget or without a verdict it raises, remembered nowhere:
            # a limit must not count nothing because its selector could not run.
            _VERDICTS[key] = verdict
            if len(_VERDICTS) > _LIMIT:
                _VERDICTS.popitem(last=False)
        if not verdict:
            return False
    return True


@dataclass(frozen=True)
class Claim:
    """Devices a placed replica holds of one resolved request: what a quota counts."""

    pool: str
    device_class: str
    selectors: tuple[str, ...]
    devices: int  # count x pods x copies


def claims(spec: Mapping[str, Any]) -> tuple[Claim, ...]:
    """The claimed (DRA) devices of a ModelReplica's spec, compactly: kept in the
    scheduler's replica records, which drop the manifest."""
    out = []
    for engine in spec.get("engines") or []:
        copies = int(engine.get("copies") or 1)
        for member in engine.get("members") or []:
            pods = member_pods(member) * copies
            for req in member.get("deviceRequests") or []:
                if (req.get("claim") or DeviceClaim.DRA) == DeviceClaim.DRA:
                    out.append(Claim(_text(member.get("nodePoolName")),
                                     _text(req.get("deviceClassName")),
                                     tuple(_text(s["cel"]) for s in req.get("selectors") or ()),
                                     int(req.get("count") or 1) * pods))
    return tuple(out)


def _text(value: Any) -> str:
    """A name or expression of a stored replica, which may hold anything: a value of
    another type raises TypeError, which callers treat as an unreadable replica (a
    list as a pool name once reached the pool lookup and crashed the scheduler)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"expected a string, found {type(value).__name__}")
    return value


def devices(held: Iterable[Claim], cluster: Cluster) -> Iterator[tuple[Device, int]]:
    """(device kind, how many) of each claim on its cluster: the pool's device kind of
    the claim's class that satisfies its selectors. A claim whose pool or device kind
    is gone counts nothing (its cluster no longer says what it holds)."""
    for claim in held:
        pool = cluster.pool(claim.pool)
        if pool is None:
            continue
        device = next((d for d in pool.devices if d.claim == DeviceClaim.DRA
                       and d.device_class == claim.device_class
                       and selected(claim.selectors, d)), None)
        if device is not None:
            yield device, claim.devices


def usage(limit: Limit, held: Iterable[tuple[Device, int]]) -> int:
    """Devices of `held` that count against `limit`."""
    return sum(n for device, n in held if selected(limit.selectors, device))
