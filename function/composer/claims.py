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

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from crossplane.function import resource

from function.composer import kinds, naming
from function.composer.composed import Composed
from function.composer.model import Engine, Member, Replica


# A template's device requests as compared with an observed one: what the composer
# writes of each (name, class, count, selectors), so the API server's defaults never
# read as a change.
Shape = tuple[tuple[str, str, int, tuple[str, ...]], ...]


def shape(spec: Mapping[str, Any]) -> Shape | None:
    """The device requests of a template's `spec`, or None when they cannot be read."""
    try:
        requests = spec["spec"]["devices"]["requests"]
        return tuple((str(r["name"]), str(r["exactly"]["deviceClassName"]),
                      int(r["exactly"].get("count", 1)),
                      tuple(str(s["cel"]["expression"])
                            for s in r["exactly"].get("selectors") or []))
                     for r in requests)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def observed_shapes(observed: Mapping[str, Any]) -> dict[str, Shape | None]:
    """The device requests of every observed template (bare or in an Object), by key."""
    out = {}
    for key, obj in observed.items():
        spec = _template_spec(obj)
        if spec is not None:
            out[key] = shape(spec)
    return out


def template_key(base: str, wanted: Shape, seen: Mapping[str, Shape | None]) -> tuple[str, str]:
    """(key, name suffix) of a member's template: the observed one asking for `wanted`;
    else the plain key when none is observed; else a key and name suffix of its digest."""
    mine = {k: v for k, v in seen.items() if k == base or k.startswith(base + "-")}
    for k in sorted(mine):
        if mine[k] == wanted:
            return k, k[len(base) + 1:]
    if not mine:
        return base, ""
    digest = hashlib.sha256(json.dumps(wanted).encode()).hexdigest()[:8]
    return f"{base}-{digest}", digest


def claim_template(replica: Replica, engine: Engine, member: Member,
                   seen: Mapping[str, Shape | None] | None = None) -> Composed | None:
    """The member's template; `seen` the observed templates' requests by key."""
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
    spec = {"metadata": {"labels": dict(labels)}, "spec": {"devices": {"requests": requests}}}
    wanted = shape(spec)
    assert wanted is not None  # built just above
    key, suffix = template_key(naming.claim_template_key(engine, member), wanted, seen or {})
    manifest = {
        **kinds.RESOURCECLAIMTEMPLATE.header(),
        "metadata": {"name": naming.claim_template_name(replica, engine, member, suffix),
                     "namespace": replica.namespace, "labels": labels},
        "spec": spec,
    }
    return Composed(key, manifest)


def _template_spec(obj: Any) -> Mapping[str, Any] | None:
    """A ResourceClaimTemplate's spec, bare or wrapped in a provider-kubernetes Object."""
    if not isinstance(obj, Mapping):
        return None
    if obj.get("kind") == kinds.OBJECT.kind:
        obj = ((obj.get("spec") or {}).get("forProvider") or {}).get("manifest")
    if isinstance(obj, Mapping) and obj.get("kind") == kinds.RESOURCECLAIMTEMPLATE.kind \
            and isinstance(obj.get("spec"), Mapping):
        return obj["spec"]
    return None


def as_composed(serialized: bytes, observed: Mapping[str, Any] | None) -> bytes:
    """A composed object as it goes to Crossplane: a ResourceClaimTemplate that
    exists without `spec.metadata` (composed by an older version; the API server
    refuses any change to a template's spec) keeps it that way, bare or wrapped
    in a provider-kubernetes Object. Everything else is unchanged."""
    existing = _template_spec(observed)
    if existing is None or "metadata" in existing:
        return serialized
    struct = resource.structpb.Struct()
    struct.ParseFromString(serialized)
    desired = resource.struct_to_dict(struct)
    spec = _template_spec(desired)
    if not isinstance(spec, dict):
        return serialized
    spec.pop("metadata", None)
    return resource.dict_to_struct(desired).SerializeToString()
