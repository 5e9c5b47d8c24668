"""The replica composer: ModelReplica -> workloads and routing on its cluster.

The I/O around small builders, in the order they run:

0. `trust`: only a replica a ModelDeployment composed is composed; any other
   (written by hand) composes nothing new and keeps what exists.
1. `model`: the validated ModelReplica and its InferenceCluster (required by
   name, `spec.clusterName`) as records: pools' node taints, the gateway,
   `providerConfigRef`. `cache` remembers the cluster record and everything
   composed from the two (steps 2-4) across reconciles.
2. `backends`: each engine -> a Deployment or a LeaderWorkerSet, with a
   ResourceClaimTemplate per device-claiming member (`pods`, `claims`).
3. `routing`: the routing layer of the replica's serving mode and router
   (`function/contract/serving.py`) decorates the backends' output (Unified's default:
   a Service and an HTTPRoute); then every engine pod gets the cluster's pod
   security level (`podsecurity`).
4. `placement`: on a remote cluster, every object wrapped in a
   provider-kubernetes Object.
5. `kinds`, `readiness` and `status`: each composed resource's readiness
   (judged as its kind says), the replica's phase, conditions and endpoint,
   from the observed objects. Every object records its role (workload,
   route, support) in a label, so `keep` can read it back.

Never destructive (`keep`): until the InferenceCluster is resolved, or while
it is missing or malformed, every observed composed resource is kept as it is
and a condition says why. A malformed ModelReplica is a Fatal result, which
keeps everything too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.composer import (
    claims,
    keep,
    kinds,
    memo,
    naming,
    placement,
    podsecurity,
    status,
    trust,
    usages,
)
from function.composer.backends import compose_backends
from function.composer.composed import Composed, Role
from function.composer.modelcache import mounts
from function.composer.model import Replica, Unusable, parse_cluster, parse_replica
from function.composer.routing import LAYERS, Routing
from function.contract import cacheview, devicecel
from function.contract.api import (
    API_VERSION,
    KIND_INFERENCE_CLUSTER,
    KIND_MODEL_CACHE,
    KIND_MODEL_DEPLOYMENT,
    REQUIRE_CLUSTER,
    REQUIRE_MODEL_CACHE,
    REQUIRE_OWN_NAMESPACE,
    REQUIRE_OWNER,
)
from function.contract.enums import ReplicaPhase
from function.contract.records import Cluster
from function.kit import requeue
from function.kit.request import Request, desired_ready, namespace_labels, require_namespace


def compose_replica(req: Request, rsp: fnv1.RunFunctionResponse, mr: dict[str, Any]) -> None:
    """Compose a valid ModelReplica onto its cluster (handlers/modelreplica.py)."""
    replica = parse_replica(mr)
    observed = req.observed()
    # The composite as Crossplane sent it: the schema's pruning keeps no ownerReferences.
    problems = trust.untrusted(req.composite)
    if problems:
        not_scheduled(rsp, req.composite, mr, observed, problems)
        return
    # Declared on every call, so the requirement stays stable across calls; the
    # deployment is resolved with the cluster, in the same round.
    response.require_resources(rsp, REQUIRE_CLUSTER, API_VERSION, KIND_INFERENCE_CLUSTER,
                               match_name=replica.cluster)
    response.require_resources(rsp, REQUIRE_OWNER, API_VERSION, KIND_MODEL_DEPLOYMENT,
                               match_name=trust.owner_name(req.composite),
                               namespace=replica.namespace)
    # Its namespace's labels, for the cluster's spec.namespaceSelector: resolved with
    # the cluster, so required always (a stable requirement costs no extra round).
    require_namespace(rsp, REQUIRE_OWN_NAMESPACE, replica.namespace)
    if replica.cache is not None:
        response.require_resources(rsp, REQUIRE_MODEL_CACHE, API_VERSION, KIND_MODEL_CACHE,
                                   match_name=replica.cache.name, namespace=replica.namespace)

    bad = selector_errors(replica)
    if bad:
        # The API server would refuse a ResourceClaimTemplate whose CEL does
        # not compile, failing the whole apply: keep what exists instead.
        keep_everything(rsp, mr, observed, Unusable("InvalidSelector", "; ".join(bad)),
                        condition=SELECTORS_VALID)
        return
    try:
        cluster = memo.cluster(req, replica, parse_cluster)
    except Unusable as why:
        keep_everything(rsp, mr, observed, why)
        return
    # Resolved in the same round as the cluster.
    if not req.resolved(REQUIRE_OWNER):
        keep_everything(rsp, mr, observed, Unusable(
            "Resolving", f"waiting for Crossplane to resolve ModelDeployment "
            f"{trust.owner_name(req.composite)}"), condition=trust.SCHEDULED)
        return
    problems = trust.unplaced(req.composite, req.required(REQUIRE_OWNER))
    if problems:
        not_scheduled(rsp, req.composite, mr, observed, problems)
        requeue.soon(rsp)  # a replica just composed: its deployment's status comes next
        return
    response.set_conditions(rsp, resource.Condition(
        typ=trust.SCHEDULED, status="True", reason="Scheduled",
        message=f"placed by ModelDeployment {replica.deployment}"))
    refused = not_admitted(req, replica, cluster)
    if refused is not None:
        # Never destructive: what runs stays as it is (the scheduler keeps such a
        # replica placed too, like NoSchedule); nothing new or changed is applied.
        keep_everything(rsp, mr, observed, refused)
        requeue.soon(rsp)  # the Namespace and the cluster are required, not watched
        return
    held = cache_wait(req, replica)
    if held is not None and not any(kinds.role_of(o) == Role.WORKLOAD for o in observed.values()):
        # No engine runs yet: start none until the weights are staged here.
        keep_everything(rsp, mr, observed, held, condition=mounts.CACHE_READY,
                        phase=ReplicaPhase.LOADING)
        requeue.soon(rsp)  # the cache is required, not watched
        return

    seen = claims.observed_shapes(observed)
    placed = memo.composed((memo.replica_key(req), memo.cluster_key(cluster, replica),
                            tuple(sorted(seen.items()))),
                           lambda: compose(replica, cluster, seen))
    for note in placed.notes:
        response.warning(rsp, note)
    items = []
    for key, role, manifest in placed.objects:
        state = kinds.judge(observed.get(key))
        memo.write(rsp, key, claims.as_composed(manifest, observed.get(key)))
        rsp.desired.resources[key].ready = desired_ready(state.ready)
        items.append(status.Observed(key, role, state))
    # The serving stack's Usages: this replica holds the CRDs it needs on its cluster.
    for key, usage in usages.replica_usages(cluster, replica.namespace, replica.name,
                                            placed.composes, observed).items():
        resource.update(rsp.desired.resources[key], usage)
        rsp.desired.resources[key].ready = fnv1.READY_TRUE
    summary = status.summarize(items, not_routed=placed.not_routed)
    write_status(rsp, phase=summary.phase, endpoint=placed.endpoint,
                 conditions=summary.conditions)
    if summary.phase != ReplicaPhase.SERVING:
        # Crossplane watches what we compose, but a replica composes a dozen
        # objects whose creation and status updates trip its per-composite
        # watch circuit breaker (50 updates, then one event per 30 s for five
        # minutes): until the replica serves, look again soon regardless.
        requeue.soon(rsp)
    if replica.cache is not None:
        response.set_conditions(rsp, resource.Condition(
            typ=mounts.CACHE_READY, status="False" if held else "True",
            reason=held.reason if held else "CacheReady",
            message=f"{held.message}; the running engines are left alone" if held else
            f"ModelCache {replica.cache.name} is Ready on {replica.cluster}"))
    where = (f"remote, through {cluster.provider_config.kind} {cluster.provider_config.name}"
             if cluster.provider_config else "the control-plane cluster")
    response.set_conditions(rsp, resource.Condition(
        typ=status.CLUSTER_RESOLVED, status="True", reason="Resolved",
        message=f"InferenceCluster {cluster.name} ({where})"))


SELECTORS_VALID = "SelectorsValid"


def selector_errors(replica: Replica) -> list[str]:
    """Device selectors that do not compile, as the DRA CEL environment sees them."""
    errors = []
    for engine in replica.engines:
        for member in engine.members:
            for request in member.requests:
                for expr in request.selectors:
                    try:
                        devicecel.compile_selector(expr)
                    except devicecel.CelError as exc:
                        errors.append(f"engine {engine.name!r} request {request.name!r}: "
                                      f"invalid CEL selector {expr!r}: {exc}")
    return errors


@dataclass
class Placed:
    objects: list[Composed]  # as they go to Crossplane: wrapped for a remote cluster
    routing: Routing         # the routing layer's endpoint and verdict
    notes: list[str]         # warnings for the user
    composes: frozenset[tuple[str, str]]  # the API groups and kinds of the objects, unwrapped


def compose(replica: Replica, cluster: Cluster,
            seen: Mapping[str, claims.Shape | None] | None = None) -> Placed:
    """Every object of the replica, placed for its cluster; `seen` the observed claim
    templates' requests by key (a changed one gets a new name: claims.py)."""
    backends = compose_backends(replica, cluster, seen)
    if replica.cache is not None:
        mounts.mount(backends, replica)
    # Validation admits only the (mode, router) pairs that have a layer (the table's).
    routing = LAYERS[(replica.mode, replica.router)].route(replica, cluster, backends)
    # Last, so the containers every layer added (the routing sidecar) are covered.
    for pod in backends.pod_templates:
        podsecurity.harden(pod.template["spec"], cluster.pod_security)
    bare = backends.objects + routing.objects
    objects = placement.place(kinds.recorded(bare), naming.owner(replica), cluster)
    composes = frozenset((str(c.manifest["apiVersion"]).rpartition("/")[0], str(c.manifest["kind"]))
                         for c in bare)
    return Placed(objects, routing, backends.notes, composes)


def not_admitted(req: Request, replica: Replica, cluster: Cluster) -> Unusable | None:
    """Why the cluster's spec.namespaceSelector refuses the replica's namespace, or None."""
    if cluster.namespace_selector is None:
        return None
    if not req.resolved(REQUIRE_OWN_NAMESPACE):
        return Unusable("Resolving", f"waiting for Crossplane to resolve Namespace "
                        f"{replica.namespace}, which InferenceCluster {cluster.name}'s "
                        "spec.namespaceSelector judges")
    labels = namespace_labels(req, REQUIRE_OWN_NAMESPACE, replica.namespace)
    if cluster.admits(labels):
        return None
    why = "its Namespace was not found" if labels is None \
        else f"its labels do not match {cluster.namespace_selector}"
    return Unusable("NamespaceNotAdmitted",
                    f"InferenceCluster {cluster.name} does not admit namespace "
                    f"{replica.namespace} (spec.namespaceSelector): {why}; nothing new is "
                    "composed there")


def cache_wait(req: Request, replica: Replica) -> Unusable | None:
    """Why the replica's ModelCache is not Ready on its cluster, or None (no cache, or Ready)."""
    if replica.cache is None:
        return None
    if not req.resolved(REQUIRE_MODEL_CACHE):
        return Unusable("Resolving", f"waiting for Crossplane to resolve ModelCache "
                        f"{replica.cache.name}")
    found = req.required(REQUIRE_MODEL_CACHE)
    cache_ = cacheview.parse_cache(found[0]) if found else \
        cacheview.missing(replica.cache.name, replica.namespace)
    why = mounts.waiting(cache_, replica)
    return Unusable(*why) if why else None


def not_scheduled(rsp: fnv1.RunFunctionResponse, composite: Mapping[str, Any],
                  mr: dict[str, Any], observed: dict[str, dict[str, Any]],
                  problems: list[str]) -> None:
    """A replica the scheduler did not make (trust.py): nothing new is composed and
    what it composed while it passed is kept, with a False Scheduled condition."""
    meta = composite.get("metadata") or {}
    why = Unusable("NotScheduled", status.cap(
        f"ModelReplica {meta.get('namespace')}/{meta.get('name')} was not placed by the "
        f"scheduler: {'; '.join(problems)}. Only the ModelReplicas a ModelDeployment "
        "composes are composed: apply a ModelDeployment instead"))
    keep_everything(rsp, mr, observed, why, condition=trust.SCHEDULED)
    response.warning(rsp, why.message)
    if not observed:
        # Derived from nothing composed, Crossplane's Ready would be True.
        rsp.desired.composite.ready = desired_ready(False)


def keep_everything(rsp: fnv1.RunFunctionResponse, mr: dict[str, Any],
                    observed: dict[str, dict[str, Any]], why: Unusable,
                    condition: str = status.CLUSTER_RESOLVED, phase: str | None = None) -> None:
    """Keep every observed object; phase from what exists (or `phase`), endpoint as it was."""
    kept = keep.keep_observed(rsp, observed)
    summary = status.summarize(kept)
    previous = mr.get("status") or {}
    if phase is None:
        phase = summary.phase if kept else previous.get("phase", ReplicaPhase.PENDING)
    write_status(rsp, phase=phase,
                 endpoint=previous.get("endpoint"), conditions=summary.conditions)
    response.set_conditions(rsp, resource.Condition(
        typ=condition, status="False", reason=why.reason,
        message=f"{why.message}; {len(kept)} existing objects are kept as they are"))


def write_status(rsp: fnv1.RunFunctionResponse, *, phase: str, endpoint: str | None,
                 conditions: Sequence[resource.Condition]) -> None:
    out: dict[str, Any] = {"phase": phase}
    if endpoint:
        out["endpoint"] = endpoint
    resource.update(rsp.desired.composite, {"status": out})
    # Ready is left to Crossplane, derived from the readiness of every composed
    # resource (each is judged above), so its message names the unready ones.
    response.set_conditions(rsp, *conditions)


__all__ = ["run", "compose"]
