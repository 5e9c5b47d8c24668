"""kube-scheduler style explanations: `0/4 clusters fit replica 2: 2 ..., 1 ...`.

A reason is a verb phrase with `{is}`/`{has}`/`{does}` placeholders so it reads
right for one cluster or many ("1 is tainted", "2 are tainted").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

_VERBS = {1: {"is": "is", "has": "has", "does": "does"},
          2: {"is": "are", "has": "have", "does": "do"}}


def _verbs(reason: str, count: int) -> str:
    # Not str.format: a reason quotes names and taints, which may hold braces.
    for placeholder, verb in _VERBS[1 if count == 1 else 2].items():
        reason = reason.replace("{" + placeholder + "}", verb)
    return reason


def phrase(reason: str, count: int) -> str:
    return f"{count} " + _verbs(reason, count)


@dataclass(frozen=True)
class Shortfall:
    """Why a replica has no cluster: per-cluster reasons, counted."""

    total: int      # clusters considered
    reasons: str    # "2 have no pool matching engine "decode", 1 is tainted (...)"
    prefix: str = ""  # context, e.g. the drain that displaced it
    # (cluster, reason) per cluster, by name: who said what. Not part of the
    # identity: replicas whose summaries read alike share one sentence.
    clusters: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def message(self, what: str) -> str:
        body = f"0/{self.total} clusters fit {what}: {self.reasons}"
        return f"{self.prefix}; {body}" if self.prefix else body


def summarize(verdicts: Iterable[tuple[str, str]], total: int) -> Shortfall:
    """(cluster, reason) pairs counted by reason, most common first, ties alphabetically."""
    verdicts = sorted(verdicts)
    counts = Counter(reason for _, reason in verdicts)
    parts = [phrase(r, n) for r, n in sorted(counts.items(), key=lambda rn: (-rn[1], rn[0]))]
    return Shortfall(total, ", ".join(parts) if parts else "no InferenceCluster matched",
                     clusters=tuple((name, plain(reason)) for name, reason in verdicts))


def plain(reason: str) -> str:
    """A reason about one cluster, without the count."""
    return _verbs(reason, 1)
