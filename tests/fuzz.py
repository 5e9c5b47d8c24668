"""Hypothesis strategies for arbitrary RunFunctionRequests of every kind, and the check.

Requests start from the real examples and are bent: subtrees replaced by
arbitrary JSON (wrong types, huge numbers, unicode, 63+ character names),
keys deleted, lists truncated, whole documents replaced by noise. The
property (`check`) is the contract of RunFunction under bad input: it never
raises, never hides an exception behind its last-resort guard, and answers
either Fatal with a message or a desired state whose every object validates.
"""

from __future__ import annotations

import copy
import datetime
import os
from typing import Any

from builders import EXAMPLES, load, request
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import strategies as st
from schemas import Schemas

import function.cluster as cluster_fn
from function.cluster.reporter import REPORT
from function.composer.modelcache import REQUIRE_SECRET
from function.contract import inventory_report
from function.contract.api import (
    REQUIRE_CLUSTER,
    REQUIRE_OWNER,
    REQUIRE_CLUSTERS,
    REQUIRE_DEPLOYMENTS,
    REQUIRE_ENDPOINTS,
    REQUIRE_FRONT_DOOR,
    REQUIRE_MODEL_CACHE,
    REQUIRE_NAMESPACES,
    REQUIRE_NODES,
    REQUIRE_QUOTA_CLUSTERS,
    REQUIRE_QUOTAS,
    REQUIRE_REPLICAS,
)
from function.kit import structs
from function.runtime import fn
from function.tools import localrender
from function.kit.request import Request

KINDS = os.environ.get("FUZZ_KINDS",
                       "ModelDeployment,ModelReplica,InferenceCluster,ModelCache,"
                       "InferenceQuota,ModelService,ModelEndpoint").split(",")
FLEET = load(EXAMPLES / "fleet")
CACHES = [d for d in load(EXAMPLES / "caches") if d["kind"] == "ModelCache"]
DEPLOYMENTS = load(EXAMPLES / "deployments") + [
    d for d in load(EXAMPLES / "caches") if d["kind"] == "ModelDeployment"]
REPLICAS = load(EXAMPLES / "replicas")
QUOTAS = load(EXAMPLES / "quotas")
SERVICES = [*load(EXAMPLES / "services" / "llama.yaml"),
            *load(EXAMPLES / "services" / "llama-rules.yaml")]
ENDPOINTS = load(EXAMPLES / "services" / "endpoints.yaml")
NAMESPACES = [{"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "ml-team", "labels": {"org": "research"}}}]
CLOCK = datetime.datetime(2026, 11, 22, 12, 0, tzinfo=datetime.UTC)
NODES = [{"apiVersion": "v1", "kind": "Node",
          "metadata": {"name": "n0", "labels": {"modelplane.ai/pool": pool}},
          "spec": {"unschedulable": cordoned, "taints": [
              {"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
          "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
         for pool in ("l4", "h100-8x", "cpu") for cordoned in (False, True)]
REPORTS = [{"apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "Object",
            "metadata": {"name": "r", "namespace": "crossplane-system"},
            "status": {"atProvider": {"manifest": {"data": {"inventory.json": inventory_report.render(
                inventory_report.summarize(NODES), CLOCK)}}}}}]
SECRETS = [{"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "hf-token", "namespace": "ml-team"}}]

json_scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=80),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=60, max_size=300),
    st.sampled_from(["", "Standalone", "Leader", "Worker", "PrefillDecode", "Decode", "DRA",
                     "Synthetic", "NoExecute", "8000", "--port", "100Gi", "1e3", "ﾟ∀ﾟ"]),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, prefix + (i,))
    return out


def _apply(doc: Any, path: tuple, op: str, value: Any) -> Any:
    if not path:
        return value if op == "replace" else doc
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    last = path[-1]
    if op == "replace":
        parent[last] = value
    elif op == "delete":
        del parent[last]
    elif op == "truncate" and isinstance(parent[last], (list, str)):
        parent[last] = parent[last][: len(parent[last]) // 2]
    elif op == "duplicate" and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[last]))
    return doc


@st.composite
def bent(draw, docs: list[dict]) -> dict:
    """One of `docs`, bent by a few mutations (or, rarely, pure noise)."""
    if draw(st.integers(0, 19)) == 0:
        noise = draw(json_values)
        return noise if isinstance(noise, dict) else {"value": noise}
    doc = copy.deepcopy(draw(st.sampled_from(docs)))
    for _ in range(draw(st.integers(0, 4))):
        paths = _paths(doc)
        path = paths[draw(st.integers(0, len(paths) - 1))]
        op = draw(st.sampled_from(["replace", "replace", "delete", "truncate", "duplicate"]))
        doc = _apply(doc, path, op, draw(json_values))
        if not isinstance(doc, dict):
            doc = {"value": doc}
    return doc


@st.composite
def stored(draw, docs: list[dict]) -> dict:
    """A resource as the API server stores it: any spec, but valid metadata.

    Admission guarantees names and labels of stored objects, so observed and
    required resources keep the example's metadata; their specs may still be
    anything (an older or newer schema, a hand edit).
    """
    doc = draw(bent(docs))
    base = draw(st.sampled_from(docs))
    doc["apiVersion"], doc["kind"] = base["apiVersion"], base["kind"]
    doc["metadata"] = copy.deepcopy(base["metadata"])
    if not isinstance(doc.get("spec"), dict):
        doc["spec"] = {}  # the structural schema makes spec an object
    return doc


@st.composite
def waiting(draw) -> dict:
    """Another ModelDeployment, bent, with a status saying how many replicas found a cluster."""
    md = draw(bent(DEPLOYMENTS))
    if draw(st.booleans()):
        md["status"] = {"replicas": {"scheduled": draw(st.integers(-1, 4))}}
    return md


@st.composite
def requests(draw) -> fnv1.RunFunctionRequest:
    kind = draw(st.sampled_from(KINDS))
    required: dict[str, list[dict]] = {}
    observed: dict[str, dict] = {}
    if kind == "ModelDeployment":
        xr = draw(bent(DEPLOYMENTS))
        tspec = ((xr.get("spec") or {}).get("template") or {}) if isinstance(
            xr.get("spec"), dict) else {}
        if isinstance(tspec, dict) and isinstance(tspec.get("spec"), dict) and draw(st.booleans()):
            tspec["spec"]["placement"] = {"strategy": "Pack"}  # reads other deployments
        if draw(st.booleans()):
            required[REQUIRE_CLUSTERS] = draw(st.lists(stored(FLEET), max_size=4))
            required[REQUIRE_REPLICAS] = draw(st.lists(stored(REPLICAS), max_size=3))
            required[REQUIRE_MODEL_CACHE] = draw(st.lists(stored(CACHES), max_size=1))
            # Under Pack, every ModelDeployment: some short of capacity (room.py).
            required[REQUIRE_DEPLOYMENTS] = draw(st.lists(waiting(), max_size=3))
            # Quotas, and what a quota-bound deployment also reads.
            required[REQUIRE_QUOTAS] = draw(st.lists(stored(QUOTAS), max_size=2))
            required[REQUIRE_QUOTA_CLUSTERS] = draw(st.lists(stored(FLEET), max_size=4))
            required[REQUIRE_NAMESPACES] = NAMESPACES
        for i, mr in enumerate(draw(st.lists(stored(REPLICAS), max_size=2))):
            observed[f"replica-{i}"] = mr
    elif kind == "ModelReplica":
        xr = draw(bent(REPLICAS))
        if draw(st.booleans()) and isinstance(xr.get("spec"), dict):
            xr["spec"]["modelCacheRef"] = {"name": "qwen3-8b"}
        if draw(st.booleans()):
            required[REQUIRE_CLUSTER] = draw(st.lists(stored(FLEET), max_size=2))
            if isinstance(xr.get("metadata"), dict):
                required[REQUIRE_OWNER] = draw(st.lists(
                    st.just(localrender.placing_deployment(xr)), max_size=1))
            required[REQUIRE_MODEL_CACHE] = draw(st.lists(stored(CACHES), max_size=1))
    elif kind == "InferenceQuota":
        xr = draw(bent(QUOTAS))
        if draw(st.booleans()):
            required[REQUIRE_CLUSTERS] = draw(st.lists(stored(FLEET), max_size=4))
            required[REQUIRE_REPLICAS] = draw(st.lists(stored(REPLICAS), max_size=3))
            required[REQUIRE_NAMESPACES] = NAMESPACES
    elif kind == "ModelCache":
        xr = draw(bent(CACHES))
        if draw(st.booleans()):
            required[REQUIRE_CLUSTERS] = draw(st.lists(stored(FLEET), max_size=4))
            required[REQUIRE_REPLICAS] = draw(st.lists(stored(REPLICAS), max_size=3))
            required[REQUIRE_SECRET] = draw(st.lists(st.sampled_from(SECRETS), max_size=1))
    elif kind == "ModelEndpoint":
        xr = draw(bent(ENDPOINTS))
    elif kind == "ModelService":
        xr = draw(bent(SERVICES))
        if draw(st.booleans()):
            required[REQUIRE_FRONT_DOOR] = draw(st.lists(stored(FLEET), max_size=2))
            required[REQUIRE_CLUSTERS] = draw(st.lists(stored(FLEET), max_size=4))
            for name in ("primary-0", "primary-1", "fallback-0", "rule-0-primary-0",
                         "rule-0-fallback-0", "rule-1-primary-0"):
                required[f"{REQUIRE_ENDPOINTS}/{name}"] = draw(
                    st.lists(stored(ENDPOINTS), max_size=3))
    else:
        xr = draw(bent(FLEET))
        if draw(st.booleans()):
            required[REQUIRE_REPLICAS] = draw(st.lists(stored(REPLICAS), max_size=3))
        # What the cluster observed: its Nodes (the control-plane cluster) and
        # the inventory reporter's report (a remote one), bent like the rest.
        pools = [p.get("name") for p in ((xr.get("spec") or {}) if isinstance(
            xr.get("spec"), dict) else {}).get("nodePools") or [] if isinstance(p, dict)]
        for pool in pools[:3]:
            if isinstance(pool, str) and draw(st.booleans()):
                required[f"{REQUIRE_NODES}/{pool}"] = draw(st.lists(bent(NODES), max_size=3))
        if draw(st.booleans()):
            observed[REPORT] = draw(bent(REPORTS))
    if draw(st.integers(0, 9)):  # mostly keep the identity, so handlers are reached
        xr.setdefault("apiVersion", "modelplane.ai/v1alpha1")
        xr.setdefault("kind", kind)
    try:
        return request(xr, required=required, observed=observed)
    except (ValueError, TypeError):
        # Not representable as a protobuf Struct (e.g. an int beyond a double):
        # Crossplane could never send it; send the unbent example instead.
        return request({"apiVersion": "modelplane.ai/v1alpha1", "kind": kind})


_schemas: Schemas | None = None


def _kept_as_is(req: fnv1.RunFunctionRequest, key: str, desired: fnv1.Resource) -> bool:
    if key not in req.observed.resources:
        return False
    # Compared as the function reads them (nulls pruned, as the API server does).
    seen = structs.to_dict(req.observed.resources[key].resource)
    want = structs.to_dict(desired.resource)
    return want.get("spec") == seen.get("spec")


def check(req: fnv1.RunFunctionRequest) -> str:
    """The fuzz property. Returns 'fatal' or 'desired' for counting."""
    global _schemas
    _schemas = _schemas or Schemas()
    # The one clock (an InferenceCluster's staleness) stands still, so both
    # answers below are compared for the same input.
    real_now, cluster_fn.now = cluster_fn.now, lambda: CLOCK
    try:
        rsp = fn.run_function(req)
        # The server reads requests from their bytes (the scheduler's with its
        # required resources left serialized): it must answer exactly the same.
        from_bytes = fn.run_serialized(req.SerializeToString())
    finally:
        cluster_fn.now = real_now
    assert from_bytes.SerializeToString(deterministic=True) == \
        rsp.SerializeToString(deterministic=True), "run_serialized differs from run_function"
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    if any(m.startswith("internal error") for m in fatal):
        # Run the handler again without the guard so the failure shows its traceback.
        _, kind = fn.composite_type(req)
        fn.HANDLERS[kind](Request(req), fnv1.RunFunctionResponse())
        raise AssertionError(fatal)
    if fatal:
        assert all(m.strip() for m in fatal)
        return "fatal"
    errors = []
    for key, r in rsp.desired.resources.items():
        if _kept_as_is(req, key, r):
            continue  # "keep what exists": an observed object echoed verbatim
        errors += _schemas.errors(resource.struct_to_dict(r.resource), key)
    composite = resource.struct_to_dict(rsp.desired.composite.resource)
    if composite.get("status"):
        xr = resource.struct_to_dict(req.observed.composite.resource)
        probe = {"apiVersion": xr.get("apiVersion"), "kind": xr.get("kind"),
                 "spec": {}, "status": composite["status"]}
        errors += [e for e in _schemas.errors(probe, "composite status")
                   if ": status" in e]
    assert not errors, errors
    return "desired"
