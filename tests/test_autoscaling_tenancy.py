"""Where KEDA queries, and what, is not a tenant's to choose (#33 finding 10).

KEDA runs on the control plane with the platform's access: a tenant-chosen
Prometheus address would make it query any URL from there, and a raw query
without its namespace would read other namespaces' metrics. So the platform
names its servers in the EnvironmentConfig modelplane-autoscaling and tenants
refer to one by name (function/scheduler/prometheus.py), and every series
selector of a raw query must carry namespace="<the deployment's namespace>"
(function/contract/promql.py). A refusal is a False Autoscaling condition that
keeps whatever autoscaler exists; placement goes on.
"""

from __future__ import annotations

import copy

import pytest
from builders import EXAMPLES, desired, load, load_one
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from fleetgen import World, condition, fatal, placements
from schemas import Schemas

from function.contract import promql
from function.contract.api import PROMETHEUS_SERVERS, REQUIRE_PROMETHEUS_SERVERS
from function.scheduler import autoscaling

FLEET = [d for d in load(EXAMPLES / "fleet") if d["kind"] == "InferenceCluster"]
PLATFORM = load_one(EXAMPLES / "platform" / "prometheus-servers.yaml")
SO, AUTH = autoscaling.KEY_SCALED_OBJECT, autoscaling.KEY_TRIGGER_AUTHENTICATION
NS = "ml-team"


def example(**prometheus) -> dict:
    md = load_one(EXAMPLES / "deployments" / "autoscaled.yaml")
    if prometheus:
        md["spec"]["autoscaling"]["prometheus"] = prometheus
    return md


def with_query(query: str) -> dict:
    md = example()
    md["spec"]["autoscaling"]["metrics"] = [{"query": query, "target": "1"}]
    return md


def servers(**entries) -> dict:
    env = copy.deepcopy(PLATFORM)
    env["data"]["prometheusServers"] = entries
    return env


def run(md: dict, platform=(PLATFORM,), observed=None) -> fnv1.RunFunctionResponse:
    return World(md, FLEET, platform=platform, observed=observed).run()


def refused(rsp) -> tuple[str, str]:
    """(reason, message) of a False Autoscaling condition, placement having gone on."""
    assert not fatal(rsp)
    status, reason, message = condition(rsp, "Autoscaling")
    assert status == "False", message
    assert condition(rsp, "ReplicasScheduled")[0] == "True"
    return reason, message


def triggers(rsp) -> list[dict]:
    return desired(rsp)[SO]["spec"]["triggers"]


# --- the address is the platform's ----------------------------------------------------


def test_the_scheduler_requires_the_platforms_servers_by_name_only_while_autoscaling():
    rsp = World(example(), FLEET).run(resolved=False)
    sel = rsp.requirements.resources[REQUIRE_PROMETHEUS_SERVERS]
    assert (sel.api_version, sel.kind, sel.match_name) == (
        "apiextensions.crossplane.io/v1beta1", "EnvironmentConfig", PROMETHEUS_SERVERS)
    md = example()
    del md["spec"]["autoscaling"]
    assert REQUIRE_PROMETHEUS_SERVERS not in World(md, FLEET).run(
        resolved=False).requirements.resources


def test_a_tenant_chosen_address_is_refused_and_nothing_is_composed():
    md = example(address="http://169.254.169.254/latest/meta-data/")
    reason, message = refused(run(md))
    assert reason == "InvalidAutoscaling"
    assert "prometheus.address is the platform's to choose" in message
    assert "no ScaledObject is composed until it is fixed" in message
    assert SO not in desired(run(md))


def test_switching_to_an_address_keeps_the_running_scaled_object_as_it_was():
    world = World(example(), FLEET, platform=[PLATFORM])
    world.step()
    before = copy.deepcopy(world.observed[SO])
    world.md["spec"]["autoscaling"]["prometheus"] = {"address": "http://evil.example.com"}
    rsp = world.run()
    assert desired(rsp)[SO]["spec"] == before["spec"]
    reason, message = refused(rsp)
    assert reason == "InvalidAutoscaling"
    assert message.endswith("the ScaledObject is kept as it was until it is fixed")


@pytest.mark.parametrize("prometheus, address", [
    ({"server": "default"}, "http://prometheus.monitoring.svc:9090"),
    ({}, "http://prometheus.monitoring.svc:9090"),
    ({"server": "tenancy"}, "https://thanos-querier.monitoring.svc:9092"),
], ids=["named", "default", "another"])
def test_the_triggers_query_the_server_the_platform_defines(prometheus, address):
    md = example(**prometheus) if prometheus else example()
    if not prometheus:
        del md["spec"]["autoscaling"]["prometheus"]
    rsp = run(md)
    assert condition(rsp, "Autoscaling")[1] == "Pending"
    assert {t["metadata"]["serverAddress"] for t in triggers(rsp)} == {address}
    # And KEDA asks for the tenant's namespace, which a tenancy proxy enforces.
    assert {t["metadata"]["namespace"] for t in triggers(rsp)} == {NS}


@pytest.mark.parametrize("platform, reason, said", [
    ((), "UnknownPrometheusServer", "EnvironmentConfig modelplane-autoscaling "
                                    "(data.prometheusServers) does not exist"),
    ((servers(other={"address": "http://p:9090"}),), "UnknownPrometheusServer",
     "defines no Prometheus server 'default' (it defines: other)"),
    ((servers(default={"address": "file:///etc/passwd"}),), "InvalidPrometheusServer",
     "server 'default' is malformed: address must be an http(s) URL"),
    ((servers(default={"address": "http://p:9090", "authModes": "bearer;x"}),),
     "InvalidPrometheusServer", "authModes must be"),
    ((servers(default="http://p:9090"),), "InvalidPrometheusServer", "not an object"),
], ids=["no-environment-config", "unknown-server", "bad-address", "bad-auth-modes", "not-an-object"])
def test_a_server_the_platform_does_not_define_is_refused_and_says_why(platform, reason, said):
    md = example(server="default", authSecret={"name": "prometheus-reader"})
    got, message = refused(run(md, platform=platform))
    assert got == reason
    assert said in message
    assert SO not in desired(run(md, platform=platform))


def test_an_unknown_server_keeps_the_running_scaled_object():
    world = World(example(), FLEET, platform=[PLATFORM])
    world.step()
    before = copy.deepcopy(world.observed[SO])
    world.platform = []  # the platform removed its EnvironmentConfig
    rsp = world.run()
    assert desired(rsp)[SO]["spec"] == before["spec"]
    assert refused(rsp)[0] == "UnknownPrometheusServer"
    assert len(placements(rsp)) == 1


def test_before_the_servers_are_resolved_nothing_new_is_composed():
    rsp = World(example(), FLEET).run(resolved=False)
    assert SO not in desired(rsp)
    assert condition(rsp, "Autoscaling")[1] == "Resolving"


def test_a_server_the_platform_authenticates_to_uses_its_cluster_trigger_authentication():
    schemas = Schemas()
    rsp = run(example(server="tenancy"))
    assert AUTH not in desired(rsp)
    for t in triggers(rsp):
        assert t["authenticationRef"] == {"name": "prometheus-platform-reader",
                                          "kind": "ClusterTriggerAuthentication"}
        assert t["metadata"]["authModes"] == "bearer"
    assert schemas.errors(desired(rsp)[SO]) == []


def test_a_tenant_token_beside_the_platforms_authentication_is_refused():
    md = example(server="tenancy", authSecret={"name": "prometheus-reader"})
    reason, message = refused(run(md))
    assert reason == "InvalidAutoscaling"
    assert "ClusterTriggerAuthentication prometheus-platform-reader; remove authSecret" in message


# --- raw queries read their own namespace only ------------------------------------------


@pytest.mark.parametrize("query", [
    "sum(vllm:num_requests_waiting)",
    'sum(vllm:num_requests_waiting{namespace="team-b"})',
    'sum(vllm:num_requests_waiting{namespace=~"ml-team|team-b"})',
    'sum(vllm:num_requests_waiting{namespace!="ml-team"})',
    'sum(x{namespace="ml-team"}) + sum(y)',
    'max_over_time(sum(x{namespace="ml-team"} or y)[5m:1m])',
    'sum(x{namespace="ml-team" or job="a"})',
    'sum(x{job="namespace=\\"ml-team\\""})',
    'sum(up) # namespace="ml-team"',
    'label_replace(x{namespace="team-b"}, "namespace", "ml-team", "", "")',
], ids=["no-matcher", "another-namespace", "regex", "negation", "one-side", "subquery-or",
        "or-alternative", "in-a-string", "in-a-comment", "relabelled"])
def test_a_query_that_may_read_another_namespace_is_refused(query):
    reason, message = refused(run(with_query(query)))
    assert reason == "InvalidAutoscaling"
    assert "metrics[0]: query a query selects its own namespace" in message
    assert 'not carry namespace="ml-team"' in message


@pytest.mark.parametrize("query", [
    'sum(vllm:num_requests_waiting{namespace="ml-team"})',
    'sum(rate(x{namespace="ml-team",job="a"}[2m])) / sum(y{namespace="ml-team"})',
    'sum(x{namespace="ml-team", namespace="team-b"})',  # matches nothing: still bounded
    'sum(x{namespace="ml-team" or namespace="ml-team", job="a"}) + vector(1)',
], ids=["plain", "binary", "two-matchers", "or-both"])
def test_a_query_of_its_own_namespace_is_composed_as_written(query):
    rsp = run(with_query(query))
    assert [t["metadata"]["query"] for t in triggers(rsp)] == [query]


def test_the_engine_metric_queries_pass_the_same_check():
    md = example()
    md["spec"]["autoscaling"]["metrics"] = [
        {"engineMetric": m.value, "target": "1"} for m in autoscaling.EngineMetric]
    rsp = run(md)
    assert condition(rsp, "Autoscaling")[1] == "Pending"
    queries = [t["metadata"]["query"] for t in triggers(rsp)]
    assert len(queries) == len(autoscaling.EngineMetric)
    assert [q for q in queries if promql.unscoped(q, NS)] == []
