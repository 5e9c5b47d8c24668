"""The fleet's InferenceClusters -> the clusters to start and what each one holds.

Pure: YAML in, manifests out. Every InferenceCluster without
`spec.providerConfigRef` lands on the control-plane cluster; every one with it
gets a cluster of its own (pools of different clusters never mix), reached
through the provider-kubernetes ClusterProviderConfig it names.

Per cluster, what a real cluster's platform team and DRA driver would have
made:

* a Namespace, GatewayClass and Gateway for each `spec.gateway` (only the
  GatewayClass where the InferenceCluster's stack composes the Gateway:
  `spec.stack.gateway` Managed);
* per node pool, `nodes` kwok fake Nodes (annotation kwok.x-k8s.io/node=fake,
  label modelplane.ai/pool, the pool's taints, generous allocatable);
* per node and DRA driver, a ResourceSlice (resource.k8s.io/v1) with `count`
  devices of every `claim: DRA` entry (Synthetic entries steer placement only
  and are not published), typed attributes and capacity as declared;
* one DeviceClass per deviceClassName selecting its driver(s);
* for `spec.storage`, its StorageClass (no provisioner) and PERSISTENT_VOLUMES
  ReadWriteMany hostPath PersistentVolumes of it that the real PV controller
  binds a ModelCache's claims to (kwok pods mount nothing, so the path is
  never touched).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from function.contract.stack import GATEWAY, managed_fields

CONTROL_PLANE = "control-plane"
API_VERSION = "modelplane.ai/v1alpha1"
POOL_LABEL = "modelplane.ai/pool"
CLUSTER_LABEL = "modelplane.ai/cluster"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
# The GatewayClass a platform team installing Envoy Gateway creates (its quickstart
# names it `eg`); the local control plane runs Envoy Gateway's controller.
GATEWAY_CLASS = "eg"
GATEWAY_CONTROLLER = "gateway.envoyproxy.io/gatewayclass-controller"
MAX_DEVICES_PER_SLICE = 128  # resource.k8s.io/v1 ResourceSlice.spec.devices maxItems
PERSISTENT_VOLUMES = 8       # per StorageClass: one per ModelCache staged there at a time
VOLUME_SIZE = "2Ti"
ATTRIBUTE_TYPES = ("string", "int", "bool", "version")

# What a fake node offers besides its devices: room for every pod placed on it.
NODE_RESOURCES = {"cpu": "1000", "memory": "4Ti", "pods": "1000", "ephemeral-storage": "10Ti"}

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class FleetError(ValueError):
    pass


@dataclass(frozen=True)
class ClusterPlan:
    """One API server: the control plane, or one remote workload cluster."""

    name: str                              # CONTROL_PLANE or the InferenceCluster's name
    remote: bool
    provider_config: str | None            # the ClusterProviderConfig that reaches it
    inference_clusters: tuple[str, ...]    # the InferenceClusters it backs
    manifests: tuple[dict, ...]            # applied in this order (namespaces first)


@dataclass(frozen=True)
class FleetPlan:
    inference_clusters: tuple[dict, ...]   # as read, in file order
    clusters: Mapping[str, ClusterPlan]    # always holds CONTROL_PLANE

    def cluster_of(self, ic_name: str) -> ClusterPlan:
        for plan in self.clusters.values():
            if ic_name in plan.inference_clusters:
                return plan
        raise KeyError(ic_name)


def dns_label(*parts: str, limit: int = 63) -> str:
    """Join parts with '-' into a DNS label, shortened with a digest when too long."""
    raw = "-".join(p for p in parts if p)
    label = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")
    if len(label) <= limit and _DNS_LABEL.match(label) and label == raw:
        return label
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    head = label[: limit - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}" if head else digest


def load_fleet(directory: Path | str) -> list[dict]:
    """Every InferenceCluster in the directory's *.yaml / *.yml files, in file order."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FleetError(f"fleet directory {directory} does not exist")
    out: list[dict] = []
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "InferenceCluster":
                out.append(doc)
    if not out:
        raise FleetError(f"no InferenceCluster in {directory}")
    return out


def _name(ic: Mapping[str, Any]) -> str:
    name = (ic.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        raise FleetError(f"an InferenceCluster without metadata.name: {ic!r:.200}")
    return name


def plan_fleet(inference_clusters: Sequence[Mapping[str, Any]]) -> FleetPlan:
    seen: set[str] = set()
    provider_configs: dict[str, str] = {}
    on_control_plane: list[Mapping[str, Any]] = []
    remote: list[tuple[Mapping[str, Any], str]] = []
    for ic in inference_clusters:
        if ic.get("apiVersion") != API_VERSION or ic.get("kind") != "InferenceCluster":
            raise FleetError(f"not an {API_VERSION} InferenceCluster: {ic.get('kind')}")
        name = _name(ic)
        if name in seen:
            raise FleetError(f"InferenceCluster {name} appears twice in the fleet")
        seen.add(name)
        ref = (ic.get("spec") or {}).get("providerConfigRef")
        if not ref:
            on_control_plane.append(ic)
            continue
        kind = ref.get("kind") or "ClusterProviderConfig"
        if kind != "ClusterProviderConfig":
            raise FleetError(f"InferenceCluster {name}: providerConfigRef kind {kind} is not "
                             "supported by the local control plane (use ClusterProviderConfig)")
        pc = ref.get("name")
        if not pc:
            raise FleetError(f"InferenceCluster {name}: providerConfigRef without a name")
        if pc in provider_configs:
            raise FleetError(f"InferenceClusters {provider_configs[pc]} and {name} name the "
                             f"same ClusterProviderConfig {pc}; each gets a cluster of its own")
        provider_configs[pc] = name
        remote.append((ic, pc))
    if any(_name(ic) == CONTROL_PLANE for ic, _ in remote):
        raise FleetError(f"a remote InferenceCluster may not be named {CONTROL_PLANE}")

    clusters: dict[str, ClusterPlan] = {
        CONTROL_PLANE: ClusterPlan(
            name=CONTROL_PLANE, remote=False, provider_config=None,
            inference_clusters=tuple(_name(ic) for ic in on_control_plane),
            manifests=tuple(cluster_manifests(on_control_plane))),
    }
    for ic, pc in remote:
        clusters[_name(ic)] = ClusterPlan(
            name=_name(ic), remote=True, provider_config=pc,
            inference_clusters=(_name(ic),), manifests=tuple(cluster_manifests([ic])))
    return FleetPlan(inference_clusters=tuple(dict(ic) for ic in inference_clusters),
                     clusters=clusters)


def _host_port(address: str) -> tuple[str, int | None]:
    rest = re.sub(r"^https?://", "", address).split("/", 1)[0]
    if rest.startswith("["):                       # [v6] or [v6]:port
        host, _, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else ""
    elif rest.count(":") == 1:                     # host:port
        host, port = rest.split(":", 1)
    else:
        host, port = rest, ""
    return host, int(port) if port.isdigit() else None


def gateway_addresses(address: str | None) -> list[dict]:
    """The Gateway's spec.addresses for an InferenceCluster's gateway address.

    None for a loopback IP: that is the local data plane's (e2e/controlplane/dataplane.py),
    whose address Envoy Gateway reads from its stand-in Service's load-balancer status;
    requested in spec.addresses, Envoy Gateway would report the Service's cluster IP
    instead."""
    if not address:
        return []
    host, _ = _host_port(address)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return [{"type": "Hostname", "value": host.lower()}]
    return [] if ip.is_loopback else [{"type": "IPAddress", "value": host}]


def gateway_port(address: str | None) -> int:
    """The Gateway listener's port: the address's own port, else 80 (the local data
    plane's Envoy binds the listener's port as it is, so its URL's port is the listener's)."""
    port = _host_port(address)[1] if address else None
    return port or 80


def _taints(taints: Iterable[Mapping[str, Any]] | None) -> list[dict]:
    out = []
    for t in taints or []:
        taint = {"key": t["key"], "effect": t["effect"]}
        if t.get("value"):
            taint["value"] = t["value"]
        out.append(taint)
    return out


def _attribute(name: str, value: Mapping[str, Any]) -> dict:
    present = [k for k in ATTRIBUTE_TYPES if k in value]
    if len(present) != 1 or set(value) - set(ATTRIBUTE_TYPES):
        raise FleetError(f"attribute {name}: exactly one of {', '.join(ATTRIBUTE_TYPES)}, "
                         f"got {dict(value)!r}")
    kind = present[0]
    v = value[kind]
    if kind == "int" and (isinstance(v, bool) or not isinstance(v, int)):
        raise FleetError(f"attribute {name}: int {v!r} is not an integer")
    if kind == "bool" and not isinstance(v, bool):
        raise FleetError(f"attribute {name}: bool {v!r} is not a boolean")
    if kind in ("string", "version") and not isinstance(v, str):
        raise FleetError(f"attribute {name}: {kind} {v!r} is not a string")
    return {kind: v}


def published(device: Mapping[str, Any]) -> bool:
    """DRA entries (claim absent or DRA) are published; Synthetic ones are not."""
    return (device.get("claim") or "DRA") == "DRA"


def _device(entry: Mapping[str, Any], index: int) -> dict:
    dev: dict[str, Any] = {"name": dns_label(entry["name"], str(index))}
    attrs = {k: _attribute(k, v) for k, v in sorted((entry.get("attributes") or {}).items())}
    if attrs:
        dev["attributes"] = attrs
    caps = {k: {"value": str(v["value"])}
            for k, v in sorted((entry.get("capacity") or {}).items())}
    if caps:
        dev["capacity"] = caps
    return dev


def node_name(ic_name: str, pool: str, index: int) -> str:
    return dns_label(ic_name, pool, str(index))


def stack_gateway_managed(ic: Mapping[str, Any]) -> bool:
    """Whether the InferenceCluster's stack composes its Gateway (spec.stack.gateway
    Managed): then the cluster's manifests leave it and its namespace out."""
    return GATEWAY.field in managed_fields(ic.get("spec") or {})


def cluster_manifests(inference_clusters: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Everything one cluster needs for the InferenceClusters it backs, in apply order."""
    namespaces: dict[str, dict] = {}
    gateways: dict[tuple[str, str], dict] = {}
    classes: dict[str, set[str]] = {}
    nodes: list[dict] = []
    slices: list[dict] = []
    storage: set[str] = set()
    class_needed = False  # a Gateway of the class, the harness's or the stack's
    for ic in inference_clusters:
        ic_name = _name(ic)
        spec = ic.get("spec") or {}
        if (spec.get("storage") or {}).get("storageClassName"):
            storage.add(spec["storage"]["storageClassName"])
        gw = spec.get("gateway") or {}
        named = bool(gw.get("name") and gw.get("namespace"))
        class_needed = class_needed or named
        if named and not stack_gateway_managed(ic):
            ns = gw["namespace"]
            namespaces.setdefault(ns, {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": ns}})
            gw_spec: dict[str, Any] = {
                "gatewayClassName": GATEWAY_CLASS,
                "listeners": [{"name": "http", "protocol": "HTTP",
                               "port": gateway_port(gw.get("address")),
                               "allowedRoutes": {"namespaces": {"from": "All"}}}],
            }
            addresses = gateway_addresses(gw.get("address"))
            if addresses:
                gw_spec["addresses"] = addresses
            gateways.setdefault((ns, gw["name"]), {
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": gw["name"], "namespace": ns,
                             "labels": {CLUSTER_LABEL: ic_name}},
                "spec": gw_spec,
            })
        pool_names: set[str] = set()
        for pool in spec.get("nodePools") or []:
            pool_name = pool["name"]
            if pool_name in pool_names:
                raise FleetError(f"InferenceCluster {ic_name}: pool {pool_name} appears twice")
            pool_names.add(pool_name)
            count = int(pool.get("nodes") or 0)
            dra = [d for d in pool.get("devices") or [] if published(d)]
            for d in dra:
                if not d.get("deviceClassName"):
                    raise FleetError(f"InferenceCluster {ic_name} pool {pool_name}: DRA device "
                                     f"{d.get('name')} has no deviceClassName")
                classes.setdefault(d["deviceClassName"], set()).add(d["driver"])
            by_driver: dict[str, list[dict]] = {}
            for d in dra:
                by_driver.setdefault(d["driver"], []).extend(
                    _device(d, i) for i in range(int(d.get("count") or 1)))
            for i in range(count):
                node = node_name(ic_name, pool_name, i)
                nodes.append({
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": {
                        "name": node,
                        "annotations": {KWOK_ANNOTATION: "fake"},
                        "labels": {POOL_LABEL: pool_name, CLUSTER_LABEL: ic_name,
                                   "kubernetes.io/hostname": node, "kubernetes.io/os": "linux",
                                   "kubernetes.io/arch": "amd64", "type": "kwok"},
                    },
                    "spec": {"taints": _taints(pool.get("taints"))},
                    "status": {"allocatable": dict(NODE_RESOURCES),
                               "capacity": dict(NODE_RESOURCES)},
                })
                for driver, devices in sorted(by_driver.items()):
                    chunks = [devices[j:j + MAX_DEVICES_PER_SLICE]
                              for j in range(0, len(devices), MAX_DEVICES_PER_SLICE)]
                    for j, chunk in enumerate(chunks):
                        slices.append({
                            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                            "metadata": {
                                "name": dns_label(node, driver.replace(".", "-"),
                                                  *([str(j)] if len(chunks) > 1 else [])),
                                "labels": {POOL_LABEL: pool_name, CLUSTER_LABEL: ic_name},
                            },
                            "spec": {"driver": driver, "nodeName": node,
                                     "pool": {"name": node, "generation": 1,
                                              "resourceSliceCount": len(chunks)},
                                     "devices": chunk},
                        })
    device_classes = []
    for cls, drivers in sorted(classes.items()):
        ds = sorted(drivers)
        expr = (f'device.driver == "{ds[0]}"' if len(ds) == 1 else
                "device.driver in [" + ", ".join(f'"{d}"' for d in ds) + "]")
        device_classes.append({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                               "metadata": {"name": cls},
                               "spec": {"selectors": [{"cel": {"expression": expr}}]}})
    gateway_class = [] if not class_needed else [{
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": GATEWAY_CLASS},
        "spec": {"controllerName": GATEWAY_CONTROLLER,
                 # (At most 64 characters.) e2e/controlplane/dataplane.py runs it.
                 "description": "Envoy Gateway; its Envoy runs on this machine."},
    }]
    return [*namespaces.values(), *gateway_class, *gateways.values(), *device_classes,
            *storage_manifests(sorted(storage)), *nodes, *slices]


def storage_manifests(classes: Sequence[str]) -> list[dict]:
    """Each StorageClass, and volumes of it for the PV controller to bind claims to."""
    out: list[dict] = []
    for cls in classes:
        out.append({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                    "metadata": {"name": cls}, "provisioner": "kubernetes.io/no-provisioner",
                    "volumeBindingMode": "Immediate", "reclaimPolicy": "Retain"})
        out += [{"apiVersion": "v1", "kind": "PersistentVolume",
                 "metadata": {"name": dns_label(cls, str(i))},
                 "spec": {"storageClassName": cls, "accessModes": ["ReadWriteMany"],
                          "capacity": {"storage": VOLUME_SIZE},
                          "persistentVolumeReclaimPolicy": "Retain",
                          "hostPath": {"path": f"/var/lib/modelplane-e2e/{cls}-{i}"}}}
                for i in range(PERSISTENT_VOLUMES)]
    return out


def provider_config_objects(provider_config: str, kubeconfig_yaml: str,
                            namespace: str = "crossplane-system") -> list[dict]:
    """The kubeconfig Secret and the ClusterProviderConfig docs/install.md describes."""
    secret = f"{provider_config}-kubeconfig"
    return [
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": secret, "namespace": namespace},
         "stringData": {"kubeconfig": kubeconfig_yaml}},
        {"apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "ClusterProviderConfig",
         "metadata": {"name": provider_config},
         "spec": {"credentials": {"source": "Secret", "secretRef": {
             "namespace": namespace, "name": secret, "key": "kubeconfig"}}}},
    ]


def expected_nodes(plan: ClusterPlan) -> list[str]:
    return [m["metadata"]["name"] for m in plan.manifests if m["kind"] == "Node"]
