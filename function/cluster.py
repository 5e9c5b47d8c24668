"""InferenceCluster status: per-pool capacity from the replicas placed on it.

The cluster composes nothing; the function reports `status.nodePools[]`
(nodes, usedNodes, freeNodes) so platform teams can read their fleet with
`kubectl get ic`, and marks the cluster not ready when the provider-kubernetes
ClusterProviderConfig it names does not exist, which keeps the scheduler from
placing new replicas on a cluster nothing can reach.
"""

from __future__ import annotations

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.contract.api import API_VERSION, KIND_MODEL_REPLICA, LABEL_CLUSTER, REQUIRE_REPLICAS
from function.contract.capacity import replica_usage
from function.contract.enums import ProviderConfigKind
from function.contract.models.inferencecluster import InferenceCluster
from function.contract.validation import dig, metadata_errors, model_errors
from function.runtime import requeue
from function.runtime.request import Request, desired_ready

PROVIDER_CONFIG = "provider-config"
PROVIDER_API_VERSION = "kubernetes.m.crossplane.io/v1alpha1"


def run(req: Request, rsp: fnv1.RunFunctionResponse) -> None:
    ic = req.composite
    errors = metadata_errors(ic, namespaced=False) + model_errors(InferenceCluster, ic)
    if errors:
        response.fatal(rsp, f"InferenceCluster {dig(ic, 'metadata').get('name')} is "
                       f"invalid: {'; '.join(errors)}")
        return
    name = ic["metadata"]["name"]
    spec = ic.get("spec") or {}
    pools = spec.get("nodePools") or []

    # Ask for the replicas placed here (every namespace) and the provider
    # config. Requirements are declared on every call so they stay stable.
    response.require_resources(rsp, REQUIRE_REPLICAS, API_VERSION, KIND_MODEL_REPLICA,
                               match_labels={LABEL_CLUSTER: name})
    ref = spec.get("providerConfigRef") or {}
    kind = ref.get("kind") or ProviderConfigKind.CLUSTER_PROVIDER_CONFIG.value
    if ref.get("name"):
        response.require_resources(rsp, PROVIDER_CONFIG, PROVIDER_API_VERSION, kind,
                                   match_name=ref["name"])
    if not req.resolved(REQUIRE_REPLICAS):
        return  # Crossplane calls again with the requirements resolved.

    used: dict[str, int] = {}
    for mr in req.required(REQUIRE_REPLICAS):
        mr_spec = dig(mr, "spec")
        if mr_spec.get("clusterName") != name:
            continue  # a forged label; the spec is what places a replica
        try:
            usage = replica_usage(mr_spec.get("engines") or [])
        except (TypeError, ValueError, AttributeError) as exc:
            # Skip only the bad object, and say so: its nodes go uncounted.
            meta = dig(mr, "metadata")
            response.warning(rsp, f"ModelReplica {meta.get('namespace')}/{meta.get('name')} "
                             f"is malformed and left out of the pool usage: {exc}")
            continue
        for pool, nodes in usage.items():
            used[pool] = used.get(pool, 0) + nodes

    status_pools = []
    for pool in pools:
        nodes = int(pool.get("nodes") or 0)
        in_use = used.get(pool.get("name"), 0)
        status_pools.append({"name": pool.get("name"), "nodes": nodes, "usedNodes": in_use,
                             "freeNodes": max(0, nodes - in_use)})
        if in_use > nodes:
            response.warning(rsp, f"pool {pool.get('name')!r} is overcommitted: {in_use} nodes "
                             f"used of {nodes}; the schedulers re-place the youngest replicas")
    resource.update(rsp.desired.composite, {"status": {
        "nodes": sum(p["nodes"] for p in status_pools),
        "freeNodes": sum(p["freeNodes"] for p in status_pools),
        "nodePools": status_pools,
    }})

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
