"""The front door's hop to a cluster gateway, and health judged in its data plane (#49).

A replica is reached on its cluster gateway by its Host, which the front door's
Envoy sets per chosen endpoint from the endpoint's hostname, so every replica of
a rule shares one Envoy cluster: outlier detection, active health checks,
retries on another host and the fallback tier (Envoy's priority 1) see them all.
A tenant can no longer ride the hop to another tenant's replica: an endpoint at
a fleet gateway must name a replica of its own namespace, and no request leaves
the front door with the client's Host.
"""

from __future__ import annotations

import copy

import pytest
from builders import composite, conditions, desired
from composer_support import compose, replica, standalone
from test_modelservice import FALSE, DOOR, NS, endpoint, replicas, route, routed, run, service

from function.composer.modelservice.traffic import milliseconds
from function.contract.api import replica_host

# Another cluster of the fleet, whose gateway is public: the hop a tenant tried.
EAST = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
        "metadata": {"name": "us-east-1", "labels": {}},
        "spec": {"gateway": {"name": "gw", "namespace": "gateway-system",
                             "address": "https://gw.us-east-1.example.com"},
                 "nodePools": []}}


def fleet_run(ms, primary=(), fallback=(), door=None):
    return run(ms, primary, fallback, required_extra={
        "inference-clusters": [door or DOOR, EAST]}, door=[door or DOOR])


def backends(rsp):
    return {o["metadata"]["name"]: o["spec"] for o in desired(rsp).values()
            if o["kind"] == "Backend"}


def policies(rsp):
    return [o["spec"] for o in desired(rsp).values() if o["kind"] == "BackendTrafficPolicy"]


# --- the cluster hop ------------------------------------------------------------

@pytest.mark.parametrize("url", [
    "https://gw.us-east-1.example.com",          # the gateway itself, its own port
    "http://gw.us-east-1.example.com:8080",      # another listener of it
    "https://GW.us-east-1.example.com/",
])
def test_a_fleet_gateway_is_reached_only_through_a_replica_of_the_endpoints_namespace(url):
    # Tenant B's endpoint at a fleet gateway with rewritePath /: a client asking
    # for /<B-ns>/<svc>/<A-ns>/<A-replica>/v1/... would reach A's replica there.
    hop = endpoint("hop", url, {"app": "a"}, rewritePath="/")
    rsp = fleet_run(service(), [[hop]])
    assert "backendRefs" not in route(rsp)["spec"]["rules"][0]
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "NoServingEndpoints")
    assert "gw.us-east-1.example.com is a gateway of the fleet" in routed(rsp).message


def test_a_replicas_endpoint_sends_its_own_replicas_host_whatever_the_client_sends():
    mine = endpoint("llama-0", "https://gw.us-east-1.example.com", {"app": "a"},
                    rewritePath="/", replica="llama-0")
    rsp = fleet_run(service(), [[mine]])
    (spec,) = backends(rsp).values()
    assert spec["endpoints"] == [{"hostname": f"llama-0.{NS}.replica.modelplane.internal",
                                  "fqdn": {"hostname": "gw.us-east-1.example.com",
                                           "port": 443}}]
    assert spec["tls"]["sni"] == "gw.us-east-1.example.com"
    # Every rule rewrites the Host to the chosen endpoint's hostname: a client's
    # own Host (another replica's) never reaches a gateway.
    host_filter = desired(rsp)["control-plane-route-host-rewrite"]
    assert host_filter["spec"] == {"urlRewrite": {"hostname": {"type": "Backend"}}}
    for rule in route(rsp)["spec"]["rules"]:
        assert {"type": "ExtensionRef", "extensionRef": {
            "group": "gateway.envoyproxy.io", "kind": "HTTPRouteFilter",
            "name": host_filter["metadata"]["name"]}} in rule["filters"]


def test_an_ip_endpoint_has_no_hostname_envoy_gateway_would_refuse():
    # Envoy Gateway v1.9.1 answers a Backend endpoint whose hostname is an IP address
    # with ResolvedRefs=False, InvalidAddress (seen live), failing the whole rule.
    provider = endpoint("provider", "http://10.0.9.9:8000", {"app": "a"})
    (spec,) = backends(run(service(), [[provider]])).values()
    assert spec["endpoints"] == [{"ip": {"address": "10.0.9.9", "port": 8000}}]
    replica = endpoint("r-0", "http://10.0.9.9:8000", {"app": "a"}, replica="r-0")
    (spec,) = backends(run(service(), [[replica]])).values()
    assert spec["endpoints"] == [{"hostname": f"r-0.{NS}.replica.modelplane.internal",
                                  "ip": {"address": "10.0.9.9", "port": 8000}}]


def test_the_replica_host_is_unambiguous_and_bounded():
    assert replica_host("team-a", "llama-0") == "llama-0.team-a.replica.modelplane.internal"
    # A namespace is one label: "a.b" in "c" and "a" in "b" never share a Host.
    assert replica_host("c", "a.b") != replica_host("b", "a")
    long = replica_host("team", "x" * 253)
    assert len(long) <= 253 and long.endswith(".team.replica.modelplane.internal")
    assert long != replica_host("team", "x" * 252)


def test_the_cluster_gateway_selects_a_replica_by_its_host_and_by_no_header():
    out = compose(replica(standalone()))
    routes = {r["metadata"]["name"]: r for r in out.of_kind("HTTPRoute")}
    assert len(routes) == 2
    (fleet,) = [r for r in routes.values() if r["spec"].get("hostnames")]
    mr = out.status
    assert fleet["spec"]["hostnames"] == [replica_host(NS, "llama-us-east-1-0")]
    assert fleet["spec"]["rules"][0]["matches"] == [{"path": {"type": "PathPrefix",
                                                              "value": "/"}}]
    (path,) = [r for r in routes.values() if r is not fleet]
    assert [m["path"]["value"] for rule in path["spec"]["rules"] for m in rule["matches"]] \
        == [f"/{NS}/llama-us-east-1-0"]
    assert not any("headers" in m for r in routes.values() for rule in r["spec"]["rules"]
                   for m in rule["matches"])
    assert fleet["spec"]["rules"][0]["backendRefs"] == path["spec"]["rules"][0]["backendRefs"]
    assert mr["endpoint"].endswith(f"/{NS}/llama-us-east-1-0")


# --- health, retries, tiers --------------------------------------------------------

def healthy_replicas(deployment, n):
    out = replicas(deployment, n)
    for me in out:
        me["spec"]["healthPath"] = "/health"
    return out


def test_replicas_are_checked_through_their_gateway_and_judged_by_their_answers():
    rsp = run(service(((1, {"modelplane.ai/deployment": "a"}),)),
              [healthy_replicas("a", 2)])
    (policy,) = policies(rsp)
    assert policy["targetRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                     "name": route(rsp)["metadata"]["name"],
                                     "sectionName": "rule-0"}]
    assert route(rsp)["spec"]["rules"][0]["name"] == "rule-0"
    health = policy["healthCheck"]
    assert health["active"]["http"] == {"path": "/health", "expectedStatuses": [200]}
    assert health["active"]["interval"] == "2s"
    assert health["passive"]["consecutiveLocalOriginFailures"] == 1
    assert health["passive"]["maxEjectionPercent"] == 100
    assert health["panicThreshold"] == 0
    assert policy["retry"]["retryOn"] == {
        "triggers": ["connect-failure", "reset", "retriable-status-codes"],
        "httpStatusCodes": [429, 502, 503, 504]}
    assert policy["retry"]["numRetries"] == 2
    assert "numAttemptsPerPriority" not in policy["retry"]
    # One Envoy cluster for the rule: no backendRef has filters of its own.
    assert all("filters" not in ref for ref in route(rsp)["spec"]["rules"][0]["backendRefs"])


def test_the_platform_sets_the_check_interval_and_spec_retry_the_attempts():
    door = copy.deepcopy(DOOR)
    door["spec"]["frontDoor"]["healthCheck"] = {"interval": "500ms"}
    rsp = run(service(((1, {"modelplane.ai/deployment": "a"}),),
                      retry={"attempts": 4, "interval": "50ms"}),
              [healthy_replicas("a", 1)], door=[door])
    (policy,) = policies(rsp)
    assert policy["healthCheck"]["active"]["interval"] == "500ms"
    assert policy["healthCheck"]["active"]["timeout"] == "500ms"
    assert policy["retry"]["numRetries"] == 4
    assert policy["retry"]["perRetry"] == {"backOff": {"baseInterval": "50ms"}}


def test_an_endpoint_without_a_health_path_is_judged_by_its_answers_alone():
    provider = endpoint("provider", "http://10.0.9.9:8000", {"provider": "p"})
    rsp = run(service(((1, {"modelplane.ai/deployment": "a"}), (1, {"provider": "p"}))),
              [healthy_replicas("a", 1), [provider]])
    (policy,) = policies(rsp)
    assert "active" not in policy["healthCheck"]
    assert "passive" in policy["healthCheck"]


def test_a_fallback_sharing_the_cluster_is_envoys_priority_one():
    ms = service(((1, {"modelplane.ai/deployment": "a"}),), ((1, {"provider": "p"}),))
    provider = endpoint("provider", "http://10.0.9.9:8000", {"provider": "p"},
                        healthPath="/health")
    rsp = run(ms, [healthy_replicas("a", 2)], [[provider]])
    refs = route(rsp)["spec"]["rules"][0]["backendRefs"]
    specs = backends(rsp)
    assert [specs[r["name"]].get("fallback", False) for r in refs] == [False, False, True]
    (policy,) = policies(rsp)
    assert policy["retry"]["numAttemptsPerPriority"] == 2
    assert policy["healthCheck"]["active"]["http"]["path"] == "/health"
    assert composite(rsp)["status"]["active"] == "Primary"
    assert "Fallback entries take what they cannot serve: fallback[0] 100% over 1 " \
        "endpoint" in routed(rsp).message
    # No primary left: the fallback alone, as before (priority 0).
    alone = run(ms, [[]], [[provider]])
    (spec,) = backends(alone).values()
    assert "fallback" not in spec
    assert composite(alone)["status"]["active"] == "Fallback"


def test_a_fallback_that_cannot_share_the_cluster_waits_for_the_control_plane():
    # A provider with a credential needs a filter of its own, so a cluster of its
    # own, and Envoy would choose it by weight: the control plane keeps it out while
    # a primary serves.
    ms = service(((1, {"modelplane.ai/deployment": "a"}),), ((1, {"provider": "p"}),))
    provider = endpoint("provider", "http://10.0.9.9:8000", {"provider": "p"},
                        auth={"secretRef": {"name": "key"}})
    rsp = run(ms, [healthy_replicas("a", 2)], [[provider]])
    assert len(route(rsp)["spec"]["rules"][0]["backendRefs"]) == 2
    assert not any(s.get("fallback") for s in backends(rsp).values())
    (policy,) = policies(rsp)
    assert "numAttemptsPerPriority" not in policy["retry"]


def test_rules_needing_different_checks_get_policies_of_their_own():
    ms = service(((1, {"modelplane.ai/deployment": "a"}),), rules=[
        {"name": "ext", "matches": [{"headers": [{"name": "x-ext", "value": "1"}]}],
         "endpoints": [{"selector": {"matchLabels": {"provider": "p"}}}]}])
    provider = endpoint("provider", "http://10.0.9.9:8000", {"provider": "p"})
    rsp = run(ms, [healthy_replicas("a", 1)], required_extra={
        "model-endpoints/rule-0-primary-0": [provider]})
    by_rule = {ref["sectionName"]: p for p in policies(rsp) for ref in p["targetRefs"]}
    assert set(by_rule) == {"rule-0", "rule-1"}
    assert "active" not in by_rule["rule-0"]["healthCheck"]
    assert by_rule["rule-1"]["healthCheck"]["active"]["http"]["path"] == "/health"


def test_an_invalid_health_path_makes_the_endpoint_unusable():
    me = endpoint("bad", "http://10.0.0.1", {"app": "a"}, healthPath="/health?x=1")
    rsp = run(service(), [[me]])
    assert "ModelEndpoint bad (spec.healthPath '/health?x=1' must be a path" \
        in routed(rsp).message


def test_durations_read_as_gateway_api_writes_them():
    assert milliseconds("2s") == 2000
    assert milliseconds("1m30s") == 90_000
    assert milliseconds("250ms") == 250
    assert milliseconds("1h") == 3_600_000


def test_conditions_say_nothing_of_a_removed_header():
    rsp = run(service(), [[endpoint("a")]])
    assert "x-modelplane-replica" not in str(conditions(rsp))


def test_replicas_behind_one_gateway_get_an_envoy_cluster_each():
    # Envoy keys a cluster's hosts by address: two replicas behind one cluster gateway
    # in one cluster would be one host with one of their Hosts (seen live: one of them
    # took the other's share). A filter on each backendRef keeps them apart.
    same = [endpoint(f"a-{i}", "http://10.0.0.1:8000", {"modelplane.ai/deployment": "a"},
                     rewritePath="/", replica=f"a-{i}", healthPath="/health") for i in range(2)]
    other = endpoint("b-0", "http://10.0.0.2:8000", {"modelplane.ai/deployment": "a"},
                     rewritePath="/", replica="b-0", healthPath="/health")
    rsp = run(service(((1, {"modelplane.ai/deployment": "a"}),)), [[*same, other]])
    refs = route(rsp)["spec"]["rules"][0]["backendRefs"]
    assert [ref["filters"] for ref in refs] == [
        [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [
            {"name": "x-modelplane-endpoint", "value": f"{NS}/{n}"}]}}]
        for n in ("a-0", "a-1", "b-0")]
    # Apart, they are no tier of one cluster either.
    ms = service(((1, {"modelplane.ai/deployment": "a"}),), ((1, {"app": "b"}),))
    fb = endpoint("fb", "http://10.0.0.2:8000", {"app": "b"}, rewritePath="/", replica="fb")
    tiers = run(ms, [[other]], [[fb]])
    assert [r["name"] for r in route(tiers)["spec"]["rules"][0]["backendRefs"]] \
        == [next(n for n, s in backends(tiers).items() if "b-0" in n)]
    # Distinct addresses share one cluster with no filter at all.
    alone = run(service(((1, {"modelplane.ai/deployment": "a"}),)), [[same[0], other]])
    assert all("filters" not in ref for ref in route(alone)["spec"]["rules"][0]["backendRefs"])


def test_a_backend_the_route_leaves_goes_one_reconcile_after_the_route_leaves_it():
    # Deleted with the route's update, a Backend Envoy Gateway sees gone first is an
    # invalid backendRef, answered 500 for its share (seen live, once, as a lost
    # cluster's replica left the route).
    from test_modelservice import observed_of
    two = healthy_replicas("a", 2)
    ms = service(((1, {"modelplane.ai/deployment": "a"}),))
    first = run(ms, [two])
    leaving = desired(first)["control-plane-backend-a-1"]
    second = run(ms, [two[:1]], observed=observed_of(first))
    assert len(route(second)["spec"]["rules"][0]["backendRefs"]) == 1
    assert desired(second)["control-plane-backend-a-1"]["spec"] == leaving["spec"]
    third = run(ms, [two[:1]], observed=observed_of(second))
    assert "control-plane-backend-a-1" not in desired(third)
