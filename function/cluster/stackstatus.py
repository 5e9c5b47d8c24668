"""What the stack reports: status.stack.components[] and the StackReady condition.

Per declared component, in install order:

* Managed: Installed when every Object the stack composes for it is Ready (a
  failed sync of a Ready one, such as a read refused while an API server restarts,
  changes nothing); Failed when one that is not Ready is not Synced either (the
  provider could not apply it: its message is passed on); otherwise Progressing
  (waiting on an earlier tier, or not Ready yet).
* External: Observed when its probe CRD is Established and serves the version
  the composer uses; Failed when the CRD is missing or serves other versions;
  Progressing until it is first observed (or while it is not Established).

StackReady is True when every component is Installed or Observed (a stack that
declares none is ready), else False with reason Failed (any failed) or
Progressing, and a message naming each component that is not ready. The
scheduler places no new replica on a cluster whose declared stack is not
ready (scheduler/filters.py: `stack`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from crossplane.function import resource

from function.cluster.stack import Declared, Rendered, is_ready, object_key, probe_key, rendered
from function.contract.enums import StackMode, StackPhase
from function.contract.stack import Component
from function.contract.validation import condition_of

CONDITION = "StackReady"
MAX_MESSAGE = 512        # status.stack.components[].message's maxLength
MAX_CONDITION = 1000
READY = (StackPhase.INSTALLED, StackPhase.OBSERVED)
NAMED_MAX = 3  # objects named in an Installing component's message


def entry(name: str, version: str, mode: StackMode, phase: StackPhase, reason: str,
          message: str) -> dict[str, Any]:
    """One status.stack.components entry, whatever its kind (a component, the Gateway
    stackgateway.py reports, the DRA driver stackdra.py reports)."""
    return {"name": name, "version": version, "mode": mode.value, "phase": phase.value,
            "reason": reason, "message": message[:MAX_MESSAGE]}


def _entry(d: Declared, version: str, phase: StackPhase, reason: str,
           message: str) -> dict[str, Any]:
    return entry(d.component.field, version, d.mode, phase, reason, message)


def judge_crd(component: Component, crd: Mapping[str, Any]) -> tuple[StackPhase, str, str]:
    """An External component's probe CRD, as observed."""
    established = (condition_of(crd, "Established") or {}).get("status") == "True"
    versions = [v for v in ((crd.get("spec") or {}).get("versions") or [])
                if isinstance(v, Mapping) and v.get("served")]
    served = sorted(str(v.get("name")) for v in versions)
    if component.probe_version not in served:
        return (StackPhase.FAILED, "VersionNotServed",
                f"{component.probe} serves {', '.join(served) or 'no version'}, not "
                f"{component.probe_version}: upgrade {component.title} on the cluster")
    if not established:
        return (StackPhase.PROGRESSING, "NotEstablished",
                f"{component.probe} is not Established yet")
    return StackPhase.OBSERVED, "Served", f"{component.probe} serves {component.probe_version}"


def managed(d: Declared, data: Rendered, composed: Mapping[str, Any],
            observed: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    keys = [object_key(d.component.field, m.name) for m in data.objects]
    ready = sum(is_ready(observed.get(k)) for k in keys)
    if ready == len(keys):
        # Ready says what is on the cluster; a failed sync of an object that is there
        # and Ready (an API server restarting refused a read, found on make cluster)
        # leaves the component installed.
        return _entry(d, data.version, StackPhase.INSTALLED, "Ready",
                      f"{ready} objects Ready")
    for key in keys:
        if is_ready(observed.get(key)):
            continue
        synced = condition_of(observed.get(key), "Synced")
        if synced is not None and synced.get("status") == "False":
            name = key.removeprefix(f"stack-{d.component.field}-")
            return _entry(d, data.version, StackPhase.FAILED, str(synced.get("reason") or
                                                                  "NotSynced"),
                          f"{name}: {synced.get('message') or 'not synced'}")
    waiting = sum(k not in composed for k in keys)
    if waiting:
        return _entry(d, data.version, StackPhase.PROGRESSING, "Waiting",
                      f"{waiting} of {len(keys)} objects wait for earlier ones to be Ready")
    behind = [m.name for m, k in zip(data.objects, keys, strict=True)
              if not is_ready(observed.get(k))]
    named = ", ".join(behind[:NAMED_MAX]) + (", ..." if len(behind) > NAMED_MAX else "")
    return _entry(d, data.version, StackPhase.PROGRESSING, "Installing",
                  f"{ready} of {len(keys)} objects Ready (not yet: {named})")


def external(d: Declared, version: str, crd: Mapping[str, Any] | None,
             probe: Mapping[str, Any] | None, remote: bool) -> dict[str, Any]:
    """`crd` as observed (None: not seen); `probe` the observe-only Object (remote)."""
    c = d.component
    if crd:
        return _entry(d, version, *judge_crd(c, crd))
    synced = condition_of(probe, "Synced")
    if remote and synced is not None and synced.get("status") == "False":
        return _entry(d, version, StackPhase.FAILED, "NotFound",
                      f"{c.probe} is not observed on the cluster ({synced.get('message')}): "
                      f"install {c.title} or mark it Managed")
    if not remote and crd is not None:  # resolved, and no such CRD
        return _entry(d, version, StackPhase.FAILED, "NotFound",
                      f"{c.probe} does not exist on the control-plane cluster: install "
                      f"{c.title} there")
    return _entry(d, version, StackPhase.PROGRESSING, "NotObservedYet",
                  f"{c.probe} is not observed yet")


def components(stack: Sequence[Declared], composed: Mapping[str, Any],
               observed: Mapping[str, Mapping[str, Any]],
               local_crds: Mapping[str, Mapping[str, Any] | None] | None,
               data: Mapping[str, Rendered] | None = None) -> list[dict[str, Any]]:
    """status.stack.components. `local_crds` (the control-plane cluster) maps a field to
    its probe CRD as required: {} when resolved to nothing, absent when unresolved;
    None on a remote cluster. `data` stands in for the build-time files (tests)."""
    out = []
    for d in stack:
        found = data[d.component.field] if data is not None else rendered(d.component.field)
        if d.managed:
            out.append(managed(d, found, composed, observed))
        elif local_crds is not None:
            out.append(external(d, found.version, local_crds.get(d.component.field),
                                None, remote=False))
        else:
            probe = observed.get(probe_key(d.component.field))
            crd = ((probe or {}).get("status") or {}).get("atProvider", {}).get("manifest")
            out.append(external(d, found.version, crd if isinstance(crd, Mapping) and crd
                                else None, probe, remote=True))
    return out


def condition(entries: Sequence[Mapping[str, Any]]) -> resource.Condition:
    behind = [e for e in entries if e["phase"] not in READY]
    if not behind:
        return resource.Condition(typ=CONDITION, status="True", reason="Ready",
                                  message=f"{len(entries)} components ready")
    failed = any(e["phase"] == StackPhase.FAILED for e in behind)
    message = "; ".join(f"{e['name']} {e['phase']}: {e['message']}" for e in behind)
    return resource.Condition(typ=CONDITION, status="False",
                              reason="Failed" if failed else "Progressing",
                              message=message[:MAX_CONDITION])
