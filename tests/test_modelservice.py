"""ModelService and ModelEndpoint: one URL for a model, as a user reads it.

Each test drives `fn.run_function` with the ModelEndpoints and the front
door's InferenceCluster Crossplane would resolve, and reads the route, the
status and the conditions. Every composed object is checked against the real
CRDs vendored in crds/ (Envoy Gateway's, Gateway API's and provider-kubernetes').
"""

from __future__ import annotations

import random
from fractions import Fraction

import pytest
from builders import composite, conditions, desired, load, load_one, request
from schemas import Schemas

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.composer.modelservice import weights
from function.kit import requeue
from function.runtime import fn

NS = "ml-team"
TRUE, FALSE = fnv1.STATUS_CONDITION_TRUE, fnv1.STATUS_CONDITION_FALSE
SCHEMAS = Schemas()
DOOR = {
    "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
    "metadata": {"name": "hub", "labels": {"modelplane.ai/front-door": "true"}},
    "spec": {"gateway": {"name": "inference-gateway", "namespace": "gateway-system",
                         "address": "llm.example.com"}, "nodePools": [],
             # The endpoints below are on 10/8, private: this front door allows them.
             "frontDoor": {"enabled": True,
                           "allowedDestinations": {"cidrs": ["10.0.0.0/8"]}}},
}
REMOTE_DOOR = {**DOOR, "metadata": {"name": "edge", "labels": {}},
               "spec": {**DOOR["spec"], "providerConfigRef": {"name": "edge"}}}


def endpoint(name, url="http://10.0.0.1", labels=None, **spec):
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelEndpoint",
            "metadata": {"name": name, "namespace": NS, "labels": labels or {"app": name}},
            "spec": {"url": url, **spec}}


def replicas(deployment, n):
    return [endpoint(f"{deployment}-{i}", f"http://10.0.{i}.1",
                     {"modelplane.ai/deployment": deployment}, rewritePath="/",
                     replica=f"{deployment}-{i}")
            for i in range(n)]


def service(primary=((1, {"app": "a"}),), fallback=(), **spec):
    def entries(es):
        return [{"weight": w, "selector": {"matchLabels": labels}} for w, labels in es]
    spec = {"endpoints": entries(primary), **spec}
    if fallback:
        spec["fallback"] = entries(fallback)
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService",
            "metadata": {"name": "llama", "namespace": NS}, "spec": spec}


def run(ms, primary=(), fallback=(), door=(DOOR,), observed=None, omit=(),
        required_extra=None):
    """primary/fallback: the ModelEndpoints each entry's requirement resolves to."""
    required = {"front-door": list(door), "inference-clusters": list(door),
                "model-replicas": [], **(required_extra or {})}
    required |= {f"model-endpoints/primary-{i}": list(eps) for i, eps in enumerate(primary)}
    required |= {f"model-endpoints/fallback-{i}": list(eps) for i, eps in enumerate(fallback)}
    for name in omit:
        required.pop(name)
    rsp = fn.run_function(request(ms, required=required, observed=observed))
    assert not [r.message for r in rsp.results if r.severity == 1], "fatal"
    for key, obj in desired(rsp).items():
        assert SCHEMAS.errors(obj) == [], key
    return rsp


def route(rsp):
    return desired(rsp)["control-plane-route"]


def shares(rsp):
    """Each backend's share of the traffic, by Backend name."""
    refs = route(rsp)["spec"]["rules"][0].get("backendRefs", [])
    total = sum(r["weight"] for r in refs)
    return {r["name"]: Fraction(int(r["weight"]), int(total)) for r in refs}


def routed(rsp):
    return conditions(rsp)["Routed"]


def observed_of(rsp):
    """What Crossplane would observe after applying this response."""
    return desired(rsp)


# --- weights ------------------------------------------------------------------


@pytest.mark.parametrize("stable", range(1, 6))
@pytest.mark.parametrize("canary", range(1, 6))
def test_a_95_5_canary_stays_95_5_whatever_the_replicas_on_each_side(stable, canary):
    ms = service(((95, {"modelplane.ai/deployment": "stable"}),
                  (5, {"modelplane.ai/deployment": "canary"})))
    rsp = run(ms, [replicas("stable", stable), replicas("canary", canary)])
    got = shares(rsp)
    side = {"stable": Fraction(0), "canary": Fraction(0)}
    for name, share in got.items():
        side["stable" if name.startswith("llama-stable") else "canary"] += share
    assert side == {"stable": Fraction(95, 100), "canary": Fraction(5, 100)}
    assert len(set(v for k, v in got.items() if "stable" in k)) == 1  # spread evenly
    assert routed(rsp).status == TRUE and routed(rsp).reason == "Primary"


def test_weights_beyond_gateway_apis_bound_are_apportioned_by_largest_remainder():
    entries = [(1000, 7), (999, 11), (998, 13), (997, 17), (996, 19), (995, 23), (1, 29)]
    got = weights.split(entries)
    flat = [w for ws in got for w in ws]
    assert max(flat) <= weights.MAX_WEIGHT and sum(flat) == weights.MAX_WEIGHT
    total = sum(w for w, _ in entries)
    for (w, n), ws in zip(entries, got, strict=True):
        assert max(ws) - min(ws) <= 1
        assert abs(Fraction(sum(ws), weights.MAX_WEIGHT) - Fraction(w, total)) <= \
            Fraction(n, weights.MAX_WEIGHT)


def test_exact_weights_are_the_smallest_integers_with_the_same_ratios():
    assert weights.split([(95, 2), (5, 1)]) == [[19, 19], [2]]
    assert weights.split([(1, 3), (0, 2), (1, 0)]) == [[1, 1, 1], [0, 0], []]


# --- which entries take traffic -----------------------------------------------


def test_fallbacks_take_traffic_only_while_no_primary_has_an_endpoint():
    ms = service(((1, {"modelplane.ai/deployment": "a"}),), ((1, {"provider": "openai"}),))
    openai = [endpoint("openai", "https://api.openai.com", {"provider": "openai"},
                       rewritePath="/")]
    serving = run(ms, [replicas("a", 2)], [openai])
    assert all("openai" not in name for name in shares(serving))
    assert composite(serving)["status"]["active"] == "Primary"

    drained = run(ms, [[]], [openai], observed=observed_of(serving))
    assert list(shares(drained)) == [desired(drained)["control-plane-backend-openai"]["metadata"]["name"]]
    assert composite(drained)["status"]["active"] == "Fallback"
    assert routed(drained).reason == "Fallback"
    assert "endpoints[0] selects no ModelEndpoint (modelplane.ai/deployment=a)" \
        in routed(drained).message
    # An external https provider: TLS with the system CAs, SNI, and its own Host.
    backend = desired(drained)["control-plane-backend-openai"]["spec"]
    assert backend == {"endpoints": [{"hostname": "api.openai.com",
                                      "fqdn": {"hostname": "api.openai.com", "port": 443}}],
                       "tls": {"wellKnownCACertificates": "System", "sni": "api.openai.com"}}
    filters = route(drained)["spec"]["rules"][0]["filters"]
    assert {"type": "ExtensionRef", "extensionRef": {
        "group": "gateway.envoyproxy.io", "kind": "HTTPRouteFilter",
        "name": desired(drained)["control-plane-route-host-rewrite"]["metadata"]["name"]}} in filters
    assert desired(drained)["control-plane-route-host-rewrite"]["spec"] == {
        "urlRewrite": {"hostname": {"type": "Backend"}}}

    back = run(ms, [replicas("a", 1)], [openai], observed=observed_of(drained))
    assert composite(back)["status"]["active"] == "Primary"
    # Kept until the route Envoy Gateway reads no longer names it, then gone.
    assert "control-plane-backend-openai" in desired(back)
    assert all("openai" not in name for name in shares(back))
    later = run(ms, [replicas("a", 1)], [openai], observed=observed_of(back))
    assert "control-plane-backend-openai" not in desired(later)


def test_without_any_endpoint_the_route_stays_without_backends_and_says_so():
    rsp = run(service(), [[]])
    assert "backendRefs" not in route(rsp)["spec"]["rules"][0]
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "NoServingEndpoints")
    assert "endpoints[0] selects no ModelEndpoint (app=a)" in routed(rsp).message
    assert composite(rsp)["status"]["active"] == "None"


def test_an_endpoint_with_an_unsupported_scheme_is_left_out_and_named():
    bad = endpoint("ftp-mirror", "ftp://files.example.com", {"app": "a"})
    good = endpoint("good", "http://10.0.0.9", {"app": "a"})
    rsp = run(service(), [[bad, good]])
    assert [k for k in desired(rsp) if "backend-" in k] == ["control-plane-backend-good"]
    assert "ModelEndpoint ftp-mirror (spec.url 'ftp://files.example.com' has scheme 'ftp'" \
        in routed(rsp).message
    assert composite(rsp)["status"]["entries"][0]["endpoints"] == ["good"]
    # The endpoint says so itself.
    own = conditions(fn.run_function(request(bad)))["Valid"]
    assert (own.status, own.reason) == (FALSE, "UnsupportedScheme")


def test_an_endpoint_of_another_namespace_is_never_routed_to_whoever_lists_it():
    # Crossplane lists only the service's namespace; were another's endpoint among
    # them (a selector bug, a forged response), the service still leaves it out.
    foreign = endpoint("theirs", "http://10.0.0.7", {"app": "a"})
    foreign["metadata"]["namespace"] = "other-team"
    good = endpoint("good", "http://10.0.0.9", {"app": "a"})
    rsp = run(service(), [[foreign, good]])
    assert [k for k in desired(rsp) if "backend-" in k] == ["control-plane-backend-good"]
    assert "theirs (it is in namespace 'other-team', not the ModelService's" in routed(rsp).message
    assert composite(rsp)["status"]["entries"][0]["endpoints"] == ["good"]


@pytest.mark.parametrize("url, reason", [
    ("http://10.0.0.1", None),
    ("https://api.openai.com/v1", None),
    ("http://model.svc.cluster.local:8000/openai", None),
    ("https://", "InvalidURL"),
    ("http://host:99999", "InvalidURL"),
    ("http://host/path?x=1", "InvalidURL"),
    ("http://user@host", "InvalidURL"),
    ("grpc://host", "UnsupportedScheme"),
    ("not a url", "InvalidURL"),
])
def test_a_model_endpoint_says_whether_its_url_is_usable(url, reason):
    rsp = fn.run_function(request(endpoint("e", url)))
    assert not rsp.results
    valid = conditions(rsp)["Valid"]
    assert (valid.status, valid.reason) == ((TRUE, "Valid") if reason is None else (FALSE, reason))


# --- bad input keeps what exists ----------------------------------------------


def test_all_weights_zero_keeps_the_route_and_says_so():
    ms = service(((1, {"app": "a"}),))
    first = run(ms, [[endpoint("a")]])
    zero = service(((0, {"app": "a"}),))
    rsp = run(zero, [[endpoint("a")]], observed=observed_of(first))
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "AllWeightsZero")
    assert desired(rsp) == desired(first)


def test_endpoints_needing_different_rewrite_paths_conflict_and_nothing_new_is_composed():
    ms = service(((1, {"app": "a"}),))
    first = run(ms, [[endpoint("a1", labels={"app": "a"}, rewritePath="/")]])
    both = [endpoint("a1", labels={"app": "a"}, rewritePath="/"),
            endpoint("a2", "https://api.example.com/openai", labels={"app": "a"})]
    rsp = run(ms, [both], observed=observed_of(first))
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "RewriteConflict")
    assert "/: a1; /openai: a2" in routed(rsp).message
    assert desired(rsp) == desired(first)


def test_a_service_asks_to_be_called_again_soon_to_follow_its_endpoints():
    """Crossplane requires ModelEndpoints, it does not watch them: without asking, a
    replica withdrawn would stay in the route until Crossplane's poll, a minute later
    (and a draining replica is held that long, scheduler/drain.py)."""
    ms = service(((1, {"app": "a"}),))
    first = run(ms, [[endpoint("a")]])
    assert first.meta.ttl.ToTimedelta() == requeue.FOLLOW
    unresolved = run(ms, [[]], observed=observed_of(first), omit=["front-door"])
    assert unresolved.meta.ttl.ToTimedelta() == requeue.FOLLOW


def test_an_endpoint_being_deleted_takes_no_traffic():
    ms = service(((1, {"app": "a"}),))
    staying = endpoint("a1", labels={"app": "a"})
    leaving = endpoint("a2", labels={"app": "a"})
    both = shares(run(ms, [[staying, leaving]]))
    leaving["metadata"]["deletionTimestamp"] = "2026-11-26T00:00:00Z"
    one = shares(run(ms, [[staying, leaving]]))
    assert len(both) == 2 and len(one) == 1 and set(one) < set(both)


def test_unresolved_requirements_keep_everything():
    ms = service(((1, {"app": "a"}),), ((1, {"app": "b"}),))
    first = run(ms, [[endpoint("a")]], [[endpoint("b", labels={"app": "b"})]])
    for missing in ("front-door", "model-endpoints/primary-0", "model-endpoints/fallback-0"):
        rsp = run(ms, [[]], [[]], observed=observed_of(first), omit=[missing])
        assert desired(rsp) == desired(first), missing
        assert routed(rsp).reason == "Resolving"


@pytest.mark.parametrize("doors, says", [
    ((), 'no InferenceCluster is labelled modelplane.ai/front-door: "true"'),
    ((DOOR, {**DOOR, "metadata": {"name": "hub2", "labels": DOOR["metadata"]["labels"]}}),
     '2 InferenceClusters are labelled modelplane.ai/front-door: "true" (hub, hub2)'),
    (({**DOOR, "spec": {"nodePools": []}},), "InferenceCluster hub has no spec.gateway"),
])
def test_no_single_front_door_keeps_the_route_and_says_what_to_do(doors, says):
    ms = service()
    first = run(ms, [[endpoint("a")]])
    rsp = run(ms, [[endpoint("a")]], door=doors, observed=observed_of(first))
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "NoGateway")
    assert says in routed(rsp).message
    assert desired(rsp) == desired(first)


# --- where and what -----------------------------------------------------------


def test_a_remote_front_door_gets_the_route_wrapped_in_objects():
    ms = service(gateway={"clusterName": "edge"}, retry={"attempts": 3, "interval": "1s"})
    rsp = run(ms, [[endpoint("a")]], door=[REMOTE_DOOR])
    out = desired(rsp)
    assert {o["kind"] for o in out.values()} == {"Object"}
    inner = {k: o["spec"]["forProvider"]["manifest"]["kind"] for k, o in out.items()}
    assert inner == {"edge-namespace": "Namespace", "edge-backend-a": "Backend",
                     "edge-route": "HTTPRoute", "edge-route-host-rewrite": "HTTPRouteFilter",
                     "edge-route-traffic-0": "BackendTrafficPolicy"}
    assert all(o["spec"]["providerConfigRef"]["name"] == "edge" for o in out.values())
    policy = out["edge-route-traffic-0"]["spec"]["forProvider"]["manifest"]["spec"]
    assert policy["retry"]["numRetries"] == 3
    assert policy["retry"]["perRetry"] == {"backOff": {"baseInterval": "1s"}}
    assert composite(rsp)["status"]["address"] == "http://llm.example.com/ml-team/llama"


def test_model_names_match_the_body_based_routers_header_in_one_match():
    # One match per rule: a rule rewriting a prefix may hold only one (Gateway
    # API's CEL); several names are one RE2 alternation, dots escaped.
    ms = service(modelName="llama-3.1-8b", loraAdapters=["sql", "chat"], timeout="5m")
    (rule,) = route(run(ms, [[endpoint("a")]]))["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/ml-team/llama"},
                                "headers": [{"type": "RegularExpression",
                                             "name": "X-Gateway-Model-Name",
                                             "value": r"^(llama-3\.1-8b|sql|chat)$"}]}]
    assert rule["timeouts"] == {"request": "5m"}
    (alone,) = route(run(service(modelName="llama-3.1-8b"), [[endpoint("a")]]))["spec"]["rules"]
    assert alone["matches"][0]["headers"] == [
        {"type": "Exact", "name": "X-Gateway-Model-Name", "value": "llama-3.1-8b"}]


def test_the_output_is_deterministic_whatever_order_endpoints_arrive_in():
    ms = service(((3, {"modelplane.ai/deployment": "a"}),))
    eps = replicas("a", 5)
    first = run(ms, [eps])
    for seed in range(3):
        shuffled = eps[:]
        random.Random(seed).shuffle(shuffled)
        again = run(ms, [shuffled])
        assert again.SerializeToString(deterministic=True) == \
            first.SerializeToString(deterministic=True)


def test_the_example_service_routes_95_5_over_its_example_endpoints():
    ms = load_one("examples/services/llama.yaml")
    eps = load("examples/services/endpoints.yaml")
    fleet = load("examples/fleet")

    def selected(labels):
        return [e for e in eps if all(e["metadata"]["labels"].get(k) == v
                                      for k, v in labels.items())]
    entries = [e["selector"]["matchLabels"] for e in ms["spec"]["endpoints"]]
    rsp = run(ms, [selected(labels) for labels in entries],
              [selected(ms["spec"]["fallback"][0]["selector"]["matchLabels"])],
              door=[c for c in fleet if c["metadata"]["name"] == "us-east-1"],
              required_extra={"inference-clusters": fleet})
    assert composite(rsp)["status"]["address"] == \
        "https://llm.us-east-1.example.com/ml-team/llama"
    got = shares(rsp)
    assert sum(v for k, v in got.items() if "canary" in k) == Fraction(5, 100)
    for doc in [ms, *eps]:
        assert SCHEMAS.errors(doc) == []


def test_a_front_door_that_moves_takes_the_route_along_under_new_keys():
    ms = service()
    local = run(ms, [[endpoint("a")]])
    moved = run(service(gateway={"clusterName": "edge"}), [[endpoint("a")]], door=[REMOTE_DOOR],
                observed=observed_of(local))
    # Crossplane deletes the control plane's route and creates the Objects: a key
    # never changes kind.
    assert not set(desired(local)) & set(desired(moved))
    assert {desired(moved)[k]["kind"] for k in desired(moved)} == {"Object"}


def test_a_named_front_door_that_does_not_exist_keeps_the_route():
    first = run(service(), [[endpoint("a")]])
    rsp = run(service(gateway={"clusterName": "nowhere"}), [[endpoint("a")]], door=[],
              observed=observed_of(first))
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "NoGateway")
    assert "InferenceCluster nowhere (spec.gateway.clusterName) does not exist" \
        in routed(rsp).message
    assert desired(rsp) == desired(first)
