"""PrefillDecode: disaggregated serving behind an InferencePool and its endpoint picker.

The replica has exactly two engines, found by phase (never by name): one
Prefill, one Decode (validation guarantees it). Either may be Standalone or
a gang; `copies` sets the xPyD ratio. Requests flow:

    gateway --HTTPRoute--> InferencePool --ext-proc--> endpoint picker (EPP)
      EPP picks a decode pod, and (when enough of the prompt is not cached
      there) a prefill pod, named in the x-prefiller-host-port header
    gateway --> decode pod :8000, the llm-d routing sidecar
      sidecar --> prefill engine :8000 (prefill only, KV pushed or pulled over
      the connector), then --> decode engine on its own --port (the decode)

The layer decorates both engines' pod templates (`pd_pods`: role labels, KV
transfer environment, /dev/shm, the routing sidecar on decode serving pods)
and composes the InferencePool, its endpoint picker and the HTTPRoute
(`epp`) with the P/D EndpointPickerConfig below.

Engine flags are never written, only read (`engine_flags`). Fail closed: if
the decode engine would bind 8000 itself (no `--port`, which is vLLM's
default, or `--port 8000`), if a port is not a literal number (`--port
$PORT`), if the prefill engine serves anywhere but 8000 (one InferencePool
target port covers both engines, and a second target port would turn every
decode pod into a dead endpoint too), or if the sidecar has no protocol for
the connector, the layer composes no routing object and `Routed` is False
with a message saying what to change. The workloads are still composed:
they are correct on their own, killing a model that took tens of minutes to
load over a routing mistake helps nobody, and with no route no request
reaches a half-wired pair. A route composed before goes away with the
mistake.

The EndpointPickerConfig has prefill and decode scheduling profiles, each
with its role filter and the common scorers (`epp.profile`); the
`disagg-profile-handler` runs decode first and asks its prefill decider
(`prefix-based-pd-decider`) whether to add a prefill: yes when at least
`nonCachedTokens` (16 by default, never 0) of the prompt are not cached on
the chosen decode pod. The `disagg-headers-handler` then names the prefill
pod in the header the sidecar reads. The prefix scorer's `blockSizeTokens` is the engines'
KV block size (`--block-size`, vLLM; `--page-size`, SGLang; default 16), the
decode engine's when they differ (the P/D decision is made on the decode
pod's cache), with a warning.
"""

from __future__ import annotations

from typing import Any

from function.composer.composed import Backends, PodTemplate
from function.composer.model import Engine, Replica
from function.composer.routing import Routing, epp, serving_config
from function.composer.routing.engine_flags import ENGINE_NAMES, engine_kind, port
from function.composer.routing.gateway import endpoint
from function.composer.routing.pd_pods import add_env, add_role_label, add_shm, add_sidecar
from function.composer.routing.serving_config import POOL_TARGET_PORT, ServingConfig
from function.composer.status import NotRouted
from function.contract.enums import EnginePhase, ServingMode
from function.contract.records import Cluster
from function.contract.serving import DEFAULT_KV_CONNECTOR

# Condition reasons when the layer composes no route.
PORT_CONFLICT = "DecodePortConflict"
PORT_UNREADABLE = "EnginePortUnreadable"
PREFILL_PORT = "PrefillPortMismatch"
CONNECTOR_UNSUPPORTED = "KVConnectorUnsupported"

# The EPP plugins of P/D (llm-d-inference-scheduler v0.7.1's names: its
# `pd-profile-handler` and `prefill-header-handler` are deprecated aliases of these).
DECIDER = "prefix-based-pd-decider"
PROFILE_HANDLER = "disagg-profile-handler"
HEADERS_HANDLER = "disagg-headers-handler"
PREFILL, DECODE = "prefill", "decode"  # the scheduling profiles


class PrefillDecodeRouting:
    def route(self, replica: Replica, cluster: Cluster, backends: Backends) -> Routing:
        config = epp.settings(ServingMode.PREFILL_DECODE)
        if isinstance(config, NotRouted):
            return Routing(not_routed=config)
        prefill = _engine(replica, EnginePhase.PREFILL)
        decode = _engine(replica, EnginePhase.DECODE)
        if prefill is None or decode is None:  # validation refuses this; never guess
            return Routing(not_routed=NotRouted("EnginesMissing", (
                "PrefillDecode needs one engine with phase Prefill and one with phase Decode")))
        connector = replica.kv_connector or DEFAULT_KV_CONNECTOR
        env = serving_config.kv_env(connector, config)
        for pod in backends.pod_templates:
            if pod.engine.name in (prefill.name, decode.name):
                add_env(pod, env)
                add_shm(pod)
                if pod.serving:
                    add_role_label(pod, "prefill" if pod.engine.name == prefill.name
                                   else "decode")

        decode_pod, prefill_pod = _serving_pod(backends, decode), _serving_pod(backends, prefill)
        if decode_pod is None or prefill_pod is None:  # validation refuses this too
            return Routing(not_routed=NotRouted("EnginesMissing", (
                "each PrefillDecode engine needs a serving member (Standalone or Leader)")))
        problems: list[tuple[str, str]] = []
        engine_port = _decode_port(decode, decode_pod, problems)
        proxy = _sidecar_connector(decode, decode_pod, connector, config, problems)
        if engine_port is not None and proxy is not None:
            add_sidecar(decode_pod, engine_port, proxy, config)
        _check_prefill_port(prefill, prefill_pod, problems)
        if problems:
            reason = problems[0][0]
            return Routing(not_routed=NotRouted(reason, "; ".join(m for _, m in problems) + (
                ". The engines' workloads are composed; no InferencePool, endpoint picker "
                "or HTTPRoute is until then")))

        blocks = _block_size(prefill, prefill_pod, decode, decode_pod, backends.notes)
        return Routing(objects=epp.objects(replica, cluster, config, picker_config(blocks, config)),
                       endpoint=endpoint(cluster, replica))


def picker_config(block_size_tokens: int, config: ServingConfig) -> dict[str, Any]:
    """The P/D EndpointPickerConfig for the pinned EPP (see serving_config)."""
    return epp.picker_config(
        [{"type": HEADERS_HANDLER, "parameters": {"prefillProfile": PREFILL}},
         {"type": "prefill-filter"}, {"type": "decode-filter"},
         *epp.scoring_plugins(block_size_tokens),
         {"type": DECIDER, "parameters": {"nonCachedTokens": config.non_cached_tokens}},
         {"type": PROFILE_HANDLER, "parameters": {
             "profiles": {"decode": DECODE, "prefill": PREFILL},
             "deciders": {"prefill": DECIDER}}}],
        [epp.profile(PREFILL, "prefill-filter"), epp.profile(DECODE, "decode-filter")],
        # The decider reads the prefix match the scorer attaches to each endpoint
        # while preparing request data; without this gate it sees no cache state
        # and would never disaggregate.
        feature_gates=["prepareDataPlugins"])


def _engine(replica: Replica, phase: str) -> Engine | None:
    return next((e for e in replica.engines if e.phase == phase), None)


def _serving_pod(backends: Backends, engine: Engine) -> PodTemplate | None:
    return next((p for p in backends.serving_pods if p.engine.name == engine.name), None)


def _decode_port(decode: Engine, pod: PodTemplate, problems: list[tuple[str, str]]) -> int | None:
    flag = port(pod.engine_container)
    what = f"decode engine {decode.name!r}"
    fix = ("set --port to another port (for example --port=8200) in the decode engine's "
           "args (modelplane never changes engine flags)")
    if flag.absent:
        problems.append((PORT_CONFLICT, (
            f"{what} sets no --port, so it would listen on 8000, the port the routing sidecar "
            f"takes on decode pods: {fix}")))
    elif flag.unreadable:
        problems.append((PORT_UNREADABLE, (
            f"{what}: --port {flag.written!r} is not a literal port number, so the routing "
            f"sidecar cannot be pointed at the engine: write the port itself "
            f"(for example --port=8200)")))
    elif flag.value == POOL_TARGET_PORT:
        problems.append((PORT_CONFLICT, (
            f"{what} sets --port {POOL_TARGET_PORT}, the port the routing sidecar takes on "
            f"decode pods: {fix}")))
    else:
        return flag.value
    return None


def _sidecar_connector(decode: Engine, pod: PodTemplate, connector: str, config: ServingConfig,
                       problems: list[tuple[str, str]]) -> str | None:
    kind = engine_kind(pod.engine_container)
    proxy = serving_config.SIDECAR_CONNECTORS[kind].get(connector)
    if proxy is None:
        problems.append((CONNECTOR_UNSUPPORTED, (
            f"kvConnector {connector} with {ENGINE_NAMES.get(kind, kind)} engines (decode "
            f"engine {decode.name!r}) has no "
            f"protocol in the routing sidecar {config.sidecar_image}: use nixl or lmcache "
            f"with vLLM, nixl or mooncake with SGLang")))
    return proxy


def _check_prefill_port(prefill: Engine, pod: PodTemplate,
                        problems: list[tuple[str, str]]) -> None:
    flag = port(pod.engine_container)
    what = f"prefill engine {prefill.name!r}"
    if flag.unreadable:
        problems.append((PORT_UNREADABLE, (
            f"{what}: --port {flag.written!r} is not a literal port number, and the "
            f"InferencePool sends prefill requests to port {POOL_TARGET_PORT}: write "
            f"--port={POOL_TARGET_PORT} or leave --port out")))
    elif not flag.absent and flag.value != POOL_TARGET_PORT:
        problems.append((PREFILL_PORT, (
            f"{what} listens on --port {flag.value}, but the InferencePool targets port "
            f"{POOL_TARGET_PORT} on every serving pod: serve the prefill engine on "
            f"{POOL_TARGET_PORT} (--port={POOL_TARGET_PORT}, or no --port)")))


def _block_size(prefill: Engine, prefill_pod: PodTemplate, decode: Engine,
                decode_pod: PodTemplate, notes: list[str]) -> int:
    sizes = epp.block_sizes([prefill_pod, decode_pod], notes, ServingMode.PREFILL_DECODE)
    if sizes[prefill.name] != sizes[decode.name]:
        notes.append(
            f"PrefillDecode: prefill engine {prefill.name!r} uses KV block size "
            f"{sizes[prefill.name]} and decode engine {decode.name!r} {sizes[decode.name]}; "
            f"the endpoint picker's prefix cache uses the decode engine's, and KV transfer "
            f"between different block sizes may not be supported by the connector: set the "
            f"same --block-size (--page-size) on both engines")
    return sizes[decode.name]


LAYER = PrefillDecodeRouting()
