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

A second rule reaches the same backend by the request header
`x-modelplane-replica: <namespace>/<replica>` at any path, unrewritten: the
replica's ModelEndpoint (scheduler/endpoints.py) names the cluster gateway
with that header, so a fleet route (a ModelService) reaches every replica at
the same path. Envoy cannot rewrite the path per weighted backend
(envoyproxy/gateway#7099), so a per-replica path prefix would make a weighted
split across replicas impossible. Gateway API ranks the path rule's longer
prefix first, so the header never changes where a prefixed request goes.
"""

from __future__ import annotations

from typing import Any

from function.composer import kinds, naming
from function.composer.model import Replica, cluster_gateway
from function.contract.api import HEADER_REPLICA, replica_header_value
from function.contract.records import Cluster

GATEWAY_API = "gateway.networking.k8s.io"


def path_prefix(replica: Replica) -> str:
    return f"/{replica.namespace}/{replica.name}"


def replica_header(replica: Replica) -> dict[str, str]:
    """The header a fleet route sets to reach this replica through its cluster gateway."""
    return {"name": HEADER_REPLICA, "value": replica_header_value(replica.namespace,
                                                                  replica.name)}


def endpoint(cluster: Cluster, replica: Replica) -> str | None:
    """The gateway's base URL plus the path prefix."""
    url = cluster_gateway(cluster).url
    return url + path_prefix(replica) if url else None


def http_route(replica: Replica, cluster: Cluster,
               backend_ref: dict[str, Any]) -> dict[str, Any]:
    """The replica's HTTPRoute on the cluster gateway, to one backend."""
    gateway = cluster_gateway(cluster)
    spec: dict[str, Any] = {
        "parentRefs": [{"group": GATEWAY_API, "kind": "Gateway", "name": gateway.name,
                        "namespace": gateway.namespace}],
    }
    if replica.hostnames:
        spec["hostnames"] = list(replica.hostnames)
    spec["rules"] = [{
        "matches": [{"path": {"type": "PathPrefix", "value": path_prefix(replica)}}],
        "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {
            "type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
        "backendRefs": [backend_ref],
        "timeouts": {"request": "0s"},
    }, {
        "matches": [{"path": {"type": "PathPrefix", "value": "/"},
                     "headers": [{"type": "Exact", **replica_header(replica)}]}],
        "backendRefs": [backend_ref],
        "timeouts": {"request": "0s"},
    }]
    return {
        **kinds.HTTPROUTE.header(),
        "metadata": {"name": naming.route_name(replica), "namespace": replica.namespace,
                     "labels": naming.object_labels(replica)},
        "spec": spec,
    }
