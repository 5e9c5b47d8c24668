"""An InferenceCluster as both stages read it: one frozen record, one parser.

The scheduler reads a cluster's labels, taints, readiness and pools (nodes and
devices) to place replicas; the composer reads how to reach it
(providerConfigRef), its gateway and its pools' node taints to compose a
replica's objects. Both read the same `Cluster`, parsed by `parse_cluster`.

The scheduler parses every cluster of the fleet, unvalidated, and must skip a
malformed one with a reason rather than fail the whole reconcile: the parser
checks each field it reads against the type the schema gives it and raises
`Malformed` saying what is wrong. It checks by hand, not with the generated
model, because it runs on every new cluster content at fleet scale
(scheduler/parsecache.py remembers its results by the item's bytes). The
composer validates its one cluster with the model first, then parses it here.

Fields only the composer reads (gateway, providerConfigRef, storage) are read
leniently: a missing or partial one is None, and the composer says why it
cannot use that (a malformed cluster is not one the scheduler should skip).

Derived fields (`Device.key`, `Pool.shape`) are plain fields computed once
when the record is built, not `functools.cached_property`: the scheduler reads
them in its hottest loops, and on CPython 3.11 a cached_property both misses
the specialized attribute read itself and, by writing to the instance's
`__dict__`, makes every other attribute read of that record slower (~4x in
a micro-benchmark; M and L were 12-14% slower end to end).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from function.contract import cost
from function.contract.enums import DeviceClaim, PodSecurityLevel, ProviderConfigKind
from function.contract.names import is_dns_label, is_dns_subdomain
from function.contract.selectors import LabelSelector, SelectorError, parse_selector
from function.contract.stack import installed, stack_unready
from function.contract.validation import condition_of, dig


class Malformed(Exception):
    """An input object the function cannot use; the message says why."""


T = TypeVar("T")


def attempt(parse: Callable[[Any], T], arg: Any) -> T | Malformed:
    """`parse(arg)`, or what a cache keeps of its failure: the message. Never
    the raised exception, whose traceback and cause hold the frames (and the
    request) it passed through."""
    try:
        return parse(arg)
    except Malformed as exc:
        return Malformed(str(exc))


def outcome(parsed: T | Malformed) -> T:
    """A kept parse: the record, or a fresh Malformed raised again."""
    if isinstance(parsed, Malformed):
        raise Malformed(str(parsed))
    return parsed


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str  # a TaintEffect

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


@dataclass(frozen=True)
class Device:
    """One kind of device every node of a pool offers, `count` of them."""

    name: str
    claim: str            # a DeviceClaim
    device_class: str
    count: int
    spec: Mapping[str, Any]  # the API shape, for the CEL activation
    # The spec as canonical JSON: what a selector's verdict depends on, so
    # verdicts can be remembered across reconciles (scheduler/matching.py).
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Worked out here, once, into a plain field (see the module's note on
        # derived fields).
        object.__setattr__(self, "key", json.dumps(self.spec, sort_keys=True))


@dataclass(frozen=True)
class Pool:
    name: str
    nodes: int
    devices: tuple[Device, ...]
    taints: tuple[Taint, ...] = ()  # the nodes' own; pods placed on the pool tolerate them
    # False when the spec leaves `devices` out: the cluster's published devices
    # (its status) stand in (parse_cluster).
    declares_devices: bool = True
    cost: int | None = None  # per node-hour in cost.UNIT ten-thousandths; None: unknown
    # Devices already allocated on its counted nodes to claims this project did
    # not compose (observed, scheduler/ledger.py starts from them): one entry per
    # such node, in node-name order, each ((device name, count), ...) by name.
    taken: tuple[tuple[tuple[str, int], ...], ...] = ()
    # Pools with identical devices match identically: the key lets matching
    # run once per distinct shape instead of once per pool.
    shape: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # json.dumps of the list of device specs, from the devices' own dumps
        # (the same text: a list's items are separated by ", ").
        object.__setattr__(self, "shape", f"[{', '.join(d.key for d in self.devices)}]")


@dataclass(frozen=True)
class Gateway:
    name: str
    namespace: str
    address: str  # "" when the cluster does not publish one

    @property
    def url(self) -> str:
        """The address as a base URL (http:// when it names no scheme), "" without one."""
        address = self.address.rstrip("/")
        if address and "://" not in address:
            address = f"http://{address}"
        return address


@dataclass(frozen=True)
class ProviderConfig:
    name: str
    kind: str  # a ProviderConfigKind


@dataclass(frozen=True)
class Cluster:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    ready: bool
    pools: tuple[Pool, ...]
    provider_config: ProviderConfig | None = None  # None: the control-plane cluster itself
    gateway: Gateway | None = None                 # None: spec.gateway names none
    storage_class: str = ""                        # "": cannot host a ModelCache
    # spec.podSecurity.enforce: the Pod Security level composed pods meet (composer/podsecurity.py)
    pod_security: str = PodSecurityLevel.RESTRICTED.value
    # spec.podSecurity.allowedMetadataPrefixes: the pod label and annotation prefixes
    # tenants may use here besides the composer's own allowlist
    pod_metadata_prefixes: tuple[str, ...] = ()

    # spec.namespaceSelector: the namespaces whose replicas may be placed here (None: all).
    namespace_selector: LabelSelector | None = None
    # Why the serving stack it declares (spec.stack) is not ready: its StackReady
    # condition's message; "" when it declares none or the stack is ready.
    stack_unready: str = ""
    stack_installed: tuple[str, ...] = ()  # its Managed components reported Installed
    # Pools by name (the first of a name, as the schema keys them): the ledger looks a
    # pool up for every replica of the fleet.
    by_pool: Mapping[str, Pool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_pool", {p.name: p for p in reversed(self.pools)})

    def admits(self, namespace_labels: Mapping[str, str] | None) -> bool:
        """Whether a namespace with these labels may place replicas here; None (its
        Namespace is missing or unknown) is admitted only where no selector is set."""
        if self.namespace_selector is None:
            return True
        return namespace_labels is not None and self.namespace_selector.matches(namespace_labels)

    def pool(self, name: str) -> Pool | None:
        return self.by_pool.get(name)

    @property
    def remote(self) -> bool:
        return self.provider_config is not None


def selects(match_labels: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether a matchLabels selector selects an object with `labels` (every pair
    present and equal; an empty selector selects everything)."""
    return all(labels.get(k) == v for k, v in match_labels.items())


def parse_clusters(objs: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Cluster], dict[str, str]]:
    """InferenceClusters by name, and why each malformed one was skipped (by name)."""
    clusters, unreadable = {}, {}
    for obj in objs:
        try:
            c = parse_cluster(obj)
            clusters[c.name] = c
        except Malformed as exc:
            unreadable[str(dig(obj, "metadata").get("name"))] = str(exc)
    return clusters, unreadable


def expect(value: Any, kind: type | tuple[type, ...], what: str, optional: bool = True) -> None:
    """Raise Malformed unless value has the type the API schema gives it.

    The scheduler sorts and keys by names and hands device data to CEL, so a
    wrongly typed field (which admission would reject) must make the object
    malformed here rather than fail the whole reconcile later.
    """
    if (value is None and optional) or (type(value) is dict and kind is Mapping):
        return  # the common case, decided without Mapping's slower ABC check
    if isinstance(value, kind) and not isinstance(value, bool):
        return
    raise Malformed(f"{what} is {type(value).__name__}, not {getattr(kind, '__name__', kind)}")


def expect_mapping(value: Any, what: str) -> Mapping[str, Any]:
    """`expect(value, Mapping, what, optional=False)`, returning the checked value."""
    expect(value, Mapping, what, optional=False)
    return value


def malformed_on_error(parse):
    """Any lookup or type error while parsing means the object is malformed."""
    @functools.wraps(parse)
    def wrapped(*args):
        try:
            return parse(*args)
        except Malformed:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise Malformed(f"{type(exc).__name__}: {exc}") from exc
    return wrapped


def _check_taints(taints: Any, what: str) -> None:
    expect(taints, list, what)
    for t in taints or []:
        expect(t, Mapping, "a taint", optional=False)
        for name in ("key", "effect", "value"):
            expect(t.get(name), str, f"a taint's {name}", optional=name == "value")


def _check_cluster(obj: Mapping[str, Any]) -> None:
    """Everything of a cluster but its pools (`parse_pool` checks each)."""
    meta, spec = expect_mapping(obj.get("metadata"), "metadata"), obj.get("spec")
    expect(meta.get("name"), str, "metadata.name", optional=False)
    expect(meta.get("labels"), Mapping, "metadata.labels")
    expect(spec, Mapping, "spec")
    spec = spec or {}
    expect(spec.get("nodePools"), list, "spec.nodePools")
    _check_taints(spec.get("taints"), "spec.taints")


def _check_pool(p: Any) -> None:
    expect(p, Mapping, "a node pool", optional=False)
    expect(p.get("name"), str, "a node pool's name", optional=False)
    if not is_dns_label(p["name"]):
        # Pools are named in ModelReplicas and node labels: a DNS label.
        raise Malformed(f"node pool name {p['name']!r} is not a DNS label")
    _check_taints(p.get("taints"), f"pool {p['name']!r} taints")
    expect(p.get("costPerNodeHour"), str, f"pool {p['name']!r} costPerNodeHour")
    expect(p.get("devices"), list, f"pool {p['name']!r} devices")
    for d in p.get("devices") or []:
        expect(d, Mapping, f"a device of pool {p['name']!r}", optional=False)
        for name in ("name", "driver", "deviceClassName"):
            expect(d.get(name), str, f"a device's {name} in pool {p['name']!r}",
                   optional=name != "name")
        dc = d.get("deviceClassName")
        if dc and not is_dns_subdomain(dc):
            # It becomes a ResourceClaimTemplate's deviceClassName.
            raise Malformed(f"deviceClassName {dc[:80]!r} in pool {p['name']!r} is not a "
                            "DNS subdomain")
        for name in ("attributes", "capacity"):
            expect(d.get(name), Mapping, f"a device's {name} in pool {p['name']!r}")
        if d.get("claim") not in (None, *DeviceClaim):
            raise Malformed(f"a device's claim in pool {p['name']!r} is {d['claim']!r}, "
                            f"not {' or '.join(DeviceClaim)}")


def _taints(taints: Sequence[Mapping[str, Any]] | None) -> tuple[Taint, ...]:
    return tuple(Taint(t["key"], t.get("value") or "", t["effect"]) for t in taints or [])


@malformed_on_error
def parse_pool(p: Any) -> Pool:
    """One node pool of an InferenceCluster (a pool depends on nothing else)."""
    _check_pool(p)
    devices = tuple(
        Device(name=d["name"], claim=d.get("claim") or DeviceClaim.DRA.value,
               device_class=d.get("deviceClassName") or "", count=int(d.get("count", 1)),
               spec=d)
        for d in p.get("devices") or [])
    if any(d.claim == DeviceClaim.DRA and not d.device_class for d in devices):
        raise Malformed(f"pool {p.get('name')!r} has a DRA device without deviceClassName")
    price = p.get("costPerNodeHour")
    return Pool(name=p["name"], nodes=int(p.get("nodes") or 0), devices=devices,
                taints=_taints(p.get("taints")), declares_devices="devices" in p,
                cost=None if price is None else _cost(price, p["name"]))


def _cost(price: str, pool: str) -> int:
    try:
        return cost.parse(price)
    except ValueError as exc:
        raise Malformed(f"pool {pool!r}: {exc}") from exc


@malformed_on_error
def parse_cluster(obj: Mapping[str, Any],
                  parse_pools: Callable[[], Sequence[Pool]] | None = None) -> Cluster:
    """A cluster; `parse_pools()` may stand in for parsing each pool of
    `spec.nodePools` with `parse_pool`, in order (parsecache.py remembers pools).
    It is called after the rest of the cluster is checked, so a cluster wrong in
    several places is reported alike either way."""
    _check_cluster(obj)
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    pools = tuple(parse_pools() if parse_pools is not None
                  else (parse_pool(p) for p in spec.get("nodePools") or []))
    published = _published(obj, pools)
    if published:
        pools = tuple(dataclasses.replace(p, devices=published[p.name])
                      if p.name in published else p for p in pools)
    observed = _schedulable(obj)
    if observed:
        pools = tuple(dataclasses.replace(p, nodes=min(p.nodes, observed[p.name]))
                      if observed.get(p.name, p.nodes) < p.nodes else p for p in pools)
        taken = _taken(obj, pools, observed)
        pools = tuple(dataclasses.replace(p, taken=taken[p.name]) if taken.get(p.name) else p
                      for p in pools)
    try:
        # Read strictly: a selector that cannot be read must not admit anyone.
        admitted = parse_selector(spec.get("namespaceSelector"), "spec.namespaceSelector")
    except SelectorError as exc:
        raise Malformed(str(exc)) from exc
    return Cluster(name=meta["name"], labels=dict(meta.get("labels") or {}),
                   taints=_taints(spec.get("taints")), ready=_ready(obj), pools=pools,
                   provider_config=_provider_config(spec.get("providerConfigRef")),
                   gateway=_gateway(spec.get("gateway")),
                   storage_class=_text(spec.get("storage"), "storageClassName"),
                   pod_security=_pod_security(spec.get("podSecurity")),
                   pod_metadata_prefixes=_prefixes(spec.get("podSecurity")),
                   namespace_selector=admitted,
                   stack_unready=stack_unready(obj), stack_installed=installed(obj))


def _schedulable(obj: Mapping[str, Any]) -> dict[str, int]:
    """Observed schedulable nodes per pool, from the cluster's own status, when
    its CapacityObserved condition says the observation counts (the cluster
    function judges freshness: cluster/observe.py). A pool's declared nodes
    stay the ceiling; without a counted observation they are what counts."""
    if (condition_of(obj, "CapacityObserved") or {}).get("status") != "True":
        return {}
    out = {}
    for p in obj["status"].get("nodePools") or []:
        n = p.get("schedulableNodes") if isinstance(p, Mapping) else None
        if isinstance(n, int) and not isinstance(n, bool) and n >= 0 \
                and isinstance(p.get("name"), str):
            out[p["name"]] = n
    return out


def _taken(obj: Mapping[str, Any], pools: Sequence[Pool],
           schedulable: Mapping[str, int]) -> dict[str, tuple[tuple[tuple[str, int], ...], ...]]:
    """The devices other claims hold on each pool's counted nodes (`takenDevices`,
    written by the cluster function: cluster/taken.py), read only while the
    observation counts, as `_schedulable` (see `pool_taken`)."""
    by_name = {p.name: p for p in pools}
    out = {}
    for status in obj["status"].get("nodePools") or []:
        pool = by_name.get(str(status.get("name"))) if isinstance(status, Mapping) else None
        listed = status.get("takenDevices") if pool is not None else None
        if pool is not None and isinstance(listed, list):
            out[pool.name] = pool_taken(pool, listed, schedulable.get(pool.name, pool.nodes))
    return out


def pool_taken(pool: Pool, listed: Sequence[Any],
               schedulable: int) -> tuple[tuple[tuple[str, int], ...], ...]:
    """`Pool.taken` from `takenDevices` entries: each node's counts of the pool's
    devices, at most what a node has. When the pool counts fewer nodes than are
    schedulable (the declaration caps it), it counts the freest of them: the
    untaken nodes first, then those holding least. The cluster function's status
    and the scheduler read the same nodes through it."""
    most = {d.name: d.count for d in pool.devices}
    nodes: dict[str, tuple[tuple[str, int], ...]] = {}
    for entry in listed:
        node = entry.get("node") if isinstance(entry, Mapping) else None
        devices = entry.get("devices") if isinstance(node, str) else None
        if not isinstance(node, str) or not isinstance(devices, list) or node in nodes:
            continue  # the status is this function's own output: never expected
        counts: dict[str, int] = {}
        for d in devices:
            name, n = (d.get("name"), d.get("count")) if isinstance(d, Mapping) else ("", 0)
            if isinstance(name, str) and name in most and isinstance(n, int) \
                    and not isinstance(n, bool) and n > 0:
                counts[name] = min(most[name], counts.get(name, 0) + n)
        if counts:
            nodes[node] = tuple(sorted(counts.items()))
    untaken = max(0, schedulable - len(nodes))
    keep = max(0, pool.nodes - untaken)
    if len(nodes) > keep:
        freest = sorted(nodes, key=lambda n: (sum(c for _, c in nodes[n]), n))[:keep]
        nodes = {n: nodes[n] for n in freest}
    return tuple(nodes[n] for n in sorted(nodes))


def _published(obj: Mapping[str, Any], pools: Sequence[Pool]) -> dict[str, tuple[Device, ...]]:
    """The devices the cluster publishes (its status, written by the cluster
    function: cluster/observe.py), for each pool whose spec leaves `devices`
    out. They are the last ones observed, whether or not the node counts are
    fresh: a paused reporter must not take a pool's devices away."""
    undeclared = {p.name for p in pools if not p.declares_devices}
    if not undeclared:
        return {}
    out = {}
    for p in (obj.get("status") or {}).get("nodePools") or []:
        if isinstance(p, Mapping) and p.get("name") in undeclared \
                and p.get("publishedDevices") is not None:
            out[p["name"]] = parse_pool({"name": p["name"],
                                         "devices": p["publishedDevices"]}).devices
    return out


def _ready(obj: Mapping[str, Any]) -> bool:
    """A cluster is unready only when its Ready condition says so explicitly."""
    ready = condition_of(obj, "Ready")
    return ready is None or ready.get("status") != "False"


def _pod_security(obj: Any) -> str:
    """The level, the schema's default when unset; a value outside the enum (which
    admission refuses) is malformed: guessing a weaker level would fail open."""
    level = _text(obj, "enforce") or PodSecurityLevel.RESTRICTED.value
    if level not in {v.value for v in PodSecurityLevel}:
        raise Malformed(f"spec.podSecurity.enforce {level[:40]!r} is not a Pod Security level")
    return level


def _prefixes(obj: Any) -> tuple[str, ...]:
    """spec.podSecurity.allowedMetadataPrefixes; anything else in the list (which
    admission refuses) is left out: an unreadable prefix opens nothing."""
    listed = obj.get("allowedMetadataPrefixes") if isinstance(obj, Mapping) else None
    return tuple(sorted({p for p in listed or [] if isinstance(p, str) and p.endswith("/")
                         and len(p) > 1})) if isinstance(listed, list) else ()


def _text(obj: Any, name: str) -> str:
    value = obj.get(name) if type(obj) is dict or isinstance(obj, Mapping) else None
    return value if isinstance(value, str) else ""


def _provider_config(ref: Any) -> ProviderConfig | None:
    if not _text(ref, "name"):
        return None
    return ProviderConfig(ref["name"], _text(ref, "kind")
                          or ProviderConfigKind.CLUSTER_PROVIDER_CONFIG.value)


def _gateway(gateway: Any) -> Gateway | None:
    if not _text(gateway, "name") or not _text(gateway, "namespace"):
        return None
    return Gateway(gateway["name"], gateway["namespace"], _text(gateway, "address"))
