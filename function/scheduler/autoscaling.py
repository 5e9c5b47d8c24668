"""spec.autoscaling -> a KEDA ScaledObject that scales the ModelDeployment (issue #17).

KEDA runs an HPA whose target is the deployment's scale subresource
(specReplicasPath .spec.replicas), so the autoscaler only ever writes
spec.replicas and the scheduler places that many replicas as it would for a
person: a replica the fleet cannot hold is reported (ReplicasScheduled=False),
never forced. Composed on the control plane, in the deployment's namespace.

The metrics are Prometheus queries over the engine pods of this deployment
only: every engine pod carries `modelplane.ai/deployment: <name>` (the
composer's naming.object_labels), which a Prometheus scrape of the workload
clusters turns into `modelplane_ai_deployment` (kubernetes_sd labelmap and the
Prometheus Operator's podTargetLabels both replace characters a label name
cannot hold with `_`), beside the `namespace` label every pod scrape gets.

Kthena's behaviour onto HPA's (HPA has no panic mode, so this is an approximation):

* stable.windowSeconds -> stabilizationWindowSeconds: a recommendation must hold
  that long before it is acted on (Kthena's stabilizationWindow);
* stable.instances / stable.percent -> a Pods and a Percent policy over Kthena's
  default 15 s period; selectPolicy Or -> Max (either limit lets the step
  through), And -> Min (both must);
* scaleUp.panic {thresholdPercent, windowSeconds} -> one more scale-up Percent
  policy of thresholdPercent - 100 over windowSeconds: within the short window
  the replicas may grow to thresholdPercent of their count, which is the surge
  panic mode answers. Under selectPolicy Max the larger allowance wins, so panic
  widens the stable limits and never narrows them (the XRD refuses panic beside
  And). HPA cannot wait for the threshold before using it, and a scale-up
  stabilization window delays panic too: keep stable.windowSeconds short when
  panic matters;
* tolerancePercent -> each direction's tolerance (HPA's HPAConfigurableTolerance
  feature; a cluster without it applies its own default, 10%, Kthena's default).

Where KEDA queries is the platform's: a server named in the EnvironmentConfig
prometheus.py reads, never an address the tenant writes; and a raw query must
read the deployment's own namespace only (contract/promql.py). Either refused,
the existing ScaledObject is kept as it was (`keep`) and the condition says why.

Removing spec.autoscaling drops the ScaledObject from the desired resources, so
Crossplane deletes it; restoreToOriginalReplicaCount false makes KEDA leave
spec.replicas where the autoscaler last put it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, cast

from function.contract import rules
from function.contract.api import API_VERSION, KIND_MODEL_DEPLOYMENT, LABEL_DEPLOYMENT
from function.contract.enums import EngineMetric, SelectPolicy
from function.contract.models.modeldeployment import (
    Autoscaling,
    AutoscalingMetric,
    Panic,
    ScaleDownStable,
    ScaleUpStable,
)
from function.contract.names import dns_label, tagged_label
from function.contract.validation import model_errors
from function.scheduler.prometheus import DEFAULT_SERVER, Refused, Server

KEDA_API_VERSION = "keda.sh/v1alpha1"
KIND_SCALED_OBJECT = "ScaledObject"
KIND_TRIGGER_AUTHENTICATION = "TriggerAuthentication"
KEY_SCALED_OBJECT = "autoscaler"
KEY_TRIGGER_AUTHENTICATION = "autoscaler-auth"
KEYS = (KEY_SCALED_OBJECT, KEY_TRIGGER_AUTHENTICATION)
KINDS = (KIND_SCALED_OBJECT, KIND_TRIGGER_AUTHENTICATION)
CONDITION = "Autoscaling"
CAPACITY_CONDITION = "CapacityLimited"
POLICY_PERIOD_SECONDS = 15  # Kthena's default `period`, and HPA's own
# The rate window of the TTFT histogram: four scrapes at Prometheus' usual 15 s.
RATE_WINDOW = "1m"

# Each engine metric, for vLLM and SGLang alike: the series (a regex over
# __name__), how the per-pod series combine, and how HPA compares them. A sum is
# divided by the replica count (AverageValue: the target is per replica); a mean
# or a quantile is compared as it is (Value).
# vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc (vllm-project/vllm#18354);
# both are matched and averaged, so an engine exporting both counts once.
AVERAGE_VALUE, VALUE = "AverageValue", "Value"
ENGINE_SERIES: dict[EngineMetric, tuple[tuple[str, ...], str, str]] = {
    EngineMetric.QUEUE_DEPTH: (("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
                               "sum", AVERAGE_VALUE),
    EngineMetric.RUNNING_REQUESTS: (("vllm:num_requests_running", "sglang:num_running_reqs"),
                                    "sum", AVERAGE_VALUE),
    EngineMetric.KV_CACHE_USAGE: (("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                                   "sglang:token_usage"), "avg", VALUE),
    EngineMetric.TIME_TO_FIRST_TOKEN_P90: (("vllm:time_to_first_token_seconds_bucket",
                                            "sglang:time_to_first_token_seconds_bucket"),
                                           "p90", VALUE),
}


def prometheus_label(key: str) -> str:
    """A Kubernetes label key as a Prometheus scrape names it."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


def selector(namespace: str, deployment: str) -> str:
    """The deployment's engine pods, as their scraped series carry them."""
    return (f'namespace="{namespace}",'
            f'{prometheus_label(LABEL_DEPLOYMENT)}="{dns_label(deployment)}"')


def engine_query(metric: EngineMetric, namespace: str, deployment: str) -> tuple[str, str]:
    """(PromQL, HPA metric type) of a built-in engine metric over this deployment's pods."""
    names, combine, metric_type = ENGINE_SERIES[metric]
    series = f'{{__name__=~"{"|".join(names)}",{selector(namespace, deployment)}}}'
    if combine == "p90":
        return (f"histogram_quantile(0.9, sum by (le) (rate({series}[{RATE_WINDOW}])))",
                metric_type)
    return f"{combine}({series})", metric_type


@dataclass
class Outcome:
    """What to compose, and the Autoscaling condition (None: say nothing)."""
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    keep: bool = False  # echo the observed autoscaler objects unchanged
    condition: tuple[str, str, str, str] | None = None  # type, status, reason, message


def without(md: Mapping[str, Any]) -> dict[str, Any]:
    """The ModelDeployment without spec.autoscaling, for the checks placement relies on."""
    spec = md.get("spec")
    if not isinstance(spec, Mapping) or "autoscaling" not in spec:
        return dict(md)
    return {**md, "spec": {k: v for k, v in spec.items() if k != "autoscaling"}}


def compose(md: Mapping[str, Any], observed: Mapping[str, Mapping[str, Any]],
            servers: Callable[[str], Server | Refused]) -> Outcome:
    """The autoscaler objects of a ModelDeployment whose spec apart from autoscaling is
    valid; `observed` holds its observed composed resources by key, `servers` looks up
    the platform's Prometheus servers by name (prometheus.py)."""
    meta = md.get("metadata") or {}
    ns, name = meta.get("namespace") or "", meta.get("name") or ""
    raw = (md.get("spec") or {}).get("autoscaling")
    existing = observed.get(KEY_SCALED_OBJECT)
    if raw is None:
        if existing is None:
            return Outcome()
        replicas = (md.get("spec") or {}).get("replicas", 1)
        return Outcome(condition=(CONDITION, "False", "Disabled",
                                  f"spec.autoscaling is unset: the ScaledObject is removed and "
                                  f"spec.replicas stays at {replicas}"))
    kept = ("the ScaledObject is kept as it was until it is fixed" if existing is not None
            else "no ScaledObject is composed until it is fixed")
    # With the namespace: a raw query must not read another namespace's series.
    errors = model_errors(Autoscaling, raw) or rules.autoscaling_errors(raw, ns)
    if errors:
        return Outcome(keep=True, condition=(
            CONDITION, "False", "InvalidAutoscaling",
            f"spec.autoscaling is invalid: {'; '.join(errors)}; {kept}"))
    spec = Autoscaling.model_validate(raw)
    prom = spec.prometheus
    server = servers((prom.server if prom is not None else None) or DEFAULT_SERVER)
    if isinstance(server, Refused):
        return Outcome(keep=True, condition=(CONDITION, "False", server.reason,
                                             f"{server.message}; {kept}"))
    if server.cluster_auth is not None and prom is not None and prom.authSecret is not None:
        return Outcome(keep=True, condition=(
            CONDITION, "False", "InvalidAutoscaling",
            f"spec.autoscaling is invalid: prometheus.authSecret: server {server.name!r} "
            f"authenticates with the platform's ClusterTriggerAuthentication "
            f"{server.cluster_auth}; remove authSecret; {kept}"))
    out = Outcome()
    auth = None
    if prom is not None and prom.authSecret is not None:
        auth = tagged_label(name, tag="promauth", identity=(ns, name, "promauth"))
        # cast: the XRD defaults key and makes no field nullable, so the API server
        # prunes a null before defaulting (render does not: a null is written as before).
        out.resources[KEY_TRIGGER_AUTHENTICATION] = trigger_authentication(
            ns, name, auth, prom.authSecret.name, cast(str, prom.authSecret.key))
    so_name = tagged_label(name, tag="autoscaler", identity=(ns, name, "autoscaler"))
    out.resources[KEY_SCALED_OBJECT] = scaled_object(ns, name, so_name, spec, server, auth)
    out.condition = _state(so_name, spec, existing)
    return out


def scaled_object(ns: str, name: str, so_name: str, spec: Autoscaling, server: Server,
                  auth: str | None) -> dict[str, Any]:
    triggers = [_trigger(i, m, ns, name, server, auth) for i, m in enumerate(spec.metrics)]
    return {
        "apiVersion": KEDA_API_VERSION, "kind": KIND_SCALED_OBJECT,
        "metadata": {"name": so_name, "namespace": ns, "labels": {LABEL_DEPLOYMENT: name}},
        "spec": {
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": KIND_MODEL_DEPLOYMENT,
                               "name": name},
            "minReplicaCount": spec.minReplicas,
            "maxReplicaCount": spec.maxReplicas,
            "advanced": {
                # Removing the ScaledObject leaves spec.replicas as the autoscaler left it.
                "restoreToOriginalReplicaCount": False,
                "horizontalPodAutoscalerConfig": {"behavior": behavior(spec)},
            },
            "triggers": triggers,
        },
    }


def _trigger(i: int, m: AutoscalingMetric, ns: str, name: str, server: Server,
             auth: str | None) -> dict[str, Any]:
    if m.engineMetric is not None:
        query, metric_type = engine_query(EngineMetric(m.engineMetric), ns, name)
        label = EngineMetric(m.engineMetric).value.lower()
    else:  # cast: rules.autoscaling_errors holds that a metric sets exactly one of the two
        query, metric_type, label = cast(str, m.query), AVERAGE_VALUE, "query"
    # `namespace` makes KEDA add ?namespace=<ns> to every request: a tenancy proxy in
    # front of the server (prom-label-proxy, Thanos Querier's tenancy port) enforces it.
    metadata = {"serverAddress": server.address, "query": query, "threshold": m.target,
                "namespace": ns}
    trigger: dict[str, Any] = {"type": "prometheus", "name": f"{label}-{i}",
                               "metricType": metric_type, "metadata": metadata}
    if server.cluster_auth is not None:
        metadata["authModes"] = server.auth_modes
        trigger["authenticationRef"] = {"name": server.cluster_auth,
                                        "kind": "ClusterTriggerAuthentication"}
    elif auth is not None:
        metadata["authModes"] = "bearer"
        trigger["authenticationRef"] = {"name": auth}
    return trigger


def trigger_authentication(ns: str, name: str, auth: str, secret: str,
                           key: str) -> dict[str, Any]:
    """KEDA reads the bearer token from the Secret for the Prometheus trigger."""
    return {
        "apiVersion": KEDA_API_VERSION, "kind": KIND_TRIGGER_AUTHENTICATION,
        "metadata": {"name": auth, "namespace": ns, "labels": {LABEL_DEPLOYMENT: name}},
        "spec": {"secretTargetRef": [{"parameter": "bearerToken", "name": secret,
                                      "key": key}]},
    }


def behavior(spec: Autoscaling) -> dict[str, Any]:
    """HPA's behaviour from Kthena's (the mapping is in the module docstring)."""
    b = spec.behavior
    up_stable = (b and b.scaleUp and b.scaleUp.stable) or ScaleUpStable()
    panic = b.scaleUp.panic if b and b.scaleUp else None
    down_stable = (b and b.scaleDown and b.scaleDown.stable) or ScaleDownStable()
    # cast: defaulted by the XRD, never null from the API server (see compose); an
    # unpruned null (render) raises TypeError here, as it did before the cast.
    tolerance = str((Decimal(cast(int, spec.tolerancePercent)) / 100).normalize())
    up = _rules(up_stable, tolerance)
    if panic is not None:
        up["policies"].append(_panic_policy(panic))
    return {"scaleUp": up, "scaleDown": _rules(down_stable, tolerance)}


def _rules(stable: ScaleUpStable | ScaleDownStable, tolerance: str) -> dict[str, Any]:
    return {
        "stabilizationWindowSeconds": stable.windowSeconds,
        "selectPolicy": "Min" if stable.selectPolicy == SelectPolicy.AND else "Max",
        "policies": [
            {"type": "Pods", "value": stable.instances, "periodSeconds": POLICY_PERIOD_SECONDS},
            {"type": "Percent", "value": stable.percent, "periodSeconds": POLICY_PERIOD_SECONDS},
        ],
        "tolerance": tolerance,
    }


def _panic_policy(panic: Panic) -> dict[str, Any]:
    # cast: defaulted by the XRD, never null from the API server (see compose); an
    # unpruned null (render) raises TypeError here, as it did before the cast.
    return {"type": "Percent", "value": cast(int, panic.thresholdPercent) - 100,
            "periodSeconds": panic.windowSeconds}


def _state(so_name: str, spec: Autoscaling,
           existing: Mapping[str, Any] | None) -> tuple[str, str, str, str]:
    """The condition: what is composed, and whether KEDA says the ScaledObject is Ready."""
    what = (f"KEDA ScaledObject {so_name} scales spec.replicas between {spec.minReplicas} and "
            f"{spec.maxReplicas} on " + ", ".join(
                f"{m.engineMetric or 'a query'} (target {m.target})" for m in spec.metrics))
    ready = next((c for c in ((existing or {}).get("status") or {}).get("conditions") or []
                  if isinstance(c, Mapping) and c.get("type") == "Ready"), None)
    if ready is None:
        return (CONDITION, "False", "Pending", f"{what}; waiting for KEDA to report it Ready (KEDA must "
                "run on the control plane: docs/autoscaling.md)")
    if ready.get("status") != "True":
        return (CONDITION, "False", "ScaledObjectNotReady",
                f"{what}; KEDA says: {ready.get('reason', '')}: {ready.get('message', '')}")
    return (CONDITION, "True", "Active", what)


def capacity(want: int, scheduled: int) -> tuple[str, str, str, str]:
    """CapacityLimited: whether the fleet holds every replica the autoscaler asks for.

    The HPA reads the current count from the scale subresource's status
    (.status.replicas.scheduled), so replicas the fleet cannot hold never count
    as running: it does not scale in because of them, and asks for more only
    within maxReplicas. The unplaced ones wait with their reasons
    (ReplicasScheduled=False) until the fleet has room."""
    if scheduled < want:
        return (CAPACITY_CONDITION, "True", "FleetFull",
                f"the autoscaler asks for {want} replicas and the fleet holds {scheduled}; "
                "ReplicasScheduled says why each other replica has no cluster")
    return (CAPACITY_CONDITION, "False", "WithinCapacity",
            f"the fleet holds all {want} replicas the autoscaler asks for")
