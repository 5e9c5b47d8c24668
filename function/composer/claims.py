"""A member's DRA device requests -> one ResourceClaimTemplate (resource.k8s.io/v1).

Each pod of the member gets its own ResourceClaim from the template, so a
request's `count` is per pod, as the API promises. Every request becomes one
`devices.requests[]` entry asking for exactly `count` devices of the
DeviceClass the scheduler matched on the pool, with the user's CEL selectors:
the same expressions the scheduler evaluated, now evaluated by the DRA
allocator on the node. Synthetic devices constrain placement only and are
never claimed; a member with no DRA request gets no template.

The template's `spec.metadata.labels` are the replica's labels: Kubernetes
copies them onto every ResourceClaim it makes from the template, and that is
how a cluster's observed allocations tell this project's claims (which the
scheduler charges itself) from everyone else's (contract/allocated.py). A
template's spec is immutable, so one composed before the labels existed is
left as it is (`as_composed`): changing it would fail on the API server, and
its claims are recognized by the pods that own them instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossplane.function import resource

from function.composer import kinds, naming
from function.composer.composed import Composed
from function.composer.model import Engine, Member, Replica


def claim_template(replica: Replica, engine: Engine, member: Member) -> Composed | None:
    if not member.claims:
        return None
    requests = []
    for r in member.claims:
        exactly: dict[str, Any] = {"deviceClassName": r.device_class,
                                   "allocationMode": "ExactCount", "count": r.count}
        if r.selectors:
            exactly["selectors"] = [{"cel": {"expression": s}} for s in r.selectors]
        requests.append({"name": r.name, "exactly": exactly})
    labels = naming.object_labels(replica)
    manifest = {
        **kinds.RESOURCECLAIMTEMPLATE.header(),
        "metadata": {"name": naming.claim_template_name(replica, engine, member),
                     "namespace": replica.namespace, "labels": labels},
        "spec": {"metadata": {"labels": dict(labels)},
                 "spec": {"devices": {"requests": requests}}},
    }
    return Composed(naming.claim_template_key(engine, member), manifest)


def as_composed(serialized: bytes, observed: Mapping[str, Any] | None) -> bytes:
    """A composed object as it goes to Crossplane: a ResourceClaimTemplate that
    exists without `spec.metadata` (composed by an older version; the API server
    refuses any change to a template's spec) keeps it that way, bare or wrapped
    in a provider-kubernetes Object. Everything else is unchanged."""
    def template(obj: Any) -> Any:
        if not isinstance(obj, Mapping):
            return None
        if obj.get("kind") == kinds.OBJECT.kind:
            obj = ((obj.get("spec") or {}).get("forProvider") or {}).get("manifest")
        if isinstance(obj, Mapping) and obj.get("kind") == kinds.RESOURCECLAIMTEMPLATE.kind \
                and isinstance(obj.get("spec"), Mapping):
            return obj["spec"]
        return None

    existing = template(observed)
    if existing is None or "metadata" in existing:
        return serialized
    struct = resource.structpb.Struct()
    struct.ParseFromString(serialized)
    desired = resource.struct_to_dict(struct)
    spec = template(desired)
    if spec is None:
        return serialized
    spec.pop("metadata", None)
    return resource.dict_to_struct(desired).SerializeToString()
