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
scheduler charges itself) from everyone else's (contract/allocated.py).
"""

from __future__ import annotations

from typing import Any

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
