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

How the layer decorates the backends' pod templates (in place):

* Serving pods of each engine (Standalone pods, gang leaders) get
  `llm-d.ai/role: prefill|decode`, the label the EPP's prefill-filter and
  decode-filter select on. It never touches a modelplane.ai/ label.
* Every prefill and decode pod, gang workers included, gets the KV-transfer
  environment of the replica's `kvConnector` (`serving_config.kv_env`;
  variables the user set keep the user's value) and one memory-backed
  /dev/shm (added once: an existing `shm` volume or /dev/shm mount is kept).
* Decode serving pods get the routing sidecar as a native sidecar (an init
  container with `restartPolicy: Always`): it starts before the engine, is
  stopped after it (so in-flight streams drain through it), restarts on its
  own, and its readiness is part of the pod's. A plain second container would
  have no ordering on startup or shutdown. The sidecar takes port 8000
  (named `http`, where the InferencePool targets) and forwards to the engine
  on `--vllm-port=<engine --port>`; the engine's port becomes `engine` and
  its readiness probe (`/health`) moves to that port. `--secure-proxy=false`:
  the gateway speaks plain HTTP to pods, as Unified does.

Engine flags are never written. The decode engine's port is read from its
`--port` (in `command` or `args`, `--port N` or `--port=N`, also inside one
shell string such as `sh -c "vllm serve ... --port 8200"`; the last one
wins, as with argparse). Fail closed: if the decode engine would bind 8000
itself (no `--port`, which is vLLM's default, or `--port 8000`), if a port is
not a literal number (`--port $PORT`), if the prefill engine serves anywhere
but 8000 (one InferencePool target port covers both engines, and a second
target port would turn every decode pod into a dead endpoint too), or if the
sidecar has no protocol for the connector, the layer composes no routing
object and `Routed` is False with a message saying what to change. The
workloads are still composed: they are correct on their own, killing a model
that took tens of minutes to load over a routing mistake helps nobody, and
with no route no request reaches a half-wired pair. A route composed before
goes away with the mistake.

Routing objects (all `Role.ROUTE`, so the replica is Serving only when both
engines are Available, the EPP Deployment is Available, and the gateway has
accepted the HTTPRoute and the InferencePool):

* InferencePool over the replica's serving label (both engines' serving
  pods), target port 8000, `endpointPickerRef` to the EPP Service (ext-proc
  port 9002, failure mode from the config: FailClose by default, so a down
  EPP never silently turns P/D into random routing).
* EPP: ServiceAccount, Role (get/list/watch pods, the InferencePool, and
  the InferenceObjectives and InferenceModelRewrites it reconciles; leases
  and events only when several replicas elect a leader), RoleBinding,
  ConfigMap with the EndpointPickerConfig, Service (9002 ext-proc, 9090
  metrics) and Deployment (health 9003). The pod template carries the
  config's sha256, so a config change rolls the EPP.
* HTTPRoute as Unified's (path prefix, rewrite, hostnames, no timeout) to
  the InferencePool.

The EndpointPickerConfig (`epp_config`) is written for the pinned EPP
release (see `serving_config`): prefill and decode scheduling profiles, each
its role filter, a prefix-cache scorer (weight 2), a queue scorer and a
KV-cache utilization scorer (weight 1) and the max-score picker; the
`pd-profile-handler` runs decode first and asks its decider
(`prefix-based-pd-decider`) whether to add a prefill: yes when at least
`nonCachedTokens` (16 by default, never 0) of the prompt are not cached on
the chosen decode pod. The prefix scorer's `blockSizeTokens` is the engines'
KV block size (`--block-size`, vLLM; `--page-size`, SGLang; default 16),
the decode engine's when they differ (the P/D decision is made on the decode
pod's cache), with a warning.
"""

from __future__ import annotations

import copy
import hashlib
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from function.api import GROUP
from function.composer import naming, pods, serving_config
from function.composer.composed import Backends, Composed, PodTemplate, Role
from function.composer.model import Cluster, Engine, Replica
from function.composer.routing import Routing
from function.composer.routing.unified import endpoint, http_route
from function.composer.serving_config import ConfigError, ServingConfig
from function.composer.status import NotRouted
from function.serving import DECODE, DEFAULT_KV_CONNECTOR, PREFILL
from function.names import tagged_label

LABEL_LLMD_ROLE = "llm-d.ai/role"
INFERENCE_API = "inference.networking.k8s.io"
INFERENCE_X_API = "inference.networking.x-k8s.io"
EPP_CONFIG_API_VERSION = f"{INFERENCE_X_API}/v1alpha1"
ANNOTATION_CONFIG_SHA = f"{GROUP}/epp-config-sha256"

SIDECAR_NAME = "routing-proxy"
ENGINE_NAMES = {serving_config.VLLM: "vLLM", serving_config.SGLANG: "SGLang"}
ENGINE_PORT_NAME = "engine"
TARGET_PORT = serving_config.POOL_TARGET_PORT

# Condition reasons when the layer composes no route.
PORT_CONFLICT = "DecodePortConflict"
PORT_UNREADABLE = "EnginePortUnreadable"
PREFILL_PORT = "PrefillPortMismatch"
CONNECTOR_UNSUPPORTED = "KVConnectorUnsupported"
CONFIG_INVALID = "ServingConfigInvalid"


# --- reading engine flags -------------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    """A flag's last occurrence: absent, a number, or written but unreadable."""

    written: str | None = None  # the value as written; None: the flag is absent
    value: int | None = None    # the value, when it is a literal number

    @property
    def absent(self) -> bool:
        return self.written is None

    @property
    def unreadable(self) -> bool:
        return self.written is not None and self.value is None


def words(container: Mapping[str, Any]) -> list[str]:
    """`command` + `args` as argv words; a word with blanks is a shell script, split."""
    out: list[str] = []
    for item in list(container.get("command") or []) + list(container.get("args") or []):
        if not isinstance(item, str):
            continue
        if any(c.isspace() for c in item):
            try:
                out += shlex.split(item)
            except ValueError:  # an unbalanced quote: split on blanks
                out += item.split()
        else:
            out.append(item)
    return out


def read_flag(argv: Sequence[str], names: Sequence[str], *, high: int = 65535) -> Flag:
    """The last `--name V` or `--name=V` of any of `names` in argv."""
    found = Flag()
    for i, word in enumerate(argv):
        for name in names:
            if word == name:
                written = argv[i + 1] if i + 1 < len(argv) else ""
            elif word.startswith(name + "="):
                written = word[len(name) + 1:]
            else:
                continue
            number = int(written) if re.fullmatch(r"[0-9]{1,6}", written) else None
            found = Flag(written, number if number is not None and 1 <= number <= high
                         else None)
    return found


def engine_kind(container: Mapping[str, Any]) -> str:
    """vllm, sglang, or "" when neither the command nor the image says."""
    for word in words(container):
        base = word.rsplit("/", 1)[-1]
        for kind in (serving_config.VLLM, serving_config.SGLANG):
            if base == kind or base.startswith(kind + "."):
                return kind
    image = str(container.get("image") or "").lower()
    repo = image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    for kind in (serving_config.SGLANG, serving_config.VLLM):
        if kind in repo:
            return kind
    return ""


def block_size(container: Mapping[str, Any]) -> Flag:
    return read_flag(words(container), ("--block-size", "--page-size"), high=1 << 16)


# --- names ----------------------------------------------------------------------------


def _name(replica: Replica, *parts: str, tag: str) -> str:
    # As naming does: the digest covers the namespace too; tags no engine object uses.
    return tagged_label(replica.name, *parts, tag=tag,
                        identity=(replica.namespace, replica.name, *parts, tag))


@dataclass(frozen=True)
class Names:
    pool: str
    epp: str
    service: str
    config: str
    account: str
    role: str
    binding: str

    @classmethod
    def of(cls, replica: Replica) -> Names:
        return cls(pool=_name(replica, tag="pool"), epp=_name(replica, tag="epp"),
                   service=naming.service_name(replica, "epp"),
                   config=_name(replica, "epp", tag="config"),
                   account=_name(replica, "epp", tag="sa"),
                   role=_name(replica, "epp", tag="role"),
                   binding=_name(replica, "epp", tag="rolebinding"))


# --- the layer ------------------------------------------------------------------------


class PrefillDecodeRouting:
    def route(self, replica: Replica, cluster: Cluster, backends: Backends) -> Routing:
        try:
            config = serving_config.load()
        except ConfigError as why:
            return Routing(not_routed=NotRouted(CONFIG_INVALID, (
                f"the function's PrefillDecode configuration is invalid: {why}; no "
                "InferencePool, endpoint picker or HTTPRoute is composed until it is fixed")))
        prefill, decode = _engine(replica, PREFILL), _engine(replica, DECODE)
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
        names = Names.of(replica)
        return Routing(objects=routing_objects(replica, cluster, names, config, blocks),
                       endpoint=endpoint(cluster, replica))


def _engine(replica: Replica, phase: str) -> Engine | None:
    return next((e for e in replica.engines if e.phase == phase), None)


def _serving_pod(backends: Backends, engine: Engine) -> PodTemplate | None:
    return next((p for p in backends.serving_pods if p.engine.name == engine.name), None)


def _decode_port(decode: Engine, pod: PodTemplate, problems: list[tuple[str, str]]) -> int | None:
    port = read_flag(words(pod.engine_container), ("--port",))
    what = f"decode engine {decode.name!r}"
    fix = ("set --port to another port (for example --port=8200) in the decode engine's "
           "args (modelplane never changes engine flags)")
    if port.absent:
        problems.append((PORT_CONFLICT, (
            f"{what} sets no --port, so it would listen on 8000, the port the routing sidecar "
            f"takes on decode pods: {fix}")))
    elif port.unreadable:
        problems.append((PORT_UNREADABLE, (
            f"{what}: --port {port.written!r} is not a literal port number, so the routing "
            f"sidecar cannot be pointed at the engine: write the port itself "
            f"(for example --port=8200)")))
    elif port.value == TARGET_PORT:
        problems.append((PORT_CONFLICT, (
            f"{what} sets --port {TARGET_PORT}, the port the routing sidecar takes on decode "
            f"pods: {fix}")))
    else:
        return port.value
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
    port = read_flag(words(pod.engine_container), ("--port",))
    what = f"prefill engine {prefill.name!r}"
    if port.unreadable:
        problems.append((PORT_UNREADABLE, (
            f"{what}: --port {port.written!r} is not a literal port number, and the "
            f"InferencePool sends prefill requests to port {TARGET_PORT}: write "
            f"--port={TARGET_PORT} or leave --port out")))
    elif not port.absent and port.value != TARGET_PORT:
        problems.append((PREFILL_PORT, (
            f"{what} listens on --port {port.value}, but the InferencePool targets port "
            f"{TARGET_PORT} on every serving pod: serve the prefill engine on "
            f"{TARGET_PORT} (--port={TARGET_PORT}, or no --port)")))


def _block_size(prefill: Engine, prefill_pod: PodTemplate, decode: Engine,
                decode_pod: PodTemplate, notes: list[str]) -> int:
    sizes = {}
    for engine, pod in ((prefill, prefill_pod), (decode, decode_pod)):
        flag = block_size(pod.engine_container)
        if flag.unreadable:
            notes.append(f"PrefillDecode: engine {engine.name!r} block size {flag.written!r} "
                         f"is not a literal number; the endpoint picker assumes "
                         f"{serving_config.DEFAULT_BLOCK_SIZE}")
        sizes[engine.name] = flag.value or serving_config.DEFAULT_BLOCK_SIZE
    if sizes[prefill.name] != sizes[decode.name]:
        notes.append(
            f"PrefillDecode: prefill engine {prefill.name!r} uses KV block size "
            f"{sizes[prefill.name]} and decode engine {decode.name!r} {sizes[decode.name]}; "
            f"the endpoint picker's prefix cache uses the decode engine's, and KV transfer "
            f"between different block sizes may not be supported by the connector: set the "
            f"same --block-size (--page-size) on both engines")
    return sizes[decode.name]


# --- pod template decorations ---------------------------------------------------------


def add_role_label(pod: PodTemplate, role: str) -> None:
    labels = pod.template["metadata"].setdefault("labels", {})
    labels[LABEL_LLMD_ROLE] = role
    pod.template["metadata"]["labels"] = dict(sorted(labels.items()))


def add_env(pod: PodTemplate, env: Sequence[Mapping[str, Any]]) -> None:
    """Ours after modelplane's gang variables and before the user's; the user's win."""
    container = pod.engine_container
    current = container.get("env") or []
    taken = {e.get("name") for e in current}
    ours = [copy.deepcopy(dict(e)) for e in env if e["name"] not in taken]
    if not ours:
        return
    gang = {pods.ENV_LEADER_ADDRESS, pods.ENV_RANK}
    at = 0
    while at < len(current) and current[at].get("name") in gang:
        at += 1
    container["env"] = current[:at] + ours + current[at:]


def add_shm(pod: PodTemplate) -> None:
    spec = pod.template["spec"]
    container = pod.engine_container
    volumes = spec.setdefault("volumes", [])
    mounts = container.setdefault("volumeMounts", [])
    if not any(v.get("name") == serving_config.SHM_VOLUME for v in volumes):
        volumes.append({"name": serving_config.SHM_VOLUME, "emptyDir": {"medium": "Memory"}})
    if not any(m.get("mountPath") == serving_config.SHM_PATH for m in mounts):
        mounts.append({"name": serving_config.SHM_VOLUME, "mountPath": serving_config.SHM_PATH})


def add_sidecar(pod: PodTemplate, engine_port: int, connector: str,
                config: ServingConfig) -> None:
    engine = pod.engine_container
    engine["ports"] = [{"name": ENGINE_PORT_NAME, "containerPort": engine_port,
                        "protocol": "TCP"}]
    engine["readinessProbe"] = {"httpGet": {"path": pods.HEALTH_PATH, "port": engine_port},
                                "timeoutSeconds": 5}
    sidecar = {
        "name": SIDECAR_NAME,
        "image": config.sidecar_image,
        "imagePullPolicy": "IfNotPresent",
        "restartPolicy": "Always",
        "args": [f"--port={TARGET_PORT}", f"--vllm-port={engine_port}",
                 f"--connector={connector}", "--secure-proxy=false"],
        "ports": [{"name": pods.SERVING_PORT_NAME, "containerPort": TARGET_PORT,
                   "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": TARGET_PORT}, "periodSeconds": 5},
        "resources": {"requests": {"cpu": config.sidecar_cpu_request,
                                   "memory": config.sidecar_memory_request},
                      "limits": {"memory": config.sidecar_memory_limit}},
        "securityContext": {"allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
    }
    init = [c for c in pod.template["spec"].get("initContainers") or []
            if c.get("name") != SIDECAR_NAME]
    pod.template["spec"]["initContainers"] = init + [sidecar]


# --- the endpoint picker's configuration ----------------------------------------------


PREFIX_SCORER = "prefix-cache-scorer"
DECIDER = "prefix-based-pd-decider"


def epp_config(block_size_tokens: int, config: ServingConfig) -> dict[str, Any]:
    """The EndpointPickerConfig for the pinned EPP (see serving_config)."""
    def profile(name: str, role_filter: str) -> dict[str, Any]:
        return {"name": name, "plugins": [
            {"pluginRef": role_filter},
            {"pluginRef": "max-score-picker"},
            {"pluginRef": PREFIX_SCORER, "weight": 2},
            {"pluginRef": "queue-scorer", "weight": 1},
            {"pluginRef": "kv-cache-utilization-scorer", "weight": 1},
        ]}

    return {
        "apiVersion": EPP_CONFIG_API_VERSION,
        "kind": "EndpointPickerConfig",
        # The decider reads the prefix match the scorer attaches to each endpoint
        # while preparing request data; without this gate it sees no cache state
        # and would never disaggregate.
        "featureGates": ["prepareDataPlugins"],
        "plugins": [
            {"type": "prefill-header-handler"},
            {"type": "prefill-filter"},
            {"type": "decode-filter"},
            {"type": PREFIX_SCORER, "parameters": {
                "blockSizeTokens": block_size_tokens,
                "maxPrefixBlocksToMatch": 256,
                "lruCapacityPerServer": 31250,
            }},
            {"type": "queue-scorer"},
            {"type": "kv-cache-utilization-scorer"},
            {"type": "max-score-picker"},
            {"type": DECIDER, "parameters": {"nonCachedTokens": config.non_cached_tokens}},
            {"type": "pd-profile-handler", "parameters": {"deciderPluginName": DECIDER}},
        ],
        "schedulingProfiles": [profile("prefill", "prefill-filter"),
                               profile("decode", "decode-filter")],
    }


def epp_config_text(block_size_tokens: int, config: ServingConfig) -> str:
    return yaml.safe_dump(epp_config(block_size_tokens, config), sort_keys=False)


# --- routing objects ------------------------------------------------------------------


def routing_objects(replica: Replica, cluster: Cluster, names: Names, config: ServingConfig,
                    block_size_tokens: int) -> list[Composed]:
    ns, labels = replica.namespace, naming.object_labels(replica)

    def meta(name: str) -> dict[str, Any]:
        return {"name": name, "namespace": ns, "labels": dict(labels)}

    text = epp_config_text(block_size_tokens, config)
    pool = {
        "apiVersion": f"{INFERENCE_API}/v1",
        "kind": "InferencePool",
        "metadata": meta(names.pool),
        "spec": {
            "selector": {"matchLabels": {naming.LABEL_SERVING: naming.replica_label(replica)}},
            "targetPorts": [{"number": TARGET_PORT}],
            "endpointPickerRef": {"group": "", "kind": "Service", "name": names.service,
                                  "port": {"number": serving_config.EPP_GRPC_PORT},
                                  "failureMode": config.epp_failure_mode},
        },
    }
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(names.config),
                  "data": {serving_config.EPP_CONFIG_FILE: text}}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(names.account)}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": meta(names.role), "rules": epp_rules(config)}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": meta(names.binding),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": names.role},
        "subjects": [{"kind": "ServiceAccount", "name": names.account, "namespace": ns}],
    }
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": meta(names.service),
        "spec": {
            "type": "ClusterIP",
            "selector": {naming.LABEL_WORKLOAD: names.epp},
            "ports": [
                {"name": "grpc-ext-proc", "port": serving_config.EPP_GRPC_PORT,
                 "targetPort": "grpc", "protocol": "TCP", "appProtocol": "http2"},
                {"name": "http-metrics", "port": serving_config.EPP_METRICS_PORT,
                 "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }
    deployment = epp_deployment(replica, names, config, text, meta(names.epp))
    route = http_route(replica, cluster, {"group": INFERENCE_API, "kind": "InferencePool",
                                          "name": names.pool})
    return [Composed("inferencepool", pool, Role.ROUTE),
            Composed("epp-serviceaccount", account, Role.ROUTE),
            Composed("epp-role", role, Role.ROUTE),
            Composed("epp-rolebinding", binding, Role.ROUTE),
            Composed("epp-config", config_map, Role.ROUTE),
            Composed("epp-service", service, Role.ROUTE),
            Composed("epp", deployment, Role.ROUTE),
            Composed("httproute", route, Role.ROUTE)]


def epp_rules(config: ServingConfig) -> list[dict[str, Any]]:
    """Least privilege: read the pool's pods and the pool; the GIE objects it reconciles."""
    read = ["get", "list", "watch"]
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": read},
        {"apiGroups": [INFERENCE_API], "resources": ["inferencepools"], "verbs": read},
        {"apiGroups": [INFERENCE_X_API],
         "resources": ["inferencemodelrewrites", "inferenceobjectives"], "verbs": read},
    ]
    if config.epp_replicas > 1:  # active-passive: the replicas elect a leader
        rules += [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "verbs": ["get", "list", "watch", "create", "update", "patch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        ]
    return rules


def epp_deployment(replica: Replica, names: Names, config: ServingConfig, config_text: str,
                   metadata: dict[str, Any]) -> dict[str, Any]:
    pod_labels = dict(sorted({**naming.object_labels(replica),
                              naming.LABEL_WORKLOAD: names.epp}.items()))
    args = [
        f"--pool-name={names.pool}",
        f"--pool-namespace={replica.namespace}",
        f"--pool-group={INFERENCE_API}",
        f"--config-file={serving_config.EPP_CONFIG_DIR}/{serving_config.EPP_CONFIG_FILE}",
        f"--grpc-port={serving_config.EPP_GRPC_PORT}",
        f"--grpc-health-port={serving_config.EPP_HEALTH_PORT}",
        f"--metrics-port={serving_config.EPP_METRICS_PORT}",
    ]
    if config.epp_replicas > 1:
        args.append("--ha-enable-leader-election")
    health = {"grpc": {"port": serving_config.EPP_HEALTH_PORT,
                       "service": "inference-extension"}}
    container = {
        "name": "epp",
        "image": config.epp_image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "env": [{"name": "NAMESPACE", "valueFrom": {"fieldRef": {
                    "fieldPath": "metadata.namespace"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [{"name": "grpc", "containerPort": serving_config.EPP_GRPC_PORT,
                   "protocol": "TCP"},
                  {"name": "grpc-health", "containerPort": serving_config.EPP_HEALTH_PORT,
                   "protocol": "TCP"},
                  {"name": "metrics", "containerPort": serving_config.EPP_METRICS_PORT,
                   "protocol": "TCP"}],
        "readinessProbe": {**health, "periodSeconds": 2},
        "livenessProbe": {**health, "initialDelaySeconds": 5, "periodSeconds": 10},
        "resources": {"requests": {"cpu": config.epp_cpu_request,
                                   "memory": config.epp_memory_request},
                      "limits": {"memory": config.epp_memory_limit}},
        "securityContext": {"allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "config", "mountPath": serving_config.EPP_CONFIG_DIR,
                          "readOnly": True}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": config.epp_replicas,
            "selector": {"matchLabels": {naming.LABEL_WORKLOAD: names.epp}},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": {
                    ANNOTATION_CONFIG_SHA: hashlib.sha256(config_text.encode()).hexdigest()}},
                "spec": {
                    "serviceAccountName": names.account,
                    "enableServiceLinks": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                    "volumes": [{"name": "config", "configMap": {"name": names.config}}],
                },
            },
        },
    }


LAYER = PrefillDecodeRouting()
