"""The ModelEndpoint of each serving replica: what a ModelService routes to.

The scheduler emits one per ModelReplica that is Serving with an endpoint,
and withdraws it the moment the replica is not (a drained, moved, failed or
deleted replica leaves every fleet route on the next reconcile). The
endpoint names the replica's cluster gateway, not the replica's path on it,
and the replica (`spec.replica`): the ModelService's route sends the Host
`<replica>.<namespace>.replica.modelplane.internal` (contract/api.py), which
selects the replica there (composer/routing/gateway.py), so every replica of
the fleet is reached at the same path and one route can split traffic across
them by weight (Envoy rewrites the path per route rule, never per weighted
backend). Its `healthPath` is the engine's readiness path, which the front
door's Envoy checks through the cluster gateway.

It carries the replica's labels (the template's, plus modelplane.ai/deployment
and modelplane.ai/cluster), which a ModelService's selectors match.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.contract.api import API_VERSION, ENGINE_HEALTH_PATH, KIND_MODEL_ENDPOINT
from function.contract.endpoints import Invalid, parse_url
from function.contract.enums import ReplicaPhase
from function.contract.validation import dig
from function.kit.request import desired_ready


def key(replica_key: str) -> str:
    """The endpoint's composed-resource key, from its replica's."""
    return f"endpoint-{replica_key}"


def manifest(mr: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ModelEndpoint of an observed ModelReplica, or None while it is not serving."""
    status = dig(mr, "status")
    meta = dig(mr, "metadata")
    name, namespace = meta.get("name"), meta.get("namespace")
    endpoint = status.get("endpoint")
    if status.get("phase") != ReplicaPhase.SERVING or not isinstance(endpoint, str) \
            or not isinstance(name, str) or not isinstance(namespace, str):
        return None
    # The replica's endpoint is its cluster gateway's address plus its own prefix;
    # the gateway must be a URL a ModelService accepts (its own parser says).
    gateway = endpoint.removesuffix(f"/{namespace}/{name}")
    if gateway == endpoint:
        return None
    try:
        parse_url(gateway)
    except Invalid:
        return None
    labels = meta.get("labels")
    return {
        "apiVersion": API_VERSION, "kind": KIND_MODEL_ENDPOINT,
        "metadata": {"name": name, "namespace": namespace,
                     "labels": dict(sorted(labels.items())) if isinstance(labels, Mapping)
                     else {}},
        "spec": {"url": gateway, "rewritePath": "/", "replica": name,
                 "healthPath": ENGINE_HEALTH_PATH},
    }


def emit(rsp: fnv1.RunFunctionResponse, replicas: Mapping[str, Mapping[str, Any]]) -> None:
    """Desire the endpoint of every serving replica among `replicas` (by composed key).

    Each is Ready as desired: it exists only while its replica serves, so it
    never holds the deployment's readiness back."""
    for replica_key, mr in sorted(replicas.items()):
        m = manifest(mr)
        if m is not None:
            resource.update(rsp.desired.resources[key(replica_key)], m)
            rsp.desired.resources[key(replica_key)].ready = desired_ready(True)
