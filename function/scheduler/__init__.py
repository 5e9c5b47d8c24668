"""The scheduler: ModelDeployment -> one ModelReplica per placed replica.

This module is the I/O around the pure `plan()`: declare the required
resources (InferenceClusters, every ModelReplica for the capacity ledger,
and the ModelCache the replicas mount, if any), read the fleet from them (fleet.py), plan,
and write desired ModelReplicas, a ModelEndpoint per serving replica (endpoints.py),
the leaving replicas that still drain (drain.py), status and conditions. It never drops
an existing replica because an input is missing or unreadable; it keeps it and says why.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.contract import cacheview
from function.contract.api import (
    API_VERSION,
    KIND_INFERENCE_CLUSTER,
    KIND_INFERENCE_QUOTA,
    KIND_MODEL_CACHE,
    KIND_MODEL_DEPLOYMENT,
    KIND_MODEL_REPLICA,
    KIND_MODEL_SERVICE,
    LABEL_DEPLOYMENT,
    REQUIRE_CLUSTERS,
    REQUIRE_DEPLOYMENTS,
    REQUIRE_MODEL_CACHE,
    REQUIRE_NAMESPACES,
    REQUIRE_OWN_NAMESPACE,
    REQUIRE_QUOTA_CLUSTERS,
    REQUIRE_QUOTAS,
    REQUIRE_REPLICAS,
    REQUIRE_SERVICES,
)
from function.contract.quotas import Quota, read_quota
from function.contract.records import Malformed
from function.contract.enums import PlacementStrategy, ReplicaPhase
from function.contract.validation import dig
from function.kit import deadline, requeue, structs
from function.kit.request import Request, desired_ready, namespace_labels, require_namespace
from function.scheduler import (autoscaling, budget, demand, drain, endpoints, output,
                                parsecache, prometheus, reasons, room)
from function.scheduler.fleet import Fleet, read
from function.scheduler.plan import Inputs, Plan, plan
from function.scheduler.quotas import QuotaLedger
from function.scheduler.quotas import ledger as quota_ledger

MAX_MESSAGE = 4000
MAX_VERDICTS = 100  # clusters named per unscheduled replica (the XRD's maxItems)


def place(req: Request, rsp: fnv1.RunFunctionResponse, md: dict[str, Any]) -> None:
    """Place a valid ModelDeployment's replicas (handlers/modeldeployment.py): `md`
    without spec.autoscaling, which is judged on its own (autoscaling.py): a
    mistake there gets a False Autoscaling condition, and placement goes on."""
    meta = md["metadata"]
    # Whatever it waits on: an edit of its spec (a scale by one) reaches it only
    # through a watch event, which an open circuit drops (requeue.while_circuit_open).
    requeue.while_circuit_open(req.composite, rsp)
    # Composed before the fleet is read: it depends on the spec alone, and a
    # desired resource left out of any response would be deleted.
    autoscaled = _autoscale(req, rsp, req.composite)
    tspec = dig(md, "spec", "template", "spec")

    selector = (tspec.get("clusterSelector") or {}).get("matchLabels") or None
    want = int((md.get("spec") or {}).get("replicas", 1))
    _require(rsp, REQUIRE_CLUSTERS, KIND_INFERENCE_CLUSTER, selector or {})
    _require(rsp, REQUIRE_REPLICAS, KIND_MODEL_REPLICA, {})
    ns, name = meta.get("namespace") or "", meta.get("name") or ""
    # The namespace's services, whose routes a leaving replica drains from (drain.py).
    # Not waited for: Crossplane resolves it with the clusters and replicas, and
    # without it a leaving replica goes at once, as it would with no service.
    rsp.requirements.resources[REQUIRE_SERVICES].CopyFrom(fnv1.ResourceSelector(
        api_version=API_VERSION, kind=KIND_MODEL_SERVICE, namespace=ns,
        match_labels=fnv1.MatchLabels(labels={})))
    # Its own Namespace, for the clusters' spec.namespaceSelector (filters.namespace):
    # one object by name, resolved with the clusters. Not waited for: missing (or
    # not resolved), it is admitted only where no cluster sets a selector.
    require_namespace(rsp, REQUIRE_OWN_NAMESPACE, ns)
    ref = cacheview.cache_ref(tspec)
    if ref is not None:
        response.require_resources(rsp, REQUIRE_MODEL_CACHE, API_VERSION, KIND_MODEL_CACHE,
                                   match_name=ref.name, namespace=ns)

    _require(rsp, REQUIRE_QUOTAS, KIND_INFERENCE_QUOTA, {})
    quotas = _quotas(req, rsp)
    strategy = demand.strategy(tspec)
    if strategy == PlacementStrategy.PACK:
        _require(rsp, REQUIRE_DEPLOYMENTS, KIND_MODEL_DEPLOYMENT, {})

    observed = req.observed(KIND_MODEL_REPLICA)
    # The quotas are declared with the clusters and replicas, and Crossplane
    # resolves every requirement of a response together: when those are
    # resolved, so are the quotas (an empty list: none). What a quota needs
    # besides is declared once quotas are known, and waited for.
    wanted = [REQUIRE_CLUSTERS, REQUIRE_REPLICAS] + (
        [REQUIRE_MODEL_CACHE] if ref else []) + (
        [REQUIRE_DEPLOYMENTS] if strategy == PlacementStrategy.PACK else []) + _quota_inputs(rsp, quotas)
    if not all(req.resolved(w) for w in wanted):
        # Not resolved yet: keep everything that exists, decide nothing.
        for key, mr in observed.items():
            resource.update(rsp.desired.resources[key], output.echo(mr))
            rsp.desired.resources[key].ready = desired_ready(serving(mr))
        endpoints.emit(rsp, observed)
        # Said explicitly: derived from nothing composed yet, Ready would be True.
        rsp.desired.composite.ready = desired_ready(
            sum(serving(mr) for mr in observed.values()) == want)
        return

    fleet = read(req, observed, ns, name)
    deadline.check("after reading the fleet")
    for warning in fleet.warnings:
        response.warning(rsp, warning)

    dep = demand.deployment(tspec, _cache(req, ref, ns), ns,
                            namespace_labels(req, REQUIRE_OWN_NAMESPACE, ns))
    quota_of = _quota_ledgers(req, quotas, fleet)
    over_budget = budget.remembered(req.composite)
    result = plan(Inputs(replicas=want, deployment=dep, clusters=fleet.clusters,
                         malformed_clusters=fleet.malformed_clusters, own=fleet.own,
                         others=fleet.others, reserved=fleet.reserved,
                         quota=quota_of(ns) if quota_of is not None else None,
                         waiting=_waiting(req, ns, name, quota_of)
                         if strategy == PlacementStrategy.PACK else (),
                         over_budget=over_budget))

    # Replicas share the deployment's dicts and their members' resolved device
    # requests: each is built and converted once.
    converted: dict = {}
    shared: dict = {}
    for p in result.placements:
        structs.update(rsp.desired.resources[fleet.key(p.cluster, p.index)],
                       output.replica_manifest(md, p, shared), converted)
    # Only the replicas still placed: one on its way out stops taking traffic now,
    # and is kept until no service routes to it (drain.py).
    placed = {fleet.key(p.cluster, p.index) for p in result.placements}
    endpoints.emit(rsp, {k: observed[k] for k in sorted(placed) if k in observed})
    leaving = {k: mr for k, mr in observed.items() if k not in placed}
    held = drain.holding(leaving, req.required(REQUIRE_SERVICES)) if leaving else {}
    for key in held:
        resource.update(rsp.desired.resources[key], output.echo(leaving[key]))
        # Not counted: the deployment's readiness is its placed replicas'.
        rsp.desired.resources[key].ready = desired_ready(True)
    kept = []
    for b in fleet.broken:
        # Skip only the bad object: keep it as it is and say so.
        resource.update(rsp.desired.resources[b.key], output.echo(b.manifest))
        rsp.desired.resources[b.key].ready = desired_ready(False)
        response.warning(rsp, f"ModelReplica {b.key} is malformed and kept as is: {b.why}")
        kept.append(f"ModelReplica {b.key} is malformed and kept as is: {b.why}")
    write_status(rsp, md, result, observed, fleet, kept,
                 drain.note(leaving, held) if held else "",
                 over_budget=budget.record(over_budget, dep.engines),
                 draining=sorted(str(dig(leaving[k], "metadata").get("name")) for k in held))
    if autoscaled:
        _condition(rsp, autoscaling.capacity(want, len(result.placements)))


def _waiting(req: Request, ns: str, name: str,
             quota_of: Callable[[str], QuotaLedger | None] | None) -> list[room.Waiting]:
    """The other ModelDeployments waiting for capacity that placement can read
    (demand.py), each parsed once per content (parsecache.DEPLOYMENTS), with the
    ledger of its namespace's quotas (room.py makes room only within them) and the
    name our notes may give it (another namespace's is never named)."""
    out = []
    for item in req.required_items(REQUIRE_DEPLOYMENTS):
        try:
            found = parsecache.DEPLOYMENTS.get(item)
        except Malformed:
            continue  # its own reconcile says what is wrong with it
        if found.waiting is not None and (found.namespace, found.name) != (ns, name):
            out.append(dataclasses.replace(
                found.waiting,
                shown=f"ModelDeployment {found.waiting.name}" if found.namespace == ns
                else room.ANOTHER,
                quota=None if quota_of is None else functools.partial(quota_of, found.namespace)))
    return out


def _autoscale(req: Request, rsp: fnv1.RunFunctionResponse, md: Mapping[str, Any]) -> bool:
    """The KEDA objects of spec.autoscaling, or the observed ones kept as they are; whether
    an autoscaler is composed."""
    # By kind: converting every observed ModelReplica again would double the cost of
    # a large deployment's request.
    observed = {k: v for kind in autoscaling.KINDS for k, v in req.observed(kind).items()
                if k in autoscaling.KEYS}
    if (md.get("spec") or {}).get("autoscaling") is not None:
        prometheus.require(rsp)  # the platform's servers, by name
    out = autoscaling.compose(md, observed, lambda server: prometheus.server(req, server))
    desired = {k: output.echo_object(v) for k, v in observed.items()} if out.keep \
        else out.resources
    for key, obj in desired.items():
        resource.update(rsp.desired.resources[key], obj)
        # Its health is the Autoscaling condition's: a KEDA hiccup must not make a
        # serving deployment un-Ready.
        rsp.desired.resources[key].ready = desired_ready(True)
    if out.condition is not None:
        _condition(rsp, out.condition)
    return bool(out.resources)


def _condition(rsp: fnv1.RunFunctionResponse, cond: tuple[str, str, str, str]) -> None:
    typ, status, reason, message = cond
    response.set_conditions(rsp, resource.Condition(typ=typ, status=status, reason=reason,
                                                    message=message[:MAX_MESSAGE]))


def _quotas(req: Request, rsp: fnv1.RunFunctionResponse) -> list[Quota]:
    """Every InferenceQuota; an invalid one closes the namespaces it selects (nothing
    new is placed there: contract/quotas.invalid_quota), with a warning."""
    out = []
    for iq in req.required(REQUIRE_QUOTAS):
        quota, errors = read_quota(iq)
        if errors:
            response.warning(rsp, f"InferenceQuota {quota.name} is invalid and closes "
                             f"{'every namespace' if quota.everyone else 'its namespaces'} "
                             f"to new replicas: {quota.invalid}")
        out.append(quota)
    return out


def _quota_inputs(rsp: fnv1.RunFunctionResponse, quotas: list[Quota]) -> list[str]:
    """With any quota, every cluster (replicas elsewhere count too) and, for a
    namespaceSelector, every Namespace's labels: required, and waited for."""
    if not quotas:
        return []
    _require(rsp, REQUIRE_QUOTA_CLUSTERS, KIND_INFERENCE_CLUSTER, {})
    if any(q.match_labels is not None for q in quotas):
        rsp.requirements.resources[REQUIRE_NAMESPACES].CopyFrom(fnv1.ResourceSelector(
            api_version="v1", kind="Namespace", match_labels=fnv1.MatchLabels(labels={})))
        return [REQUIRE_QUOTA_CLUSTERS, REQUIRE_NAMESPACES]
    return [REQUIRE_QUOTA_CLUSTERS]


def _quota_ledgers(req: Request, quotas: list[Quota],
                   fleet: Fleet) -> Callable[[str], QuotaLedger | None] | None:
    """A namespace -> the ledger of the InferenceQuotas that apply to it (None: none
    does), each built once, when first asked; None when no InferenceQuota exists."""
    if not quotas:
        return None
    labels: dict[str, dict[str, str]] = {}
    for n in req.required(REQUIRE_NAMESPACES):
        meta = dig(n, "metadata")
        # An API server's Namespace has a string name, and the ledger looks up only
        # string names: a key of another type (a hand-written render input) was never read.
        if isinstance(meta.get("name"), str):
            labels[meta["name"]] = dict(meta.get("labels") or {})
    clusters = {}
    for item in req.required_items(REQUIRE_QUOTA_CLUSTERS):
        try:
            c = parsecache.CLUSTERS.get(item)
            clusters[c.name] = c
        except Malformed:
            continue  # reported by the InferenceCluster itself
    replicas = [*fleet.own, *fleet.others]

    @functools.cache
    def of(ns: str) -> QuotaLedger | None:
        return quota_ledger(quotas, ns, labels, replicas, clusters)
    return of


def _cache(req: Request, ref: cacheview.CacheRef | None, ns: str) -> cacheview.Cache | None:
    """The ModelCache the replicas mount, as placement reads it (None: none)."""
    if ref is None:
        return None
    found = req.required(REQUIRE_MODEL_CACHE)
    return cacheview.parse_cache(found[0]) if found else cacheview.missing(ref.name, ns)


def serving(mr: Mapping[str, Any]) -> bool:
    """Whether an observed ModelReplica says it serves."""
    return dig(mr, "status").get("phase") == ReplicaPhase.SERVING


def _require(rsp: fnv1.RunFunctionResponse, name: str, kind: str,
             labels: Mapping[str, str]) -> None:
    """Require every `kind` carrying `labels`, an empty map meaning all of them.

    The match is always set: Crossplane's fetcher rejects a selector with
    neither matchName nor matchLabels ("unsupported required resource
    selector type"), and the SDK leaves the match unset for an empty map.
    """
    rsp.requirements.resources[name].CopyFrom(fnv1.ResourceSelector(
        api_version=API_VERSION, kind=kind, match_labels=fnv1.MatchLabels(labels=dict(labels))))


def write_status(rsp: fnv1.RunFunctionResponse, md: Mapping[str, Any], result: Plan,
                 observed: Mapping[str, Mapping[str, Any]], fleet: Fleet,
                 broken: Sequence[str] = (), draining_note: str = "",
                 over_budget: Sequence[Mapping[str, str]] = (),
                 draining: Sequence[str] = ()) -> None:
    name = (md.get("metadata") or {}).get("name", "")
    want = int((md.get("spec") or {}).get("replicas", 1))
    placements, ready = [], 0
    for p in result.placements:
        if p.engines is not None:
            mr_name = output.replica_name(name, p.cluster, p.index)
        else:
            assert p.existing is not None, "a Placement without engines holds the replica it keeps"
            mr_name = p.existing.name
        key = fleet.key(p.cluster, p.index)
        seen = observed.get(key, {})
        status = seen.get("status") or {}
        is_ready = serving(seen)
        ready += is_ready
        # Crossplane derives the deployment's Ready from its composed
        # resources, and one left unspecified counts as not ready.
        rsp.desired.resources[key].ready = desired_ready(is_ready)
        entry: dict[str, Any] = {"name": mr_name, "index": p.index, "cluster": p.cluster,
                                 "pools": _pools(p), "ready": is_ready}
        if _alternatives(p):
            entry["alternatives"] = _alternatives(p)
        if status.get("endpoint"):
            entry["endpoint"] = status["endpoint"]
        placements.append(entry)
    scheduled = len(result.placements)
    resource.update(rsp.desired.composite, {"status": {
        "replicas": {"desired": want, "scheduled": scheduled, "ready": ready},
        "labelSelector": f"{LABEL_DEPLOYMENT}={name}",
        "placements": placements,
        "unscheduled": [_unscheduled(i, r) for i, r in sorted(result.unscheduled.items())],
        **({"draining": list(draining)} if draining else {}),
        **({"selectorsOverBudget": list(over_budget)} if over_budget else {}),
    }})

    if result.undecided:
        cond = ("False", "SelectorNotEvaluated", "; ".join(result.errors) +
                "; existing replicas are kept as they are")
    elif result.errors:
        cond = ("False", "InvalidSelector", "; ".join(result.errors) +
                "; existing replicas are kept as they are until the selector is fixed")
    elif result.unscheduled or scheduled < want:
        cond = ("False", "Unschedulable", _group(result.unscheduled))
    elif broken or any(p.engines is None for p in result.placements):
        kept = [f"replica {p.index} on {p.cluster}: {p.note}" for p in result.placements
                if p.engines is None] + list(broken)
        cond = ("False", "KeptAsIs", "; ".join(kept + result.notes))
    else:
        cond = ("True", "AllScheduled", f"{scheduled}/{want} replicas scheduled")
    if draining_note:
        cond = (cond[0], cond[1], f"{cond[2]}; {draining_note}")
    response.set_conditions(rsp, resource.Condition(
        typ="ReplicasScheduled", status=cond[0], reason=cond[1], message=cond[2][:MAX_MESSAGE]))
    # Ready means every replica the spec asks for serves, however many are
    # composed (a deployment short of capacity is not Ready).
    rsp.desired.composite.ready = desired_ready(ready == want and not result.errors)
    if result.errors or result.unscheduled or scheduled < want or cond[1] == "KeptAsIs":
        requeue.soon(rsp)  # waiting on the fleet, which Crossplane does not watch for us
    elif ready < scheduled or draining:
        # Waiting on replicas to serve: Crossplane watches them, but their
        # status updates can open its watch circuit breaker (see requeue).
        # Or on services to stop routing to a draining one: not watched at all.
        requeue.soon(rsp)
    response.set_conditions(rsp, resource.Condition(
        typ="ReplicasReady", status="True" if ready == want else "False",
        reason="AllReady" if ready == want else "NotAllReady",
        message=f"{ready}/{want} replicas serving"))
    for note in result.notes:
        response.normal(rsp, note[:MAX_MESSAGE])


def _unscheduled(index: int, why: reasons.Shortfall) -> dict[str, Any]:
    """One replica without a cluster: the summary, and what each cluster said."""
    entry: dict[str, Any] = {"index": index, "reason": why.message(f"replica {index}")[:4096]}
    if why.clusters:
        entry["clusters"] = [{"name": name, "reason": reason[:1024]}
                             for name, reason in why.clusters[:MAX_VERDICTS]]
    return entry


def _alternatives(p) -> dict[str, str]:
    """`<engine>/<request>` -> the firstAvailable alternative it got."""
    if p.engines is None:
        return {}
    return {f"{e}/{name}": choice.alternative
            for e, placed in sorted(p.engines.items()) for fit in placed.fit.members
            for name, choice in sorted(fit.choices.items()) if choice.alternative}


def _pools(p) -> dict[str, str]:
    if p.engines is not None:
        return {e: placed.pool.name for e, placed in sorted(p.engines.items())}
    return dict(sorted(p.existing.pools.items()))


def _group(unscheduled: Mapping[int, reasons.Shortfall]) -> str:
    """One sentence per distinct shortfall, naming the replicas that share it."""
    by_reason: dict[reasons.Shortfall, list[int]] = {}
    for index, why in sorted(unscheduled.items()):
        by_reason.setdefault(why, []).append(index)
    return "; ".join(
        why.message(f"replica {idx[0]}" if len(idx) == 1
                    else "replicas " + ", ".join(str(i) for i in idx))
        for why, idx in by_reason.items())
