"""What a ModelService composes on the front door: Backends, the HTTPRoute and its policies.

Names are `<service>[-<endpoint>]-<digest>-<tag>` (contract/names.tagged_label):
readable, unique per namespace, service and endpoint, and never equal to a
ModelReplica's objects in the same namespace (their tags differ).

* `Backend` (Envoy Gateway, `extensionApis.enableBackend: true`): `ip` when
  the endpoint's host is an IPv4 address, else `fqdn`; the URL's port, or 80
  and 443; the endpoint's `hostname`: a replica's Host on its cluster gateway
  (`<replica>.<namespace>.replica.modelplane.internal`, contract/api.py), else
  the URL's DNS name (none for an IP address: Envoy Gateway refuses one,
  `InvalidAddress`). An https endpoint gets TLS verified against the system CAs,
  with its host as SNI.
* `HTTPRoute` on the front door's Gateway: one rule per match of each of
  spec.rules, in order, then one for the service's own entries matching the
  path prefix `/<namespace>/<service>`; every match also requires, when
  `modelName` is set, the header `X-Gateway-Model-Name` (rules.py). One match
  per rule, because a rule rewriting a prefix may hold only one (Gateway API's
  CEL); the prefix is rewritten to the endpoints' rewritePath (an Exact path
  replaced whole); one weighted backendRef per endpoint, each setting the
  endpoint's request headers; `timeouts.request` is spec.timeout or `0s`
  (none: token streams are never cut).
* `HTTPRouteFilter` (Envoy Gateway) `urlRewrite.hostname.type: Backend`,
  referenced by every rule: Envoy sets the Host to the chosen endpoint's
  hostname (`auto_host_rewrite`), per attempt, so a client's own Host never
  reaches a replica or a DNS-named backend: an external provider gets its own
  name and a replica its Host on the cluster gateway, which selects it there
  whatever the path. An IP endpoint that is no replica's gets the client's Host.
* `BackendTrafficPolicy` (Envoy Gateway) per group of rules (named
  `rule-<i>`, targeted by sectionName) that need the same health checks,
  outlier detection and retries (traffic.py; `spec.retry` tunes the retries).
* A fallback entry's endpoints share the rule's Envoy cluster with the
  primaries when every endpoint of the rule can (`shares_cluster`): their
  Backends (tag `fb`) are `fallback: true`, Envoy's priority 1.
* A backendRef's own filters only where an endpoint needs them (its
  `requestHeaders`, its credential): Envoy Gateway gives a backendRef with
  filters an Envoy cluster of its own (`NeedsClusterPerSetting`), while
  backendRefs without them share one, where outlier detection, health checks,
  retries on another host and priorities see every endpoint at once.
* `HTTPRouteFilter` (Envoy Gateway) `credentialInjection` per endpoint with
  `spec.auth`, referenced by that endpoint's backendRef only: Envoy Gateway
  reads the Secret (key `credential`) and sets the header, replacing any the
  client sent; the function never reads the Secret.
* `SecurityPolicy` (Envoy Gateway) targeting the route, when
  `spec.authentication` is set: `apiKeyAuth` or `jwt` (authn.py). With `jwt`,
  the client's `Authorization` is removed (by the rule, or by each backendRef
  without its own credential where one has one, as a rule's removal would
  also remove the injected one): Envoy Gateway forwards a verified token,
  which is the tenant's client's, not the provider's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from function.composer import kinds, placement
from function.composer.composed import Composed, Role
from function.composer.modelservice import authn, traffic
from function.composer.modelservice.rules import Match
from function.contract.api import GROUP, HEADER_ENDPOINT
from function.contract.endpoints import AUTH_HEADER, Endpoint
from function.contract.names import tagged_label
from function.contract.records import Cluster

GATEWAY_API = "gateway.networking.k8s.io"
ENVOY_GATEWAY = "gateway.envoyproxy.io"
LABEL_SERVICE = f"{GROUP}/model-service"
LOCAL = "control-plane"  # the key prefix of every InferenceCluster without providerConfigRef


@dataclass(frozen=True)
class Target:
    """What a part of the route sends where: its matches, and each of its
    endpoints (by name) with its backendRef weight."""

    matches: tuple[Match, ...]
    backends: tuple[tuple[Endpoint, int], ...]
    fallbacks: tuple[tuple[Endpoint, int], ...] = ()  # Envoy's priority 1, same cluster

    @property
    def endpoints(self) -> list[Endpoint]:
        return [ep for ep, _ in self.backends + self.fallbacks]

    @property
    def health_path(self) -> str:
        """The health path every endpoint shares, "" when they share none."""
        paths = {ep.health_path for ep in self.endpoints}
        return paths.pop() if len(paths) == 1 else ""


def shares_cluster(endpoints: Sequence[Endpoint]) -> bool:
    """Whether these endpoints' backendRefs can be one Envoy cluster: Envoy Gateway
    makes one (v1.9.1, `RouteDestination.NeedsClusterPerSetting`) when none has
    filters of its own (request headers, a credential) and they are all IP addresses
    or all DNS names, and Envoy keeps them apart there only when no two share an
    address (it keys a cluster's hosts by address: two replicas behind one cluster
    gateway would be one host, sent one Host). Only then do priorities, retries on
    another host and health choose among all of them; weighted clusters are chosen
    once per request."""
    return not any(ep.headers or ep.auth_secret for ep in endpoints) \
        and len({ep.is_ip for ep in endpoints}) <= 1 and distinct_addresses(endpoints)


def distinct_addresses(endpoints: Sequence[Endpoint]) -> bool:
    return len({(ep.host, ep.port) for ep in endpoints}) == len(endpoints)


def key(cluster: Cluster, what: str) -> str:
    """A composed-resource key: the front door's, so a route that moves to another
    cluster (or from the control plane to a remote one, where it is an Object) is
    a new resource and the old one is deleted, never turned into another kind."""
    return f"{cluster.name if cluster.remote else LOCAL}-{what}"


def name_of(ns: str, name: str, *parts: str, tag: str) -> str:
    return tagged_label(name, *parts, tag=tag, identity=(ns, name, *parts, tag))


def owner(ns: str, name: str) -> placement.Owner:
    return placement.Owner(ns, {LABEL_SERVICE: name}, name_of(ns, name, tag="ns"))


def meta(ns: str, name: str, object_name: str) -> dict[str, Any]:
    return {"name": object_name, "namespace": ns, "labels": {LABEL_SERVICE: name}}


def compose(ns: str, name: str, spec: Mapping[str, Any], cluster: Cluster,
            targets: Sequence[Target], health_interval: str) -> list[Composed]:
    """The objects for the route's parts, in order: one Backend per endpoint in use
    (and one per fallback endpoint sharing its rule's cluster), the route, its
    filters and policies."""
    endpoints = {ep.name: ep for t in targets for ep, _ in t.backends}
    fallbacks = {ep.name: ep for t in targets for ep, _ in t.fallbacks}
    route_name = name_of(ns, name, tag="route")
    out = [Composed(key(cluster, f"backend-{ep_name}"), backend(ns, name, ep), Role.ROUTE)
           for ep_name, ep in sorted(endpoints.items())]
    out += [Composed(key(cluster, f"fallback-{ep_name}"), backend(ns, name, ep, fallback=True),
                     Role.ROUTE) for ep_name, ep in sorted(fallbacks.items())]
    host_filter = name_of(ns, name, tag="host")
    out.append(Composed(key(cluster, "route"), http_route(ns, name, route_name, spec, cluster,
                                                          host_filter, targets), Role.ROUTE))
    out.append(Composed(key(cluster, "route-host-rewrite"), {
        **kinds.HTTPROUTEFILTER.header(), "metadata": meta(ns, name, host_filter),
        "spec": {"urlRewrite": {"hostname": {"type": "Backend"}}}}, Role.ROUTE))
    for ep_name, ep in sorted({**endpoints, **fallbacks}.items()):
        if ep.auth_secret:
            out.append(Composed(key(cluster, f"credential-{ep_name}"), {
                **kinds.HTTPROUTEFILTER.header(),
                "metadata": meta(ns, name, credential_name(ns, name, ep_name)),
                "spec": {"credentialInjection": {
                    "header": ep.auth_header, "overwrite": True,
                    "credential": {"valueRef": {"group": "", "kind": "Secret",
                                                "name": ep.auth_secret}}}}}, Role.ROUTE))
    authentication = authn.policy(spec)
    if authentication:
        out.append(Composed(key(cluster, "route-authentication"), {
            **kinds.SECURITYPOLICY.header(),
            "metadata": meta(ns, name, name_of(ns, name, tag="auth")),
            "spec": {"targetRefs": [{"group": GATEWAY_API, "kind": "HTTPRoute",
                                     "name": route_name}],
                     **authentication}}, Role.ROUTE))
    rules = [traffic.RuleTraffic(rule_name(i), t.health_path, bool(t.fallbacks))
             for i, t in enumerate(t for t in targets for _ in t.matches)]
    for i, (sections, settings) in enumerate(traffic.policies(rules, spec, health_interval)):
        out.append(Composed(key(cluster, f"route-traffic-{i}"), {
            **kinds.BACKENDTRAFFICPOLICY.header(),
            "metadata": meta(ns, name, name_of(ns, name, str(i), tag="traffic")),
            "spec": {"targetRefs": [{"group": GATEWAY_API, "kind": "HTTPRoute",
                                     "name": route_name, "sectionName": s}
                                    for s in sections],
                     **settings}}, Role.ROUTE))
    return out


def rule_name(index: int) -> str:
    """The HTTPRoute's rule `index`'s name: what a policy's sectionName targets."""
    return f"rule-{index}"


def backend(ns: str, name: str, ep: Endpoint, fallback: bool = False) -> dict[str, Any]:
    address = {"ip": {"address": ep.host, "port": ep.port}} if ep.is_ip \
        else {"fqdn": {"hostname": ep.host, "port": ep.port}}
    hostname = {"hostname": ep.hostname} if ep.hostname else {}
    spec: dict[str, Any] = {"endpoints": [{**hostname, **address}]}
    if ep.tls:
        tls: dict[str, Any] = {"wellKnownCACertificates": "System"}
        if not ep.is_ip:
            tls["sni"] = ep.host
        spec["tls"] = tls
    if fallback:
        spec["fallback"] = True
    return {**kinds.BACKEND.header(),
            "metadata": meta(ns, name, backend_name(ns, name, ep.name, fallback)),
            "spec": spec}


def backend_name(ns: str, name: str, endpoint: str, fallback: bool = False) -> str:
    return name_of(ns, name, endpoint, tag="fb" if fallback else "be")


def credential_name(ns: str, name: str, endpoint: str) -> str:
    return name_of(ns, name, endpoint, tag="cred")


def backend_filters(ns: str, name: str, ep: Endpoint, strip_authorization: bool = False,
                    apart: bool = False) -> list[dict[str, Any]]:
    """The endpoint's own filters, none when it needs none: its headers set (and
    HEADER_ENDPOINT when it must have an Envoy cluster of its own), the client's
    Authorization removed when asked (a JWT the front door verified, in a rule where
    another endpoint's credential keeps the rule from removing it) unless the
    endpoint's credential replaces it; its credential filter."""
    modifier: dict[str, Any] = {}
    if strip_authorization and not ep.auth_secret:
        modifier["remove"] = [AUTH_HEADER]
    headers = sorted([*ep.headers, *([(HEADER_ENDPOINT, f"{ns}/{ep.name}")] if apart else [])],
                     key=lambda h: h[0].lower())
    if headers:
        modifier["set"] = [{"name": n, "value": v} for n, v in headers]
    out: list[dict[str, Any]] = [{"type": "RequestHeaderModifier",
                                  "requestHeaderModifier": modifier}] if modifier else []
    if ep.auth_secret:
        out.append({"type": "ExtensionRef", "extensionRef": {
            "group": ENVOY_GATEWAY, "kind": "HTTPRouteFilter",
            "name": credential_name(ns, name, ep.name)}})
    return out


def http_route(ns: str, name: str, route_name: str, spec: Mapping[str, Any], cluster: Cluster,
               host_filter: str, targets: Sequence[Target]) -> dict[str, Any]:
    gateway = cluster.gateway
    assert gateway is not None
    rules = [{"name": rule_name(i), **rule} for i, rule in enumerate(
        http_rule(ns, name, spec, m, t, host_filter) for t in targets for m in t.matches)]
    return {
        **kinds.HTTPROUTE.header(),
        "metadata": meta(ns, name, route_name),
        "spec": {"parentRefs": [{"group": GATEWAY_API, "kind": "Gateway", "name": gateway.name,
                                 "namespace": gateway.namespace}],
                 "rules": rules},
    }


def http_rule(ns: str, name: str, spec: Mapping[str, Any], match: Match, target: Target,
              host_filter: str) -> dict[str, Any]:
    """One match of a part, its rewrites and its weighted backends."""
    rewrite = next((ep.rewrite_path for ep, _ in target.backends), "/")
    filters: list[dict[str, Any]] = [{"type": "URLRewrite",
                                      "urlRewrite": {"path": match.rewrite(rewrite)}},
                                     {"type": "ExtensionRef", "extensionRef": {
                                         "group": ENVOY_GATEWAY, "kind": "HTTPRouteFilter",
                                         "name": host_filter}}]
    strip = authn.strips_authorization(spec)
    credentialed = any(ep.auth_secret for ep in target.endpoints)
    # Endpoints sharing an address must not share an Envoy cluster (shares_cluster):
    # a filter on each backendRef gives each its own.
    apart = not distinct_addresses(target.endpoints)
    if strip and not credentialed:
        filters.append({"type": "RequestHeaderModifier",
                        "requestHeaderModifier": {"remove": [AUTH_HEADER]}})
    rule: dict[str, Any] = {"matches": [match.http()], "filters": filters}
    refs = []
    for ep, weight, fallback in [(ep, w, False) for ep, w in target.backends] \
            + [(ep, w, True) for ep, w in target.fallbacks]:
        ref: dict[str, Any] = {"group": ENVOY_GATEWAY, "kind": "Backend",
                               "name": backend_name(ns, name, ep.name, fallback),
                               "weight": weight}
        own = backend_filters(ns, name, ep, strip and credentialed, apart)
        if own:
            ref["filters"] = own
        refs.append(ref)
    if refs:
        rule["backendRefs"] = refs
    rule["timeouts"] = {"request": spec.get("timeout") or "0s"}
    return rule
