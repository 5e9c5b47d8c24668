"""The replica's HTTPRoute on its cluster's gateway, and the endpoint it gives clients.

Every router attaches one HTTPRoute to the cluster's gateway, matching the
path prefix `/<namespace>/<replica>`, unique per replica on a cluster (a
namespace and a name identify a ModelReplica); only its backend differs (a
Service, an InferencePool). The prefix is rewritten to `/` so the engine sees
its usual paths: `<endpoint>/v1/chat/completions` reaches the engine as
`/v1/chat/completions`, and an OpenAI client takes `<endpoint>/v1` as its
base URL. `timeouts.request: 0s` turns the gateway's request timeout off: a
long generation streams for minutes and must not be cut. The gateway must
admit routes from the replica's namespace (its listeners' allowedRoutes).
`serving.hostnames`, when set, become the route's `hostnames` (unset: any
host the gateway's listeners accept).

A second HTTPRoute, the replica's fleet route, reaches the same backend for
the Host `<replica>.<namespace>.replica.modelplane.internal` (contract/api.py,
replica_host) at any path, unrewritten: a front door's route (a ModelService)
sends that Host to the replica's cluster gateway, Envoy setting it per chosen
endpoint from the endpoint's hostname, so one route splits by weight across
every replica of the fleet at one path (Envoy rewrites the path per route rule,
never per weighted backend: envoyproxy/gateway#7099), and the replicas share
one Envoy cluster on the front door, where outlier detection, health checks
and retries see them all. A Host is matched before any path (Envoy Gateway
makes a virtual host per hostname), so a request with it reaches this replica
only, whatever its path: a front door never forwards a client's own Host.
"""

from __future__ import annotations

from typing import Any

from function.composer import kinds, naming
from function.composer.composed import Composed, Role
from function.composer.model import Replica, cluster_gateway
from function.contract.api import replica_host
from function.contract.records import Cluster

GATEWAY_API = "gateway.networking.k8s.io"


def path_prefix(replica: Replica) -> str:
    return f"/{replica.namespace}/{replica.name}"


def endpoint(cluster: Cluster, replica: Replica) -> str | None:
    """The gateway's base URL plus the path prefix."""
    url = cluster_gateway(cluster).url
    return url + path_prefix(replica) if url else None


def routes(replica: Replica, cluster: Cluster, backend_ref: dict[str, Any]) -> list[Composed]:
    """The replica's two HTTPRoutes on the cluster gateway, to one backend: its path
    prefix, and its fleet Host."""
    return [Composed("httproute", http_route(replica, cluster, backend_ref), Role.ROUTE),
            Composed("httproute-fleet", fleet_route(replica, cluster, backend_ref), Role.ROUTE)]


def _route(replica: Replica, cluster: Cluster, name: str, hostnames: list[str],
           rule: dict[str, Any]) -> dict[str, Any]:
    gateway = cluster_gateway(cluster)
    spec: dict[str, Any] = {
        "parentRefs": [{"group": GATEWAY_API, "kind": "Gateway", "name": gateway.name,
                        "namespace": gateway.namespace}],
    }
    if hostnames:
        spec["hostnames"] = hostnames
    spec["rules"] = [{**rule, "timeouts": {"request": "0s"}}]
    return {
        **kinds.HTTPROUTE.header(),
        "metadata": {"name": name, "namespace": replica.namespace,
                     "labels": naming.object_labels(replica)},
        "spec": spec,
    }


def http_route(replica: Replica, cluster: Cluster,
               backend_ref: dict[str, Any]) -> dict[str, Any]:
    """The replica's path-prefix HTTPRoute: `<endpoint>/...` reaches the engine as `/...`."""
    return _route(replica, cluster, naming.route_name(replica), list(replica.hostnames), {
        "matches": [{"path": {"type": "PathPrefix", "value": path_prefix(replica)}}],
        "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {
            "type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
        "backendRefs": [backend_ref]})


def fleet_route(replica: Replica, cluster: Cluster,
                backend_ref: dict[str, Any]) -> dict[str, Any]:
    """The replica's fleet HTTPRoute: its Host, any path, unrewritten."""
    return _route(replica, cluster, naming.fleet_route_name(replica),
                  [replica_host(replica.namespace, replica.name)], {
                      "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                      "backendRefs": [backend_ref]})
