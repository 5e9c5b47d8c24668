"""spec.autoscaling becomes a KEDA ScaledObject on the control plane (issue #17).

The scheduler composes it from the spec alone (function/scheduler/autoscaling.py);
every composed KEDA object is validated against KEDA's own CRDs, vendored in
crds/keda from the pinned Go module (hack/vendor_crds.py).
"""

from __future__ import annotations

import copy
import pathlib
import re

import pytest
import yaml
from builders import EXAMPLES, ROOT, desired, load, load_one
import composer_support
from composer_support import as_composed, compose, inner, pod_templates
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from fleetgen import World, condition, fatal, placements
from schemas import Schemas

from function.contract import promql
from function.contract.api import LABEL_DEPLOYMENT
from function.contract.enums import EngineMetric
from function.runtime import fn
from function.scheduler import autoscaling

EXAMPLE = EXAMPLES / "deployments" / "autoscaled.yaml"
FLEET = [d for d in load(EXAMPLES / "fleet") if d["kind"] == "InferenceCluster"]
# The platform's Prometheus servers (an EnvironmentConfig the scheduler requires by name).
PLATFORM = load(EXAMPLES / "platform")
SO, AUTH = autoscaling.KEY_SCALED_OBJECT, autoscaling.KEY_TRIGGER_AUTHENTICATION
INVALID = sorted((ROOT / "tests" / "invalid").glob("md-autoscaling-*.yaml"))


@pytest.fixture(scope="module")
def schemas() -> Schemas:
    return Schemas()


def example() -> dict:
    return load_one(EXAMPLE)


def with_autoscaling(**changes) -> dict:
    md = example()
    md["spec"]["autoscaling"].update(changes)
    return md


def run(md: dict, observed: dict | None = None) -> fnv1.RunFunctionResponse:
    return World(md, FLEET, observed=observed, platform=PLATFORM).run()


def scaled_object(rsp) -> dict:
    return desired(rsp)[SO]


# --- what is composed ---------------------------------------------------------------


def test_the_example_composes_a_scaled_object_that_scales_the_deployment(schemas):
    rsp = run(example())
    so = scaled_object(rsp)
    assert so["apiVersion"] == "keda.sh/v1alpha1" and so["kind"] == "ScaledObject"
    assert so["metadata"]["namespace"] == "ml-team"
    assert so["spec"]["scaleTargetRef"] == {"apiVersion": "modelplane.ai/v1alpha1",
                                            "kind": "ModelDeployment", "name": "qwen3-8b"}
    assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (1, 4)
    assert so["spec"]["advanced"]["restoreToOriginalReplicaCount"] is False
    assert [t["type"] for t in so["spec"]["triggers"]] == ["prometheus", "prometheus"]
    assert not fatal(rsp)


def test_every_composed_keda_object_validates_against_kedas_crds(schemas):
    rsp = run(example())
    objs = [desired(rsp)[SO], desired(rsp)[AUTH]]
    assert [o["kind"] for o in objs] == ["ScaledObject", "TriggerAuthentication"]
    for obj in objs:
        assert schemas.errors(obj) == [], obj["kind"]


def test_a_schema_violation_in_a_scaled_object_is_caught_by_the_vendored_crd(schemas):
    """The validation above can fail: KEDA's schema knows its fields."""
    so = scaled_object(run(example()))
    so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"][
        "selectPolicy"] = {"not": "a string"}
    so["spec"]["triggers"][0]["unknownField"] = True
    errors = schemas.errors(so)
    assert any("selectPolicy" in e for e in errors) and any("unknownField" in e for e in errors)


def test_the_bearer_token_comes_from_the_named_secret_through_a_trigger_authentication():
    rsp = run(example())
    auth = desired(rsp)[AUTH]
    assert auth["spec"]["secretTargetRef"] == [
        {"parameter": "bearerToken", "name": "prometheus-reader", "key": "token"}]
    for t in scaled_object(rsp)["spec"]["triggers"]:
        assert t["authenticationRef"] == {"name": auth["metadata"]["name"]}
        assert t["metadata"]["authModes"] == "bearer"


def test_without_an_auth_secret_no_trigger_authentication_is_composed():
    md = example()
    del md["spec"]["autoscaling"]["prometheus"]["authSecret"]
    rsp = run(md)
    assert AUTH not in desired(rsp)
    assert all("authenticationRef" not in t for t in scaled_object(rsp)["spec"]["triggers"])


# --- the queries select this deployment's engine pods, and the pods carry the labels --


def test_engine_metric_queries_select_this_deployments_pods_by_namespace_and_label():
    triggers = scaled_object(run(example()))["spec"]["triggers"]
    for t in triggers:
        q = t["metadata"]["query"]
        assert 'namespace="ml-team"' in q and 'modelplane_ai_deployment="qwen3-8b"' in q, q
        assert t["metadata"]["serverAddress"] == "http://prometheus.monitoring.svc:9090"
    queue, ttft = triggers
    assert (queue["metricType"], queue["metadata"]["threshold"]) == ("AverageValue", "5")
    assert queue["metadata"]["query"].startswith("sum(")
    assert (ttft["metricType"], ttft["metadata"]["threshold"]) == ("Value", "0.5")
    assert ttft["metadata"]["query"].startswith("histogram_quantile(0.9, ")


@pytest.mark.parametrize("metric", list(EngineMetric), ids=str)
def test_every_engine_metric_reads_both_vllm_and_sglang(metric):
    query, metric_type = autoscaling.engine_query(metric, "ns", "dep")
    names = re.search(r'__name__=~"([^"]+)"', query).group(1).split("|")
    assert any(n.startswith("vllm:") for n in names) and any(
        n.startswith("sglang:") for n in names), names
    assert metric_type in ("AverageValue", "Value")
    assert promql.syntax_errors(query) == []  # Prometheus' grammar accepts it
    assert promql.unscoped(query, "ns") == []  # and it reads its own namespace only


def test_every_engine_pod_of_a_placed_replica_carries_the_labels_the_queries_select():
    """The composer stamps `modelplane.ai/deployment` on every pod; the scrape names it
    modelplane_ai_deployment, which is what the triggers select on."""
    rsp = run(example())
    (mr,) = [d for k, d in desired(rsp).items() if k.startswith("replica-")]
    workloads = [inner(d) for d in compose(as_composed(mr)).desired.values()
                 if inner(d).get("kind") in ("Deployment", "LeaderWorkerSet")]
    assert workloads
    selector = autoscaling.selector("ml-team", "qwen3-8b")
    for workload in workloads:
        assert f'namespace="{workload["metadata"]["namespace"]}"' in selector
        for pod in pod_templates(workload):
            value = pod["metadata"]["labels"][LABEL_DEPLOYMENT]
            assert f'{autoscaling.prometheus_label(LABEL_DEPLOYMENT)}="{value}"' in selector


@pytest.mark.parametrize("engines, mode", [
    ([composer_support.gang(nodes=2)], "Unified"),
    ([composer_support.standalone("prefill", pool="h100-8x"),
      composer_support.standalone("decode", pool="h100-8x")], "PrefillDecode"),
], ids=["gang", "prefill-decode"])
def test_every_pod_of_every_topology_carries_the_deployment_label(engines, mode):
    """Gang workers and both disaggregated engines too: their metrics are the deployment's."""
    if mode == "PrefillDecode":
        engines[0]["phase"], engines[1]["phase"] = "Prefill", "Decode"
    mr = composer_support.replica(*engines, mode=mode, deployment="dep")
    pods = [pod for d in compose(mr).desired.values()
            if inner(d).get("kind") in ("Deployment", "LeaderWorkerSet")
            for pod in pod_templates(inner(d))]
    assert len(pods) >= 2
    assert all(pod["metadata"]["labels"][LABEL_DEPLOYMENT] == "dep" for pod in pods)


def test_a_raw_query_of_its_own_namespace_is_passed_through_as_written():
    query = 'sum(rate(http_requests_total{job="x",namespace="ml-team"}[2m]))'
    md = with_autoscaling(metrics=[{"query": query, "target": "100"}])
    (t,) = scaled_object(run(md))["spec"]["triggers"]
    assert t["metadata"]["query"] == query
    assert (t["metricType"], t["metadata"]["threshold"]) == ("AverageValue", "100")


# --- Kthena's behaviour on HPA's --------------------------------------------------------


def behavior(md: dict) -> dict:
    return scaled_object(run(md))["spec"]["advanced"]["horizontalPodAutoscalerConfig"][
        "behavior"]


def test_unset_behaviour_gets_kthenas_defaults():
    md = with_autoscaling()
    del md["spec"]["autoscaling"]["behavior"]
    b = behavior(md)
    stable = [{"type": "Pods", "value": 1, "periodSeconds": 15},
              {"type": "Percent", "value": 100, "periodSeconds": 15}]
    assert b["scaleUp"] == {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                            "policies": stable, "tolerance": "0.1"}
    assert b["scaleDown"] == {"stabilizationWindowSeconds": 300, "selectPolicy": "Max",
                              "policies": stable, "tolerance": "0.1"}


def test_panic_is_one_more_scale_up_policy_over_its_short_window():
    b = behavior(example())
    assert b["scaleUp"]["policies"][-1] == {"type": "Percent", "value": 100,
                                            "periodSeconds": 10}
    assert b["scaleUp"]["selectPolicy"] == "Max"
    assert len(b["scaleDown"]["policies"]) == 2  # panic is for scaling up only


def test_select_policy_and_takes_the_smaller_limit_and_tolerance_is_a_ratio():
    b = behavior(with_autoscaling(tolerancePercent=5, behavior={
        "scaleDown": {"stable": {"windowSeconds": 60, "instances": 2, "percent": 50,
                                 "selectPolicy": "And"}}}))
    assert b["scaleDown"] == {
        "stabilizationWindowSeconds": 60, "selectPolicy": "Min", "tolerance": "0.05",
        "policies": [{"type": "Pods", "value": 2, "periodSeconds": 15},
                     {"type": "Percent", "value": 50, "periodSeconds": 15}]}


# --- lifecycle and conditions -----------------------------------------------------------


def test_the_condition_waits_for_keda_then_reports_its_ready_state():
    world = World(example(), FLEET, platform=PLATFORM)
    rsp = world.step()
    assert condition(rsp, "Autoscaling")[:2] == ("False", "Pending")
    world.observed[SO]["status"] = {"conditions": [
        {"type": "Ready", "status": "False", "reason": "ScaledObjectCheckFailed",
         "message": "no prometheus at that address"}]}
    status, reason, message = condition(world.run(), "Autoscaling")
    assert (status, reason) == ("False", "ScaledObjectNotReady")
    assert "no prometheus at that address" in message
    world.observed[SO]["status"] = {"conditions": [
        {"type": "Ready", "status": "True", "reason": "ScaledObjectReady"}]}
    status, reason, message = condition(world.run(), "Autoscaling")
    assert (status, reason) == ("True", "Active")
    assert "between 1 and 4 on queueDepth (target 5)" in message


def test_removing_autoscaling_removes_the_scaled_object_and_keeps_spec_replicas():
    world = World(example(), FLEET, platform=PLATFORM)
    world.step()
    assert SO in world.observed and AUTH in world.observed
    # The autoscaler had scaled the deployment to 2 through the scale subresource.
    world.md["spec"]["replicas"] = 2
    del world.md["spec"]["autoscaling"]
    rsp = world.step()
    assert SO not in desired(rsp) and AUTH not in desired(rsp)
    assert len(placements(rsp)) == 2
    assert condition(rsp, "Autoscaling") == (
        "False", "Disabled",
        "spec.autoscaling is unset: the ScaledObject is removed and spec.replicas stays at 2")
    # Once it is gone, nothing is said about autoscaling any more.
    assert "Autoscaling" not in {c.type for c in world.run().conditions}


def test_a_deployment_without_autoscaling_composes_nothing_for_it():
    md = load_one(EXAMPLES / "deployments" / "single-gpu.yaml")
    rsp = run(md)
    assert not set(desired(rsp)) & set(autoscaling.KEYS)
    assert "Autoscaling" not in {c.type for c in rsp.conditions}


def test_more_replicas_than_the_fleet_holds_is_capacity_limited_with_reasons():
    md = example()
    md["spec"]["replicas"] = 20  # as the autoscaler would write it, within no fleet
    rsp = run(md)
    status, reason, message = condition(rsp, "CapacityLimited")
    held = len(placements(rsp))
    assert 0 < held < 20
    assert (status, reason) == ("True", "FleetFull")
    assert message.startswith(f"the autoscaler asks for 20 replicas and the fleet holds {held};")
    assert condition(rsp, "ReplicasScheduled")[:2] == ("False", "Unschedulable")
    # The ScaledObject's bounds are untouched by the shortfall.
    assert scaled_object(rsp)["spec"]["maxReplicaCount"] == 4


def test_within_capacity_says_so_and_without_autoscaling_nothing_is_said():
    assert condition(run(example()), "CapacityLimited") == (
        "False", "WithinCapacity", "the fleet holds all 1 replicas the autoscaler asks for")
    md = example()
    del md["spec"]["autoscaling"]
    assert "CapacityLimited" not in {c.type for c in run(md).conditions}


def test_the_scaled_object_is_composed_while_the_fleet_is_not_yet_resolved():
    """A desired resource missing from any response would be deleted."""
    world = World(example(), FLEET, platform=PLATFORM)
    world.step()
    rsp = world.run(resolved=False)
    assert desired(rsp)[SO] == desired(world.run())[SO]


def test_composition_is_byte_identical_across_runs():
    a = run(example()).SerializeToString(deterministic=True)
    b = run(example()).SerializeToString(deterministic=True)
    assert a == b


# --- bad input: a condition, never an exception ----------------------------------------


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_every_invalid_autoscaling_gets_a_false_condition_and_placement_goes_on(path):
    doc = yaml.safe_load(path.read_text().split("\n", 2)[2])
    rsp = run(doc)
    assert not fatal(rsp)
    status, reason, message = condition(rsp, "Autoscaling")
    assert (status, reason) == ("False", "InvalidAutoscaling"), message
    assert "no ScaledObject is composed until it is fixed" in message
    assert SO not in desired(rsp)
    assert condition(rsp, "ReplicasScheduled")[0] == "True"


def test_an_invalid_change_keeps_the_existing_scaled_object_as_it_was():
    world = World(example(), FLEET, platform=PLATFORM)
    world.step()
    before = copy.deepcopy(world.observed[SO])
    world.md["spec"]["autoscaling"]["minReplicas"] = 9
    rsp = world.run()
    after = desired(rsp)[SO]
    assert after["spec"] == before["spec"]
    assert after["metadata"]["name"] == before["metadata"]["name"]
    status, reason, message = condition(rsp, "Autoscaling")
    assert (status, reason) == ("False", "InvalidAutoscaling")
    assert message == ("spec.autoscaling is invalid: minReplicas must not exceed maxReplicas; "
                       "the ScaledObject is kept as it was until it is fixed")


@pytest.mark.parametrize("query, why", [
    ("sum(rate(vllm:num_requests_waiting[1m])", "unclosed left parenthesis"),
    ('sum(x{job="a})', 'unterminated quoted string "'),
    ("sum(x])", "unexpected right bracket ']'"),
    # What balanced brackets alone would let through:
    ("rate(x[5q])", "bad number or duration syntax: 5q"),
    ("sum by (pod) (x) +", "invalid promql query"),
])
def test_a_query_that_cannot_parse_is_refused_with_what_is_wrong(query, why):
    md = with_autoscaling(metrics=[{"query": query, "target": "1"}])
    status, reason, message = condition(run(md), "Autoscaling")
    assert (status, reason) == ("False", "InvalidAutoscaling")
    assert f"metrics[0]: query does not parse as PromQL: {why}" in message


@pytest.mark.parametrize("value", ["nonsense", 7, ["a"], {"maxReplicas": "four"}])
def test_autoscaling_of_the_wrong_shape_is_a_condition_not_an_exception(value):
    md = example()
    md["spec"]["autoscaling"] = value
    rsp = fn.run_function(World(md, FLEET, platform=PLATFORM).request())
    assert not fatal(rsp)
    assert condition(rsp, "Autoscaling")[:2] == ("False", "InvalidAutoscaling")


def test_the_example_and_every_engine_metric_are_documented():
    page = (ROOT / "docs" / "autoscaling.md").read_text()
    assert "examples/deployments/autoscaled.yaml" in page
    assert pathlib.Path(EXAMPLE).exists()
    assert [m.value for m in EngineMetric if f"`{m.value}`" not in page] == []

