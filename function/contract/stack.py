"""The serving stack's components: one table, read by the XRD generator, the build-time
renderer (hack/gen_stack.py) and the InferenceCluster's composition (cluster/stack.py).

A workload cluster needs some APIs before the composer's objects can land there
(docs/install.md): Gateway API for every replica's HTTPRoute, the Inference
Extension's InferencePool for EndpointPicker and PrefillDecode, LeaderWorkerSet for
multi-node engines, Envoy Gateway (with its Backend API) for a front door, KEDA where
ScaledObjects are composed. `spec.stack` names the ones a cluster's stack owns: each
`Managed` (the stack installs it) or `External` (the platform runs it; the stack
only observes that its API is served). Two entries are not a module's components:
the Gateway spec.gateway names (StackGateway) and the DRA driver (StackDraDriver,
observed with the cluster's nodes).

A component's version is not written here: it is the one the folder under
hack/tools named by `tool` pins in its go.mod (the only place a version is
written), and hack/gen_stack.py copies it, with the manifests rendered from that
module, into cluster/stackdata/ (checked by `make check-generated`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from function.contract import rules
from function.contract.api import DRA_API_VERSION, GROUP
from function.contract.enums import InventorySource, StackMode, StackPhase
from function.contract.names import tagged_label

# On every object the stack composes, and on the manifests it installs: the component.
LABEL_COMPONENT = f"{GROUP}/stack-component"
PURPOSE = "stack"  # the purpose label of the stack's objects, and its Objects' name tag
# provider-kubernetes' API (its Objects' and its configs'), and the Usage API
# Crossplane v2.3 serves: the cluster composes the stack's Objects, each replica
# on the cluster composes the Usages that hold them (composer/usages.py).
OBJECT_API_VERSION = "kubernetes.m.crossplane.io/v1alpha1"
USAGE_API_VERSION = "protection.crossplane.io/v1beta1"
DEFAULT_OBJECTS_NAMESPACE = "crossplane-system"


def objects_namespace() -> str:
    """Where an InferenceCluster's Objects live on the control plane (the reporter's and
    the stack's): it is cluster-scoped, so its composed Objects need a namespace of
    their own choosing."""
    return os.environ.get("MODELPLANE_INVENTORY_NAMESPACE") or DEFAULT_OBJECTS_NAMESPACE


def object_name(cluster: str, name: str, tag: str = PURPOSE) -> str:
    """The Object carrying the cluster's object `name` (a probe's is tagged apart: a
    component switched between modes never has two Objects of one name)."""
    return tagged_label(cluster, name, tag=tag)


class Tier(IntEnum):
    """Install order: a tier's objects are composed once every earlier tier's are Ready."""

    CRDS = 0          # and the namespaces the controllers go to
    CONTROLLERS = 1
    GATEWAYS = 2


def manifest_id(manifest: Mapping[str, Any]) -> str:
    """A manifest's name among its stack's: a CRD's own name (unique by its group), any
    other object's kind and name (a chart names its ServiceAccount like its Deployment)."""
    name = str((manifest.get("metadata") or {}).get("name", ""))
    kind = str(manifest.get("kind", ""))
    return name if kind == "CustomResourceDefinition" else f"{kind.lower()}-{name}"


@dataclass(frozen=True)
class Chart:
    """The Helm chart a component's controller ships in its module, as
    hack/vendor_charts.py renders it at build time into manifests/<field>.yaml."""

    path: str                     # the chart's folder in the module
    release: str                  # the release name its templates derive names from
    namespace: str                # where its namespaced objects go (the stack creates it)
    image_tag: str = ""           # the value set to the module's version: image and CRDs move together
    container: str = "manager"    # the Deployment's container spec.stack.<field>.controller sets
    # (key, value) for --set, beside the chart's defaults (a tuple: hashable).
    values: tuple[tuple[str, str], ...] = ()
    # A chart whose module holds a values template in place of values.yaml (its
    # release process fills it in): that file, and the (placeholder, value) its
    # `${placeholder}`s take, `{version}` standing for the module's version.
    values_template: str = ""
    template_values: tuple[tuple[str, str], ...] = ()
    # A chart whose Chart.yaml holds a placeholder version its release process
    # replaces (`helm package --version --app-version`): the rendering sets both to
    # the module's version, so its labels say the version that runs.
    stamp_version: bool = False


@dataclass(frozen=True)
class Component:
    field: str           # spec.stack.<field>, and its status.stack.components[].name
    title: str           # what a person calls it
    tool: str            # the folder under hack/tools whose go.mod pins the module
    module: str          # the Go module its manifests come from
    probe: str           # the CRD whose presence says the API is served: what External observes
    probe_version: str   # the version of that CRD the composed objects use
    # Globs of the vendored CRD files (crds/, copied from the pinned module by
    # hack/vendor_crds.py) the stack installs when Managed; empty: this release
    # renders no manifests for it, so Managed is refused.
    crds: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()  # components a stack that declares this one declares too
    # The kind of its probe CRD, where ModelReplicas compose objects of it on the
    # cluster: a replica composing one there holds a Usage of the Object carrying
    # that CRD (composer/usages.py). Empty: no replica composes its probe's kind.
    replica_kind: str = ""
    # Its controller's chart, rendered at build time: Managed installs it (the
    # controllers' tier) after the CRDs. None: Managed installs the CRDs only, and
    # the platform runs the controller.
    chart: Chart | None = None

    @property
    def installable(self) -> bool:
        return bool(self.crds)

    @property
    def controllers(self) -> bool:
        """Whether Managed installs its controller too."""
        return self.chart is not None

    @property
    def probe_group(self) -> str:
        return self.probe.split(".", 1)[1]


# In install order (and the order status lists them).
COMPONENTS: tuple[Component, ...] = (
    Component("gatewayAPI", "Gateway API", "gateway-api", "sigs.k8s.io/gateway-api",
              "httproutes.gateway.networking.k8s.io", "v1",
              crds=("gateway-api/*.yaml",), replica_kind="HTTPRoute"),
    Component("inferenceExtension", "Gateway API Inference Extension",
              "gateway-api-inference-extension", "sigs.k8s.io/gateway-api-inference-extension",
              "inferencepools.inference.networking.k8s.io", "v1",
              crds=("inference-extension/*.yaml",),
              requires=("gatewayAPI",), replica_kind="InferencePool"),
    # The v0.9 manager also runs the DisaggregatedSet controller, which cannot start
    # without its CRD (hack/vendor_crds.py).
    Component("leaderWorkerSet", "LeaderWorkerSet", "lws", "sigs.k8s.io/lws",
              "leaderworkersets.leaderworkerset.x-k8s.io", "v1",
              crds=("lws/*.yaml",), replica_kind="LeaderWorkerSet",
              chart=Chart("charts/lws", "lws", "lws-system", image_tag="image.manager.tag",
                          values=(("image.manager.pullPolicy", "IfNotPresent"),))),
    # Its chart's CRDs and controller (release `eg`, as its quickstart installs it); the
    # Gateway API CRDs are the gatewayAPI component's, so the chart's copies stay off.
    # The certgen Job keeps its Complete status (no TTL: the Object would make it
    # again). The EnvoyGateway configuration gets the Backend API per cluster
    # (cluster/stackenvoy.py).
    Component("envoyGateway", "Envoy Gateway", "envoy-gateway", "github.com/envoyproxy/gateway",
              "backends.gateway.envoyproxy.io", "v1alpha1", crds=("envoy-gateway/*.yaml",),
              requires=("gatewayAPI",),
              chart=Chart("charts/gateway-helm", "eg", "envoy-gateway-system",
                          container="envoy-gateway",
                          values=(("crds.enabled", "false"),
                                  ("certgen.job.ttlSecondsAfterFinished", "null")),
                          values_template="values.tmpl.yaml", stamp_version=True,
                          template_values=(
                              ("GatewayImage", "docker.io/envoyproxy/gateway:{version}"),
                              ("GatewayImagePullPolicy", "IfNotPresent")))),
    # Where ScaledObjects are composed: the control-plane cluster (docs/autoscaling.md).
    Component("keda", "KEDA", "keda", "github.com/kedacore/keda/v2",
              "scaledobjects.keda.sh", "v1alpha1"),
)

BY_FIELD = {c.field: c for c in COMPONENTS}
# The gateway implementation the stack installs: its Backend API (cluster/stackenvoy.py)
# and the GatewayClass of a Managed stack.gateway (cluster/stackgateway.py).
ENVOY_GATEWAY = BY_FIELD["envoyGateway"]


@dataclass(frozen=True)
class StackGateway:
    """spec.stack.gateway: the Gateway spec.gateway names, which every replica's
    HTTPRoute attaches to. Not a module's manifests rendered at build time but one
    object built from the InferenceCluster (cluster/stackgateway.py): Managed composes
    it (the Gateways' tier, after every component's objects are Ready), External
    observes that it exists and its class's controller Accepted it."""

    field: str = "gateway"
    title: str = "Gateway"
    kind: str = "Gateway"
    api_version: str = "gateway.networking.k8s.io/v1"
    requires: tuple[str, ...] = ("gatewayAPI",)
    version_of: str = "gatewayAPI"   # the component whose pinned version it is written in
    default_port: int = 80           # its listener's, when neither spec says one


GATEWAY = StackGateway()


@dataclass(frozen=True)
class StackDraDriver:
    """spec.stack.draDriver: the DRA driver that publishes the pools' devices. External
    only: a driver is the accelerator vendor's, runs on every accelerator node, and no
    driver's module is served to build one from (NVIDIA's answers 403 at the Go module
    proxy). Observed through what the cluster's Nodes, ResourceSlices and
    DeviceClasses say (the inventory report on a remote cluster, read directly on the
    control-plane cluster): every DeviceClass a pool's DRA device names exists, and
    every such device's driver publishes devices on the pool's nodes
    (cluster/stackdra.py)."""

    field: str = "draDriver"
    title: str = "DRA driver"
    version: str = DRA_API_VERSION  # the API it is read through: its status entry's version


DRA_DRIVER = StackDraDriver()


def spec_errors(spec: Mapping[str, Any]) -> list[str]:
    """The rules hack/gen_xrds.py gives spec.stack, checked again (admission should
    have refused these; `crossplane render` and hand-built requests do not)."""
    stack = spec.get("stack")
    if not isinstance(stack, Mapping):
        return []
    errors: list[str] = []
    declared = {f: c for f, c in stack.items() if f in BY_FIELD and isinstance(c, Mapping)}
    gateway = stack.get(GATEWAY.field)
    if isinstance(gateway, Mapping):
        errors += gateway_errors(spec, gateway, declared)
    driver = stack.get(DRA_DRIVER.field)
    if isinstance(driver, Mapping):
        errors += dra_driver_errors(spec, driver)
    for field, entry in declared.items():
        component = BY_FIELD[field]
        controller = entry.get("controller")
        if isinstance(controller, Mapping):
            if entry.get("mode") != StackMode.MANAGED:
                errors.append("controller overrides apply to the controller the stack "
                              "installs: mode Managed")
            errors += rules.placement_errors(
                controller.get("nodeSelector"), controller.get("tolerations"),
                controller.get("resources"), f"stack.{field}.controller")
        if entry.get("mode") == StackMode.MANAGED and not component.installable:
            errors.append(f"this release does not install {component.title} (mode Managed): run "
                          "it on the cluster and mark it External")
        errors += [f"stack.{field} needs stack.{r}: {component.title} works on its API"
                   for r in component.requires if r not in declared]
    ref = spec.get("providerConfigRef")
    if not isinstance(ref, Mapping):
        if managed_fields(spec):
            errors.append("the control-plane cluster's stack (no providerConfigRef) only "
                          "observes: mark every component External")
    elif ref.get("kind", "ClusterProviderConfig") != "ClusterProviderConfig":
        errors.append("a stack reaches its cluster through a ClusterProviderConfig: the "
                      "cluster-scoped InferenceCluster's Objects cannot use a namespaced "
                      "ProviderConfig")
    front_door = spec.get("frontDoor")
    if isinstance(front_door, Mapping) and front_door.get("enabled") \
            and (declared.get(ENVOY_GATEWAY.field) or {}).get("backendAPI") is False:
        errors.append("a front door needs Envoy Gateway's Backend API: set "
                      "stack.envoyGateway.backendAPI")
    return errors


def gateway_errors(spec: Mapping[str, Any], gateway: Mapping[str, Any],
                   declared: Mapping[str, Any]) -> list[str]:
    """spec.stack.gateway's rules (hack/gen_xrds.py gives them too)."""
    errors = [f"stack.gateway needs stack.{r}: a Gateway is of its API"
              for r in GATEWAY.requires if r not in declared]
    named = spec.get("gateway")
    if not (isinstance(named, Mapping) and named.get("name") and named.get("namespace")):
        errors.append("stack.gateway composes or observes the Gateway spec.gateway names: "
                      "set spec.gateway's name and namespace")
    if gateway.get("mode") == StackMode.MANAGED and not gateway.get("gatewayClassName"):
        errors.append("a Managed stack.gateway needs gatewayClassName: the GatewayClass of "
                      "the cluster's gateway implementation")
    if gateway.get("mode") == StackMode.EXTERNAL and ("gatewayClassName" in gateway or "port" in gateway):
        errors.append("stack.gateway's gatewayClassName and port shape the Gateway the stack "
                      "composes: mode Managed")
    return errors


def dra_driver_errors(spec: Mapping[str, Any], driver: Mapping[str, Any]) -> list[str]:
    """spec.stack.draDriver's rules (hack/gen_xrds.py gives them too)."""
    errors = []
    if driver.get("mode") != StackMode.EXTERNAL:
        errors.append("this release does not install a DRA driver (mode Managed): install "
                      "your accelerators' driver on the cluster and mark it External")
    if (spec.get("inventory") or {}).get("source", InventorySource.OBSERVED) \
            != InventorySource.OBSERVED:
        errors.append("stack.draDriver is observed with the cluster's nodes: "
                      "spec.inventory.source Observed")
    return errors


STACK_UNREADY_MAX = 200  # of the condition's message, in a scheduler reason


def stack_unready(obj: Mapping[str, Any]) -> str:
    """Why a declared stack is not ready, from the cluster's StackReady condition (the
    cluster's own output): not reported yet counts as not ready."""
    if not isinstance((obj.get("spec") or {}).get("stack"), Mapping):
        return ""
    ready = next((c for c in (obj.get("status") or {}).get("conditions") or []
                  if isinstance(c, Mapping) and c.get("type") == "StackReady"), None)
    if ready is None:
        return "not reported yet"
    if ready.get("status") == "True":
        return ""
    said = ready.get("message") or ready.get("reason") or "not ready"
    return str(said)[:STACK_UNREADY_MAX]


def installed(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """The Managed components the cluster's status.stack reports Installed (its own
    output), in table order: what a replica there may hold a Usage of."""
    entries = ((obj.get("status") or {}).get("stack") or {}).get("components") or []
    done = {e.get("name") for e in entries if isinstance(e, Mapping)
            and e.get("mode") == StackMode.MANAGED and e.get("phase") == StackPhase.INSTALLED}
    return tuple(c.field for c in COMPONENTS if c.field in done)


def managed_fields(spec: Mapping[str, Any]) -> frozenset[str]:
    """The fields of spec.stack (components and the gateway) declared Managed."""
    stack = spec.get("stack")
    if not isinstance(stack, Mapping):
        return frozenset()
    return frozenset(f for f, entry in stack.items()
                     if (f in BY_FIELD or f == GATEWAY.field) and isinstance(entry, Mapping)
                     and entry.get("mode") == StackMode.MANAGED)
