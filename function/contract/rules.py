"""The XRDs' CEL rules, checked again by the function.

Admission enforces these, but a ModelReplica may be edited by hand, an XRD may
be older than the function, and `crossplane render` does not run admission.
Each check returns messages worded like the XRD's, so a user sees the same
sentence whichever layer caught the mistake.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from function.contract import promql
from function.contract import serving as modes
from function.contract.enums import (
    DeviceClaim,
    EngineContainerName,
    MemberRole,
    SelectPolicy,
    TolerationOperator,
)

RESERVED_PREFIX = "modelplane.ai/"
# The resources an engine template may name: what a node gives every pod and the
# namespace's own ResourceQuota can cap. Anything else is an extended resource
# (nvidia.com/gpu, rdma/hca_shared_devices_a): a device that no placement ledger
# or InferenceQuota sees, so 40 replicas of 8 such devices could land on a pool
# the ledger counts as two nodes. hugepages-<size> are memory reserved at boot,
# not devices, and quota-capped like memory: allowed.
COMPUTE_RESOURCES = ("cpu", "memory", "ephemeral-storage")
HUGEPAGES_PREFIX = "hugepages-"
RESOURCES_MESSAGE = ("only cpu, memory, ephemeral-storage and hugepages-<size> may be named: "
                     "devices (nvidia.com/gpu and other extended resources) are claimed "
                     "through DRA device requests, which placement and InferenceQuotas count")
# Kubernetes qualified names (label keys): an optional DNS prefix and '/', then a name.
QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def engine_errors(spec: Mapping[str, Any]) -> list[str]:
    """Rule violations in a template spec or ModelReplica spec (engines + serving)."""
    errors: list[str] = []
    engines = spec.get("engines") or []
    if not engines:
        return ["at least one engine is required"]
    names = [e.get("name") for e in engines]
    if len(set(names)) != len(names):
        errors.append("engine names must be unique")
    errors += serving_errors(spec.get("serving") or {}, [e.get("phase") for e in engines])
    for engine in engines:
        errors += [f"engine {engine.get('name')!r}: {m}" for m in _engine(engine)]
    errors += [f"clusterSelector.matchLabels {m}" for m in _keys(
        (spec.get("clusterSelector") or {}).get("matchLabels") or {})]
    errors += [f"modelCacheRef: {m}" for m in _cache_ref(spec.get("modelCacheRef") or {})]
    for i, t in enumerate(spec.get("tolerations") or []):
        errors += [f"tolerations[{i}]: {m}" for m in _toleration(t)]
    return errors


def serving_errors(spec: Mapping[str, Any], phases: Sequence[str | None]) -> list[str]:
    """The serving mode's rules (serving.py) over `serving` and the engines' phases."""
    errors = []
    mode = modes.MODES.get(spec.get("mode") or modes.DEFAULT_MODE)
    if mode is None:  # the schema's enum refuses it first
        return [f"unknown serving mode {spec.get('mode')!r}"]
    if spec.get("kvConnector") and not mode.kv_connector:
        errors.append(modes.kv_connector_message())
    if spec.get("router") and spec["router"] not in mode.routers:
        errors.append(modes.router_message(mode))
    if mode.phases:
        if len(phases) != len(mode.phases) or sorted(p or "" for p in phases) != sorted(
                mode.phases):
            errors.append(modes.phases_message(mode))
    elif any(phases):
        errors.append(modes.phase_only_message())
    return errors


def _keys(labels: Iterable[str], reserved: bool = False) -> list[str]:
    errors = []
    if any(not QUALIFIED_NAME.match(str(k)) or len(str(k)) > 317 for k in labels):
        errors.append("keys must be qualified names (an optional DNS prefix and '/', then a "
                      "name of letters, digits, '-', '_' and '.')")
    if reserved and any(str(k).startswith(RESERVED_PREFIX) for k in labels):
        errors.append(f"keys under {RESERVED_PREFIX} are reserved for modelplane itself")
    return errors


def _toleration(t: Mapping[str, Any]) -> list[str]:
    errors = []
    op = t.get("operator") or TolerationOperator.EQUAL
    if op == TolerationOperator.EXISTS and t.get("value"):
        errors.append("a toleration with operator Exists must not set a value")
    if not t.get("key") and op != TolerationOperator.EXISTS:
        errors.append("a toleration without a key must use operator Exists (it then "
                      "tolerates every taint)")
    return errors


def _env(env: Mapping[str, Any]) -> list[str]:
    errors = []
    if env.get("value") is not None and env.get("valueFrom") is not None:
        errors.append("an env var sets value or valueFrom, not both")
    source = env.get("valueFrom")
    if source is not None and sum(source.get(k) is not None for k in
                                  ("secretKeyRef", "configMapKeyRef", "fieldRef")) != 1:
        errors.append("valueFrom needs exactly one of secretKeyRef, configMapKeyRef, fieldRef")
    return errors


def extended_resources(resources: Mapping[str, Any]) -> list[str]:
    """The names in requests and limits that are not compute resources, as `limits.<name>`."""
    return [f"{part}.{name}" for part in ("requests", "limits")
            for name in sorted(resources.get(part) or {})
            if name not in COMPUTE_RESOURCES and not str(name).startswith(HUGEPAGES_PREFIX)]


def _resources(resources: Mapping[str, Any]) -> list[str]:
    bad = extended_resources(resources)
    if not bad:
        return []
    return [f"the engine container's resources name {', '.join(bad)}: {RESOURCES_MESSAGE}"]


def placement_errors(node_selector: Mapping[str, Any] | None,
                     tolerations: Sequence[Mapping[str, Any]] | None,
                     resources: Mapping[str, Any] | None, what: str) -> list[str]:
    """The XRD's rules for a pod's node selector, tolerations and container resources
    outside an engine (a stack's controller: `what`)."""
    errors = _keys(node_selector or {})
    errors += [e for t in tolerations or () if isinstance(t, Mapping) for e in _toleration(t)]
    bad = extended_resources(resources or {})
    if bad:
        errors.append(f"{what}'s resources name {', '.join(bad)}: {RESOURCES_MESSAGE}")
    return errors


def _engine(engine: Mapping[str, Any]) -> list[str]:
    errors = []
    members = engine.get("members") or []
    roles = sorted(m.get("role") or MemberRole.STANDALONE for m in members)
    if roles not in ([MemberRole.STANDALONE], [MemberRole.LEADER, MemberRole.WORKER]):
        errors.append("members must be exactly one Standalone, or one Leader and one Worker")
    for m in members:
        is_worker = m.get("role") == MemberRole.WORKER
        if is_worker != ("worker" in m and m["worker"] is not None):
            errors.append("worker.nodes is set on the Worker member, and only there")
        containers = ((m.get("template") or {}).get("spec") or {}).get("containers") or []
        if len(containers) != 1 or containers[0].get("name") != EngineContainerName.ENGINE:
            errors.append("the pod template needs exactly one container, named engine")
        for where, labels in _template_maps(m):
            errors += [f"{where} {e}" for e in _keys(labels, reserved=True)]
        for c in containers:
            for env in c.get("env") or []:
                errors += [f"env {env.get('name')!r}: {e}" for e in _env(env)]
            errors += _resources(c.get("resources") or {})
        for r in m.get("deviceRequests") or []:
            claimed = (r.get("claim") or DeviceClaim.DRA) == DeviceClaim.DRA
            if claimed and not r.get("deviceClassName"):
                errors.append(f"device request {r.get('name')!r}: a DRA device request needs "
                              "a deviceClassName")
    if len({m.get("nodePoolName") for m in members}) > 1:
        errors.append("every member of an engine runs on one node pool (the scheduler places each engine on one pool)")
    if not any(((m.get("nodeSelector") or {}).get("devices")) for m in members):
        errors.append("at least one member of every engine must request devices in "
                      "nodeSelector.devices")
    gang = MemberRole.LEADER in roles
    if engine.get("recoveryPolicy") and not gang:
        errors.append("recoveryPolicy applies to gang engines (a Leader and a Worker) only")
    if (engine.get("rollout") or {}).get("partition") is not None and not gang:
        errors.append("rollout.partition applies to gang engines only: a Deployment has no "
                      "partition")
    for m in members:
        for r in (m.get("nodeSelector") or {}).get("devices") or []:
            if r.get("firstAvailable") is not None and r.get("selectors") is not None:
                errors.append(f"device request {r.get('name')!r} has selectors or "
                              "firstAvailable alternatives, not both")
            elif r.get("firstAvailable") == []:
                errors.append(f"device request {r.get('name')!r}: firstAvailable needs at "
                              "least one alternative")
    return errors


def _template_maps(member: Mapping[str, Any]):
    meta = (member.get("template") or {}).get("metadata") or {}
    for key in ("labels", "annotations"):
        yield f"pod template {key}", meta.get(key) or {}


def template_metadata_errors(metadata: Mapping[str, Any]) -> list[str]:
    return [f"template {key} {e}" for key in ("labels", "annotations")
            for e in _keys(metadata.get(key) or {}, reserved=True)]


_DOT_SEGMENT = re.compile(r"(^|/)\.\.?(/|$)")


def _cache_ref(ref: Mapping[str, Any]) -> list[str]:
    if _DOT_SEGMENT.search(ref.get("mountPath") or ""):
        return ["mountPath must not contain '.' or '..' segments"]
    return []


def cache_errors(spec: Mapping[str, Any]) -> list[str]:
    """Rule violations in a ModelCache spec."""
    errors = []
    source = spec.get("source")
    hf, uri = "huggingFace" in spec, "uri" in spec
    if source == "HuggingFace" and not (hf and not uri):
        errors.append("source HuggingFace needs spec.huggingFace, and no spec.uri")
    if source == "URI" and not (uri and not hf):
        errors.append("source URI needs spec.uri, and no spec.huggingFace")
    h = spec.get("huggingFace") or {}
    if "filename" in h and ("allowPatterns" in h or "ignorePatterns" in h):
        errors.append("filename stages one file: it excludes allowPatterns and ignorePatterns")
    for a in spec.get("adapters") or []:
        if ("huggingFace" in a) == ("uri" in a):
            errors.append(f"adapter {a.get('name')!r}: an adapter sets exactly one of "
                          "huggingFace and uri")
    names = [a.get("name") for a in spec.get("adapters") or []]
    if len(set(names)) != len(names):
        errors.append("adapter names must be unique")
    errors += [f"clusterSelector.matchLabels {m}" for m in _keys(
        (spec.get("clusterSelector") or {}).get("matchLabels") or {})]
    return errors


QUOTA_SELECTS = ("a quota selects namespaces (namespaces, namespaceSelector or both) or is the "
                 "default for every namespace no other quota selects (default: true), "
                 "not both")


def quota_errors(spec: Mapping[str, Any]) -> list[str]:
    """Rule violations in an InferenceQuota spec."""
    errors = []
    if (spec.get("default") is True) == ("namespaces" in spec or "namespaceSelector" in spec):
        errors.append(QUOTA_SELECTS)
    if not any(k in spec for k in ("limits", "maxReplicas", "maxPods")):
        errors.append("a quota caps something: set limits, maxReplicas or maxPods")
    names = [lim.get("name") for lim in spec.get("limits") or []]
    if len(set(names)) != len(names):
        errors.append("limit names must be unique")
    errors += [f"namespaceSelector.matchLabels {m}" for m in _keys(
        (spec.get("namespaceSelector") or {}).get("matchLabels") or {})]
    return errors


_DECIMAL = re.compile(r"^([0-9]+(\.[0-9]+)?|\.[0-9]+)$")


QUERY_UNSCOPED = ('a query selects its own namespace: every series selector carries '
                  'namespace="<the deployment\'s namespace>"')
ADDRESS_REFUSED = ("prometheus.address is the platform's to choose: name one of its "
                   "Prometheus servers in prometheus.server (docs/autoscaling.md)")


def autoscaling_errors(spec: Mapping[str, Any], namespace: str | None = None) -> list[str]:
    """Rule violations in a ModelDeployment's spec.autoscaling, worded as the XRD words them,
    a query that does not parse as PromQL and, given the deployment's namespace, a query
    that may read series of another namespace (promql.py)."""
    errors = []
    low, high = spec.get("minReplicas", 1), spec.get("maxReplicas")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        errors.append("minReplicas must not exceed maxReplicas")
    for i, m in enumerate(spec.get("metrics") or []):
        if ("engineMetric" in m and m["engineMetric"] is not None) == (
                "query" in m and m["query"] is not None):
            errors.append(f"metrics[{i}]: a metric sets exactly one of engineMetric and query")
        target = str(m.get("target") or "")
        if _DECIMAL.match(target) and float(target) <= 0:
            errors.append(f"metrics[{i}]: target must be above 0")
        if m.get("query"):
            errors += [f"metrics[{i}]: query {e}" for e in _query_errors(m["query"], namespace)]
    up = ((spec.get("behavior") or {}).get("scaleUp") or {})
    if up.get("panic") is not None and ((up.get("stable") or {}).get("selectPolicy")
                                        or SelectPolicy.OR) != SelectPolicy.OR:
        errors.append("scaleUp.panic needs stable.selectPolicy Or: HPA applies one selectPolicy "
                      "to every scale-up policy, and And would cap the panic policy by the "
                      "stable ones")
    if (spec.get("prometheus") or {}).get("address") is not None:
        errors.append(ADDRESS_REFUSED)
    return errors


def _query_errors(query: str, namespace: str | None) -> list[str]:
    """Why a query is not PromQL (what KEDA would only find when it first asks
    Prometheus), or may select series outside `namespace`."""
    errors = promql.syntax_errors(query)
    if errors:
        return errors
    loose = promql.unscoped(query, namespace)
    if not loose:
        return []
    which = f'namespace="{namespace}"' if namespace is not None else "one"
    return [f'{QUERY_UNSCOPED}: {", ".join(loose[:4])}{" ..." if len(loose) > 4 else ""} '
            f'{"does" if len(loose) == 1 else "do"} not carry {which}']
