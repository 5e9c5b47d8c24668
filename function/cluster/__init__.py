"""InferenceCluster status: per-pool capacity, observed and used.

The function reports `status.nodePools[]` so platform teams can read their
fleet with `kubectl get ic`, and the scheduler counts what it reports:

* the nodes each pool has now (observe.py): observed Ready and schedulable
  nodes, never more than declared, while the observation counts, else the
  declared `nodes`, with the CapacityObserved condition saying which and why.
  A remote cluster is observed through the inventory reporter composed onto
  it (reporter.py); the control-plane cluster's Nodes are read directly;
* the devices the ModelReplicas placed on each pool take, node by node
  (contract/nodes.py packs their pods as the scheduler's ledger does), and
  what is free: per device kind, and the nodes nothing holds;
* the devices other claims (ResourceClaims this project did not compose)
  hold on each pool's counted nodes (taken.py), while the observation counts.

It marks the cluster not ready when the provider-kubernetes
ClusterProviderConfig it names does not exist, which keeps the scheduler
from placing new replicas on a cluster nothing can reach.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.cluster import (
    monitoring,
    observe,
    reporter,
    stack,
    stackdra,
    stackgateway,
    stackstatus,
    taken,
)
from function.contract.api import (
    API_VERSION,
    DRA_API_VERSION,
    KIND_MODEL_REPLICA,
    LABEL_CLUSTER,
    LABEL_POOL,
    REQUIRE_CLAIMS,
    REQUIRE_DEVICE_CLASSES,
    REQUIRE_NODES,
    REQUIRE_REPLICAS,
    REQUIRE_SLICES,
)
from function.contract.capacity import merged, replica_usage
from function.contract.nodes import Bins, packed
from function.contract.enums import InventorySource, ProviderConfigKind
from function.contract.inventory_report import Observation
from function.contract.models.inferencecluster import Monitoring
from function.contract.records import Cluster, parse_cluster, pool_taken
from function.contract.stack import GATEWAY, OBJECT_API_VERSION
from function.contract.validation import dig
from function.kit import requeue
from function.kit.request import Request, desired_ready

PROVIDER_CONFIG = "provider-config"
STALE_AFTER_DEFAULT = 300
DEFAULT_TTL_SECONDS = 60  # the SDK's response TTL: how often Crossplane calls again


FREE_DEVICES_MAX = 1024  # status.freeDevices' maxLength


def device_status(bins: Bins) -> list[dict[str, Any]]:
    """status.nodePools[].devices: each claimable kind, total, used, free and the
    most free on one node."""
    free = bins.free_devices()
    out = []
    for i, device in enumerate(bins.pool.devices):
        per_node = bins.cap[i]
        if not per_node:
            continue  # synthetic: never claimed
        total = per_node * bins.nodes
        out.append({"name": device.name, "perNode": per_node, "total": total,
                    "used": max(0, total - free[i]), "free": free[i],
                    "largestFree": max(0, bins.largest_free(i))})
    return out


def now() -> datetime.datetime:
    """The clock (tests set it): only staleness reads it."""
    return datetime.datetime.now(datetime.UTC)


def declared(ic: Mapping[str, Any]) -> Cluster:
    """The cluster as declared: the observed counts in its status are this
    function's output, not its input (records.parse_cluster applies them)."""
    return parse_cluster({k: v for k, v in ic.items() if k != "status"})


def status(req: Request, rsp: fnv1.RunFunctionResponse, ic: dict[str, Any],
           cluster: Cluster) -> None:
    """Observe and report a valid InferenceCluster's pools (handlers/inferencecluster.py);
    `cluster` is its declared record."""
    pools = cluster.pools
    name = cluster.name
    spec = ic.get("spec") or {}
    inventory = spec.get("inventory") or {}
    observed = inventory.get("source", InventorySource.OBSERVED) == InventorySource.OBSERVED
    stale_after = int(inventory.get("staleAfterSeconds") or STALE_AFTER_DEFAULT)
    ref = spec.get("providerConfigRef") or {}
    kind = ref.get("kind") or ProviderConfigKind.CLUSTER_PROVIDER_CONFIG.value
    # A remote cluster reports through the reporter composed onto it, which only a
    # ClusterProviderConfig can reach (reporter.py).
    reporting = observed and cluster.remote and kind == ProviderConfigKind.CLUSTER_PROVIDER_CONFIG

    # Ask for the replicas placed here (every namespace), the provider config
    # and, for the control-plane cluster, its Nodes per pool. Requirements are
    # declared on every call so they stay stable.
    response.require_resources(rsp, REQUIRE_REPLICAS, API_VERSION, KIND_MODEL_REPLICA,
                               match_labels={LABEL_CLUSTER: name})
    if ref.get("name"):
        response.require_resources(rsp, PROVIDER_CONFIG, OBJECT_API_VERSION, kind,
                                   match_name=ref["name"])
    if observed and not cluster.remote:
        for pool in pools:
            response.require_resources(rsp, f"{REQUIRE_NODES}/{pool.name}", "v1", "Node",
                                       match_labels={LABEL_POOL: pool.name})
        # Every slice and class: a slice names its node, not its pool.
        response.require_resources(rsp, REQUIRE_SLICES, DRA_API_VERSION, "ResourceSlice")
        response.require_resources(rsp, REQUIRE_DEVICE_CLASSES, DRA_API_VERSION, "DeviceClass")
        # Every claim, every namespace: what they hold is what pods can no longer have.
        response.require_resources(rsp, REQUIRE_CLAIMS, DRA_API_VERSION, "ResourceClaim")
    composed = dict(reporter.objects(cluster)) if reporting else {}
    pod_monitor = Monitoring.model_validate(spec.get("monitoring") or {}).podMonitor
    if pod_monitor is not None:
        composed.update(monitoring.objects(cluster, pod_monitor))
    # The serving stack, only when declared (a cluster without one composes, requires
    # and reports nothing more than before).
    components = stack.declared(spec)
    gateway = stackgateway.declared(spec, cluster, components)
    seen = stack.observed_states(req, stackgateway.READ_BACK) if components is not None else {}
    if components is not None:
        if cluster.remote:
            installing = stack.managed_objects(cluster, components, seen)
            composed.update(installing)
            composed.update(stack.probe_objects(cluster, components))
            if gateway is not None:
                composed.update(stackgateway.objects(
                    cluster, gateway, stack.all_ready(installing, seen), seen))
        else:
            for d in components:  # External only here (stack.spec_errors)
                response.require_resources(
                    rsp, f"{stack.REQUIRE_STACK}/{d.component.field}", stack.CRD_API_VERSION,
                    "CustomResourceDefinition", match_name=d.component.probe)
            if gateway is not None:
                response.require_resources(
                    rsp, stackgateway.REQUIRE, GATEWAY.api_version, GATEWAY.kind,
                    match_name=gateway.gateway.name, namespace=gateway.gateway.namespace)
    for key, obj in composed.items():
        if key.startswith("stack-"):
            stack.put(rsp.desired.resources[key], obj)
        else:
            resource.update(rsp.desired.resources[key], obj)
        # The reporter's, the PodMonitor's and the stack's health never show in the
        # cluster's readiness: an unready cluster takes no new replicas (the stack's
        # has its own condition, StackReady).
        rsp.desired.resources[key].ready = fnv1.READY_TRUE
    if not req.resolved(REQUIRE_REPLICAS):
        return  # Crossplane calls again with the requirements resolved.

    clock = now()
    observation: Observation | str | None
    if not observed:
        observation = None
    elif not cluster.remote:
        wanted = [f"{REQUIRE_NODES}/{p.name}" for p in pools]
        if all(req.resolved(w) for w in (*wanted, REQUIRE_SLICES, REQUIRE_DEVICE_CLASSES,
                                         REQUIRE_CLAIMS)):
            nodes = [n for w in wanted for n in req.required(w)]
            observation = observe.local(nodes, pools, dig(ic, "status"), clock,
                                        req.required(REQUIRE_SLICES),
                                        req.required(REQUIRE_DEVICE_CLASSES),
                                        req.required(REQUIRE_CLAIMS))
        else:
            observation = "the cluster's Nodes are not read yet"
    elif not reporting:
        observation = ("the inventory reporter needs a ClusterProviderConfig; a namespaced "
                       "ProviderConfig cannot be reached from the cluster-scoped "
                       "InferenceCluster's Objects")
    else:
        observation = observe.remote(req.observed().get(reporter.REPORT))
    verdict = observe.judge(pools, observation, clock, stale_after, live=not cluster.remote)

    holdings = []
    for mr in req.required(REQUIRE_REPLICAS):
        mr_spec = dig(mr, "spec")
        if mr_spec.get("clusterName") != name:
            continue  # a forged label; the spec is what places a replica
        try:
            usage = replica_usage(mr_spec.get("engines") or [])
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            # Skip only the bad object, and say so: its devices go uncounted.
            meta = dig(mr, "metadata")
            response.warning(rsp, f"ModelReplica {meta.get('namespace')}/{meta.get('name')} "
                             f"is malformed and left out of the pool usage: {exc}")
            continue
        holdings.append(usage)
    used = merged(holdings)

    devices, notes = observe.devices(pools, observation, dig(ic, "status"))
    # What others hold, while the observation counts (else the declared view: nothing).
    held: dict[str, list[dict[str, Any]]] = {}
    held_notes: list[str] = []
    if verdict.status == "True" and isinstance(observation, Observation) \
            and observation.taken is not None:
        counted = {p.name: [d.spec for d in p.devices] if p.declares_devices
                   else devices.get(p.name, []) for p in pools}
        held, held_notes = taken.entries(pools, counted, observation.taken)
    status_pools = []
    summary = []
    by_name = {p.name: p for p in pools}
    for count in verdict.pools:
        pool = dataclasses.replace(by_name[count.name], nodes=count.counted)
        others = pool_taken(pool, held.get(count.name, ()),
                            count.counted if count.schedulable is None else count.schedulable)
        bins = packed(dataclasses.replace(pool, taken=others), used.get(count.name) or {})
        in_use = bins.busy_nodes() + sum(bins.over.values())
        entry = {"name": count.name, "nodes": count.counted, "declaredNodes": count.declared,
                 "usedNodes": in_use, "freeNodes": max(0, count.counted - in_use)}
        kinds = device_status(bins)
        if kinds:
            entry["devices"] = kinds
            summary += [f"{count.name}: {k['free']}/{k['total']} {k['name']}" for k in kinds]
        if count.ready is not None:
            entry.update(readyNodes=count.ready, schedulableNodes=count.schedulable,
                         observedAt=verdict.observed_at)
        if count.name in devices:
            entry["publishedDevices"] = devices[count.name]
        if count.name in held:
            entry["takenDevices"] = held[count.name]
        status_pools.append(entry)
        if bins.overcommitted():
            response.warning(rsp, f"pool {count.name!r} is overcommitted: "
                             f"{sum(bins.over.values())} pods fit on none of its "
                             f"{count.counted} nodes; the schedulers re-place the youngest "
                             "replicas")
    status: dict[str, Any] = {
        "nodes": sum(p["nodes"] for p in status_pools),
        "freeNodes": sum(p["freeNodes"] for p in status_pools),
        "freeDevices": ", ".join(summary)[:FREE_DEVICES_MAX],
        "nodePools": status_pools,
    }
    if components is not None:
        dra = stackdra.entry(cluster.pools, observation) if stackdra.declared(spec) else None
        status["stack"] = {"components": report_stack(req, rsp, cluster, components,
                                                      gateway, composed, seen, dra)}
    # One write: the SDK's update replaces a top-level key, so a second write of
    # `status` would drop the first's fields.
    resource.update(rsp.desired.composite, {"status": status})
    message = verdict.message
    for what, said in (("published devices", notes), ("taken devices", held_notes)):
        if said:
            message += f"; {what}: {'; '.join(said)}"
    response.set_conditions(rsp, resource.Condition(
        typ=observe.CONDITION, status=verdict.status, reason=verdict.reason,
        message=message[:observe.MAX_MESSAGE]))
    if reporting and stale_after < 2 * DEFAULT_TTL_SECONDS:
        # Look again before a report can go stale unnoticed for long.
        rsp.meta.ttl.FromTimedelta(datetime.timedelta(seconds=stale_after // 2))
    if stack_behind(rsp):
        # A stack installing is followed closely: its Objects' events trip the
        # cluster's watch circuit breaker (a dozen CRDs created at once), after which
        # Crossplane drops them, and the scheduler waits for StackReady (found on
        # make cluster: 74 s from applying the fleet to every stack ready).
        requeue.soon(rsp)

    reachable = not ref.get("name") or not req.resolved(PROVIDER_CONFIG) \
        or bool(req.required(PROVIDER_CONFIG))
    rsp.desired.composite.ready = desired_ready(reachable)
    if not reachable:
        requeue.soon(rsp)  # Crossplane does not watch the config for us
        response.set_conditions(rsp, resource.Condition(
            typ="Reachable", status="False", reason="ProviderConfigMissing",
            message=f"{kind} {ref['name']!r} does not exist; create it so "
                    "provider-kubernetes can reach this cluster"))
    else:
        response.set_conditions(rsp, resource.Condition(
            typ="Reachable", status="True", reason="ProviderConfigFound" if ref.get("name")
            else "LocalCluster"))


def stack_behind(rsp: fnv1.RunFunctionResponse) -> bool:
    """Whether the response says the declared stack is not ready yet (StackReady not True)."""
    return any(c.type == stackstatus.CONDITION and c.status != fnv1.STATUS_CONDITION_TRUE
               for c in rsp.conditions)


def report_stack(req: Request, rsp: fnv1.RunFunctionResponse, cluster: Cluster,
                 components: list[stack.Declared], gateway: stackgateway.Settings | None,
                 composed: Mapping[str, Any], seen: Mapping[str, dict[str, Any]],
                 dra: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The StackReady condition (stack.py, stackstatus.py; `dra` the DRA driver's entry,
    stackdra.py); returns the status per component (status.stack.components)."""
    local: dict[str, dict[str, Any]] | None = None
    if not cluster.remote:
        local = {}
        for d in components:
            name = f"{stack.REQUIRE_STACK}/{d.component.field}"
            if req.resolved(name):
                found = [c for c in req.required(name)
                         if dig(c, "metadata").get("name") == d.component.probe]
                local[d.component.field] = found[0] if found else {}
    entries = stackstatus.components(components, composed, seen, local)
    if dra is not None:
        entries.append(dra)
    if gateway is not None:
        entries.append(stackgateway.remote_entry(gateway, composed, seen) if cluster.remote
                       else stackgateway.local_entry(gateway, _required_gateway(req, gateway)))
    response.set_conditions(rsp, stackstatus.condition(entries))
    return entries


def _required_gateway(req: Request, gateway: stackgateway.Settings) -> dict[str, Any] | None:
    """The control-plane cluster's Gateway as required: {} when it does not exist, None
    until the requirement is resolved."""
    if not req.resolved(stackgateway.REQUIRE):
        return None
    found = [g for g in req.required(stackgateway.REQUIRE)
             if dig(g, "metadata").get("name") == gateway.gateway.name
             and dig(g, "metadata").get("namespace") == gateway.gateway.namespace]
    return found[0] if found else {}
