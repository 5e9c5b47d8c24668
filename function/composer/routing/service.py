"""Router Service (Unified's default): one Service over every serving pod, two HTTPRoutes.

The Service selects the replica's serving label, which only Standalone pods
and gang leaders carry: every copy of every engine of the replica is one
backend pool, and workers never receive requests. The HTTPRoutes
(`gateway.routes`) send the replica's path prefix and its fleet Host to the
Service.
"""

from __future__ import annotations

from typing import Any

from function.composer import kinds, naming
from function.composer.composed import Backends, Composed, Role
from function.composer.model import Replica
from function.composer.pods import SERVING_PORT
from function.composer.routing import Routing
from function.composer.routing.gateway import endpoint, routes
from function.contract.api import LABEL_SERVING, SERVING_PORT_NAME
from function.contract.records import Cluster


class ServiceRouting:
    def route(self, replica: Replica, cluster: Cluster, backends: Backends) -> Routing:
        labels = naming.object_labels(replica)
        service: dict[str, Any] = {
            **kinds.SERVICE.header(),
            "metadata": {"name": naming.service_name(replica), "namespace": replica.namespace,
                         "labels": labels},
            "spec": {
                "type": "ClusterIP",
                "selector": {LABEL_SERVING: naming.replica_label(replica)},
                "ports": [{"name": SERVING_PORT_NAME, "port": SERVING_PORT,
                           "targetPort": SERVING_PORT_NAME, "protocol": "TCP"}],
            },
        }
        hops = routes(replica, cluster, {
            "group": "", "kind": "Service", "name": service["metadata"]["name"],
            "port": SERVING_PORT})
        return Routing(objects=[Composed("service", service, Role.ROUTE), *hops],
                       endpoint=endpoint(cluster, replica))


LAYER = ServiceRouting()
