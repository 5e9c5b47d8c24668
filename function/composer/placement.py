"""Where the composed objects go: the control plane itself, or a remote cluster.

An InferenceCluster without `providerConfigRef` is the control-plane cluster:
the objects are composed as they are, in the ModelReplica's namespace.

With `providerConfigRef`, every object is wrapped in a provider-kubernetes
`Object` (kubernetes.m.crossplane.io/v1alpha1, in the ModelReplica's
namespace on the control plane) that applies it on the workload cluster, in
a namespace named like the ModelReplica's. Workloads and routes carry a CEL
readiness query (`kinds.cel_ready`), so an Object is Ready only when the
remote Deployment or LeaderWorkerSet is Available and the remote HTTPRoute
is accepted; the rest are ready once created. The Objects with a query also
ask provider-kubernetes to watch the remote object (`spec.watch`): with the
provider's `--enable-watches` (docs/install.md) a remote rollout reaches the
replica's status as it happens instead of a poll interval later; without the
flag the provider ignores the field and polls.

The remote namespace is composed too, labelled `pod-security.kubernetes.io/enforce`
with the cluster's pod security level (podsecurity.py), by every replica that lands there,
each through its own Object whose management policies leave out Delete:
deleting one replica (or moving it away) never deletes a namespace other
replicas share, and the namespace outlives its last replica (remove it by
hand when it is no longer wanted).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from function.composer import kinds, podsecurity
from function.composer.composed import Composed
from function.contract.records import Cluster

NAMESPACE_KEY = "namespace"
# Everything but Delete: create the namespace if missing, never remove it.
SHARED_POLICIES = ["Observe", "Create", "Update", "LateInitialize"]


@dataclass(frozen=True)
class Owner:
    """Whose objects are placed: a ModelReplica's, or a ModelCache's on one cluster."""

    namespace: str              # on the control plane, and its namesake on the cluster
    labels: Mapping[str, str]   # on every Object
    namespace_object: str       # the name of the Object that creates the remote namespace
    # The Object's name for an object: by default the object's own name.
    object_name: Callable[[Mapping[str, Any]], str] = lambda m: m["metadata"]["name"]


def place(composed: list[Composed], owner: Owner, cluster: Cluster,
          namespace_key: str = NAMESPACE_KEY) -> list[Composed]:
    if not cluster.remote:
        return composed
    namespace = {**kinds.NAMESPACE.header(), "metadata": {
        "name": owner.namespace, "labels": podsecurity.namespace_labels(cluster.pod_security)}}
    out = [Composed(namespace_key, wrap(namespace, owner.namespace_object, owner, cluster,
                                        policies=SHARED_POLICIES))]
    for c in composed:
        out.append(Composed(c.key, wrap(c.manifest, owner.object_name(c.manifest), owner,
                                        cluster), c.role))
    return kinds.recorded(out)


def wrap(manifest: dict[str, Any], name: str, owner: Owner, cluster: Cluster, *,
         policies: list[str] | None = None) -> dict[str, Any]:
    pc = cluster.provider_config
    assert pc is not None
    query = kinds.cel_ready(manifest)
    readiness = {"policy": "DeriveFromCelQuery", "celQuery": query} if query \
        else {"policy": "SuccessfulCreate"}
    spec: dict[str, Any] = {
        "forProvider": {"manifest": manifest},
        "providerConfigRef": {"name": pc.name, "kind": pc.kind},
        "readiness": readiness,
    }
    if query:
        # Readiness that follows the remote object's status: watch it.
        spec["watch"] = True
    if policies:
        spec["managementPolicies"] = list(policies)
    return {
        **kinds.OBJECT.header(),
        "metadata": {"name": name, "namespace": owner.namespace,
                     "labels": dict(owner.labels)},
        "spec": spec,
    }
