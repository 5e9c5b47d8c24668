"""A Managed component's controller as the platform sets it (spec.stack.<field>.controller).

The stack installs a controller from its chart, rendered at build time, so a
platform's settings cannot be Helm values: the ones a platform changes most (an
image mirror, replicas, placement off the accelerator nodes, compute resources)
are applied here to the Deployment the chart renders, to its `Chart.container`.
What the settings leave out stays as the chart renders it; no other object of the
chart changes.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from function.contract.models.inferencecluster import StackController
from function.contract.stack import Chart


def settings(entry: Mapping[str, Any]) -> StackController | None:
    """A declared component's controller settings (the schema already holds: the
    handler's prologue validated the InferenceCluster)."""
    raw = entry.get("controller")
    return StackController.model_validate(raw) if isinstance(raw, Mapping) else None


def applied(manifest: Mapping[str, Any], controller: StackController,
            chart: Chart) -> Mapping[str, Any]:
    """The manifest with the settings applied: a copy of the chart's Deployment, or the
    manifest itself for any other object."""
    if manifest.get("kind") != "Deployment":
        return manifest
    out = copy.deepcopy(dict(manifest))
    spec = out["spec"]
    pod = spec["template"]["spec"]
    if controller.replicas is not None:
        spec["replicas"] = controller.replicas
    if controller.nodeSelector is not None:
        pod["nodeSelector"] = dict(sorted(controller.nodeSelector.items()))
    if controller.tolerations is not None:
        pod["tolerations"] = [t.model_dump(mode="json", exclude_none=True)
                              for t in controller.tolerations]
    for container in pod.get("containers") or []:
        if container.get("name") != chart.container:
            continue
        if controller.image is not None:
            container["image"] = controller.image
        if controller.resources is not None:
            container["resources"] = controller.resources.model_dump(
                mode="json", exclude_none=True)
    return out
