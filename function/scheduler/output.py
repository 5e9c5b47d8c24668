"""What the scheduler emits: ModelReplica manifests and the deployment status."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from function.contract.api import (
    API_VERSION,
    KIND_MODEL_REPLICA,
    LABEL_CLUSTER,
    LABEL_DEPLOYMENT,
    LABEL_MODEL_CACHE,
    LABEL_REPLICA_INDEX,
)
from function.contract.names import unique_label
from function.scheduler.filters import EnginePlacement
from function.scheduler.matching import MemberFit
from function.scheduler.plan import Placement


def replica_name(deployment: str, cluster: str, index: int) -> str:
    """Unique per (namespace, deployment, cluster, index); a DNS label <= 63.

    Readable (`<deployment>-<cluster>-<index>-<digest>`), and the digest keeps
    two deployments of one namespace apart even when their names and
    cluster names read alike once joined by dashes.
    """
    return unique_label(deployment, cluster, index)


def replica_manifest(md: Mapping[str, Any], p: Placement,
                     shared: dict[tuple[int, int], tuple[Any, Any, list]] | None = None
                     ) -> dict[str, Any]:
    """The desired ModelReplica for one placement. `shared`, kept for one
    response, lets replicas whose members got the same fit (the matcher's one
    per engine and pool shape) share one list of resolved device requests, so
    structs.update converts it once."""
    meta = md.get("metadata") or {}
    template = (md.get("spec") or {}).get("template") or {}
    tmeta, tspec = template.get("metadata") or {}, template.get("spec") or {}
    if p.engines is None:
        assert p.existing is not None, "a Placement without engines holds the replica it keeps"
        return echo(p.existing.manifest)
    engines = p.engines
    labels = dict(sorted((tmeta.get("labels") or {}).items()))
    labels.update({LABEL_DEPLOYMENT: meta.get("name", ""), LABEL_CLUSTER: p.cluster,
                   LABEL_REPLICA_INDEX: str(p.index)})
    if tspec.get("modelCacheRef"):
        # The cache function finds the replicas that mount it by this label.
        labels[LABEL_MODEL_CACHE] = tspec["modelCacheRef"]["name"]
    metadata: dict[str, Any] = {"name": replica_name(meta.get("name", ""), p.cluster, p.index),
                                "labels": labels}
    if meta.get("namespace"):
        metadata["namespace"] = meta["namespace"]
    if tmeta.get("annotations"):
        metadata["annotations"] = dict(sorted(tmeta["annotations"].items()))
    spec: dict[str, Any] = {"clusterName": p.cluster}
    if tspec.get("serving"):
        spec["serving"] = tspec["serving"]
    if tspec.get("modelCacheRef"):
        spec["modelCacheRef"] = tspec["modelCacheRef"]
    spec["engines"] = [_engine(e, engines, {} if shared is None else shared)
                       for e in tspec.get("engines") or []]
    return {"apiVersion": API_VERSION, "kind": KIND_MODEL_REPLICA, "metadata": metadata, "spec": spec}


def _engine(engine: Mapping[str, Any], engines: Mapping[str, EnginePlacement],
            shared: dict[tuple[int, int], tuple[Any, Any, list]]) -> dict[str, Any]:
    placed = engines[engine["name"]]
    # Shallow copies: the deployment's dicts are read-only here (they are
    # converted to protobuf right after), so every replica can share them.
    out = {k: v for k, v in engine.items() if k != "members"}
    out["members"] = []
    for member, fit in zip(engine.get("members") or [], placed.fit.members):
        m = dict(member)
        m["nodePoolName"] = placed.pool.name
        # By identity: the objects are kept in the entry, so an id is not reused.
        hit = shared.get((id(member), id(fit)))
        if hit is None or hit[0] is not member or hit[1] is not fit:
            hit = (member, fit, _device_requests(member, fit))
            shared[(id(member), id(fit))] = hit
        m["deviceRequests"] = hit[2]
        out["members"].append(m)
    return out


def _device_requests(member: Mapping[str, Any], fit: MemberFit) -> list[dict[str, Any]]:
    """A member's device requests as its fit resolved them."""
    resolved = []
    for req in (member.get("nodeSelector") or {}).get("devices") or []:
        choice = fit.choices[req["name"]]
        r = {"name": req["name"], "claim": choice.device.claim, "count": choice.count}
        if choice.device.device_class:
            r["deviceClassName"] = choice.device.device_class
        if choice.selectors:
            r["selectors"] = list(choice.selectors)
        if choice.alternative:
            r["alternative"] = choice.alternative  # the firstAvailable alternative chosen
        resolved.append(r)
    return resolved


def echo(observed: Mapping[str, Any]) -> dict[str, Any]:
    """An observed ModelReplica as desired state: identity, labels, annotations
    (the template's, which the scheduler sets) and spec only."""
    return {**echo_object(observed, ("annotations",)),
            "apiVersion": API_VERSION, "kind": KIND_MODEL_REPLICA}


def echo_object(observed: Mapping[str, Any], extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """Any observed object as desired state, unchanged: identity, labels, the
    `extra` metadata fields and spec."""
    meta = observed.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    keep = {k: copy.deepcopy(meta[k]) for k in ("name", "namespace", "labels", *extra)
            if meta.get(k)}
    return {"apiVersion": observed.get("apiVersion", ""), "kind": observed.get("kind", ""),
            "metadata": keep, "spec": copy.deepcopy(observed.get("spec") or {})}
