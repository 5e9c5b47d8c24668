"""The Usages a ModelReplica composes to hold its cluster's serving stack.

A replica on a remote cluster needs the CRDs of the kinds it composes there of
the stack's APIs (an HTTPRoute always; an InferencePool behind an endpoint
picker or for prefill/decode; a LeaderWorkerSet for a gang). Where the
cluster's stack installs one (Managed, cluster/stack.py), the replica composes
a Crossplane Usage in its own namespace, used `by` the replica, of the Object
carrying that CRD: the Object cannot be deleted, even with its InferenceCluster, while a
replica that needs the CRD exists. The replica composes them, not the cluster,
so the cluster's composition does not grow with its replicas, and a Usage goes
with its replica.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from function.contract.api import API_VERSION, GROUP, KIND_MODEL_REPLICA, LABEL_CLUSTER
from function.contract.names import tagged_label
from function.contract.records import Cluster
from function.contract.stack import (
    COMPONENTS,
    LABEL_COMPONENT,
    OBJECT_API_VERSION,
    PURPOSE,
    USAGE_API_VERSION,
    object_name,
    objects_namespace,
)


def replica_usages(cluster: Cluster, namespace: str, name: str,
                   composes: Collection[tuple[str, str]],
                   observed: Collection[str]) -> dict[str, dict[str, Any]]:
    """The Usages of the replica `namespace/name`, by composed-resource key: one of the
    Object carrying each Managed CRD of a kind it composes (`composes`: the API groups
    and kinds of its objects on the cluster), once the cluster's stack reports the
    component Installed; one composed stays (`observed`: the replica's observed keys),
    so a component taken out of the stack keeps its Object while the replica runs."""
    out: dict[str, dict[str, Any]] = {}
    for component in COMPONENTS:
        key = f"stack-usage-{component.field}"
        if key not in observed and not (
                cluster.remote and component.field in cluster.stack_installed
                and (component.probe_group, component.replica_kind) in composes):
            continue
        out[key] = {
            "apiVersion": USAGE_API_VERSION, "kind": "Usage",
            "metadata": {
                "name": tagged_label(cluster.name, name, component.field, tag="usage",
                                     identity=(cluster.name, namespace, name, component.field)),
                "namespace": namespace,
                "labels": {LABEL_CLUSTER: cluster.name, f"{GROUP}/purpose": PURPOSE,
                           LABEL_COMPONENT: component.field}},
            "spec": {
                "of": {"apiVersion": OBJECT_API_VERSION, "kind": "Object",
                       "resourceRef": {"name": object_name(cluster.name, component.probe),
                                       "namespace": objects_namespace()}},
                "by": {"apiVersion": API_VERSION, "kind": KIND_MODEL_REPLICA,
                       "resourceRef": {"name": name}},
                "reason": f"ModelReplica {namespace}/{name} runs on {cluster.name}, which "
                          f"needs {component.probe}",
                # A deletion tried while held goes through once the replica is gone.
                "replayDeletion": True,
            },
        }
    return out
