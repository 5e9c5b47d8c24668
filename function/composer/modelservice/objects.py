"""What a ModelService composes on the front door: Backends, the HTTPRoute and its policies.

Names are `<service>[-<endpoint>]-<digest>-<tag>` (contract/names.tagged_label):
readable, unique per namespace, service and endpoint, and never equal to a
ModelReplica's objects in the same namespace (their tags differ).

* `Backend` (Envoy Gateway, `extensionApis.enableBackend: true`): `ip` when
  the endpoint's host is an IPv4 address, else `fqdn`; the URL's port, or 80
  and 443. An https endpoint gets TLS verified against the system CAs, with
  its host as SNI.
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
  referenced by the rule, when an endpoint is a DNS name: an external
  provider answers only for its own Host.
* `BackendTrafficPolicy` (Envoy Gateway) targeting the route, when
  `spec.retry` is set: `numRetries` = attempts, `perRetry.backOff.baseInterval`
  = interval.
* Each backendRef's `RequestHeaderModifier`: a replica's endpoint
  (`spec.replica`) sets `x-modelplane-replica: <namespace>/<replica>`, every
  other endpoint removes it, so a client's own never reaches a cluster gateway;
  then the endpoint's own headers.
* `HTTPRouteFilter` (Envoy Gateway) `credentialInjection` per endpoint with
  `spec.auth`, referenced by that endpoint's backendRef only: Envoy Gateway
  reads the Secret (key `credential`) and sets the header, replacing any the
  client sent; the function never reads the Secret.
* `SecurityPolicy` (Envoy Gateway) targeting the route, when
  `spec.authentication` is set: `apiKeyAuth` or `jwt` (authn.py). With `jwt`,
  each backendRef without its own credential also removes `Authorization`:
  Envoy Gateway forwards a verified token, which is the tenant's client's, not
  the provider's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from function.composer import kinds, placement
from function.composer.composed import Composed, Role
from function.composer.modelservice import authn
from function.composer.modelservice.rules import Match
from function.contract.api import GROUP, HEADER_REPLICA
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
            targets: Sequence[Target]) -> list[Composed]:
    """The objects for the route's parts, in order: one Backend per endpoint in use."""
    endpoints = {ep.name: ep for t in targets for ep, _ in t.backends}
    route_name = name_of(ns, name, tag="route")
    out = [Composed(key(cluster, f"backend-{ep_name}"), backend(ns, name, ep), Role.ROUTE)
           for ep_name, ep in sorted(endpoints.items())]
    fqdn = any(not ep.is_ip for ep in endpoints.values())
    host_filter = name_of(ns, name, tag="host") if fqdn else None
    out.append(Composed(key(cluster, "route"), http_route(ns, name, route_name, spec, cluster,
                                                          host_filter, targets), Role.ROUTE))
    if host_filter:
        out.append(Composed(key(cluster, "route-host-rewrite"), {
            **kinds.HTTPROUTEFILTER.header(), "metadata": meta(ns, name, host_filter),
            "spec": {"urlRewrite": {"hostname": {"type": "Backend"}}}}, Role.ROUTE))
    for ep_name, ep in sorted(endpoints.items()):
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
    retry = spec.get("retry")
    if retry:
        policy: dict[str, Any] = {"numRetries": retry["attempts"]}
        if retry.get("interval"):
            policy["perRetry"] = {"backOff": {"baseInterval": retry["interval"]}}
        out.append(Composed(key(cluster, "route-retry"), {
            **kinds.BACKENDTRAFFICPOLICY.header(),
            "metadata": meta(ns, name, name_of(ns, name, tag="retry")),
            "spec": {"targetRefs": [{"group": GATEWAY_API, "kind": "HTTPRoute",
                                     "name": route_name}],
                     "retry": policy}}, Role.ROUTE))
    return out


def backend(ns: str, name: str, ep: Endpoint) -> dict[str, Any]:
    address = {"ip": {"address": ep.host, "port": ep.port}} if ep.is_ip \
        else {"fqdn": {"hostname": ep.host, "port": ep.port}}
    spec: dict[str, Any] = {"endpoints": [address]}
    if ep.tls:
        tls: dict[str, Any] = {"wellKnownCACertificates": "System"}
        if not ep.is_ip:
            tls["sni"] = ep.host
        spec["tls"] = tls
    return {**kinds.BACKEND.header(),
            "metadata": meta(ns, name, backend_name(ns, name, ep.name)), "spec": spec}


def backend_name(ns: str, name: str, endpoint: str) -> str:
    return name_of(ns, name, endpoint, tag="be")


def credential_name(ns: str, name: str, endpoint: str) -> str:
    return name_of(ns, name, endpoint, tag="cred")


def backend_filters(ns: str, name: str, ep: Endpoint,
                    strip_authorization: bool = False) -> list[dict[str, Any]]:
    """The endpoint's header changes: the replica header set (a replica's endpoint)
    or removed (any other), the client's Authorization removed when asked (a JWT the
    front door verified) unless the endpoint's credential replaces it, its own
    headers; its credential filter."""
    modifier: dict[str, Any] = {}
    headers = list(ep.headers)
    remove = [] if ep.replica else [HEADER_REPLICA]
    if strip_authorization and not ep.auth_secret:
        remove.append(AUTH_HEADER)
    if ep.replica:
        headers = sorted([(HEADER_REPLICA, ep.replica_header), *headers],
                         key=lambda h: h[0].lower())
    if remove:
        modifier["remove"] = remove
    if headers:
        modifier["set"] = [{"name": n, "value": v} for n, v in headers]
    out: list[dict[str, Any]] = [{"type": "RequestHeaderModifier",
                                  "requestHeaderModifier": modifier}]
    if ep.auth_secret:
        out.append({"type": "ExtensionRef", "extensionRef": {
            "group": ENVOY_GATEWAY, "kind": "HTTPRouteFilter",
            "name": credential_name(ns, name, ep.name)}})
    return out


def http_route(ns: str, name: str, route_name: str, spec: Mapping[str, Any], cluster: Cluster,
               host_filter: str | None, targets: Sequence[Target]) -> dict[str, Any]:
    gateway = cluster.gateway
    assert gateway is not None
    rules = [http_rule(ns, name, spec, m, t, host_filter) for t in targets for m in t.matches]
    return {
        **kinds.HTTPROUTE.header(),
        "metadata": meta(ns, name, route_name),
        "spec": {"parentRefs": [{"group": GATEWAY_API, "kind": "Gateway", "name": gateway.name,
                                 "namespace": gateway.namespace}],
                 "rules": rules},
    }


def http_rule(ns: str, name: str, spec: Mapping[str, Any], match: Match, target: Target,
              host_filter: str | None) -> dict[str, Any]:
    """One match of a part, its rewrite and its weighted backends."""
    rewrite = next((ep.rewrite_path for ep, _ in target.backends), "/")
    filters: list[dict[str, Any]] = [{"type": "URLRewrite",
                                      "urlRewrite": {"path": match.rewrite(rewrite)}}]
    if host_filter and any(not ep.is_ip for ep, _ in target.backends):
        filters.append({"type": "ExtensionRef", "extensionRef": {
            "group": ENVOY_GATEWAY, "kind": "HTTPRouteFilter", "name": host_filter}})
    rule: dict[str, Any] = {"matches": [match.http()], "filters": filters}
    refs = []
    for ep, weight in target.backends:
        ref: dict[str, Any] = {"group": ENVOY_GATEWAY, "kind": "Backend",
                               "name": backend_name(ns, name, ep.name), "weight": weight}
        ref["filters"] = backend_filters(ns, name, ep, authn.strips_authorization(spec))
        refs.append(ref)
    if refs:
        rule["backendRefs"] = refs
    rule["timeouts"] = {"request": spec.get("timeout") or "0s"}
    return rule
