"""PromQL a tenant writes, parsed and held to its own namespace.

spec.autoscaling's raw queries run in KEDA, with the platform's access to the
platform's Prometheus (docs/autoscaling.md): a query that selects series of
another namespace would read that namespace's metrics. So a query is parsed
with Prometheus' grammar (promql-parser, a Rust port of Prometheus' own parser,
already what the XRD's check of a query's syntax uses) and every vector
selector in it, however deep (inside functions, aggregations, subqueries,
range vectors, both sides of a binary operator, each alternative of a
Prometheus 3 `{a="1" or b="2"}` selector) must carry the matcher
`namespace="<the deployment's namespace>"`: an equality, not a regex or a
negation. Extra matchers only narrow a selector further, so one such matcher
bounds it whatever else it says. Parsing, never a regular expression: a
matcher inside a string literal or a comment must not count.
"""

from __future__ import annotations

import promql_parser

NAMESPACE_LABEL = "namespace"


def syntax_errors(query: str) -> list[str]:
    """Why a query is not PromQL, by Prometheus' grammar."""
    try:
        promql_parser.parse(query)
    except ValueError as exc:
        return [f"does not parse as PromQL: {exc}"]
    return []


def unscoped(query: str, namespace: str | None) -> list[str]:
    """The vector selectors of a (parseable) query that may select series outside
    `namespace`, as PromQL writes them; [] when every one is held to it. Without a
    namespace (the XRD's rule, which cannot know it), any one namespace will do."""
    found: list[str] = []

    def visit(node) -> None:
        if isinstance(node, promql_parser.VectorSelector) and not _held(node, namespace):
            found.append(str(node))

    promql_parser.walk(promql_parser.parse(query), visit)
    return found


def _held(selector: promql_parser.VectorSelector, namespace: str | None) -> bool:
    matchers = selector.matchers
    # With `or`, every alternative must hold on its own (the plain list is not
    # counted towards them: stricter than Prometheus, never looser).
    alternatives = matchers.or_matchers or [matchers.matchers]
    return all(any(m.name == NAMESPACE_LABEL and m.op == promql_parser.MatchOp.Equal
                   and (namespace is None or m.value == namespace) for m in alt)
               for alt in alternatives)
