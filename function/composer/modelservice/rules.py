"""A ModelService's ordered rules as HTTPRoute matches, and the orders Gateway API cannot keep.

Kthena's ModelRoute sends a request to the first rule it matches. Gateway API
does not: across all of an HTTPRoute's rules it takes the most specific
matching match (an Exact path, then the longest path prefix, then a method,
then the most headers, then the most query parameters) and uses list order
only among equally specific ones (HTTPRouteRule.matches in the Gateway API
CRD, v1.6.1). Envoy Gateway v1.9.1 implements that with one refinement: among
as many headers, more Exact ones first (a stable sort otherwise keeping list
order: internal/gatewayapi/sort.go). The rules are composed in order, one HTTPRoute rule per match,
with the service's own entries last; composing them is faithful exactly
when no later match can take a request an earlier one matches while being
ranked above it. `conflict` finds the first such pair and says why, so the
function refuses the spec instead of routing in an order nobody wrote.

Two matches can take one request unless their paths are disjoint or one
header must hold two different Exact values. A regular expression is taken
to overlap anything (its language is not compared), so a conflict may be
reported for rules a regex keeps apart: fail closed, never route by surprise.

Every match also carries the service's own constraints: its prefix, and its
model names on `X-Gateway-Model-Name` (one Exact value, or several as one
RE2 alternation: an HTTPRoute rule that rewrites a prefix holds exactly one
match, Gateway API's CEL rule). A rule match naming that header itself (an
Exact model name of the service) replaces the service's model constraint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from function.contract.destinations import reserved_header, reserved_text
from function.contract.models.modelservice import RuleHeaderType, RulePathType

MODEL_HEADER = "X-Gateway-Model-Name"  # set by the Inference Extension's body-based router
MAX_MATCHES = 15  # one HTTPRoute holds 16 rules: one per match, one for the service's entries
RE2_SPECIAL = set("\\.+*?()|[]{}^$")


@dataclass(frozen=True)
class Match:
    """One HTTPRouteMatch: a path under the service's prefix and headers."""

    rule: int | None                # None: the service's own entries
    index: int                      # its index in the rule's matches
    exact: bool                     # an Exact path, else a PathPrefix
    prefix: str                     # the service's prefix, `/<namespace>/<name>`
    relative: str                   # the path under it, "" for the prefix itself
    headers: tuple[tuple[str, str, str], ...]  # (name, type, value), as composed

    @property
    def path(self) -> str:
        return self.prefix + self.relative

    def rank(self) -> tuple[bool, int, int, int]:
        """Envoy Gateway's precedence (higher first): Gateway API's (the API has no
        method or query matches), then the number of Exact headers."""
        exact_headers = sum(t == RuleHeaderType.EXACT for _, t, _ in self.headers)
        return self.exact, len(self.path), len(self.headers), exact_headers

    def http(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": {"type": (RulePathType.EXACT if self.exact else
                                                 RulePathType.PATH_PREFIX).value,
                                        "value": self.path}}
        if self.headers:
            out["headers"] = [{"type": t, "name": n, "value": v} for n, t, v in self.headers]
        return out

    def rewrite(self, rewrite_path: str) -> dict[str, Any]:
        """The URLRewrite path putting the endpoints' rewritePath where the prefix was."""
        target = rewrite_path.rstrip("/") + self.relative if self.relative else rewrite_path
        if self.exact:  # ReplacePrefixMatch needs a PathPrefix match (Gateway API's CEL)
            return {"type": "ReplaceFullPath", "replaceFullPath": target}
        return {"type": "ReplacePrefixMatch", "replacePrefixMatch": target}


def re2_escape(text: str) -> str:
    return "".join("\\" + c if c in RE2_SPECIAL else c for c in text)


def model_header(models: Sequence[str]) -> tuple[str, str, str] | None:
    if not models:
        return None
    if len(models) == 1:
        return MODEL_HEADER, RuleHeaderType.EXACT.value, models[0]
    return (MODEL_HEADER, RuleHeaderType.REGULAR_EXPRESSION.value,
            "^(" + "|".join(re2_escape(m) for m in models) + ")$")


def models_of(spec: Mapping[str, Any]) -> list[str]:
    return [m for m in [spec.get("modelName"), *(spec.get("loraAdapters") or [])] if m]


def own_match(spec: Mapping[str, Any], prefix: str) -> Match:
    """The service's own entries' match: its prefix and model names."""
    model = model_header(models_of(spec))
    return Match(None, 0, False, prefix, "", (model,) if model else ())


def rule_matches(spec: Mapping[str, Any], prefix: str) -> list[list[Match]]:
    """Each rule's matches, in order."""
    model = model_header(models_of(spec))
    out = []
    for r, rule in enumerate(spec.get("rules") or []):
        matches = []
        for k, m in enumerate(rule["matches"]):
            path = m.get("path") or {}
            headers = tuple((h["name"], RuleHeaderType(h.get("type") or RuleHeaderType.EXACT).value,
                             h["value"]) for h in m.get("headers") or [])
            if model and not any(n.lower() == MODEL_HEADER.lower() for n, _, _ in headers):
                headers += (model,)
            matches.append(Match(r, k, path.get("type") == RulePathType.EXACT, prefix,
                                 path.get("value", ""), headers))
        out.append(matches)
    return out


def rule_errors(spec: Mapping[str, Any]) -> list[str]:
    """The XRD's CEL rules on spec.rules, checked again."""
    rules = spec.get("rules") or []
    errors = []
    names = [r["name"] for r in rules]
    if len(set(names)) != len(names):
        errors.append("spec.rules: rule names must be unique")
    if sum(len(r["matches"]) for r in rules) > MAX_MATCHES:
        errors.append(f"spec.rules hold at most {MAX_MATCHES} matches in all (one HTTPRoute "
                      "holds 16 rules: one per match and one for the service's own entries)")
    models = models_of(spec)
    for r, rule in enumerate(rules):
        if not any(e.get("weight", 1) > 0 for e in rule["endpoints"]):
            errors.append(f"spec.rules[{r}].endpoints: at least one primary entry needs a "
                          "weight above 0")
        for k, m in enumerate(rule["matches"]):
            where = f"spec.rules[{r}].matches[{k}]"
            if not m.get("path") and not m.get("headers"):
                errors.append(f"{where}: a match needs a path or headers")
            names = [h["name"].lower() for h in m.get("headers") or []]
            if len(set(names)) != len(names):
                errors.append(f"{where}: a match names each header once, whatever its case")
            for h in m.get("headers") or []:
                if reserved_header(h["name"]):
                    errors.append(f"{where}: header {h['name']!r} is reserved "
                                  f"({reserved_text()})")
                if models and h["name"].lower() == MODEL_HEADER.lower() and not (
                        h.get("type", RuleHeaderType.EXACT) == RuleHeaderType.EXACT and h["value"] in models):
                    errors.append(f"{where}: a rule matching {MODEL_HEADER} names modelName "
                                  "or one of loraAdapters exactly")
    return errors


def _under(path: str, prefix: str) -> bool:
    """Gateway API's PathPrefix: whole path elements."""
    return path == prefix or path.startswith(prefix + "/")


def _paths_overlap(a: Match, b: Match) -> bool:
    if a.exact and b.exact:
        return a.path == b.path
    if a.exact or b.exact:
        exact, prefix = (a, b) if a.exact else (b, a)
        return _under(exact.path, prefix.path)
    return _under(a.path, b.path) or _under(b.path, a.path)


def overlap(a: Match, b: Match) -> bool:
    """Whether some request matches both."""
    if not _paths_overlap(a, b):
        return False
    theirs = {n.lower(): (t, v) for n, t, v in b.headers}
    for n, t, v in a.headers:
        other = theirs.get(n.lower())
        if other and t == other[0] == RuleHeaderType.EXACT and v != other[1]:
            return False
    return True


def _why(earlier: Match, later: Match) -> str:
    if later.exact and not earlier.exact:
        return "its path is an Exact match and the other's a PathPrefix"
    if len(later.path) != len(earlier.path):
        return (f"its path {later.relative or '(any)'} is longer than "
                f"{earlier.relative or '(any)'}")
    if len(later.headers) != len(earlier.headers):
        return f"it matches {len(later.headers)} headers and the other {len(earlier.headers)}"
    return ("as many headers, more of them Exact: Envoy Gateway ranks Exact header matches "
            "above regular expressions")


def conflict(names: Sequence[str], matches: Sequence[Sequence[Match]]) -> str | None:
    """The first later rule Gateway API would rank above an earlier one it overlaps, and why.

    The service's own match, last in the route, needs no check: every rule
    match has its prefix and model constraint and more (a longer path, or a
    header more, or an Exact model name for its alternation), so it never
    ranks above one; and where it ties it comes last."""
    def name(m: Match) -> str:
        if m.rule is None:  # the service's own match, which is not checked (above)
            raise ValueError("conflict() compares rule matches, not the service's own")
        return names[m.rule]

    def label(m: Match) -> str:
        return f"rules[{m.rule}] ({name(m)}) matches[{m.index}]"
    for i, earlier in enumerate(matches):
        for later in matches[i + 1:]:
            for a in earlier:
                for b in later:
                    if overlap(a, b) and b.rank() > a.rank():
                        return (f"{label(b)} can take requests {label(a)} matches, and "
                                f"Gateway API ranks it first ({_why(a, b)}): first match "
                                "wins only among equally specific matches; put "
                                f"{name(b)} before {name(a)}, or make them "
                                "disjoint (one header with different Exact values)")
    return None
