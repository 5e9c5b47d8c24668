"""Autoscaling's first increment on the real control plane: what KEDA would act on.

KEDA's operator does not build from the module proxy here (README, Autoscaling),
so no autoscaler runs. What is proven instead: the ScaledObject the function
composes is admitted by a real API server against KEDA's own CRD and names the
deployment's scale subresource; scaling through that subresource (what the HPA
KEDA makes would do, here `kubectl scale`) places and removes replicas through
the scheduler; and removing spec.autoscaling removes the ScaledObject and
leaves spec.replicas as it stands.
"""

from __future__ import annotations

import copy

from builders import load_one
from conftest import REPO
from live import (MD, SERVING, SETTLE, apply_docs, condition, delete_and_wait, ensure_namespace,
                  get, items, wait, wait_scheduled)

from e2e.controlplane.core import ControlPlane

NS = "autoscale-team"
EXAMPLE = load_one(REPO / "examples" / "deployments" / "autoscaled.yaml")
SCALED_OBJECTS = "scaledobjects.keda.sh"


def test_the_scaled_object_targets_the_scale_subresource_and_scaling_it_places(cp: ControlPlane):
    ensure_namespace(cp, NS)
    md = copy.deepcopy(EXAMPLE)
    md["metadata"]["namespace"] = NS
    name = md["metadata"]["name"]
    apply_docs(cp, [md])
    try:
        so = wait("the ScaledObject on the control plane",
                  lambda: items(cp, SCALED_OBJECTS, NS)[0], SETTLE)
        assert so["spec"]["scaleTargetRef"] == {"apiVersion": "modelplane.ai/v1alpha1",
                                               "kind": "ModelDeployment", "name": name}
        assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (1, 4)
        assert {t["type"] for t in so["spec"]["triggers"]} == {"prometheus"}
        # No KEDA runs: the deployment says it waits for one, and serves anyway.
        autoscaling = condition(get(cp, MD, name, NS), "Autoscaling")
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
