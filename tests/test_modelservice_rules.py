"""A ModelService's ordered rules: first match wins, or the spec is refused.

Gateway API ranks matches by specificity and keeps list order only among
equals; the function composes rules in order and refuses a later rule that
overlaps an earlier one and would be ranked above it (`RuleConflict`). The
property test below simulates both semantics independently of the function:
Kthena's first-match over the spec, and Gateway API's precedence over the
composed HTTPRoute; whenever the function accepts rules, the two agree on
every sampled request.
"""

from __future__ import annotations

import itertools
import random
import re
from fractions import Fraction
from pathlib import Path

import pytest
from builders import composite, desired, request
from test_modelservice import (
    FALSE,
    NS,
    TRUE,
    endpoint,
    observed_of,
    replicas,
    route,
    routed,
    run,
    service,
)

from function.runtime import fn

INVALID = Path(__file__).parent / "invalid"


def rule(name, matches, primary=None, fallback=()):
    """A rule; by default one entry selecting the endpoints labelled rule=<name>."""
    def entries(es):
        return [{"weight": w, "selector": {"matchLabels": labels}} for w, labels in es]
    out = {"name": name, "matches": matches,
           "endpoints": entries(primary or ((1, {"rule": name}),))}
    if fallback:
        out["fallback"] = entries(fallback)
    return out


def header(name, value, typ="Exact"):
    return {"name": name, "value": value, "type": typ}


def path(value, typ="PathPrefix"):
    return {"type": typ, "value": value}


def ep(name, labels, octet):
    return endpoint(name, f"http://10.9.{octet}.1", labels, rewritePath="/")


def required_for(ms, eps):
    """What Crossplane would resolve for each entry of the service and its rules."""
    def pick(labels):
        return [e for e in eps if all(e["metadata"]["labels"].get(k) == v
                                      for k, v in labels.items())]
    spec, req = ms["spec"], {}
    for role, key in (("primary", "endpoints"), ("fallback", "fallback")):
        for i, e in enumerate(spec.get(key) or []):
            req[f"model-endpoints/{role}-{i}"] = pick(e["selector"]["matchLabels"])
        for r, rl in enumerate(spec.get("rules") or []):
            for i, e in enumerate(rl.get(key) or []):
                req[f"model-endpoints/rule-{r}-{role}-{i}"] = pick(e["selector"]["matchLabels"])
    return req


def run_rules(ms, eps, observed=None):
    return run(ms, observed=observed, required_extra=required_for(ms, eps))


def backends_of(http_rule):
    return sorted(r["name"].split("-")[1] for r in http_rule.get("backendRefs", []))


A, B, C = ep("a-0", {"rule": "a"}, 1), ep("b-0", {"rule": "b"}, 2), ep("own-0", {"app": "a"}, 3)


# --- first match wins ---------------------------------------------------------


def test_rules_are_composed_in_order_before_the_services_own_entries():
    ms = service(rules=[rule("a", [{"headers": [header("x-tier", "gold")]}]),
                        rule("b", [{"headers": [header("x-beta", "true")]}])])
    rsp = run_rules(ms, [A, B, C])
    rules = route(rsp)["spec"]["rules"]
    # Equally specific (one header each): Gateway API keeps list order, so a
    # request with both headers goes to a, the first rule, as in Kthena.
    assert [r["matches"] for r in rules] == [
        [{"path": {"type": "PathPrefix", "value": "/ml-team/llama"},
          "headers": [{"type": "Exact", "name": "x-tier", "value": "gold"}]}],
        [{"path": {"type": "PathPrefix", "value": "/ml-team/llama"},
          "headers": [{"type": "Exact", "name": "x-beta", "value": "true"}]}],
        [{"path": {"type": "PathPrefix", "value": "/ml-team/llama"}}]]
    assert [backends_of(r) for r in rules] == [["a"], ["b"], ["own"]]
    assert (routed(rsp).status, routed(rsp).reason) == (TRUE, "Primary")
    assert composite(rsp)["status"]["rules"] == [
        {"name": "a", "active": "Primary", "entries": [
            {"role": "Primary", "index": 0, "weight": 1, "endpoints": ["a-0"]}]},
        {"name": "b", "active": "Primary", "entries": [
            {"role": "Primary", "index": 0, "weight": 1, "endpoints": ["b-0"]}]}]
    assert composite(rsp)["status"]["entries"][0]["endpoints"] == ["own-0"]


def test_a_rule_with_several_matches_is_one_http_route_rule_per_match():
    ms = service(rules=[rule("a", [{"path": path("/v1/embeddings", "Exact")},
                                   {"path": path("/v1/completions")}])])
    rules = route(run_rules(ms, [A, C]))["spec"]["rules"]
    assert [(r["matches"], r["filters"][0]["urlRewrite"]["path"]) for r in rules[:2]] == [
        ([{"path": {"type": "Exact", "value": "/ml-team/llama/v1/embeddings"}}],
         {"type": "ReplaceFullPath", "replaceFullPath": "/v1/embeddings"}),
        ([{"path": {"type": "PathPrefix", "value": "/ml-team/llama/v1/completions"}}],
         {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v1/completions"})]
    assert backends_of(rules[0]) == backends_of(rules[1]) == ["a"]


# --- conflicts ----------------------------------------------------------------


@pytest.mark.parametrize("earlier, later, why", [
    ({"path": path("/v1")}, {"path": path("/v1/chat/completions")},
     "its path /v1/chat/completions is longer than /v1"),
    ({"path": path("/v1/chat")}, {"path": path("/v1/chat/completions", "Exact")},
     "its path is an Exact match and the other's a PathPrefix"),
    ({"headers": [header("x-tier", "gold")]},
     {"headers": [header("x-beta", "true"), header("x-region", "eu")]},
     "it matches 2 headers and the other 1"),
    ({"headers": [header("x-tier", "gold")]},
     {"headers": [header("x-tier", "gold|silver", "RegularExpression"),
                  header("x-region", "eu")]},
     "it matches 2 headers and the other 1"),  # a regex is taken to overlap
    ({"headers": [header("x-tier", "gold|silver", "RegularExpression")]},
     {"headers": [header("x-tier", "gold")]},
     "as many headers, more of them Exact: Envoy Gateway ranks Exact header matches above "
     "regular expressions"),
])
def test_a_later_rule_more_specific_than_an_overlapping_earlier_one_is_refused(
        earlier, later, why):
    ok = service(rules=[rule("a", [earlier])])
    first = run_rules(ok, [A, B, C])
    bad = service(rules=[rule("a", [earlier]), rule("b", [later])])
    rsp = run_rules(bad, [A, B, C], observed=observed_of(first))
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "RuleConflict")
    assert routed(rsp).message.startswith(
        "rules[1] (b) matches[0] can take requests rules[0] (a) matches[0] matches, and "
        f"Gateway API ranks it first ({why}): ")
    assert "put b before a" in routed(rsp).message
    assert desired(rsp) == desired(first)  # never destructive
    # The other way round, first match and Gateway API agree.
    swapped = service(rules=[rule("b", [later]), rule("a", [earlier])])
    assert routed(run_rules(swapped, [A, B, C])).status == TRUE


@pytest.mark.parametrize("earlier, later", [
    ({"headers": [header("x-tier", "gold")]},   # different exact values: disjoint
     {"headers": [header("x-tier", "silver"), header("x-region", "eu")]}),
    ({"headers": [header("X-Tier", "gold")]},   # header names match whatever their case
     {"headers": [header("x-tier", "silver"), header("x-region", "eu")]}),
    ({"path": path("/v1/embeddings")}, {"path": path("/v1/chat/completions")}),
    ({"path": path("/v1/chat")}, {"path": path("/v1/chatbot/x")}),  # whole path elements
    ({"path": path("/v1/chat/completions")}, {"path": path("/v1")}),  # less specific later
])
def test_rules_that_cannot_share_a_request_or_keep_their_order_are_accepted(earlier, later):
    ms = service(rules=[rule("a", [earlier]), rule("b", [later])])
    rsp = run_rules(ms, [A, B, C])
    assert (routed(rsp).status, routed(rsp).reason) == (TRUE, "Primary"), routed(rsp).message


def test_a_rule_naming_a_model_replaces_the_services_model_match():
    sql = rule("sql", [{"headers": [header("X-Gateway-Model-Name", "sql")]}])
    eu = rule("eu", [{"headers": [header("x-region", "eu")]}])
    ms = service(modelName="llama", loraAdapters=["sql"], rules=[eu, sql])
    rules = route(run_rules(ms, [A, B, C]))["spec"]["rules"]
    model = {"type": "RegularExpression", "name": "X-Gateway-Model-Name",
             "value": "^(llama|sql)$"}
    assert [r["matches"][0].get("headers") for r in rules] == [
        [{"type": "Exact", "name": "x-region", "value": "eu"}, model],
        [{"type": "Exact", "name": "X-Gateway-Model-Name", "value": "sql"}],
        [model]]
    # eu also requires the service's model names: two headers to sql's one, so
    # sql first would lose its requests for sql from the eu region to eu.
    swapped = run_rules(service(modelName="llama", loraAdapters=["sql"], rules=[sql, eu]),
                        [A, B, C])
    assert routed(swapped).reason == "RuleConflict"
    assert "(it matches 2 headers and the other 1)" in routed(swapped).message


# --- which endpoints each rule uses -------------------------------------------


@pytest.mark.parametrize("stable, canary", [(1, 1), (2, 3), (4, 1)])
def test_weights_hold_per_rule_whatever_the_replicas(stable, canary):
    eps = replicas("stable", stable) + replicas("canary", canary) + [C]
    ms = service(rules=[rule("beta", [{"headers": [header("x-beta", "true")]}],
                             primary=((3, {"modelplane.ai/deployment": "stable"}),
                                      (1, {"modelplane.ai/deployment": "canary"})))])
    rsp = run_rules(ms, eps)
    beta, own = route(rsp)["spec"]["rules"]
    total = int(sum(r["weight"] for r in beta["backendRefs"]))
    side = {"stable": Fraction(0), "canary": Fraction(0)}
    for r in beta["backendRefs"]:
        side["stable" if "-stable-" in r["name"] else "canary"] += Fraction(int(r["weight"]), total)
    assert side == {"stable": Fraction(3, 4), "canary": Fraction(1, 4)}
    assert backends_of(own) == ["own"]
    assert "rules[0] (beta): Primary entries take traffic: rules[0].endpoints[0] 75%" \
        in routed(rsp).message


def test_a_rule_without_serving_endpoints_answers_500_and_uses_its_own_fallback_only():
    ms = service(rules=[rule("onprem", [{"headers": [header("x-tenant", "bank")]}])])
    rsp = run_rules(ms, [C])  # the rule's selector matches nothing
    onprem, own = route(rsp)["spec"]["rules"]
    assert "backendRefs" not in onprem  # no fall-through to the service's own entries
    assert backends_of(own) == ["own"]
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "NoServingEndpoints")
    assert routed(rsp).message.startswith("rules[0] (onprem): no entry of weight above 0")
    assert "rules[0].endpoints[0] selects no ModelEndpoint (rule=onprem)" in routed(rsp).message
    assert composite(rsp)["status"]["rules"][0]["active"] == "None"

    with_fallback = service(rules=[rule("onprem", [{"headers": [header("x-tenant", "bank")]}],
                                        fallback=((1, {"app": "a"}),))])
    rsp = run_rules(with_fallback, [C], observed=observed_of(rsp))
    onprem, own = route(rsp)["spec"]["rules"]
    assert backends_of(onprem) == backends_of(own) == ["own"]
    assert composite(rsp)["status"]["rules"][0]["active"] == "Fallback"
    assert routed(rsp).status == TRUE


def test_rewrite_paths_need_to_agree_only_within_a_rule():
    ext = endpoint("ext", "https://api.example.com/openai", {"rule": "a"})
    ms = service(rules=[rule("a", [{"headers": [header("x-ext", "1")]}])])
    rsp = run_rules(ms, [ext, C])
    a, own = route(rsp)["spec"]["rules"]
    assert a["filters"][0]["urlRewrite"]["path"]["replacePrefixMatch"] == "/openai"
    assert own["filters"][0]["urlRewrite"]["path"]["replacePrefixMatch"] == "/"
    assert [f["type"] for f in a["filters"]] == ["URLRewrite", "ExtensionRef"]
    assert [f["type"] for f in own["filters"]] == ["URLRewrite", "ExtensionRef"]  # every rule
    both = [ext, endpoint("a-ip", "http://10.0.0.7", {"rule": "a"}, rewritePath="/")]
    clash = run_rules(ms, both + [C], observed=observed_of(rsp))
    assert (routed(clash).status, routed(clash).reason) == (FALSE, "RewriteConflict")
    assert "endpoints of rules[0] (a) need different rewrite paths (/: a-ip; /openai: ext)" \
        in routed(clash).message
    assert desired(clash) == desired(rsp)


def test_the_output_is_deterministic_whatever_order_endpoints_arrive_in():
    eps = replicas("stable", 4) + replicas("canary", 3) + [C]
    ms = service(rules=[rule("beta", [{"headers": [header("x-beta", "true")]}],
                             primary=((3, {"modelplane.ai/deployment": "stable"}),
                                      (1, {"modelplane.ai/deployment": "canary"})))])
    first = run_rules(ms, eps).SerializeToString(deterministic=True)
    for seed in range(3):
        shuffled = eps[:]
        random.Random(seed).shuffle(shuffled)
        assert run_rules(ms, shuffled).SerializeToString(deterministic=True) == first


# --- every CEL rule, checked again by the function -----------------------------


@pytest.mark.parametrize("manifest", sorted(INVALID.glob("ms-rule*.yaml")), ids=lambda p: p.stem)
def test_the_function_refuses_what_the_xrd_refuses(manifest):
    import yaml
    ms = yaml.safe_load(manifest.read_text())
    first = run(service(), [[endpoint("a")]])
    rsp = fn.run_function(request(ms, observed=observed_of(first)))
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "InvalidSpec"), \
        routed(rsp).message
    assert desired(rsp) == desired(first)


# --- the property: whatever the function accepts, Gateway API routes first-match


def _path_ok(m, p):
    if "path" not in m:
        return True
    want = m["path"]["value"]
    if m["path"]["type"] == "Exact":
        return p == want
    return p == want or p.startswith(want.rstrip("/") + "/")


def _headers_ok(hs, req):
    for h in hs:
        got = req.get(h["name"].lower())
        if got is None:
            return False
        if h.get("type", "Exact") == "Exact" and got != h["value"]:
            return False
        if h.get("type") == "RegularExpression" and not re.fullmatch(h["value"], got):
            return False
    return True


def first_match(spec, prefix, p, req):
    """Kthena: the first rule with a matching match, else None (the service's own)."""
    for r in spec.get("rules") or []:
        for m in r["matches"]:
            full = {"path": {"type": m["path"].get("type", "PathPrefix"),
                             "value": prefix + m["path"]["value"]}} if "path" in m else {}
            if _path_ok(full, p) and _headers_ok(m.get("headers", []), req):
                return r["name"]
    return None


def gateway_api(rules, p, req):
    """Gateway API's precedence over the composed HTTPRoute, as Envoy Gateway v1.9.1
    sorts it (more Exact headers first among as many): index of the winning rule."""
    best = None
    for i, r in enumerate(rules):
        for m in r["matches"]:
            if _path_ok(m, p) and _headers_ok(m.get("headers", []), req):
                hs = m.get("headers", [])
                rank = (m["path"]["type"] == "Exact", len(m["path"]["value"]), len(hs),
                        sum(h["type"] == "Exact" for h in hs))
                if best is None or rank > best[0]:  # ties: the first in list order
                    best = (rank, i)
    return None if best is None else best[1]


PATHS = ["/v1", "/v1/chat", "/v1/chat/completions", "/v1/embeddings"]
HEADERS = [("x-tier", ["gold", "silver"]), ("x-beta", ["true"]), ("x-region", ["eu", "us"])]


def random_match(rng):
    m = {}
    if rng.random() < 0.6:
        m["path"] = path(rng.choice(PATHS), rng.choice(["PathPrefix", "PathPrefix", "Exact"]))
    names = rng.sample(HEADERS, rng.randint(0 if m else 1, 2))
    if names:
        m["headers"] = [header(n, rng.choice(vs)) if rng.random() < 0.8
                        else header(n, "|".join(vs), "RegularExpression") for n, vs in names]
    return m


def test_accepted_rules_route_first_match_under_gateway_apis_precedence():
    rng = random.Random(16)
    requests = [(p, dict(hs)) for p in ["/ml-team/llama" + x for x in ["", *PATHS,
                                                                      "/v1/chat/x"]]
                for hs in itertools.product(*[[(n, v) for v in [*vs, None]]
                                              for n, vs in HEADERS])]
    requests = [(p, {k: v for k, v in hs.items() if v is not None}) for p, hs in requests]
    accepted = refused = 0
    for _ in range(150):
        rules = [rule(f"r{i}", [random_match(rng) for _ in range(rng.randint(1, 2))])
                 for i in range(rng.randint(2, 4))]
        ms = service(rules=rules)
        rsp = run_rules(ms, [C])
        if routed(rsp).reason == "RuleConflict":
            refused += 1
            continue
        accepted += 1
        composed = route(rsp)["spec"]["rules"]
        # Which spec rule each composed HTTPRoute rule belongs to, in order.
        owner = [r["name"] for r in rules for _ in r["matches"]] + [None]
        for p, hs in requests:
            got = gateway_api(composed, p, hs)
            assert (owner[got] if got is not None else None) == \
                first_match(ms["spec"], f"/{NS}/llama", p, hs), (rules, p, hs)
    assert accepted > 30 and refused > 30  # both sides of the property were exercised
