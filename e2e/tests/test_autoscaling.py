"""Autoscaling's first increment on the real control plane: what KEDA would act on.

KEDA's operator does not build from the module proxy here (docs/autoscaling.md),
so no autoscaler runs. What is proven instead: the ScaledObject the function
composes is admitted by a real API server against KEDA's own CRD and names the
deployment's scale subresource; scaling through that subresource (what the HPA
KEDA makes would do, here `kubectl scale`) places and removes replicas through
the scheduler; and removing spec.autoscaling removes the ScaledObject and
leaves spec.replicas as it stands. The Prometheus server the ScaledObject
queries is the platform's (the EnvironmentConfig examples/platform/ holds), not
one the deployment names an address for.
"""

from __future__ import annotations

import copy

from builders import load, load_one
from conftest import REPO
from live import (IC, MD, SERVING, SETTLE, apply_docs, condition, delete_and_wait,
                  ensure_namespace, get, items, wait, wait_scheduled)

from e2e.controlplane.core import ControlPlane
from function.contract.api import LABEL_DEPLOYMENT

NS = "autoscale-team"
EXAMPLE = load_one(REPO / "examples" / "deployments" / "autoscaled.yaml")
SCALED_OBJECTS = "scaledobjects.keda.sh"
# The platform's Prometheus servers: a cluster-scoped EnvironmentConfig (Crossplane's CRD),
# taken from examples/platform/ by kind (the function's recommended
# DeploymentRuntimeConfig sits beside it; this test does not need it).
PLATFORM = [d for d in load(REPO / "examples" / "platform") if d["kind"] == "EnvironmentConfig"]


def test_the_scaled_object_targets_the_scale_subresource_and_scaling_it_places(cp: ControlPlane):
    ensure_namespace(cp, NS)
    md = copy.deepcopy(EXAMPLE)
    md["metadata"]["namespace"] = NS
    name = md["metadata"]["name"]
    apply_docs(cp, PLATFORM)
    apply_docs(cp, [md])
    try:
        so = wait("the ScaledObject on the control plane",
                  lambda: items(cp, SCALED_OBJECTS, NS)[0], SETTLE)
        assert so["spec"]["scaleTargetRef"] == {"apiVersion": "modelplane.ai/v1alpha1",
                                               "kind": "ModelDeployment", "name": name}
        assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (1, 4)
        assert {t["type"] for t in so["spec"]["triggers"]} == {"prometheus"}
        platform = PLATFORM[0]["data"]["prometheusServers"]["default"]["address"]
        assert {t["metadata"]["serverAddress"] for t in so["spec"]["triggers"]} == {platform}
        # No KEDA runs: the deployment says it waits for one, and serves anyway. The
        # ScaledObject can exist before Crossplane writes the status of the reconcile
        # that composed it, so the condition is waited for, then checked.
        autoscaling = wait("the deployment's Autoscaling condition",
                           lambda: condition(get(cp, MD, name, NS), "Autoscaling") or None,
                           SETTLE)
        assert (autoscaling.get("status"), autoscaling.get("reason")) == ("False", "Pending")
        wait_scheduled(cp, NS, name, 1, SERVING)

        # What KEDA's HPA does: write spec.replicas through the scale subresource.
        cp.kubectl("scale", MD, name, "-n", NS, "--replicas=3")
        wait_scheduled(cp, NS, name, 3)
        cp.kubectl("scale", MD, name, "-n", NS, "--replicas=2")
        wait_scheduled(cp, NS, name, 2)

        # Autoscaling removed: the ScaledObject goes, spec.replicas stays as it is.
        cp.kubectl("patch", MD, name, "-n", NS, "--type=json",
                   "-p", '[{"op": "remove", "path": "/spec/autoscaling"}]')
        wait("the ScaledObject to be gone", lambda: items(cp, SCALED_OBJECTS, NS) == [], SETTLE)
        assert get(cp, MD, name, NS)["spec"]["replicas"] == 2
        wait_scheduled(cp, NS, name, 2)
    finally:
        delete_and_wait(cp, NS, name)


# --- Engine metrics on the workload clusters ------------------------------------------

PODMONITORS = "podmonitors.monitoring.coreos.com"


def test_a_cluster_that_opts_in_gets_a_pod_monitor_selecting_its_serving_engines(
        cp: ControlPlane):
    """The PodMonitor is admitted by each cluster's real API server against the
    Prometheus Operator's CRD (no operator or Prometheus runs), and what it
    selects on the control-plane cluster are the serving pods of a live replica,
    on the port it names, with the label it keeps. Opting out removes it."""
    clusters = {"us-east-1": None, "eu-west-1": "modelplane-system"}  # control plane, remote
    md = copy.deepcopy(EXAMPLE)
    md["metadata"].update(name="monitored", namespace=NS)
    md["spec"].pop("autoscaling")
    md["spec"]["replicas"] = 1
    md["spec"]["template"]["spec"]["clusterSelector"] = {
        "matchLabels": {"topology.kubernetes.io/region": "us-east-1"}}
    ensure_namespace(cp, NS)
    opt_in = '{"spec": {"monitoring": {"podMonitor": {"labels": {"release": "e2e"}}}}}'
    try:
        for ic in clusters:
            cp.kubectl("patch", IC, ic, "--type=merge", "-p", opt_in)
        monitors = {}
        for ic, ns in clusters.items():
            handle = cp.cluster(ic)
            monitors[ic] = wait(f"the PodMonitor on {ic}", lambda handle=handle, ns=ns: next(
                (m for m in items(cp, PODMONITORS, ns, cluster=handle)
                 if m["metadata"]["name"] == "modelplane-engines"), None), SETTLE)
            assert monitors[ic]["metadata"]["labels"]["release"] == "e2e"
        apply_docs(cp, [md])
        wait_scheduled(cp, NS, "monitored", 1, SERVING)
        spec = monitors["us-east-1"]["spec"]
        (expr,) = spec["selector"]["matchExpressions"]
        assert expr["operator"] == "Exists"

        def selected():
            pods = [p for p in items(cp, "pods", NS, expr["key"], cluster=cp.cluster("us-east-1"))
                    if p["metadata"]["labels"].get(LABEL_DEPLOYMENT) == "monitored"]
            return pods or None
        pods = wait("the replica's serving pods, as the PodMonitor selects them", selected,
                    SERVING)
        port = spec["podMetricsEndpoints"][0]["port"]
        for pod in pods:
            assert port in [p.get("name") for c in pod["spec"]["containers"]
                            for p in c.get("ports") or []]
            assert all(label in pod["metadata"]["labels"] for label in spec["podTargetLabels"])
    finally:
        delete_and_wait(cp, NS, "monitored")
        for ic in clusters:
            cp.kubectl("patch", IC, ic, "--type=json", "-p",
                       '[{"op": "remove", "path": "/spec/monitoring"}]', check=False)
    for ic, ns in clusters.items():
        handle = cp.cluster(ic)
        wait(f"the PodMonitor on {ic} to be gone",
             lambda handle=handle, ns=ns: items(cp, PODMONITORS, ns, cluster=handle) == [], SETTLE)
