"""A PodMonitor for a cluster's engine pods, when its InferenceCluster opts in.

Autoscaling queries (scheduler/autoscaling.py) select engine metrics by the
labels `namespace` and `modelplane_ai_deployment`, so whatever scrapes the
engines must keep the pod's modelplane.ai/deployment label. With
`spec.monitoring.podMonitor`, the InferenceCluster composes onto its cluster
one Prometheus Operator PodMonitor that does exactly that for every serving
engine pod (label modelplane.ai/serving: a Standalone pod or a gang's leader;
workers serve nothing) in every namespace, on the port the composer names
`http`. The Prometheus Operator and a Prometheus selecting the PodMonitor's
labels must run on the cluster; getting the metrics to the address the
autoscaler queries (federation or remote write) is the platform's (docs/autoscaling.md).

On the control-plane cluster the PodMonitor is composed as-is in the
function's inventory namespace; on a remote one it is wrapped in a
provider-kubernetes Object, in modelplane-system, beside the inventory
reporter (reporter.py), whose namespace it shares.
"""

from __future__ import annotations

from typing import Any

from function.cluster import reporter
from function.contract.api import LABEL_DEPLOYMENT, LABEL_SERVING, SERVING_PORT_NAME
from function.contract.inventory_report import REPORT_NAMESPACE
from function.contract.models.inferencecluster import PodMonitor as PodMonitorSpec
from function.contract.records import Cluster
from function.contract.stack import objects_namespace

API_VERSION = "monitoring.coreos.com/v1"
KIND = "PodMonitor"
NAME = "modelplane-engines"
KEY = "engine-podmonitor"  # the composed resource's key
METRICS_PATH = "/metrics"  # vLLM's and SGLang's


def objects(cluster: Cluster, spec: PodMonitorSpec) -> dict[str, dict[str, Any]]:
    """The composed resources by key: the PodMonitor (wrapped for a remote
    cluster, with the namespace it lives in)."""
    namespace = REPORT_NAMESPACE if cluster.remote else objects_namespace()
    plain = spec.model_dump(mode="json", exclude_none=True)
    monitor = {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": NAME, "namespace": namespace,
                     "labels": {**plain.get("labels", {}), **reporter.PART_OF}},
        "spec": {
            "namespaceSelector": {"any": True},
            "selector": {"matchExpressions": [{"key": LABEL_SERVING, "operator": "Exists"}]},
            "podTargetLabels": [LABEL_DEPLOYMENT],
            "podMetricsEndpoints": [{"port": SERVING_PORT_NAME, "path": METRICS_PATH,
                                     "interval": plain["interval"]}],
        },
    }
    if not cluster.remote:
        return {KEY: monitor}
    return {**reporter.namespace_object(cluster),
            KEY: reporter.wrap(cluster, "podmonitor", monitor, purpose="monitoring")}
