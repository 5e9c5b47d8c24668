"""An InferencePool and its endpoint picker (EPP), for any layer that routes through one.

    gateway --HTTPRoute--> InferencePool --ext-proc--> endpoint picker
      the EPP scores the pool's pods and names the one the gateway sends to

A layer gives the EndpointPickerConfig (built from the parts below: the
scorers every profile uses, a profile, the config document) and gets the
routing objects, all `Role.ROUTE`, so the replica is Serving only when the
EPP Deployment is Available and the gateway has accepted the HTTPRoute and
the InferencePool:

* InferencePool over the replica's serving label (every serving pod),
  target port 8000, `endpointPickerRef` to the EPP Service (ext-proc port
  9002, failure mode from the settings: FailClose by default, so a down EPP
  never silently turns into random routing).
* EPP: ServiceAccount, Role (get/list/watch pods, the InferencePool, and the
  InferenceObjectives and InferenceModelRewrites it reconciles; leases and
  events only when several replicas elect a leader), RoleBinding, ConfigMap
  with the EndpointPickerConfig, Service (9002 ext-proc, 9090 metrics) and
  Deployment (gRPC health 9003: the `liveness` and `readiness` services, so
  with several replicas only the leader is Ready and none is restarted for
  not leading). The pod template carries the config's sha256, so a config
  change rolls the EPP.
* HTTPRoutes (`gateway.routes`) to the InferencePool.

The config is written for the pinned EPP release (see `serving_config`):
every profile scores with a prefix-cache scorer (weight 2), a queue scorer
and a KV-cache utilization scorer (weight 1) and picks the max score. The
prefix scorer's `blockSizeTokens` must be the engines' KV block size
(`block_sizes`), or its cache model drifts from the engines'.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from function.composer import kinds, naming
from function.composer.composed import Composed, PodTemplate, Role
from function.composer.model import Replica
from function.composer.routing import serving_config
from function.composer.routing.engine_flags import block_size
from function.composer.routing.gateway import routes
from function.composer.routing.serving_config import ConfigError, ServingConfig
from function.composer.status import NotRouted
from function.contract.api import GROUP, LABEL_SERVING
from function.contract.records import Cluster

INFERENCE_API = "inference.networking.k8s.io"
INFERENCE_X_API = "inference.networking.x-k8s.io"
EPP_CONFIG_API_VERSION = f"{INFERENCE_X_API}/v1alpha1"
ANNOTATION_CONFIG_SHA = f"{GROUP}/epp-config-sha256"
CONFIG_INVALID = "ServingConfigInvalid"  # the Routed reason when the settings are malformed

# The gRPC health services the EPP answers on its health port. With leader
# election (several replicas) it tells them apart: `liveness` is serving on
# every replica, `readiness` only on the leader once the pool has synced, and
# any other name is SERVICE_UNKNOWN (a probe on it would restart every replica).
# With one replica every name answers as the pool's sync.
HEALTH_LIVENESS, HEALTH_READINESS = "liveness", "readiness"

PREFIX_SCORER = "prefix-cache-scorer"
PICKER = "max-score-picker"
LOAD_SCORERS = ("queue-scorer", "kv-cache-utilization-scorer")


def settings(what: str) -> ServingConfig | NotRouted:
    """The function's settings, or why `what` composes no routing with them."""
    try:
        return serving_config.load()
    except ConfigError as why:
        return NotRouted(CONFIG_INVALID, (
            f"the function's {what} configuration is invalid: {why}; no InferencePool, "
            "endpoint picker or HTTPRoute is composed until it is fixed"))


def block_sizes(pods: Sequence[PodTemplate], notes: list[str], who: str) -> dict[str, int]:
    """Each engine's KV block size (serving pods), the default when unreadable, with a note."""
    sizes = {}
    for pod in pods:
        flag = block_size(pod.engine_container)
        if flag.unreadable:
            notes.append(f"{who}: engine {pod.engine.name!r} block size {flag.written!r} "
                         f"is not a literal number; the endpoint picker assumes "
                         f"{serving_config.DEFAULT_BLOCK_SIZE}")
        sizes[pod.engine.name] = flag.value or serving_config.DEFAULT_BLOCK_SIZE
    return sizes


# --- the EndpointPickerConfig -----------------------------------------------------------


def scoring_plugins(block_size_tokens: int) -> list[dict[str, Any]]:
    """Prefix-cache affinity, load, and the picker: what every profile scores with."""
    return [
        {"type": PREFIX_SCORER, "parameters": {
            "blockSizeTokens": block_size_tokens,
            "maxPrefixBlocksToMatch": 256,
            "lruCapacityPerServer": 31250,
        }},
        *({"type": scorer} for scorer in LOAD_SCORERS),
        {"type": PICKER},
    ]


def profile(name: str, *filters: str) -> dict[str, Any]:
    return {"name": name, "plugins": [
        *({"pluginRef": f} for f in filters),
        {"pluginRef": PICKER},
        {"pluginRef": PREFIX_SCORER, "weight": 2},
        *({"pluginRef": scorer, "weight": 1} for scorer in LOAD_SCORERS),
    ]}


def picker_config(plugins: list[dict[str, Any]], profiles: list[dict[str, Any]], *,
                  feature_gates: Sequence[str] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": EPP_CONFIG_API_VERSION, "kind": "EndpointPickerConfig"}
    if feature_gates:
        out["featureGates"] = list(feature_gates)
    out["plugins"] = plugins
    out["schedulingProfiles"] = profiles
    return out


def config_text(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


# --- the routing objects ----------------------------------------------------------------


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
        def name(*parts: str, tag: str) -> str:
            return naming.object_name(replica, *parts, tag=tag)

        return cls(pool=name(tag="pool"), epp=name(tag="epp"),
                   service=naming.service_name(replica, "epp"),
                   config=name("epp", tag="config"), account=name("epp", tag="sa"),
                   role=name("epp", tag="role"), binding=name("epp", tag="rolebinding"))


def objects(replica: Replica, cluster: Cluster, config: ServingConfig,
            picker: dict[str, Any]) -> list[Composed]:
    """The InferencePool, its endpoint picker running `picker`, and the HTTPRoute to the pool."""
    names = Names.of(replica)
    ns, labels = replica.namespace, naming.object_labels(replica)

    def meta(name: str) -> dict[str, Any]:
        return {"name": name, "namespace": ns, "labels": dict(labels)}

    text = config_text(picker)
    pool = {
        **kinds.INFERENCEPOOL.header(),
        "metadata": meta(names.pool),
        "spec": {
            "selector": {"matchLabels": {LABEL_SERVING: naming.replica_label(replica)}},
            "targetPorts": [{"number": serving_config.POOL_TARGET_PORT}],
            "endpointPickerRef": {"group": "", "kind": "Service", "name": names.service,
                                  "port": {"number": serving_config.EPP_GRPC_PORT},
                                  "failureMode": config.epp_failure_mode},
        },
    }
    config_map = {**kinds.CONFIGMAP.header(), "metadata": meta(names.config),
                  "data": {serving_config.EPP_CONFIG_FILE: text}}
    account = {**kinds.SERVICEACCOUNT.header(), "metadata": meta(names.account)}
    role = {**kinds.RBAC_ROLE.header(), "metadata": meta(names.role), "rules": rules(config)}
    binding = {
        **kinds.ROLEBINDING.header(),
        "metadata": meta(names.binding),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": names.role},
        "subjects": [{"kind": "ServiceAccount", "name": names.account, "namespace": ns}],
    }
    service = {
        **kinds.SERVICE.header(), "metadata": meta(names.service),
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
    hops = routes(replica, cluster, {"group": INFERENCE_API, "kind": "InferencePool",
                                     "name": names.pool})
    return [Composed("inferencepool", pool, Role.ROUTE),
            Composed("epp-serviceaccount", account, Role.ROUTE),
            Composed("epp-role", role, Role.ROUTE),
            Composed("epp-rolebinding", binding, Role.ROUTE),
            Composed("epp-config", config_map, Role.ROUTE),
            Composed("epp-service", service, Role.ROUTE),
            Composed("epp", deployment, Role.ROUTE),
            *hops]


def rules(config: ServingConfig) -> list[dict[str, Any]]:
    """Least privilege: read the pool's pods and the pool; the GIE objects it reconciles."""
    read = ["get", "list", "watch"]
    out = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": read},
        {"apiGroups": [INFERENCE_API], "resources": ["inferencepools"], "verbs": read},
        {"apiGroups": [INFERENCE_X_API],
         "resources": ["inferencemodelrewrites", "inferenceobjectives"], "verbs": read},
    ]
    if config.epp_replicas > 1:  # active-passive: the replicas elect a leader
        out += [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "verbs": ["get", "list", "watch", "create", "update", "patch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        ]
    return out


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
    def health(service: str) -> dict[str, Any]:
        return {"grpc": {"port": serving_config.EPP_HEALTH_PORT, "service": service}}

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
        "readinessProbe": {**health(HEALTH_READINESS), "periodSeconds": 2},
        "livenessProbe": {**health(HEALTH_LIVENESS), "initialDelaySeconds": 5,
                          "periodSeconds": 10},
        "resources": {"requests": {"cpu": config.epp_cpu_request,
                                   "memory": config.epp_memory_request},
                      "limits": {"memory": config.epp_memory_limit}},
        "securityContext": {"allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "config", "mountPath": serving_config.EPP_CONFIG_DIR,
                          "readOnly": True}],
    }
    return {
        **kinds.DEPLOYMENT.header(),
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
