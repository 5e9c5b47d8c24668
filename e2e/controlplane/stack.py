"""The serving stack on the local control plane (docs/clusters.md#the-serving-stack).

`make cluster` starts its remote clusters bare of what a stack can install: an
InferenceCluster of the fleet that declares no `spec.stack` gets the harness's
(`declare`, said in the start-up log): Gateway API, the Inference Extension and
LeaderWorkerSet `Managed` on a remote cluster, `External` on the control plane's
(whose stack can only observe), Envoy Gateway `Managed` on a remote cluster and
`External` on the control plane's (and KEDA there), and the DRA driver `External`
on every cluster whose pools declare a DRA device (the harness publishes their
ResourceSlices and DeviceClasses as a driver would: `fleet.cluster_manifests`). A
fleet's own `spec.stack` is left as written.

A remote cluster whose InferenceCluster declares a component `Managed` in
`spec.stack` gets that component's CRDs from the stack (provider-kubernetes
Objects the function composes through the cluster's ClusterProviderConfig), not
from the harness; one that names a Gateway gets it from the stack too (`gateway`
Managed, of the class `eg`), after the components. What needs those CRDs waits
until they are Established:

* the fleet plan's manifests of the API groups those CRDs serve (the GatewayClass
  of `spec.gateway` with its `parametersRef` to the EnvoyProxy that runs Envoy under
  Host infrastructure, and that EnvoyProxy: the stack's own apply of the class, with
  its Gateway, owns its controller name and labels, this one the parametersRef);
* the controllers that watch them. Where the stack installs a component's CRDs
  only, the harness runs its controller as a local process in place of the
  Deployment a real cluster runs, and starts it once the stack has installed what it
  watches: LeaderWorkerSet's manager (it cannot start without its CRDs) and Envoy
  Gateway with its InferencePool extension (it watches only the kinds served when it
  starts), the latter once the stack's Gateway is there too: the stack is ready only
  when Envoy Gateway has Accepted it. Where the stack installs the controller too
  (`runs_controller`: its chart's Deployment), either the cluster's pods supervisor
  runs that Deployment's pod (e2e/controlplane/pods/) and the harness starts nothing
  (LeaderWorkerSet's: it waits until the manager serves its webhooks,
  `lws_not_serving`), or the pod is kwok's and the local process stands in for it
  (`POD_STAND_INS`): Envoy Gateway's controller starts each Gateway's Envoy as its
  child on the cluster's loopback address (Host infrastructure), which a pod's
  network namespace cannot give it; it reads the configuration the stack composed
  (the Backend API as declared) under the harness's provider settings
  (envoy_gateway.config).

Pure: plans and manifests in, decisions out.
"""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from e2e.controlplane import addons, fleet
from function.contract.stack import BY_FIELD, DRA_DRIVER, GATEWAY, managed_fields

# What `declare` gives an InferenceCluster without a stack.
REMOTE_STACK: Mapping[str, Mapping[str, str]] = {
    "gatewayAPI": {"mode": "Managed"}, "inferenceExtension": {"mode": "Managed"},
    "leaderWorkerSet": {"mode": "Managed"}, "envoyGateway": {"mode": "Managed"}}
CONTROL_PLANE_STACK: Mapping[str, Mapping[str, str]] = {
    "gatewayAPI": {"mode": "External"}, "inferenceExtension": {"mode": "External"},
    "leaderWorkerSet": {"mode": "External"}, "envoyGateway": {"mode": "External"},
    "keda": {"mode": "External"}}

# The Gateway of spec.gateway, where an InferenceCluster names one.
REMOTE_GATEWAY: Mapping[str, str] = {"mode": "Managed", "gatewayClassName": fleet.GATEWAY_CLASS}
CONTROL_PLANE_GATEWAY: Mapping[str, str] = {"mode": "External"}
# The DRA driver, where a pool declares a DRA device: the harness stands in for it.
DRA_DRIVER_EXTERNAL: Mapping[str, str] = {"mode": "External"}

# The local controller (its component prefix in the harness) -> the components whose
# CRDs it needs before it starts.
CONTROLLERS: Mapping[str, tuple[str, ...]] = {
    "lws": ("leaderWorkerSet",),
    "envoy-gateway": ("gatewayAPI", "inferenceExtension", "envoyGateway"),
}


# The local controller -> the component whose controller it stands in for.
STANDS_IN_FOR: Mapping[str, str] = {"lws": "leaderWorkerSet", "envoy-gateway": "envoyGateway"}
# The local controllers that run even where the stack installs their Deployment: its pod
# is kwok's (pods/images.py maps no image of it) and the process does its work.
POD_STAND_INS: frozenset[str] = frozenset({"envoy-gateway"})

# What LeaderWorkerSet's chart (sigs.k8s.io/lws charts/lws, release `lws` in
# lws-system) names: the manager's Deployment, and the webhook configurations whose
# CA bundle its cert rotator writes once the certificates are in the pod's volume
# (the controllers and webhooks are set up right after).
_LWS_CHART = BY_FIELD["leaderWorkerSet"].chart
assert _LWS_CHART is not None
LWS_DEPLOYMENT = (_LWS_CHART.namespace, f"{_LWS_CHART.release}-controller-manager")
LWS_WEBHOOK_CONFIGURATIONS = ("lws-mutating-webhook-configuration",
                              "lws-validating-webhook-configuration")


def runs_controller(component: str) -> bool:
    """Whether a Managed component's stack installs its controller too, not only its
    CRDs (the contract's `Component.controllers`: it has a chart)."""
    return BY_FIELD[component].controllers


def stack_installs(controller: str, components: frozenset[str]) -> bool:
    """Whether a cluster's stack (its Managed `components`) installs the Deployment of
    the controller a local one stands in for."""
    component = STANDS_IN_FOR[controller]
    return component in components and runs_controller(component)


def stack_runs(controller: str, components: frozenset[str]) -> bool:
    """Whether the controller the stack installs runs as its pod (the pods supervisor
    runs it): then the harness starts no local one."""
    return stack_installs(controller, components) and controller not in POD_STAND_INS


def lws_not_serving(deployment: Mapping[str, Any] | None,
                    configurations: Iterable[Mapping[str, Any]]) -> list[str]:
    """Why the stack's LeaderWorkerSet manager does not serve its webhooks yet (empty:
    it does): its Deployment has no available replica, or a webhook configuration of
    the chart has no CA bundle."""
    why = []
    ns, name = LWS_DEPLOYMENT
    if deployment is None:
        why.append(f"no Deployment {ns}/{name}")
    elif not (deployment.get("status") or {}).get("availableReplicas"):
        why.append(f"Deployment {ns}/{name}: no available replica")
    have = {(c.get("metadata") or {}).get("name"): c for c in configurations}
    for config in LWS_WEBHOOK_CONFIGURATIONS:
        hooks = (have.get(config) or {}).get("webhooks") or []
        if not hooks or not all((h.get("clientConfig") or {}).get("caBundle") for h in hooks):
            why.append(f"{config}: no CA bundle yet")
    return why


def declare(inference_clusters: Sequence[Mapping[str, Any]]) -> tuple[list[dict], list[str]]:
    """Copies of the InferenceClusters, each without a spec.stack given the harness's
    (with the DRA driver External where a pool declares a DRA device, and the Gateway
    spec.gateway names: Managed on a remote cluster, of the class Envoy Gateway serves
    here; External on the control plane's, which the harness makes), and a line per
    change saying so."""
    out, said = [], []
    for ic in inference_clusters:
        ic = copy.deepcopy(dict(ic))
        spec = ic.setdefault("spec", {})
        if "stack" not in spec:
            remote = bool(spec.get("providerConfigRef"))
            spec["stack"] = copy.deepcopy(dict(REMOTE_STACK if remote else CONTROL_PLANE_STACK))
            if any(fleet.published(d) for p in spec.get("nodePools") or []
                   for d in p.get("devices") or []):
                spec["stack"][DRA_DRIVER.field] = dict(DRA_DRIVER_EXTERNAL)
            if spec.get("gateway"):
                spec["stack"][GATEWAY.field] = copy.deepcopy(dict(
                    REMOTE_GATEWAY if remote else CONTROL_PLANE_GATEWAY))
            said.append(f"InferenceCluster {ic['metadata']['name']}: spec.stack " + ", ".join(
                f"{f} {e['mode']}" for f, e in spec["stack"].items()))
        out.append(ic)
    return out, said


def managed(plan: fleet.FleetPlan, cluster: str) -> frozenset[str]:
    """The components the stack installs on a cluster: those an InferenceCluster it
    backs declares Managed (only a remote cluster's may: the function refuses it on
    the control plane's)."""
    cplan = plan.clusters[cluster]
    if not cplan.remote:
        return frozenset()
    out = set()
    for ic in plan.inference_clusters:
        if ic["metadata"]["name"] not in cplan.inference_clusters:
            continue
        out |= managed_fields(ic.get("spec") or {}) & BY_FIELD.keys()
    return frozenset(out)


def composes_gateways(plan: fleet.FleetPlan, cluster: str) -> bool:
    """Whether the stack composes a Gateway on the cluster (an InferenceCluster it
    backs declares stack.gateway Managed): Envoy Gateway there starts before the stack
    is ready, which it cannot be until Envoy Gateway has Accepted that Gateway."""
    cplan = plan.clusters[cluster]
    return cplan.remote and any(
        fleet.stack_gateway_managed(ic) for ic in plan.inference_clusters
        if ic["metadata"]["name"] in cplan.inference_clusters)


def stack_clusters(plan: fleet.FleetPlan) -> list[str]:
    """The clusters with something Managed, in plan order."""
    return [name for name in plan.clusters if managed(plan, name)]


def installed_by_stack(files: Iterable[Path], crds_dir: Path,
                       components: Iterable[str]) -> list[Path]:
    """The vendored CRD files (crds/<folder>/...) a set of Managed components install:
    those their table entries' globs name (contract/stack.py)."""
    globs = [g for c in components for g in BY_FIELD[c].crds]
    out = []
    for f in files:
        rel = Path(f).resolve().relative_to(Path(crds_dir).resolve()).as_posix()
        if any(fnmatch.fnmatch(rel, g) for g in globs):
            out.append(Path(f))
    return out


def served_groups(files: Iterable[Path]) -> frozenset[str]:
    """The API groups the CRDs of some files serve."""
    groups = set()
    for f in files:
        for doc in addons.load_all(f):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                groups.add(doc["spec"]["group"])
    return frozenset(groups)


def _group(manifest: Mapping[str, Any]) -> str:
    api = str(manifest.get("apiVersion", ""))
    return api.split("/")[0] if "/" in api else ""


def split_manifests(manifests: Sequence[Mapping[str, Any]], groups: frozenset[str]
                    ) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """(what can be applied now, what waits for the stack's CRDs), each in plan order."""
    now = [m for m in manifests if _group(m) not in groups]
    later = [m for m in manifests if _group(m) in groups]
    return now, later


def waits_for_stack(controller: str, components: frozenset[str]) -> bool:
    """Whether a local controller starts only after the stack installed its CRDs."""
    return bool(set(CONTROLLERS[controller]) & components)


def starts_after_stack(controller: str, components: frozenset[str]) -> bool:
    """Whether the harness starts a local controller once the stack installed the CRDs
    it watches: it waits for them, and the stack does not install the controller."""
    return waits_for_stack(controller, components) and not stack_runs(controller, components)


def not_stack_ready(items: Iterable[Mapping[str, Any]], names: Iterable[str]) -> list[str]:
    """Which of the named InferenceClusters do not say StackReady=True, and why."""
    have = {(i.get("metadata") or {}).get("name"): i for i in items}
    waiting = []
    for name in names:
        conds = [c for c in ((have.get(name) or {}).get("status") or {}).get("conditions") or []
                 if isinstance(c, Mapping) and c.get("type") == "StackReady"]
        if not conds:
            waiting.append(f"{name}: StackReady not reported yet")
        elif conds[0].get("status") != "True":
            waiting.append(f"{name}: StackReady={conds[0].get('status')} "
                           f"({conds[0].get('reason')}: {conds[0].get('message', '')})")
    return waiting


def not_composed(expected: Iterable[tuple[str, str]],
                 items: Iterable[Mapping[str, Any]]) -> list[str]:
    """Which of the expected Gateways (namespace, name) a cluster does not hold yet."""
    have = {((g.get("metadata") or {}).get("namespace"), (g.get("metadata") or {}).get("name"))
            for g in items}
    return [f"Gateway {ns}/{name} not there yet" for ns, name in expected
            if (ns, name) not in have]
