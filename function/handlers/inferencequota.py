"""The InferenceQuota handler: what the selected namespaces hold against each limit.

The quota composes nothing; the scheduler enforces it when it places a
replica (scheduler/quotas.py). This function reports, per limit, the devices
held now by every ModelReplica of the namespaces the quota selects (by name,
and by namespace labels through the Namespaces it requires), so platform
teams read use with `kubectl get iq`; with `maxReplicas` or `maxPods`, the
replicas of those namespaces and their engine pods too, wherever they run.
A namespace over a limit or a cap (the quota was
lowered, deployments were placed from one snapshot, or replicas were placed
before it existed) is reported here; the schedulers repair it, each making its
youngest replicas beyond the limit wait (scheduler/plan.py). A selector
that does not compile makes `LimitsValid` False: the scheduler then places
nothing new in the quota's namespaces until it is fixed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.contract import devicecel, rules
from function.contract.api import (
    API_VERSION,
    KIND_INFERENCE_CLUSTER,
    KIND_INFERENCE_QUOTA,
    KIND_MODEL_REPLICA,
    REQUIRE_CLUSTERS,
    REQUIRE_NAMESPACES,
    REQUIRE_QUOTAS,
    REQUIRE_REPLICAS,
)
from function.contract.models.inferencequota import InferenceQuota
from function.contract.quotas import (
    MAX_PODS,
    MAX_REPLICAS,
    claims,
    count_usage,
    devices,
    engine_pods,
    parse_quota,
    read_quota,
    usage,
)
from function.contract.records import parse_clusters
from function.contract.validation import dig
from function.handlers import prologue
from function.kit.request import Request, desired_ready

MAX_MESSAGE = 1000


@prologue.admitted(InferenceQuota, namespaced=False, prune=False,
                   rules=lambda iq: rules.quota_errors(dig(iq, "spec")))
def run(req: Request, rsp: fnv1.RunFunctionResponse, iq: dict[str, Any]) -> None:
    quota = parse_quota(iq)
    response.require_resources(rsp, REQUIRE_REPLICAS, API_VERSION, KIND_MODEL_REPLICA,
                               match_labels={})
    response.require_resources(rsp, REQUIRE_CLUSTERS, API_VERSION, KIND_INFERENCE_CLUSTER,
                               match_labels={})
    wanted = [REQUIRE_REPLICAS, REQUIRE_CLUSTERS]
    if quota.default:
        # Which namespaces no other quota selects: every quota, every Namespace's labels.
        response.require_resources(rsp, REQUIRE_QUOTAS, API_VERSION, KIND_INFERENCE_QUOTA,
                                   match_labels={})
        response.require_resources(rsp, REQUIRE_NAMESPACES, "v1", "Namespace", match_labels={})
        wanted += [REQUIRE_QUOTAS, REQUIRE_NAMESPACES]
    elif quota.match_labels is not None:
        response.require_resources(rsp, REQUIRE_NAMESPACES, "v1", "Namespace",
                                   match_labels=dict(quota.match_labels))
        wanted.append(REQUIRE_NAMESPACES)
    rsp.desired.composite.ready = desired_ready(True)  # nothing composed: nothing to wait on
    if not all(req.resolved(w) for w in wanted):
        return

    bad = []
    for limit in quota.limits:
        for expr in limit.selectors:
            try:
                devicecel.compile_selector(expr)
            except devicecel.CelError as exc:
                bad.append(f"limit {limit.name!r}: invalid CEL selector {expr!r}: {exc}")
    labels = {dig(n, "metadata").get("name"): dict(dig(n, "metadata").get("labels") or {})
              for n in req.required(REQUIRE_NAMESPACES)}
    # A quota's namespaces by name, and those its selector matched (required by it).
    selected = set(quota.namespaces) | set(labels)
    in_scope = _unselected(req, labels) if quota.default else selected.__contains__
    # A malformed cluster's replicas cannot be told apart: the cluster says why itself.
    clusters, _ = parse_clusters(req.required(REQUIRE_CLUSTERS))
    # What counts together: every selected namespace, or each one of a default quota's.
    groups: dict[str, Use] = {}
    for mr in req.required(REQUIRE_REPLICAS):
        spec, meta = dig(mr, "spec"), dig(mr, "metadata")
        ns = meta.get("namespace")
        if not isinstance(ns, str) or not in_scope(ns):
            continue
        cname = spec.get("clusterName")  # a stored object of another schema may hold anything
        cluster = clusters.get(cname) if isinstance(cname, str) else None
        try:
            # Replicas and pods count wherever they run, as the scheduler counts them.
            n = engine_pods(spec.get("engines"))
            got = list(devices(claims(spec), cluster)) if cluster is not None else []
            use = groups.setdefault(ns if quota.default else "", Use())
            use.held += got
            use.replicas, use.pods = use.replicas + 1, use.pods + n
        except (TypeError, ValueError, AttributeError, KeyError, devicecel.CelError) as exc:
            # Skip only the bad object, and say so: its devices go uncounted.
            response.warning(rsp, f"ModelReplica {meta.get('namespace')}/{meta.get('name')} "
                             f"is malformed and left out of the quota's use: {exc}")
    uses = groups or {"": Use()}

    entries: list[dict[str, Any]] = []
    for limit in quota.limits:  # for a default quota, the most one namespace holds
        used = 0 if any(f"limit {limit.name!r}" in b for b in bad) else max(
            usage(limit, u.held) for u in uses.values())
        entries.append({"name": limit.name, "used": used, "devices": limit.devices})
    counted = [(what, max(count_usage(what, u.replicas, u.pods) for u in uses.values()), cap)
               for what, cap in quota.counts()]
    status: dict[str, Any] = {"limits": entries}
    for what, used, _ in counted:
        status["replicas" if what == MAX_REPLICAS else "pods"] = used
    said = [f"{e['name']}: {e['used']}/{e['devices']}" for e in entries] + [
        f"{_noun(what)}: {used}/{cap}" for what, used, cap in counted]
    status["summary"] = ", ".join(said)[:256]
    resource.update(rsp.desired.composite, {"status": status})
    over = [f"{e['name']}: {e['used']} of {e['devices']} devices" for e in entries
            if e["used"] > e["devices"]] + [
        f"{what}: {used} of {cap} {_noun(what)}" for what, used, cap in counted if used > cap]
    if bad:
        response.set_conditions(rsp, resource.Condition(
            typ="LimitsValid", status="False", reason="InvalidSelector",
            message=("; ".join(bad) + "; nothing new is placed in the quota's namespaces "
                     "until it is fixed")[:MAX_MESSAGE]))
    else:
        response.set_conditions(rsp, resource.Condition(
            typ="LimitsValid", status="True", reason="Valid"))
    if over:
        response.set_conditions(rsp, resource.Condition(
            typ="WithinLimits", status="False", reason="OverQuota",
            message=("; ".join(over)
                     + "; the youngest replicas beyond a limit wait, removed by their "
                       "deployments' next reconcile; the oldest stay")[:MAX_MESSAGE]))
    else:
        response.set_conditions(rsp, resource.Condition(
            typ="WithinLimits", status="True", reason="WithinLimits",
            message=(f"{len(groups)} namespaces holding replicas, each on its own"
                     if quota.default else f"{len(selected)} namespaces")
                    + f", {len(entries)} limits"))


@dataclass
class Use:
    """What the replicas counted together hold: devices, replicas, pods."""

    held: list = field(default_factory=list)
    replicas: int = 0
    pods: int = 0


def _unselected(req: Request, labels: Mapping[Any, Mapping[str, str]]) -> Callable[[str], bool]:
    """Whether no other quota selects a namespace: where a default quota counts."""
    others = [q for q, _ in map(read_quota, req.required(REQUIRE_QUOTAS)) if not q.default]
    return lambda ns: not any(q.applies(ns, labels.get(ns, {})) for q in others)


def _noun(what: str) -> str:
    return "pods" if what == MAX_PODS else "replicas"
