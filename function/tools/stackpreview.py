"""What each previewed cluster's serving stack composes (spec.stack), offline.

`preview` renders every InferenceCluster of the fleet that declares a stack through
the real `crossplane composition render` (apis/inferencecluster/), as it renders
deployments, and lists per cluster and component the objects the stack composes:
the Objects carrying a Managed component's manifests (by kind), the probe of an
External one (an External Gateway's too), and the version. The stack composes a tier once the earlier ones are
Ready, so the cluster is rendered again with what it composed observed Ready, until
it composes nothing new: the table shows every tier (CRDs, then controllers, then
the Gateway spec.stack.gateway declares).
Nothing is applied, so the cluster itself observes nothing: every component would
start Progressing, and the scheduler places nothing on the cluster until its
StackReady condition turns True (the placement table above says so).
"""

from __future__ import annotations

import pathlib
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from function.contract.api import KIND_INFERENCE_CLUSTER
from function.contract.stack import COMPONENTS, DRA_DRIVER, GATEWAY, LABEL_COMPONENT, Tier
from function.tools import localrender

IC = localrender.ROOT / "apis" / "inferencecluster"
RESOURCE_NAME = "crossplane.io/composition-resource-name"


def render_stacks(tools: localrender.Tools, address: str, fleet: pathlib.Path,
                  tmp: pathlib.Path) -> dict[str, list[dict[str, Any]]]:
    """Each stack-declaring cluster of the fleet, rendered: its documents by name."""
    files = sorted(fleet.glob("*.yaml")) if fleet.is_dir() else [fleet]
    out = {}
    for doc in (d for f in files for d in yaml.safe_load_all(f.read_text()) if d):
        if doc.get("kind") != KIND_INFERENCE_CLUSTER or "stack" not in (doc.get("spec") or {}):
            continue
        name = doc["metadata"]["name"]
        path = tmp / f"stack-{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        observed: pathlib.Path | None = None
        seen: set[str] = set()
        for _ in range(len(Tier)):
            docs = localrender.render(tools, address, path, IC / "composition.yaml",
                                      xrd=IC / "definition.yaml", observed=observed)
            composed = _composed(docs)
            names = {_resource_name(d) for d in composed}
            out[name] = docs
            if names <= seen:
                break
            seen = names
            observed = tmp / f"stack-{name}-observed.yaml"
            observed.write_text(yaml.safe_dump_all([_ready(d) for d in composed]))
    return out


def _resource_name(doc: Mapping[str, Any]) -> str:
    return str(((doc.get("metadata") or {}).get("annotations") or {}).get(RESOURCE_NAME, ""))


def _ready(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A composed object as observed once its provider made it Ready."""
    return {**doc, "status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "Available"},
        {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}]}}


def _composed(docs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [d for d in docs if d.get("kind") not in (KIND_INFERENCE_CLUSTER, "Result")]


def _objects(composed: Sequence[Mapping[str, Any]], field: str) -> str:
    """What the stack composes for one component: its manifests' kinds, or its probe."""
    mine = [d for d in composed
            if ((d.get("metadata") or {}).get("labels") or {}).get(LABEL_COMPONENT) == field]
    kinds: Counter[str] = Counter()
    probes = []
    for d in mine:
        spec = d.get("spec") or {}
        manifest = (spec.get("forProvider") or {}).get("manifest") or {}
        if spec.get("managementPolicies") == ["Observe"]:
            probes.append(f"observes {manifest.get('kind')} "
                          f"{(manifest.get('metadata') or {}).get('name')}")
        else:
            kinds[str(manifest.get("kind"))] += 1
    said = [f"{n} × {k}" for k, n in sorted(kinds.items())] + probes
    return ", ".join(said) or "nothing"


def lines(rendered: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """The stack table: one row per cluster and declared component."""
    if not rendered:
        return []
    rows = [("CLUSTER", "COMPONENT", "MODE", "VERSION", "COMPOSES")]
    for name, docs in sorted(rendered.items()):
        ic = next((d for d in docs if d.get("kind") == KIND_INFERENCE_CLUSTER), {})
        entries = ((ic.get("status") or {}).get("stack") or {}).get("components") or []
        composed = _composed(docs)
        by_name = {e.get("name"): e for e in entries}
        declared = (ic.get("spec") or {}).get("stack") or {}
        for field in (*(c.field for c in COMPONENTS), DRA_DRIVER.field, GATEWAY.field):
            if field not in declared:
                continue
            entry = by_name.get(field) or {}
            rows.append((name, field, str(declared[field].get("mode")),
                         str(entry.get("version", "")),
                         "nothing: observed with the cluster's nodes"
                         if field == DRA_DRIVER.field else _objects(composed, field)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    table = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    return ["", "", "Serving stack (spec.stack), as each cluster composes it:", *table]


def documents(rendered: Mapping[str, Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every object the stacks compose, cluster by cluster (for -o yaml)."""
    return [d for _, docs in sorted(rendered.items()) for d in docs
            if d.get("kind") not in (KIND_INFERENCE_CLUSTER, "Result")]
