"""Selectors over their evaluation budget, remembered in the deployment's status.

The server remembers an expression whose evaluation ran past its budget for
its own life (contract/devicecel/sandbox.py). A restarted server would run
it once more, and a selector that exhausts a worker's memory costs a worker
each time; so the deployment's status keeps a digest of each such selector
(`status.selectorsOverBudget`), and the scheduler refuses a selector its own
status names before anything evaluates it. A deployment's status speaks only
for that deployment: another one with the same text is judged on its own.
An entry goes when its selector leaves the spec.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from function.contract import devicecel
from function.contract.validation import dig
from function.scheduler.matching import selectors

MAX_ENTRIES = 16   # the XRD's maxItems
MAX_REASON = 512   # the XRD's maxLength


def remembered(composite: Mapping[str, Any]) -> dict[str, str]:
    """Selector digest -> why, as the observed deployment's status lists them."""
    entries = dig(composite, "status").get("selectorsOverBudget")
    out: dict[str, str] = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, Mapping) and isinstance(entry.get("selector"), str):
            out[entry["selector"]] = str(entry.get("reason") or "it exceeded its budget before")
    return out


def record(before: Mapping[str, str], engines: Sequence[Mapping[str, Any]]) -> list[dict]:
    """The status entries: each selector of the spec that exceeded its budget,
    here or as the status already said (`before`, `remembered`), in spec order."""
    out: list[dict] = []
    seen: set[str] = set()
    for _, _, expr in selectors(engines):
        key = devicecel.digest(expr)
        if key in seen:
            continue
        seen.add(key)
        why = before.get(key) or devicecel.exceeded(expr)
        if why is not None and len(out) < MAX_ENTRIES:
            out.append({"selector": key, "reason": why[:MAX_REASON]})
    return out
