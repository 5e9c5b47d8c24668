"""Devices other claims hold: what a cluster's ResourceClaims have allocated, per node.

The scheduler charges every ModelReplica's pods itself; what it cannot know is
what the rest of the cluster already holds: pods this project did not compose,
with ResourceClaims of their own. Both readers of a cluster (the InferenceCluster
function for the control-plane cluster, the inventory reporter for a remote one)
reduce its ResourceClaims with `held` and `taken`, so a device counts the same
wherever it runs:

* A claim is the project's own when it carries the replica's or deployment's
  label (composer/claims.py puts them in every ResourceClaimTemplate's
  `spec.metadata`, which Kubernetes copies onto each claim it makes), or when it
  was made for a composed pod from a template composed before those labels
  (the pod's claim is named `devices` and the pod's name is one a composed
  Deployment or LeaderWorkerSet gives its pods). Everyone else's count. Labels
  are trusted as written: docs/security.md says what that means.
* Each of a claim's `status.allocation.devices.results[]` (driver, pool, device)
  is found in the cluster's node-local ResourceSlices, which name its node; a
  device no slice lists any more is placed by the allocation's node selector.
  A device counts once however many claims share it; admin access takes none.
* Only Ready, uncordoned nodes of a pool (label modelplane.ai/pool) are kept,
  with their NoSchedule/NoExecute taints: the InferenceCluster function, which
  knows each pool's own taints, keeps the nodes the pool counts.
* Devices are grouped into kinds as published.py groups a pool's devices
  (driver, capacity, and attributes less those that tell a node's devices
  apart), so a report stays small: a pool's kinds once, then per node a count
  per kind. The function matches each kind to the pool's devices.

Sizes are bounded: at most MAX_KINDS kinds and MAX_NODES nodes per pool (the
nodes holding most, by name on ties) and MAX_ENTRIES nodes in all; what is cut
is noted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from function.contract.api import LABEL_DEPLOYMENT, LABEL_POOL, LABEL_REPLICA, POD_CLAIM
from function.contract.inventory_report import NodeTaken, PoolTaken, Taken, ready, repelling
from function.contract.published import identity_attributes
from function.contract.validation import dig

MAX_KINDS = 16
MAX_NODES = 256     # per pool: status.nodePools[].takenDevices maxItems
MAX_ENTRIES = 1024  # nodes over all pools: a report and a status stay far below 1 MiB
MAX_NOTES = 8
# Kubernetes' annotation on a claim made from a template: the pod's name for it.
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
# The names a composed workload's pods get: a Deployment's `<name>-<hash>-<suffix>`,
# a LeaderWorkerSet's `<name>-<group>[-<worker>]`, both names ending in
# `-<digest>-deploy` or `-<digest>-lws` (composer/naming.py).
_COMPOSED_POD = re.compile(r"-[0-9a-f]{8}-(deploy-[a-z0-9]+-[a-z0-9]+|lws-[0-9]+(-[0-9]+)?)")

# One allocated device: (driver, resource pool, device, node its allocation selects or "").
Held = tuple[str, str, str, str]


def ours(claim: Mapping[str, Any]) -> bool:
    """Whether the project composed the claim (see the module's note)."""
    meta = dig(claim, "metadata")
    labels = dig(meta, "labels")
    if any(isinstance(labels.get(k), str) and labels[k] for k in (LABEL_REPLICA, LABEL_DEPLOYMENT)):
        return True
    if dig(meta, "annotations").get(POD_CLAIM_ANNOTATION) != POD_CLAIM:
        return False
    owners = meta.get("ownerReferences")
    return isinstance(owners, list) and any(
        isinstance(o, Mapping) and o.get("kind") == "Pod" and o.get("controller") is True
        and isinstance(o.get("name"), str) and _COMPOSED_POD.search(o["name"]) is not None
        for o in owners)


def held(claims: Iterable[Mapping[str, Any]]) -> list[Held]:
    """The devices other claims hold: a reducer a reporter can feed page by page."""
    out: list[Held] = []
    for claim in claims:
        allocation = dig(claim, "status", "allocation")
        results = dig(allocation, "devices").get("results")
        if not isinstance(results, list) or not results or ours(claim):
            continue
        node = _selected_node(allocation.get("nodeSelector"))
        for r in results:
            if not isinstance(r, Mapping) or r.get("adminAccess") is True:
                continue
            fields = (r.get("driver"), r.get("pool"), r.get("device"))
            if all(isinstance(f, str) and f for f in fields):
                out.append((*fields, node))  # type: ignore[arg-type]
    return out


def _selected_node(selector: Any) -> str:
    """The one node an allocation's node selector names (metadata.name In [node]), or ""."""
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, Mapping) else None
    for term in terms if isinstance(terms, list) else ():
        fields = term.get("matchFields") if isinstance(term, Mapping) else None
        for field in fields if isinstance(fields, list) else ():
            if isinstance(field, Mapping) and field.get("key") == "metadata.name" \
                    and field.get("operator") == "In" and isinstance(field.get("values"), list) \
                    and len(field["values"]) == 1 and isinstance(field["values"][0], str):
                return field["values"][0]
    return ""


def taken(nodes: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]],
          devices: Iterable[Held]) -> Taken:
    """Per pool, the devices `held` found on its Ready, uncordoned nodes."""
    pool_of: dict[str, tuple[str, tuple[str, ...]]] = {}  # node -> (pool, repelling taints)
    members: dict[str, list[str]] = {}
    for n in nodes:
        meta, node_spec = dig(n, "metadata"), dig(n, "spec")
        name, pool = meta.get("name"), dig(meta, "labels").get(LABEL_POOL)
        if not (isinstance(name, str) and isinstance(pool, str) and pool):
            continue
        members.setdefault(pool, []).append(name)
        if ready(dig(n, "status")) and node_spec.get("unschedulable") is not True:
            pool_of[name] = (pool, repelling(node_spec.get("taints")))
    # (driver, resource pool, device) -> (generation, node, device); node -> driver -> devices
    where: dict[tuple[str, str, str], tuple[int, str, Mapping[str, Any]]] = {}
    for s in slices:
        spec = dig(s, "spec")
        on, driver, rpool = spec.get("nodeName"), spec.get("driver"), dig(spec, "pool")
        generation = rpool.get("generation")
        if not (isinstance(on, str) and on and isinstance(driver, str)
                and isinstance(rpool.get("name"), str) and isinstance(generation, int)):
            continue
        for d in spec.get("devices") or []:
            if isinstance(d, Mapping) and isinstance(d.get("name"), str):
                key = (driver, rpool["name"], d["name"])
                if key not in where or where[key][0] < generation:
                    where[key] = (generation, on, d)
    by_node: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
    for (driver, _, _), (_, node, d) in where.items():
        by_node.setdefault(node, {}).setdefault(driver, []).append(d)

    found: dict[str, dict[str, dict[str, Mapping[str, Any]]]] = {}  # pool -> node -> key -> device
    for driver, resource_pool, device, selected in devices:
        at = where.get((driver, resource_pool, device))
        node, d = (at[1], at[2]) if at is not None else (selected, {"name": device})
        if node in pool_of:  # a Ready, uncordoned node of a pool
            found.setdefault(pool_of[node][0], {}).setdefault(node, {})[
                f"{driver}\x00{resource_pool}\x00{device}"] = {"driver": driver, **d}
    notes: list[str] = []
    out: dict[str, PoolTaken] = {}
    budget = MAX_ENTRIES
    for pool in sorted(found):
        result = _pool(pool, found[pool], members[pool], by_node, pool_of, notes, budget)
        budget -= len(result.nodes)
        out[pool] = result
    return Taken(out, tuple(notes[:MAX_NOTES]))


def _pool(pool: str, found: Mapping[str, Mapping[str, Mapping[str, Any]]],
          members: Sequence[str], by_node: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]],
          pool_of: Mapping[str, tuple[str, tuple[str, ...]]], notes: list[str],
          budget: int) -> PoolTaken:
    drivers = sorted({d["driver"] for held in found.values() for d in held.values()})
    identity = {driver: identity_attributes([by_node.get(n, {}).get(driver, ()) for n in members])
                for driver in drivers}
    kinds: dict[str, dict[str, Any]] = {}
    counts: dict[str, dict[str, int]] = {}  # node -> kind key -> devices
    for node, held in found.items():
        for d in held.values():
            kind = {"driver": d["driver"],
                    "attributes": {k: v for k, v in (d.get("attributes") or {}).items()
                                   if k not in identity[d["driver"]]},
                    "capacity": dict(d.get("capacity") or {})}
            key = json.dumps(kind, sort_keys=True)
            kinds.setdefault(key, kind)
            counts.setdefault(node, {})[key] = counts.get(node, {}).get(key, 0) + 1
    order = sorted(kinds)
    if len(order) > MAX_KINDS:
        notes.append(f"pool {pool}: other claims hold {len(order)} kinds of devices; "
                     f"counting the first {MAX_KINDS}")
        order = order[:MAX_KINDS]
    index = {key: i for i, key in enumerate(order)}
    entries = [NodeTaken(node, pool_of[node][1], tuple(sorted(
        (index[k], n) for k, n in counts[node].items() if k in index)))
        for node in counts]
    entries = [e for e in entries if e.devices]
    keep = min(MAX_NODES, max(0, budget))
    if len(entries) > keep:
        notes.append(f"pool {pool}: other claims hold devices on {len(entries)} nodes; "
                     f"reporting the {keep} that hold most, the rest count as free")
        entries = sorted(entries, key=lambda e: (-sum(n for _, n in e.devices), e.node))[:keep]
    return PoolTaken(tuple(kinds[k] for k in order), tuple(sorted(entries, key=lambda e: e.node)))
