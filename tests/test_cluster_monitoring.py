"""A PodMonitor for a cluster's engine pods, when its InferenceCluster opts in.

What it selects is what the composer puts on serving pods, and the label it
keeps is the one the autoscaling queries select; it validates against the
Prometheus Operator's own CRD (vendored from its Go module).
"""

from __future__ import annotations

import re

from builders import desired
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from composer_support import compose, replica, standalone
from fleetgen import cluster, pool, to_plain
from schemas import Schemas
from test_cluster_inventory import remote_cluster, run_cluster

from function.cluster import monitoring
from function.contract.api import LABEL_DEPLOYMENT, LABEL_SERVING, SERVING_PORT_NAME
from function.scheduler import autoscaling

OPT_IN = {"podMonitor": {"labels": {"release": "kube-prometheus-stack"}}}


def local(**monitoring_spec) -> dict:
    ic = cluster("local", pool("cpu", 2))
    if monitoring_spec:
        ic["spec"]["monitoring"] = monitoring_spec
    return ic


def test_without_opting_in_no_pod_monitor_is_composed():
    assert desired(run_cluster(local())) == {}


def test_the_control_plane_cluster_gets_a_pod_monitor_for_every_serving_engine_pod():
    rsp = run_cluster(local(**OPT_IN))
    pm = desired(rsp)[monitoring.KEY]
    assert pm["metadata"] == {"name": "modelplane-engines", "namespace": "crossplane-system",
                              "labels": {"release": "kube-prometheus-stack",
                                         "app.kubernetes.io/part-of": "function-model-serving"}}
    assert pm["spec"] == {
        "namespaceSelector": {"any": True},
        "selector": {"matchExpressions": [{"key": "modelplane.ai/serving", "operator": "Exists"}]},
        "podTargetLabels": ["modelplane.ai/deployment"],
        "podMetricsEndpoints": [{"port": "http", "path": "/metrics", "interval": "30s"}]}
    assert Schemas().errors(to_plain(pm)) == []
    # Its health is not the cluster's: an unready cluster would take no replicas.
    assert rsp.desired.resources[monitoring.KEY].ready == fnv1.READY_TRUE


def test_a_remote_cluster_gets_it_through_provider_kubernetes_beside_the_reporter():
    ic = remote_cluster(inventory={"source": "Declared"})  # no reporter: the namespace still
    ic["spec"]["monitoring"] = {"podMonitor": {"interval": "15s"}}
    objs = desired(run_cluster(ic))
    assert set(objs) == {"inventory-namespace", monitoring.KEY}
    manifest = objs[monitoring.KEY]["spec"]["forProvider"]["manifest"]
    assert manifest["metadata"]["namespace"] == "modelplane-system"
    assert manifest["spec"]["podMetricsEndpoints"][0]["interval"] == "15s"
    schemas = Schemas()
    assert [e for o in objs.values() for e in schemas.errors(to_plain(o))] == []
    # With the reporter too, the one namespace is composed once.
    ic["spec"]["inventory"] = {"source": "Observed"}
    ic["spec"]["monitoring"] = OPT_IN
    objs = desired(run_cluster(ic))
    assert monitoring.KEY in objs and "inventory-deployment" in objs
    assert [k for k in objs if k.endswith("namespace")] == ["inventory-namespace"]


def test_it_selects_the_serving_pods_the_composer_makes_on_the_port_they_serve():
    out = compose(replica(standalone()))
    pods = [w["spec"]["template"] for w in out.of_kind("Deployment")]
    assert pods
    for pod in pods:
        assert LABEL_SERVING in pod["metadata"]["labels"]
        assert LABEL_DEPLOYMENT in pod["metadata"]["labels"]
        ports = [p["name"] for c in pod["spec"]["containers"] for p in c.get("ports") or []]
        assert SERVING_PORT_NAME in ports


def test_the_label_it_keeps_is_the_one_the_autoscaling_queries_select():
    # The Prometheus Operator turns a pod label into a metric label by replacing
    # every character a label name cannot hold with "_".
    (kept,) = (re.sub(r"[^a-zA-Z0-9_]", "_", k) for k in monitoring_spec()["podTargetLabels"])
    assert kept == "modelplane_ai_deployment"
    assert f'{kept}="llama"' in autoscaling.selector("team", "llama")


def monitoring_spec() -> dict:
    return desired(run_cluster(local(**OPT_IN)))[monitoring.KEY]["spec"]
