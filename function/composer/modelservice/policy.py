"""Who may use a front door, and where its Envoy may send: the ModelService's SSRF checks.

A cluster is a front door only when its platform team admits it
(InferenceCluster `spec.frontDoor.enabled`), and only for the namespaces it
lists (`spec.frontDoor.namespaces`, default all): the label
`modelplane.ai/front-door` or `spec.gateway.clusterName` choose among admitted
clusters, they admit none.

Each ModelEndpoint a service selects is then checked against that front door
(contract/destinations.py): never a link-local, metadata, unspecified or
multicast address or the API server's names; a private address or
cluster-internal name only when the front door's
`spec.frontDoor.allowedDestinations` lists it, or, for a replica's endpoint
(`spec.replica`), when it is one of the fleet's own gateways (an
InferenceCluster's `spec.gateway.address`, which only the platform team
writes). A refused endpoint is left out of the route like an invalid one, and
the service's `Routed` condition names it and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from function.contract.destinations import FrontDoor, parse_front_door, refusal
from function.contract.endpoints import Endpoint, Invalid, parse_url
from function.contract.records import Cluster
from function.contract.validation import dig


def admitted(objs: Sequence[Mapping[str, Any]], cluster: Cluster, ns: str) -> tuple[FrontDoor,
                                                                                   str]:
    """The cluster's front-door setting, and why it may not carry ns's routes ("" if it may)."""
    obj = next((o for o in objs if dig(o, "metadata").get("name") == cluster.name), {})
    door = parse_front_door(obj)
    if not door.enabled:
        return door, (f"InferenceCluster {cluster.name} is not admitted as a front door: its "
                      "platform team sets spec.frontDoor.enabled: true to let ModelServices "
                      "attach routes to its gateway")
    if not door.admits_namespace(ns):
        # Which other namespaces it admits is not this tenant's to read.
        return door, (f"InferenceCluster {cluster.name} is a front door that does not admit "
                      f"namespace {ns} (spec.frontDoor.namespaces): its platform team lists "
                      "the namespaces it serves")
    return door, ""


def addresses(clusters: Mapping[str, Cluster]) -> dict[tuple[str, int], list[Cluster]]:
    """The clusters by (host, port) of their gateway address, for each address that is
    a URL an endpoint could name."""
    out: dict[tuple[str, int], list[Cluster]] = {}
    for c in clusters.values():
        if c.gateway is None or not c.gateway.url:
            continue
        try:
            _, host, port, _ = parse_url(c.gateway.url)
        except Invalid:
            continue
        out.setdefault((host, port), []).append(c)
    return out


def check(ep: Endpoint, door: FrontDoor, fleet: frozenset[tuple[str, int]]) -> str:
    """Why the front door may not send to the endpoint, or ""."""
    why = refusal(ep.host, ep.port, allowed=door.allowed, gateways=fleet,
                  replica=bool(ep.replica), cluster_domain=door.cluster_domain)
    return why
