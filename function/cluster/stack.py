"""The serving stack an InferenceCluster composes onto its cluster (spec.stack).

Per declared component (contract/stack.py's table):

* Managed: one provider-kubernetes Object per manifest hack/gen_stack.py
  rendered when this release was built (cluster/stackdata/), through the
  cluster's ClusterProviderConfig, in crossplane-system beside the inventory
  reporter's Objects. Install order is by tier: a tier's Objects are composed
  once every Object of the earlier tiers (of every component) is Ready, and an
  Object once composed stays composed, so a Ready that flickers never takes a
  controller away. A CRD's Object is Ready when the CRD is Established and
  serves the version the composer uses.
  CRDs are never deleted by the stack (no Delete in their management policies):
  deleting a CRD deletes every object of its kind on the cluster, whoever wrote
  them. Taking a component out of the stack leaves its CRDs where they are.
* External: nothing is installed; the stack observes the component's probe CRD
  (an observe-only Object on a remote cluster, a required resource on the
  control-plane cluster) and reports whether it serves the version used.

A Managed CRD of a kind the composer writes (HTTPRoute, InferencePool,
LeaderWorkerSet) is held by a Crossplane Usage per ModelReplica on the cluster,
which the replica composes itself (composer/usages.py), so the cluster's
composition does not grow with its replicas.
"""

from __future__ import annotations

import functools
import json
import pathlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from function.cluster import reporter, stackcontroller, stackenvoy
from function.contract.enums import StackMode
from function.contract.models.inferencecluster import StackController
from function.contract.records import Cluster
from function.contract.stack import (
    COMPONENTS,
    LABEL_COMPONENT,
    PURPOSE,
    Component,
    manifest_id,
    object_name,
)
from function.contract.validation import condition_of
from function.kit import structs
from function.kit.request import Request

DATA = pathlib.Path(__file__).resolve().parent / "stackdata"
CRD_API_VERSION = "apiextensions.k8s.io/v1"
REQUIRE_STACK = "stack-crds"  # the control-plane cluster's probe CRDs: "stack-crds/<field>"
# Everything but Delete (reporter._SHARED): what the stack's Objects may do. Deleting
# a CRD deletes every object of its kind; deleting a controller (or the webhooks it
# serves) stops every workload of its kind from being reconciled. The stack orphans
# both when a component leaves it: whoever takes over finds them running.
KEEP = ["Observe", "Create", "Update", "LateInitialize"]


@dataclass(frozen=True)
class Manifest:
    tier: int
    name: str
    manifest: Mapping[str, Any]


@dataclass(frozen=True)
class Rendered:
    """One component as this release was built: its version and what it installs."""

    field: str
    version: str
    objects: tuple[Manifest, ...]


@dataclass(frozen=True)
class Declared:
    component: Component
    mode: StackMode
    controller: StackController | None = None  # spec.stack.<field>.controller (stackcontroller.py)
    backend_api: bool = True  # spec.stack.envoyGateway.backendAPI (stackenvoy.py)

    @property
    def managed(self) -> bool:
        return self.mode == StackMode.MANAGED


@functools.cache
def rendered(field: str) -> Rendered:
    """The component's build-time data (cluster/stackdata/<field>.json)."""
    data = json.loads((DATA / f"{field}.json").read_text())
    return Rendered(field=field, version=data["version"],
                    objects=tuple(Manifest(o["tier"], o["name"], o["manifest"])
                                  for o in data["objects"]))


@functools.cache
def _manifest_struct(field: str, name: str) -> struct_pb2.Struct | None:
    """A rendered manifest (by its contract.stack.manifest_id) as a protobuf Struct,
    built once per process."""
    for m in rendered(field).objects:
        if m.name == name:
            s = struct_pb2.Struct()
            s.update(m.manifest)
            return s
    return None


def put(target: fnv1.Resource, obj: Mapping[str, Any]) -> None:
    """`resource.update(target, obj)`, a rendered CRD's manifest copied from its Struct
    built once (converting a full stack's manifests cost about 20 ms a call). Only a
    CRD's: the stack never changes one, where a controller's Deployment may carry the
    platform's settings."""
    manifest = obj["spec"]["forProvider"]["manifest"]
    field = obj["metadata"]["labels"].get(LABEL_COMPONENT, "")
    built = _manifest_struct(field, manifest_id(manifest)) \
        if field and manifest.get("kind") == "CustomResourceDefinition" \
        and obj["spec"].get("managementPolicies") != ["Observe"] else None
    if built is None:
        resource.update(target, dict(obj))
        return
    resource.update(target, {**obj, "spec": {**obj["spec"], "forProvider": {}}})
    target.resource.fields["spec"].struct_value.fields["forProvider"].struct_value \
        .fields["manifest"].struct_value.CopyFrom(built)


def declared(spec: Mapping[str, Any]) -> list[Declared] | None:
    """The components spec.stack declares, in install order; None without a stack."""
    stack = spec.get("stack")
    if not isinstance(stack, Mapping):
        return None
    return [Declared(c, StackMode(stack[c.field]["mode"]), stackcontroller.settings(stack[c.field]),
                     stackenvoy.backend_api(stack[c.field]))
            for c in COMPONENTS if isinstance(stack.get(c.field), Mapping)]


def observed_states(req: Request, read_back: frozenset[str] = frozenset()
                    ) -> dict[str, dict[str, Any]]:
    """The stack's observed composed resources by key, with only what the stack reads:
    their conditions, and the object a probe (or a key in `read_back`) observed. A
    Managed CRD's Object carries its manifest twice (spec and status, about 1 MB for a
    full stack): decoding all of it on every reconcile cost about 120 ms."""
    out: dict[str, dict[str, Any]] = {}
    for key, r in req.message.observed.resources.items():
        if not key.startswith("stack-"):
            continue
        fields = r.resource.fields
        status = fields["status"].struct_value.fields if "status" in fields else {}
        state: dict[str, Any] = {}
        if "conditions" in status:
            state["conditions"] = structs.value(status["conditions"])
        if (key.endswith("-probe") or key in read_back) and "atProvider" in status:
            state["atProvider"] = structs.value(status["atProvider"])
        out[key] = {"status": state}
    return out


def object_key(field: str, name: str) -> str:
    return f"stack-{field}-{name}"


def probe_key(field: str) -> str:
    return f"stack-{field}-probe"


ESTABLISHED = "object.status.conditions.exists(c, c.type == 'Established' && c.status == 'True')"
# A controller's Deployment: its current spec rolled out and Available.
AVAILABLE = ("object.status.observedGeneration == object.metadata.generation"
             " && object.status.conditions.exists(c, c.type == 'Available' && c.status == 'True')")
# A chart's Job (Envoy Gateway's certgen): run to completion.
COMPLETE = "object.status.conditions.exists(c, c.type == 'Complete' && c.status == 'True')"


def serves(component: Component, crd: str | None = None) -> str:
    """A CEL test on an observed CRD: Established, and, for the component's probe (the
    kind the composer writes), serving the version used. Its other CRDs need serve no
    such version (the Inference Extension's InferencePoolImport is v1alpha1 only)."""
    if crd is not None and crd != component.probe:
        return ESTABLISHED
    return (f"{ESTABLISHED}"
            f" && object.spec.versions.exists(v, v.name == '{component.probe_version}' && v.served)")


def is_ready(obj: Mapping[str, Any] | None) -> bool:
    """Whether an observed composed resource says Ready=True."""
    return (condition_of(obj, "Ready") or {}).get("status") == "True"


def readiness(component: Component, manifest: Mapping[str, Any]) -> dict[str, str]:
    """When an Object of the stack is Ready: a CRD when served (`serves`), a Deployment
    when rolled out and Available, a Job when Complete, anything else once it exists."""
    kind = manifest.get("kind")
    if kind == "CustomResourceDefinition":
        return {"policy": "DeriveFromCelQuery",
                "celQuery": serves(component, manifest["metadata"]["name"])}
    if kind == "Deployment":
        return {"policy": "DeriveFromCelQuery", "celQuery": AVAILABLE}
    if kind == "Job":
        return {"policy": "DeriveFromCelQuery", "celQuery": COMPLETE}
    return {"policy": "SuccessfulCreate"}


def stack_object(cluster: Cluster, field: str, manifest: Mapping[str, Any],
                 policies: list[str], ready_when: Mapping[str, str],
                 tag: str = PURPOSE) -> dict[str, Any]:
    """The Object carrying one of the stack's manifests onto the cluster: named after
    the manifest, labelled with its component (spec.stack.<field>), Ready per
    `ready_when` (an Object's spec.readiness)."""
    obj = reporter.wrap(cluster, tag, dict(manifest), policies, purpose=PURPOSE)
    obj["metadata"]["name"] = object_name(cluster.name, manifest_id(manifest), tag)
    obj["metadata"]["labels"][LABEL_COMPONENT] = field
    obj["spec"]["readiness"] = dict(ready_when)
    # With --enable-watches, Ready as soon as it is, where readiness reads the object;
    # the others need no cluster-wide list and watch of their kind (Secrets among them).
    obj["spec"]["watch"] = ready_when["policy"] != "SuccessfulCreate"
    return obj


def _object(cluster: Cluster, component: Component, manifest: Mapping[str, Any],
            policies: list[str], tag: str = PURPOSE) -> dict[str, Any]:
    return stack_object(cluster, component.field, manifest, policies,
                        readiness(component, manifest), tag)


def all_ready(objects: Mapping[str, Any], observed: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether every one of managed_objects' Objects is Ready: a tier is composed once
    the earlier ones are, so all of them Ready means every tier is there and Ready."""
    return all(is_ready(observed.get(k)) for k in objects)


def managed_objects(cluster: Cluster, stack: Sequence[Declared],
                    observed: Mapping[str, Mapping[str, Any]],
                    data: Mapping[str, Rendered] | None = None) -> dict[str, dict[str, Any]]:
    """The Objects of the Managed components, by key: a tier's once every earlier tier's
    Object is Ready (an Object already observed stays). `data` stands in for the
    build-time files (tests)."""
    per_tier: dict[int, list[tuple[Declared, Manifest]]] = {}
    for d in stack:
        if d.managed:
            found = data[d.component.field] if data is not None else rendered(d.component.field)
            for m in found.objects:
                per_tier.setdefault(m.tier, []).append((d, m))
    out: dict[str, dict[str, Any]] = {}
    earlier_ready = True
    for tier in sorted(per_tier):
        keys = []
        for d, m in per_tier[tier]:
            component, chart = d.component, d.component.chart
            manifest = stackcontroller.applied(m.manifest, d.controller, chart) \
                if d.controller is not None and chart is not None else m.manifest
            # Envoy Gateway's configuration (no other chart has its ConfigMap).
            manifest = stackenvoy.configured(manifest, d.backend_api)
            key = object_key(component.field, m.name)
            keys.append(key)
            if earlier_ready or key in observed:
                out[key] = _object(cluster, component, manifest, KEEP)
        earlier_ready = earlier_ready and all(is_ready(observed.get(k)) for k in keys)
    return out


def probe_objects(cluster: Cluster, stack: Sequence[Declared]) -> dict[str, dict[str, Any]]:
    """An observe-only Object of each External component's probe CRD (remote clusters)."""
    return {probe_key(d.component.field): _object(
        cluster, d.component,
        {"apiVersion": CRD_API_VERSION, "kind": "CustomResourceDefinition",
         "metadata": {"name": d.component.probe}}, ["Observe"], tag="probe")
        for d in stack if not d.managed}
