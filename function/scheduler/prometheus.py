"""The Prometheus servers autoscaling may query: the platform's, by name.

KEDA runs on the control plane with the platform's credentials and network,
so where it sends a query is the platform's to say, never a tenant's: a
tenant-chosen address would make KEDA probe any URL from inside the control
plane. The platform team defines its servers in one cluster-scoped Crossplane
EnvironmentConfig, `modelplane-autoscaling` (only cluster administrators write
cluster-scoped objects; Crossplane reads it, and the tenant role grants
nothing on it), and a ModelDeployment names one in
spec.autoscaling.prometheus.server (default `default`):

    apiVersion: apiextensions.crossplane.io/v1beta1
    kind: EnvironmentConfig
    metadata: {name: modelplane-autoscaling}
    data:
      prometheusServers:
        default:
          address: http://prometheus.monitoring.svc:9090
          # optional: the platform's own credentials for it, a KEDA
          # ClusterTriggerAuthentication, and how the trigger uses them
          clusterTriggerAuthentication: prometheus-reader
          authModes: bearer

The scheduler requires it by name only while spec.autoscaling is set.
Anything missing or malformed refuses the autoscaler (the Autoscaling
condition names the EnvironmentConfig and the server) and keeps what exists.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crossplane.function import response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.contract.api import PROMETHEUS_SERVERS, REQUIRE_PROMETHEUS_SERVERS
from function.contract.names import is_dns_subdomain
from function.kit.request import Request

ENVIRONMENT_CONFIG_API = "apiextensions.crossplane.io/v1beta1"
KIND_ENVIRONMENT_CONFIG = "EnvironmentConfig"
DATA_KEY = "prometheusServers"
DEFAULT_SERVER = "default"
ADDRESS = re.compile(r"^https?://[^\s]{1,2040}$")
AUTH_MODES = re.compile(r"^(bearer|basic|tls|custom)(,(bearer|basic|tls|custom))*$")
WHERE = f"EnvironmentConfig {PROMETHEUS_SERVERS} (data.{DATA_KEY})"


@dataclass(frozen=True)
class Server:
    name: str
    address: str
    cluster_auth: str | None = None  # a KEDA ClusterTriggerAuthentication, the platform's
    auth_modes: str = "bearer"


@dataclass(frozen=True)
class Refused:
    """Why no server can be used now: a condition reason and a sentence."""
    reason: str
    message: str


def require(rsp: fnv1.RunFunctionResponse) -> None:
    response.require_resources(rsp, REQUIRE_PROMETHEUS_SERVERS, ENVIRONMENT_CONFIG_API,
                               KIND_ENVIRONMENT_CONFIG, match_name=PROMETHEUS_SERVERS)


def server(req: Request, name: str) -> Server | Refused:
    """The platform's server `name`, or why it cannot be used."""
    if not req.resolved(REQUIRE_PROMETHEUS_SERVERS):
        return Refused("Resolving", f"waiting for Crossplane to resolve {WHERE}")
    found = [c for c in req.required(REQUIRE_PROMETHEUS_SERVERS)
             if (c.get("metadata") or {}).get("name") == PROMETHEUS_SERVERS]
    if not found:
        return Refused("UnknownPrometheusServer",
                       f"{WHERE} does not exist: the platform team defines the Prometheus "
                       "servers autoscaling may query (docs/autoscaling.md)")
    servers = (found[0].get("data") or {}).get(DATA_KEY)
    if not isinstance(servers, Mapping):
        return Refused("UnknownPrometheusServer", f"{WHERE} is not a map of servers by name")
    entry = servers.get(name)
    if entry is None:
        known = ", ".join(sorted(str(k) for k in servers)[:20]) or "none"
        return Refused("UnknownPrometheusServer",
                       f"{WHERE} defines no Prometheus server {name!r} (it defines: {known})")
    return _parse(name, entry)


def _parse(name: str, entry: Any) -> Server | Refused:
    bad = Refused("InvalidPrometheusServer", f"{WHERE}: server {name!r} is malformed: ")
    if not isinstance(entry, Mapping):
        return Refused(bad.reason, bad.message + "not an object")
    address, auth = entry.get("address"), entry.get("clusterTriggerAuthentication")
    modes = entry.get("authModes", "bearer")
    if not isinstance(address, str) or not ADDRESS.match(address):
        return Refused(bad.reason, bad.message + "address must be an http(s) URL")
    if auth is not None and not (isinstance(auth, str) and is_dns_subdomain(auth)):
        return Refused(bad.reason, bad.message + "clusterTriggerAuthentication must name a "
                       "ClusterTriggerAuthentication")
    if not isinstance(modes, str) or not AUTH_MODES.match(modes):
        return Refused(bad.reason, bad.message + "authModes must be bearer, basic, tls or "
                       "custom, comma separated")
    return Server(name, address, auth, modes)

