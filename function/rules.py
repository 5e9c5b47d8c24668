"""The XRDs' CEL rules, checked again by the function.

Admission enforces these, but a ModelReplica may be edited by hand, an XRD may
be older than the function, and `crossplane render` does not run admission.
Each check returns messages worded like the XRD's, so a user sees the same
sentence whichever layer caught the mistake.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RESERVED_PREFIX = "modelplane.ai/"


def engine_errors(spec: Mapping[str, Any]) -> list[str]:
    """Rule violations in a template spec or ModelReplica spec (engines + serving)."""
    errors: list[str] = []
    engines = spec.get("engines") or []
    if not engines:
        return ["at least one engine is required"]
    mode = (spec.get("serving") or {}).get("mode") or "Unified"
    names = [e.get("name") for e in engines]
    if len(set(names)) != len(names):
        errors.append("engine names must be unique")
    phases = [e.get("phase") for e in engines]
    if mode == "PrefillDecode":
        if len(engines) != 2 or sorted(p or "" for p in phases) != ["Decode", "Prefill"]:
            errors.append("serving mode PrefillDecode needs exactly two engines, one with phase "
                          "Prefill and one with phase Decode")
    elif any(phases):
        errors.append("engine phase is only allowed under serving mode PrefillDecode")
    for engine in engines:
        errors += [f"engine {engine.get('name')!r}: {m}" for m in _engine(engine)]
    return errors


def _engine(engine: Mapping[str, Any]) -> list[str]:
    errors = []
    members = engine.get("members") or []
    roles = sorted(m.get("role") or "Standalone" for m in members)
    if roles not in (["Standalone"], ["Leader", "Worker"]):
        errors.append("members must be exactly one Standalone, or one Leader and one Worker")
    for m in members:
        is_worker = (m.get("role") or "Standalone") == "Worker"
        if is_worker != ("worker" in m and m["worker"] is not None):
            errors.append("worker.nodes is set on the Worker member, and only there")
        containers = ((m.get("template") or {}).get("spec") or {}).get("containers") or []
        if len(containers) != 1 or containers[0].get("name") != "engine":
            errors.append("the pod template needs exactly one container, named engine")
        for where, labels in _template_maps(m):
            if any(str(k).startswith(RESERVED_PREFIX) for k in labels):
                errors.append(f"{where} keys under {RESERVED_PREFIX} are reserved")
    if not any(((m.get("nodeSelector") or {}).get("devices")) for m in members):
        errors.append("at least one member of every engine must request devices in "
                      "nodeSelector.devices")
    return errors


def _template_maps(member: Mapping[str, Any]):
    meta = (member.get("template") or {}).get("metadata") or {}
    for key in ("labels", "annotations"):
        yield f"pod template {key}", meta.get(key) or {}


def template_metadata_errors(metadata: Mapping[str, Any]) -> list[str]:
    return [f"template {key} under {RESERVED_PREFIX} are reserved"
            for key in ("labels", "annotations")
            if any(str(k).startswith(RESERVED_PREFIX) for k in (metadata.get(key) or {}))]
