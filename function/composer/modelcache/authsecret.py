"""A cache's auth Secret on a remote cluster: observed there, never copied there.

The platform syncs the Secret to every workload cluster that stages the cache (External
Secrets, or its own tooling), in the cache's namespace under the same name. The cache
composes an observe-only provider-kubernetes `Object` per remote cluster
(`managementPolicies: [Observe]`) that reads it: the Object's spec names the Secret and
holds no data, and no `spec.references` resolves a control-plane Secret into it (which
provider-kubernetes v1.2.0 persists into the Object's spec). What the provider observes
lands in the Object's `status.atProvider.manifest`, data included unless it runs with
`--sanitize-secrets` (docs/install.md), as for any Object of a Secret.

Its readiness says whether the Secret is usable: a Hugging Face source's key must be in
it (a CEL query, evaluated by the provider on what it observed); a URI source's Secret
only has to exist. A Secret the provider cannot find leaves the Object `Synced=False`
("observe failed: external resource does not exist"): the cluster's entry says
`SecretMissing` and names the Secret, namespace and cluster. A missing Secret only holds
back a Job not created yet; nothing composed is removed for it.

Caches composed by earlier releases copied the Secret with an Object under `SECRET_KEY`.
That Object is first made observe-only (so deleting it never deletes the remote Secret
the running Job reads), then dropped, which also releases its finalizer on the control
plane's Secret. The copy stays on the cluster for the platform's sync to take over.
"""

from __future__ import annotations

import copy
import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from function.composer import kinds, keep, placement, readiness
from function.contract.records import Cluster

OBSERVE = ["Observe"]
AUTH_KEY = "auth"      # `{owner}-auth`: the observe-only Object
SECRET_KEY = "secret"  # `{owner}-secret`: an earlier release's copy, retired
# What crossplane-runtime says of an observe-only resource that does not exist.
NOT_FOUND = "external resource does not exist"
DOCS = "docs/caches.md"


class Found(enum.Enum):
    PRESENT = "present"
    CHECKING = "checking"   # not observed yet
    MISSING = "missing"
    NO_KEY = "no-key"
    UNREADABLE = "unreadable"


@dataclass(frozen=True)
class Presence:
    found: Found
    reason: str = ""
    message: str = ""

    @property
    def usable(self) -> bool:
        return self.found is Found.PRESENT


PRESENT = Presence(Found.PRESENT)


def observer(secret: tuple[str, str], ns: str, obj_name: str, owner: placement.Owner,
             cluster: Cluster) -> dict[str, Any]:
    """The observe-only Object `obj_name` of the Secret (name, key) in `ns` on `cluster`."""
    manifest = {**kinds.SECRET.header(), "metadata": {"name": secret[0], "namespace": ns}}
    obj = placement.wrap(manifest, obj_name, owner, cluster, policies=OBSERVE)
    if secret[1]:
        # Keys of a Secret are [-._a-zA-Z0-9]+; json.dumps quotes anything else safely
        # (CEL reads JSON's escapes), and such a key is never in a Secret anyway.
        obj["spec"]["readiness"] = {"policy": "DeriveFromCelQuery",
                                    "celQuery": f"has(object.data) && {json.dumps(secret[1])} "
                                                "in object.data"}
    kinds.record_role(obj, kinds.SECRET.role)
    return obj


def presence(observed: Mapping[str, Any] | None, secret: tuple[str, str], ns: str,
             cluster: str) -> Presence:
    """What the observe-only Object says of the Secret on its cluster."""
    where = f"Secret {secret[0]} in namespace {ns} on cluster {cluster}"
    if not observed:
        return Presence(Found.CHECKING, "CheckingSecret", f"checking that {where} exists")
    conds = readiness.conditions(observed)
    synced = conds.get("Synced") or {}
    said = str(synced.get("message") or synced.get("reason") or "")
    if synced.get("status") == "False":
        if NOT_FOUND in said:
            return Presence(Found.MISSING, "SecretMissing",
                            f"Secret {secret[0]} not found in namespace {ns} on cluster "
                            f"{cluster}: sync it there ({DOCS})")
        return Presence(Found.UNREADABLE, "SecretUnreadable",
                        f"cannot read {where}: {said or 'not synced'}")
    if (conds.get("Ready") or {}).get("status") == "True":
        return PRESENT
    if secret[1] and synced.get("status") == "True":
        return Presence(Found.NO_KEY, "SecretKeyMissing",
                        f"{where} has no key {secret[1]}: add it where the Secret is synced "
                        f"from ({DOCS})")
    return Presence(Found.CHECKING, "CheckingSecret", f"checking that {where} exists")


def retired(observed: Mapping[str, Any]) -> dict[str, Any] | None:
    """An earlier release's copying Object as desired now: observe-only first (its
    references kept, so that its deletion releases the control plane's Secret), then
    None (drop it) once it is observe-only."""
    out = copy.deepcopy(keep.as_desired(observed))
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return out  # not an Object we know: kept as it is
    if spec.get("managementPolicies") == OBSERVE:
        return None
    spec["managementPolicies"] = list(OBSERVE)
    manifest = (spec.get("forProvider") or {}).get("manifest")
    for field in ("data", "stringData"):  # what the provider resolved: never ours to send
        if isinstance(manifest, dict):
            manifest.pop(field, None)
    return out
