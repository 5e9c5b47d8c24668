"""Envoy Gateway's configuration as a cluster's stack installs it (spec.stack.envoyGateway).

Its chart renders the EnvoyGateway configuration (ConfigMap `envoy-gateway-config`,
the file its controller reads at start) once, at build time, with the Backend API
off, as upstream ships it. A front door routes ModelServices to Envoy Gateway
Backends, so the stack turns the API on per cluster (`backendAPI`, default true):
`extensionApis.enableBackend` in that file. Nothing else of the file changes. The
GatewayClass the stack composes for it names the controller the file gives
(cluster/stackgateway.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

CONFIG_MAP = "envoy-gateway-config"  # the chart's (templates/envoy-gateway-config.yaml)
CONFIG_KEY = "envoy-gateway.yaml"


def config_of(configmap: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The EnvoyGateway configuration a ConfigMap of the chart holds (None: no file, or
    not a mapping): the rendered one, or one observed on a cluster."""
    text = ((configmap or {}).get("data") or {}).get(CONFIG_KEY)
    doc = yaml.safe_load(text) if text else None
    return doc if isinstance(doc, dict) else None


def configured(manifest: Mapping[str, Any], backend_api: bool) -> Mapping[str, Any]:
    """The chart's ConfigMap with the Backend API set as declared; any other manifest
    as it is."""
    if manifest.get("kind") != "ConfigMap" \
            or (manifest.get("metadata") or {}).get("name") != CONFIG_MAP:
        return manifest
    data = dict(manifest.get("data") or {})
    config = config_of(manifest) or {}
    apis = {k: v for k, v in (config.get("extensionApis") or {}).items() if k != "enableBackend"}
    if backend_api:
        apis["enableBackend"] = True
    config["extensionApis"] = dict(sorted(apis.items()))
    data[CONFIG_KEY] = yaml.safe_dump(config, sort_keys=False)
    return {**manifest, "data": data}


def backend_api(entry: Mapping[str, Any]) -> bool:
    """spec.stack.envoyGateway.backendAPI, true unless set false (the XRD's default)."""
    return entry.get("backendAPI") is not False

