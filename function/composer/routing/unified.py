"""Unified serving: one Service over every serving pod, one HTTPRoute on the gateway.

The Service selects the replica's serving label, which only Standalone pods
and gang leaders carry: every copy of every engine of the replica is one
backend pool, and workers never receive requests.

The HTTPRoute attaches to the cluster's gateway and matches the path prefix
`/<namespace>/<replica>`, unique per replica on a cluster (a namespace and a
name identify a ModelReplica). The prefix is rewritten to `/` so the engine
sees its usual paths: `<endpoint>/v1/chat/completions` reaches the engine as
`/v1/chat/completions`, and an OpenAI client takes `<endpoint>/v1` as its
base URL. `timeouts.request: 0s` turns the gateway's request timeout off:
a long generation streams for minutes and must not be cut. The gateway must
admit routes from the replica's namespace (its listeners' allowedRoutes).
`serving.hostnames`, when set, become the route's `hostnames` (unset: any
host the gateway's listeners accept). PrefillDecode builds its route with
`http_route` too, only the backend differs.
"""

from __future__ import annotations

from typing import Any

from function.composer import naming
from function.composer.composed import Backends, Composed, Role
from function.composer.model import Cluster, Replica
from function.composer.pods import SERVING_PORT, SERVING_PORT_NAME
from function.composer.routing import Routing

GATEWAY_API = "gateway.networking.k8s.io"


def path_prefix(replica: Replica) -> str:
    return f"/{replica.namespace}/{replica.name}"


def endpoint(cluster: Cluster, replica: Replica) -> str | None:
    """The gateway address (http:// when it names no scheme) plus the path prefix."""
    address = cluster.gateway.address.rstrip("/")
    if not address:
        return None
    if "://" not in address:
        address = f"http://{address}"
    return address + path_prefix(replica)


def http_route(replica: Replica, cluster: Cluster,
               backend_ref: dict[str, Any]) -> dict[str, Any]:
    """The replica's HTTPRoute on the cluster gateway, to one backend."""
    gateway = cluster.gateway
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
    }]
    return {
        "apiVersion": f"{GATEWAY_API}/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": naming.route_name(replica), "namespace": replica.namespace,
                     "labels": naming.object_labels(replica)},
        "spec": spec,
    }


class UnifiedRouting:
    def route(self, replica: Replica, cluster: Cluster, backends: Backends) -> Routing:
        labels = naming.object_labels(replica)
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": naming.service_name(replica), "namespace": replica.namespace,
                         "labels": labels},
            "spec": {
                "type": "ClusterIP",
                "selector": {naming.LABEL_SERVING: naming.replica_label(replica)},
                "ports": [{"name": SERVING_PORT_NAME, "port": SERVING_PORT,
                           "targetPort": SERVING_PORT_NAME, "protocol": "TCP"}],
            },
        }
        route = http_route(replica, cluster, {
            "group": "", "kind": "Service", "name": service["metadata"]["name"],
            "port": SERVING_PORT})
        return Routing(objects=[Composed("service", service, Role.ROUTE),
                                Composed("httproute", route, Role.ROUTE)],
                       endpoint=endpoint(cluster, replica))


LAYER = UnifiedRouting()
