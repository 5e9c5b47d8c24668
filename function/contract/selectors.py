"""Kubernetes label selectors (metav1.LabelSelector): matchLabels and matchExpressions.

An InferenceCluster's spec.namespaceSelector says which namespaces may place
replicas on it, read by both stages: the scheduler's `namespace` filter and
the composer. One frozen record and one parser, the rules the XRD states
checked again here (a cluster is read unvalidated at fleet scale, and a
selector that cannot be read must make its cluster malformed, never admit).

Semantics are Kubernetes' (apimachinery labels.Selector): every matchLabels pair
and every expression must hold; In needs the key with one of the values, NotIn
holds when the key is absent or its value is none of them, Exists and
DoesNotExist look at the key alone; an empty selector selects everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from function.contract.enums import LabelSelectorOperator as Op

OPERATORS = tuple(Op)
WITH_VALUES = (Op.IN, Op.NOT_IN)
MAX_LABELS = 16
MAX_EXPRESSIONS = 16
MAX_VALUES = 16


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # one of OPERATORS
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == Op.EXISTS:
            return self.key in labels
        if self.operator == Op.DOES_NOT_EXIST:
            return self.key not in labels
        if self.operator == Op.IN:
            return self.key in labels and labels[self.key] in self.values
        return labels.get(self.key) not in self.values  # NotIn

    def __str__(self) -> str:
        if self.operator in WITH_VALUES:
            return f"{self.key} {self.operator.lower()} ({','.join(sorted(self.values))})"
        return self.key if self.operator == Op.EXISTS else f"!{self.key}"


@dataclass(frozen=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return (all(labels.get(k) == v for k, v in self.match_labels)
                and all(r.matches(labels) for r in self.expressions))

    def __str__(self) -> str:
        """As kubectl's `-l` writes it (`team=a,env in (prod)`); "" selects everything."""
        return ",".join([f"{k}={v}" for k, v in self.match_labels]
                        + [str(r) for r in self.expressions])


class SelectorError(ValueError):
    """A selector that breaks the XRD's rules; the message says which."""


def parse_selector(raw: Any, what: str) -> LabelSelector | None:
    """A LabelSelector from its API shape (None when unset), or SelectorError."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise SelectorError(f"{what} is {type(raw).__name__}, not an object")
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, Mapping) or len(labels) > MAX_LABELS or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise SelectorError(f"{what}.matchLabels must map at most {MAX_LABELS} keys to strings")
    exprs = raw.get("matchExpressions") or []
    if not isinstance(exprs, list) or len(exprs) > MAX_EXPRESSIONS:
        raise SelectorError(f"{what}.matchExpressions must be a list of at most "
                            f"{MAX_EXPRESSIONS} expressions")
    return LabelSelector(tuple(sorted(labels.items())),
                         tuple(_requirement(e, f"{what}.matchExpressions[{i}]")
                               for i, e in enumerate(exprs)))


def _requirement(e: Any, what: str) -> Requirement:
    if not isinstance(e, Mapping) or not isinstance(e.get("key"), str) or not e["key"]:
        raise SelectorError(f"{what} needs a key")
    op, values = e.get("operator"), e.get("values")
    if op not in OPERATORS:
        raise SelectorError(f"{what}: operator {op!r} is not one of {', '.join(OPERATORS)}")
    if values is not None and (not isinstance(values, list) or len(values) > MAX_VALUES
                               or not all(isinstance(v, str) for v in values)):
        raise SelectorError(f"{what}: values must be a list of at most {MAX_VALUES} strings")
    if (op in WITH_VALUES) != bool(values):
        raise SelectorError(f"{what}: operators In and NotIn need values, Exists and "
                            "DoesNotExist take none")
    return Requirement(e["key"], op, frozenset(values or ()))
