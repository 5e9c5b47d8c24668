"""Replicas behind one cluster gateway reached as one endpoint: the gateway splits among them.

Envoy keys an Envoy cluster's hosts by address, so two replicas behind one
cluster gateway cannot be two endpoints of the front door's cluster for a rule
(they would merge into one host, sent one Host: seen live). Istio's multi-network
gateways meet the same limit the same way: the front door sends to each gateway
once, with a Host naming the slice of the service behind it, and the gateway
splits among its own replicas.

A slice is one part of a ModelService's route (a rule, or its own entries) and one
tier, on one cluster: the replicas of its endpoints there whose ModelReplica routes
through a Service (router Service; an InferencePool's endpoint picker chooses
among a replica's own pods and is left as it is). It composes on the replicas'
cluster, beside them in the service's namespace (as-is on the control plane, in
provider-kubernetes Objects on a remote cluster):

* an HTTPRoute on the cluster's gateway for the Host
  `<service>-r<part>-<tier>-<cluster>-<digest>-slice.<namespace>.slice.modelplane.internal`,
  any path, unrewritten, with a weighted backendRef per replica's Service (each
  replica's share of the front door's weight for the slice);
* a BackendTrafficPolicy on it: the replicas' pods share one Envoy cluster there, so
  outlier detection and retries on another pod act among them (traffic.py's
  passive settings and retries, no active checks: the pods' readiness probes run).

The front door then sends the slice's share to one Backend at the gateway's address,
with the slice's Host as its hostname, checked at the engines' health path. It does
so only once the slice's HTTPRoute is observed accepted: until then the replicas are
endpoints of their own (each its own Envoy cluster where they share an address,
objects.py), so nothing is sent to a Host the gateway does not serve yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from function.composer import kinds, naming, placement
from function.composer.composed import Composed, Role
from function.composer.modelservice import objects, traffic
from function.composer.pods import SERVING_PORT
from function.contract.api import ENGINE_HEALTH_PATH, SLICE_HOST_SUFFIX
from function.contract.destinations import HEALTH_INTERVAL
from function.contract.endpoints import Endpoint
from function.contract.names import tagged_label
from function.contract.records import Cluster
from function.contract.serving import SERVICE, router
from function.contract.validation import dig

GATEWAY_API = objects.GATEWAY_API


@dataclass(frozen=True)
class Slice:
    """One part's tier's replicas on one cluster, and the endpoint standing for them."""

    key: str                                # its HTTPRoute's composed-resource key
    cluster: Cluster
    label: str                              # its objects' name, its Host's first label
    members: tuple[tuple[Endpoint, int], ...]  # the replicas' endpoints, their weights

    @property
    def host(self) -> str:
        return f"{self.label}.{self.members[0][0].namespace}.{SLICE_HOST_SUFFIX}"

    @property
    def weight(self) -> int:
        return sum(w for _, w in self.members)

    def endpoint(self) -> Endpoint:
        """The front door's endpoint for the slice: the gateway, the slice's Host."""
        first = self.members[0][0]
        return replace(first, name=self.label, replica="", host_header=self.host,
                       health_path=ENGINE_HEALTH_PATH, labels={})


def service_name(namespace: str, replica: str) -> str:
    """A Service-routed replica's Service, as its own composition names it."""
    return naming.service_name_of(namespace, replica)


def gateway_clusters(by_address: Mapping[tuple[str, int], Sequence[Cluster]]
                     ) -> dict[tuple[str, int], Cluster]:
    """Each gateway address (host, port) to its one cluster; an address two clusters
    publish is left out (which one a replica is on could not be told)."""
    return {a: cs[0] for a, cs in by_address.items() if len(cs) == 1}


def service_routed(replicas: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The replicas (by name) that route through a Service, with their cluster."""
    out = {}
    for name, mr in replicas.items():
        spec = dig(mr, "spec")
        serving = dig(spec, "serving")
        mode, chosen = serving.get("mode"), serving.get("router")
        try:
            routed = router(mode if isinstance(mode, str) else None,
                            chosen if isinstance(chosen, str) else None)
        except KeyError:
            continue
        cluster = spec.get("clusterName")
        if routed == SERVICE and isinstance(cluster, str):
            out[name] = cluster
    return out


def plan(ns: str, name: str, part: int, tier: str, backends: Sequence[tuple[Endpoint, int]],
         gateways: Mapping[tuple[str, int], Cluster],
         routed: Mapping[str, str]) -> list[Slice]:
    """The slices of one part's tier: its replica endpoints grouped by the cluster behind
    their gateway address, where that cluster is the replica's own."""
    groups: dict[str, list[tuple[Endpoint, int]]] = {}
    clusters: dict[str, Cluster] = {}
    for ep, weight in backends:
        cluster = gateways.get((ep.host, ep.port)) if ep.replica else None
        if cluster is None or routed.get(ep.replica) != cluster.name:
            continue
        groups.setdefault(cluster.name, []).append((ep, weight))
        clusters[cluster.name] = cluster
    out = []
    for cluster_name, members in sorted(groups.items()):
        label = tagged_label(name, f"r{part}", tier, cluster_name, tag="slice",
                             identity=(ns, name, part, tier, cluster_name))
        out.append(Slice(f"{objects.key(clusters[cluster_name], 'slice')}-{part}-{tier}",
                         clusters[cluster_name], label, tuple(members)))
    return out


def use(backends: Sequence[tuple[Endpoint, int]],
        ready: Sequence[Slice]) -> tuple[tuple[Endpoint, int], ...]:
    """The backends with each ready slice's members replaced by the slice's endpoint."""
    covered = {ep.name for s in ready for ep, _ in s.members}
    out = [(ep, w) for ep, w in backends if ep.name not in covered]
    out += [(s.endpoint(), s.weight) for s in ready]
    return tuple(sorted(out, key=lambda b: b[0].name))


def compose(ns: str, name: str, s: Slice, retry: Mapping[str, Any]) -> list[Composed]:
    """The slice's HTTPRoute and policy on its cluster, placed there."""
    gateway = s.cluster.gateway
    assert gateway is not None
    meta = objects.meta(ns, name, s.label)
    route = {**kinds.HTTPROUTE.header(), "metadata": meta, "spec": {
        "parentRefs": [{"group": GATEWAY_API, "kind": "Gateway", "name": gateway.name,
                        "namespace": gateway.namespace}],
        "hostnames": [s.host],
        "rules": [{"name": objects.rule_name(0),
                   "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                   "backendRefs": [{"group": "", "kind": "Service",
                                    "name": service_name(ns, ep.replica), "port": SERVING_PORT,
                                    "weight": w} for ep, w in s.members],
                   "timeouts": {"request": "0s"}}]}}
    settings = traffic.policy("", False, retry, HEALTH_INTERVAL)
    policy_name = tagged_label(s.label, tag="tp", identity=(ns, s.label, "tp"))
    policy = {**kinds.BACKENDTRAFFICPOLICY.header(),
              "metadata": objects.meta(ns, name, policy_name),
              "spec": {"targetRefs": [{"group": GATEWAY_API, "kind": "HTTPRoute",
                                       "name": s.label}], **settings}}
    owner = placement.Owner(ns, {objects.LABEL_SERVICE: name},
                            objects.name_of(ns, name, s.cluster.name, tag="ns"))
    return placement.place(kinds.recorded([Composed(s.key, route, Role.ROUTE),
                                           Composed(f"{s.key}-policy", policy, Role.ROUTE)]),
                           owner, s.cluster,
                           namespace_key=objects.key(s.cluster, "slice-namespace"))


class Slicer:
    """A reconcile's slices: planned per part and tier, composed, and used by the front
    door once observed accepted."""

    def __init__(self, ns: str, name: str, spec: Mapping[str, Any],
                 gateways: Mapping[tuple[str, int], Cluster], routed: Mapping[str, str],
                 observed: Mapping[str, Mapping[str, Any]], route_key: str) -> None:
        self.ns, self.name, self.spec = ns, name, spec
        self.gateways, self.routed, self.observed = gateways, routed, observed
        self.named = named_backends(observed, route_key)
        self.composed: list[Composed] = []

    def ready(self, s: Slice) -> bool:
        """Whether the front door may send to the slice: its HTTPRoute was observed
        accepted, or the route already does (a cluster that stops answering makes its
        Object unready, and the replicas there leave the route the control plane's way,
        not by the route switching back to them one by one)."""
        return kinds.judge(self.observed.get(s.key)).ready or bool(
            {objects.backend_name(self.ns, self.name, s.label, fb) for fb in (False, True)}
            & self.named)

    def slice(self, part: int, tier: str, backends: Sequence[tuple[Endpoint, int]]
              ) -> tuple[tuple[tuple[Endpoint, int], ...], list[Slice]]:
        """The backends with the tier's ready slices in, and every slice it plans."""
        planned = plan(self.ns, self.name, part, tier, backends, self.gateways, self.routed)
        return use(backends, [s for s in planned if self.ready(s)]), planned

    def keep(self, planned: Sequence[Slice]) -> None:
        """Compose these slices (the tiers the route uses)."""
        known = {c.key for c in self.composed}
        for s in planned:
            self.composed += [c for c in compose(self.ns, self.name, s,
                                                 self.spec.get("retry") or {})
                              if c.key not in known]


def named_backends(observed: Mapping[str, Mapping[str, Any]], route_key: str) -> set[str]:
    """The Backends the observed front-door route sends to, by name."""
    return {str(ref.get("name")) for rule in (kinds.wrapped(observed.get(route_key) or {})
                                              .get("spec") or {}).get("rules") or []
            for ref in rule.get("backendRefs") or []}


def lingering(observed: Mapping[str, Mapping[str, Any]], route_key: str, desired: set[str],
              ns: str, name: str) -> dict[str, Mapping[str, Any]]:
    """Observed objects the new route no longer needs but the observed one still does,
    by key, kept as they are for one more reconcile: a Backend it names, and a slice
    (its HTTPRoute and policy) whose Backend it names. Deleted together with the
    route's update, one Envoy Gateway (or a cluster gateway) sees gone first would be
    answered 500 or 404 for its share (a 500 was seen live when a lost cluster's
    replica left the route)."""
    named = named_backends(observed, route_key)
    out: dict[str, Mapping[str, Any]] = {}
    for k, obj in sorted(observed.items()):
        if k in desired:
            continue
        manifest = kinds.wrapped(obj)
        object_name = dig(manifest, "metadata").get("name")
        if manifest.get("kind") == kinds.BACKEND.kind and object_name in named:
            out[k] = obj
        elif manifest.get("kind") == kinds.HTTPROUTE.kind and isinstance(object_name, str) \
                and {objects.backend_name(ns, name, object_name, fb)
                     for fb in (False, True)} & named:
            out[k] = obj
            if f"{k}-policy" in observed and f"{k}-policy" not in desired:
                out[f"{k}-policy"] = observed[f"{k}-policy"]
    return out
