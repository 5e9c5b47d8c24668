"""What the endpoint-picker layers run besides the user's engines: one place, pinned.

Every image, version, port, size and tunable of the routing objects the
composer adds for an endpoint picker (and PrefillDecode's routing sidecar)
lives here, with a pinned default.
The function process may override each through an environment variable
(set on the function's Deployment, e.g. through a DeploymentRuntimeConfig);
an unset or empty variable keeps the default. A malformed value is never
guessed at: `load()` raises `ConfigError`, and a layer using it composes no
routing until it is fixed (the `Routed` condition says
which variable is wrong).

| variable | default | what |
|---|---|---|
| MODELPLANE_EPP_IMAGE | ghcr.io/llm-d/llm-d-inference-scheduler:v0.7.1 | the endpoint picker |
| MODELPLANE_ROUTING_SIDECAR_IMAGE | ghcr.io/llm-d/llm-d-routing-sidecar:v0.7.1 | decode sidecar |
| MODELPLANE_EPP_REPLICAS | 1 | EPP pods; above 1 they elect a leader |
| MODELPLANE_EPP_CPU_REQUEST | 500m | EPP container |
| MODELPLANE_EPP_MEMORY_REQUEST | 1Gi | EPP container |
| MODELPLANE_EPP_MEMORY_LIMIT | 4Gi | EPP container |
| MODELPLANE_SIDECAR_CPU_REQUEST | 100m | routing sidecar |
| MODELPLANE_SIDECAR_MEMORY_REQUEST | 128Mi | routing sidecar |
| MODELPLANE_SIDECAR_MEMORY_LIMIT | 512Mi | routing sidecar |
| MODELPLANE_EPP_FAILURE_MODE | FailClose | InferencePool endpointPickerRef.failureMode |
| MODELPLANE_PD_NON_CACHED_TOKENS | 16 | uncached prompt tokens that make a request P/D |
| MODELPLANE_NIXL_SIDE_CHANNEL_PORT | 5600 | VLLM_NIXL_SIDE_CHANNEL_PORT in engine pods |

Why these pins: llm-d v0.6.0 released the inference scheduler (the EPP) and
the routing sidecar together as v0.7.1, built against Gateway API Inference
Extension v1.4 (InferencePool `inference.networking.k8s.io/v1`, which the
v1.6.0 CRD vendored in crds/inference-extension still serves unchanged). The EPP configuration in
`epp.py` and the layers using it, the EPP's flags and the sidecar's flags are
written for exactly that release: plugin names and parameters change between
llm-d releases (`pd-profile-handler`'s `threshold`/`hashBlockSize` became a
`prefix-based-pd-decider` with `nonCachedTokens`; in v0.7.1 the handler is
`disagg-profile-handler` and the old name a deprecated alias; the sidecar's
`--connector` became `--kv-connector` and lost `lmcache`; later releases, as
llm-d-router, move the config group to llm-d.ai), so bumping an image means
re-checking that config. tests/harness/test_llmd_binaries.py runs the pinned
binaries (built by `hack/tools.sh --dataplane`) on what the composer emits.
Tags, not digests: pin digests in the override if your registry policy wants
them.

The KV-transfer environment each connector needs in every prefill and decode
pod (workers included) is `kv_env` below; user-set variables always win.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from function.contract.enums import KvConnector

PREFIX = "MODELPLANE_"

EPP_IMAGE = "ghcr.io/llm-d/llm-d-inference-scheduler:v0.7.1"
SIDECAR_IMAGE = "ghcr.io/llm-d/llm-d-routing-sidecar:v0.7.1"

# The EPP's ports, as the GIE chart and the EPP's flag defaults have them.
EPP_GRPC_PORT = 9002         # ext-proc, what the gateway calls (endpointPickerRef)
EPP_HEALTH_PORT = 9003       # gRPC health, for the kubelet's probes
EPP_METRICS_PORT = 9090      # Prometheus
EPP_CONFIG_DIR = "/config"
EPP_CONFIG_FILE = "epp-config.yaml"

# The port the InferencePool targets on every serving pod: the prefill engine
# itself, or the routing sidecar in front of the decode engine.
POOL_TARGET_PORT = 8000

# kvConnector (the API) -> the routing sidecar's --kv-connector, per engine kind.
# The sidecar (v0.7.1) accepts exactly nixlv2, shared-storage and sglang
# (SIDECAR_PROTOCOLS); any other value and it logs "Invalid configuration" and
# exits. It speaks the engine's P/D protocol, not the transfer library:
#  nixlv2: prefill with kv_transfer_params asking for a remote decode, then
#    decode with the parameters the prefill returned (vLLM's NixlConnector).
#  shared-storage: prefill (max_tokens 1), then the request to the decode
#    engine, which finds the KV cache where the prefill engine put it. This is
#    the protocol earlier sidecars called `lmcache` (the name is gone in
#    v0.7.1), what vLLM's LMCacheConnectorV1 needs: LMCache moves the KV
#    cache itself, the sidecar only orders the two calls.
#  sglang: SGLang's bootstrap protocol. An SGLang decode engine always needs
#    it, whatever moves its KV cache (Mooncake is SGLang's default transfer
#    backend, NIXL its alternative).
# vLLM's MooncakeConnector has no sidecar protocol in this release (only
# unreleased builds have a mooncake protocol), so vLLM + mooncake is refused.
VLLM, SGLANG = "vllm", "sglang"
SIDECAR_PROTOCOLS = ("nixlv2", "shared-storage", "sglang")
SIDECAR_CONNECTORS: Mapping[str, Mapping[str, str | None]] = {
    VLLM: {KvConnector.NIXL: "nixlv2", KvConnector.LMCACHE: "shared-storage",
           KvConnector.MOONCAKE: None},
    SGLANG: {KvConnector.NIXL: "sglang", KvConnector.LMCACHE: None, KvConnector.MOONCAKE: "sglang"},
    # An engine we cannot recognise from its command: go by the connector.
    "": {KvConnector.NIXL: "nixlv2", KvConnector.LMCACHE: "shared-storage",
         KvConnector.MOONCAKE: "sglang"},
}

# /dev/shm for NCCL/NIXL/Mooncake staging; the container runtime's 64 MiB
# default is far too small. Memory-backed, so it counts against the pod's
# memory; no size limit by default (the engine's memory limit bounds it).
SHM_VOLUME = "shm"
SHM_PATH = "/dev/shm"

# The engines' KV block size, when neither --block-size (vLLM) nor --page-size
# (SGLang) says otherwise: vLLM's default on CUDA.
DEFAULT_BLOCK_SIZE = 16


class ConfigError(ValueError):
    """An environment override that is not a valid value."""


@dataclass(frozen=True)
class ServingConfig:
    epp_image: str = EPP_IMAGE
    sidecar_image: str = SIDECAR_IMAGE
    epp_replicas: int = 1
    epp_cpu_request: str = "500m"
    epp_memory_request: str = "1Gi"
    epp_memory_limit: str = "4Gi"
    sidecar_cpu_request: str = "100m"
    sidecar_memory_request: str = "128Mi"
    sidecar_memory_limit: str = "512Mi"
    epp_failure_mode: str = "FailClose"
    non_cached_tokens: int = 16
    nixl_side_channel_port: int = 5600


_ENV = {  # field -> its variable, after the MODELPLANE_ prefix
    "epp_image": "EPP_IMAGE",
    "sidecar_image": "ROUTING_SIDECAR_IMAGE",
    "epp_replicas": "EPP_REPLICAS",
    "epp_cpu_request": "EPP_CPU_REQUEST",
    "epp_memory_request": "EPP_MEMORY_REQUEST",
    "epp_memory_limit": "EPP_MEMORY_LIMIT",
    "sidecar_cpu_request": "SIDECAR_CPU_REQUEST",
    "sidecar_memory_request": "SIDECAR_MEMORY_REQUEST",
    "sidecar_memory_limit": "SIDECAR_MEMORY_LIMIT",
    "epp_failure_mode": "EPP_FAILURE_MODE",
    "non_cached_tokens": "PD_NON_CACHED_TOKENS",
    "nixl_side_channel_port": "NIXL_SIDE_CHANNEL_PORT",
}
_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*[a-zA-Z0-9_]$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")


def _int(variable: str, value: str, low: int, high: int) -> int:
    if not re.fullmatch(r"[0-9]+", value) or not low <= int(value) <= high:
        raise ConfigError(f"{variable}={value!r} must be an integer from {low} to {high}")
    return int(value)


def _check(field: str, variable: str, value: str) -> str | int:
    if field in ("epp_image", "sidecar_image"):
        if not _IMAGE.match(value) or len(value) > 512:
            raise ConfigError(f"{variable}={value!r} is not an image reference")
        return value
    if field == "epp_replicas":
        return _int(variable, value, 1, 16)
    if field == "non_cached_tokens":
        # 0 would not mean "never": older deciders read it as "always", newer
        # ones as "disabled". A positive threshold means the same everywhere.
        return _int(variable, value, 1, 1 << 20)
    if field == "nixl_side_channel_port":
        return _int(variable, value, 1024, 65535)
    if field == "epp_failure_mode":
        if value not in ("FailClose", "FailOpen"):
            raise ConfigError(f"{variable}={value!r} must be FailClose or FailOpen")
        return value
    if not _QUANTITY.match(value):
        raise ConfigError(f"{variable}={value!r} is not a resource quantity")
    return value


def load(environ: Mapping[str, str] | None = None) -> ServingConfig:
    """The defaults, with the function process's environment overrides applied."""
    environ = os.environ if environ is None else environ
    overrides: dict[str, str | int] = {}
    for field, name in _ENV.items():
        variable = PREFIX + name
        value = (environ.get(variable) or "").strip()
        if value:
            overrides[field] = _check(field, variable, value)
    return ServingConfig(**overrides)  # type: ignore[arg-type]


# Environment the engines need for KV transfer that is not an engine flag, in
# every prefill and decode pod (gang workers too); a variable the user set
# keeps the user's value (`kv_env`).
#  nixl: vLLM's NixlConnector handshakes over a side channel on this host and
#    port (plus the data-parallel rank); left alone it advertises an address
#    peers in other pods cannot reach. Host: the pod IP.
#  lmcache: nothing pod-level. LMCache's P/D role, peer and proxy addresses
#    are engine configuration (LMCACHE_CONFIG_FILE or LMCACHE_* variables in
#    the template); its transfer runs over NIXL inside the engine.
#  mooncake: SGLang advertises its bootstrap/transfer address from
#    SGLANG_HOST_IP; on multi-NIC (RDMA) nodes its own guess may pick the
#    wrong interface. Host: the pod IP.
POD_IP = {"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


def kv_env(connector: str, config: ServingConfig) -> list[dict[str, Any]]:
    """The KV-transfer variables for `connector`, in order (before user overrides)."""
    if connector == KvConnector.NIXL:
        return [{"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", **POD_IP},
                {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT",
                 "value": str(config.nixl_side_channel_port)}]
    if connector == KvConnector.MOONCAKE:
        return [{"name": "SGLANG_HOST_IP", **POD_IP}]
    return []
