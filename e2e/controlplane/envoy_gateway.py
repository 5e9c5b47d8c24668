"""Envoy Gateway as the local control plane's Gateway implementation.

Upstream's controller (cmd/envoy-gateway, pinned in hack/tools/envoy-gateway and
built by hack/tools.sh --e2e) runs as a local process against one API server: its
EnvoyGateway config names the Custom provider with Kubernetes resources and Host
infrastructure, so it reconciles GatewayClasses, Gateways, HTTPRoutes and Backends,
writes their status, and starts each Gateway's Envoy as its own child process (the
data plane: e2e/controlplane/dataplane.py). One process per API server that holds a
Gateway (a controller watches one API server; each remote cluster of the fleet has
its own Gateway and receives its replicas' HTTPRoutes).

Every listener is on loopback: the admin server by the config, the health probe,
the topology-injector webhook, the xDS server (whose address upstream hard-codes) and
the Wasm cache through the environment hack/tools/envoy-gateway/main.go and patch.sh
read, and the Envoy's listeners on its cluster's own loopback address
($EG_PROXY_ADDRESS); EG's own Prometheus endpoint and controller-runtime's metrics
server are off. Its HOME and Host directories are its run directory, so nothing it
might cache lands outside the state directory.

InferencePools: Envoy Gateway v1.9 has no support of its own; its extension
manager calls our extension server (tools/inferencepool-extension, one per
controller, started first), which routes each pool through its endpoint picker
and writes the pool's status.parents.

Pure helpers here; core.py starts the processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from e2e.controlplane import fleet

CONTROLLER = fleet.GATEWAY_CONTROLLER
GATEWAY_CLASS = fleet.GATEWAY_CLASS
POOL_GROUP = "inference.networking.k8s.io"
NAMESPACE = "envoy-gateway-system"  # EG's controller namespace (ENVOY_GATEWAY_NAMESPACE)


def config(admin_port: int, infrastructure: Mapping[str, Any] | None = None,
           extension_port: int | None = None,
           composed: Mapping[str, Any] | None = None) -> dict:
    """The EnvoyGateway configuration file (gateway.envoyproxy.io/v1alpha1).
    `infrastructure` is provider.custom.infrastructure (dataplane.HostPaths.provider():
    Envoy Gateway starts each Gateway's Envoy); without it no Envoy is created.
    `extension_port`: the InferencePool extension server on 127.0.0.1 (extension_manager).
    `composed`: the configuration a cluster's stack installed (its ConfigMap's file,
    stackenvoy.config_of), whose extension APIs (the Backend API as the InferenceCluster
    declares it) and controller name this one keeps; the harness's own settings
    (provider, admin, telemetry, extension manager) replace the rest."""
    custom: dict[str, Any] = {"resource": {
        "type": "Kubernetes", "kubernetes": {"leaderElection": {"disable": True}}}}
    if infrastructure is not None:
        custom["infrastructure"] = dict(infrastructure)
    doc = {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "EnvoyGateway",
        "gateway": {"controllerName": CONTROLLER},
        "provider": {"type": "Custom", "custom": custom},
        "admin": {"address": {"host": "127.0.0.1", "port": admin_port}},
        # ModelServices route to Envoy Gateway Backends (off by default upstream).
        "extensionApis": {"enableBackend": True},
        # EG's own metrics server listens on 0.0.0.0:19001 with no host setting.
        "telemetry": {"metrics": {"prometheus": {"disable": True}}},
        "logging": {"level": {"default": "info"}},
    }
    if composed is not None:
        doc["gateway"] = dict(composed.get("gateway") or doc["gateway"])
        doc["extensionApis"] = dict(composed.get("extensionApis") or {})
    if extension_port is not None:
        doc["extensionManager"] = extension_manager(extension_port)
    return doc


def extension_manager(port: int) -> dict:
    """Envoy Gateway's extensionManager for tools/inferencepool-extension (its README):
    InferencePools become backendRefs EG passes to the Cluster hook; the Translation
    hook needs listeners, routes, clusters and secrets included, or it sees only
    clusters and pool routes answer 503. failOpen false: a failing hook keeps the last
    good configuration instead of EG's pool-less one."""
    everything = {"includeAll": True}
    return {
        "backendResources": [{"group": POOL_GROUP, "version": "v1", "kind": "InferencePool"}],
        "hooks": {"xdsTranslator": {
            "translation": {"listener": everything, "route": everything,
                            "cluster": everything, "secret": everything},
            "post": ["Cluster", "Translation"]}},
        "service": {"ip": {"address": "127.0.0.1", "port": port}},
        "failOpen": False,
    }


def extension_argv(binary: str, *, port: int, kubeconfig: Path) -> tuple[str, ...]:
    """The extension server's command line: EG's hooks and its Envoys' EDS on loopback."""
    return (binary, f"--listen=127.0.0.1:{port}", f"--kubeconfig={kubeconfig}",
            f"--controller-name={CONTROLLER}")


def environment(*, kubeconfig: Path, cert_dir: Path, home: Path, health_port: int,
                webhook_port: int, xds_port: int, xds_cert_dir: Path | None = None,
                proxy_address: str | None = None,
                wasm_port: int | None = None) -> dict[str, str]:
    """What the wrapper (main.go) and the patched controller (patch.sh) read.

    The xDS server's certificates must share a CA with the Envoy's (certgen --local's,
    dataplane.HostPaths.certs): `xds_cert_dir`, else the webhook's `cert_dir`.
    `proxy_address` is where its Envoys bind every listener; the Wasm cache listens
    on 127.0.0.1:`wasm_port`."""
    env = {
        "KUBECONFIG": str(kubeconfig),
        "ENVOY_GATEWAY_NAMESPACE": NAMESPACE,
        "HOME": str(home),
        "EG_HEALTH_PROBE_ADDR": f"127.0.0.1:{health_port}",
        "EG_CR_METRICS_ADDR": "0",
        "EG_WEBHOOK_PORT": str(webhook_port),
        "EG_WEBHOOK_CERT_DIR": str(cert_dir),
        "EG_XDS_PORT": str(xds_port),
        "EG_XDS_CERT_DIR": str(xds_cert_dir or cert_dir),
    }
    if proxy_address is not None:
        env["EG_PROXY_ADDRESS"] = proxy_address
    if wasm_port is not None:
        env["EG_WASM_ADDRESS"] = f"127.0.0.1:{wasm_port}"
    return env


def clusters_with_gateways(plan: fleet.FleetPlan) -> list[str]:
    """The clusters (API servers) that hold a Gateway, the harness's or the stack's:
    those given the GatewayClass (fleet.cluster_manifests). One controller each."""
    return [name for name, c in plan.clusters.items()
            if any(m["kind"] == "GatewayClass" for m in c.manifests)]


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []
            if isinstance(c, Mapping)}


def _said(cond: Mapping[str, Any] | None) -> str:
    if cond is None:
        return "no Accepted condition yet"
    return f"Accepted={cond.get('status')} {cond.get('reason') or ''}: {cond.get('message') or ''}"


def not_accepted(gatewayclass: Mapping[str, Any] | None,
                 gateways: Iterable[Mapping[str, Any]]) -> list[str]:
    """What keeps the controller from being up and in charge: the GatewayClass
    missing or naming another controller, or a Gateway not Accepted=True (for its
    current generation). Empty when every Gateway is accepted.

    Programmed is not asked for here (dataplane.not_programmed asks). Nor is the
    GatewayClass's own Accepted: Envoy Gateway v1.9.1 sometimes overwrites it at
    start-up with the status it read before its first write (Accepted=Unknown,
    Pending) until the next event, while it accepts the class's Gateways (which it
    does only for a class it accepted)."""
    if gatewayclass is None:
        return [f"GatewayClass {GATEWAY_CLASS} does not exist"]
    controller = (gatewayclass.get("spec") or {}).get("controllerName")
    if controller != CONTROLLER:
        return [f"GatewayClass {GATEWAY_CLASS} names controller {controller}, not {CONTROLLER}"]
    out = []
    for gw in gateways:
        meta = gw.get("metadata") or {}
        if (gw.get("spec") or {}).get("gatewayClassName") != GATEWAY_CLASS:
            continue
        name = f"{meta.get('namespace')}/{meta.get('name')}"
        cond = _conditions(gw).get("Accepted")
        gen = meta.get("generation")
        if cond is None or cond.get("status") != "True":
            out.append(f"Gateway {name}: {_said(cond)}")
        elif gen is not None and cond.get("observedGeneration") not in (None, gen):
            out.append(f"Gateway {name}: Accepted for generation "
                       f"{cond.get('observedGeneration')}, not {gen}")
    return out


__all__ = ["CONTROLLER", "GATEWAY_CLASS", "NAMESPACE", "config", "environment",
           "extension_manager", "extension_argv",
           "clusters_with_gateways", "not_accepted"]
