"""The quota function: what the selected namespaces hold against each limit."""

from __future__ import annotations

from builders import composite, conditions, request
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from fleetgen import cluster, deployment, device, engine, own_replica, pool, product_is, req, \
    standalone, stamp

from function.contract.api import REQUIRE_CLUSTERS, REQUIRE_NAMESPACES, REQUIRE_REPLICAS
from function.runtime import fn

H100 = device("gpu", "H100", count=8)
A100 = device("gpu", "A100", count=8)
FLEET = [cluster("a", pool("h100", 4, H100)), cluster("b", pool("a100", 4, A100))]


def quota(*, namespaces=("ml-team",), selector=None, cel=product_is("H100"), devices=16):
    spec: dict = {"limits": [{"name": "h100", "devices": devices, "selectors": [{"cel": cel}]},
                             {"name": "all", "devices": 100}]}
    if namespaces:
        spec["namespaces"] = list(namespaces)
    if selector is not None:
        spec["namespaceSelector"] = {"matchLabels": selector}
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceQuota",
            "metadata": {"name": "team-a"}, "spec": spec}


def held(name: str, cluster_name: str, pool_name: str, namespace: str = "ml-team") -> dict:
    members = [standalone(req("gpu", 8, product_is("H100", "A100")))]
    md = deployment(name, engine("vllm", *members), namespace=namespace)
    return own_replica(md, cluster_name, 0, {"vllm": pool_name}, created=stamp(1))


def run(iq, replicas=(), namespaces=None):
    required = {REQUIRE_REPLICAS: list(replicas), REQUIRE_CLUSTERS: FLEET}
    if namespaces is not None:
        required[REQUIRE_NAMESPACES] = namespaces
    return fn.run_function(request(iq, required=required))


def test_each_limit_counts_the_matching_devices_of_the_selected_namespaces():
    rsp = run(quota(), [held("x", "a", "h100"), held("y", "b", "a100"),
                        held("z", "a", "h100", namespace="elsewhere")])
    status = composite(rsp)["status"]
    assert status["limits"] == [{"name": "h100", "used": 8, "devices": 16},
                                {"name": "all", "used": 16, "devices": 100}]
    assert status["summary"] == "h100: 8/16, all: 16/100"
    assert conditions(rsp)["WithinLimits"].status == fnv1.STATUS_CONDITION_TRUE
    assert rsp.desired.composite.ready == fnv1.READY_TRUE


def test_a_namespace_selector_selects_through_the_namespaces_labels():
    iq = quota(namespaces=(), selector={"org": "research"})
    labelled = [{"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": "elsewhere", "labels": {"org": "research"}}}]
    rsp = run(iq, [held("x", "a", "h100"), held("z", "a", "h100", namespace="elsewhere")],
              labelled)
    assert composite(rsp)["status"]["limits"][0]["used"] == 8
    assert rsp.requirements.resources[REQUIRE_NAMESPACES].match_labels.labels == {
        "org": "research"}


def test_over_a_limit_is_reported_and_says_the_schedulers_repair_it():
    rsp = run(quota(devices=4), [held("x", "a", "h100")])
    c = conditions(rsp)["WithinLimits"]
    assert (c.status, c.reason) == (fnv1.STATUS_CONDITION_FALSE, "OverQuota")
    assert c.message == ("h100: 8 of 4 devices; the youngest replicas beyond a limit wait, "
                         "removed by their deployments' next reconcile; the oldest stay")


def test_an_invalid_selector_is_a_false_condition_not_an_exception():
    rsp = run(quota(cel="device.attributes["), [held("x", "a", "h100")])
    c = conditions(rsp)["LimitsValid"]
    assert (c.status, c.reason) == (fnv1.STATUS_CONDITION_FALSE, "InvalidSelector")
    assert "limit 'h100': invalid CEL selector" in c.message


def test_a_quota_selecting_no_namespace_is_fatal_with_the_xrds_words():
    iq = quota(namespaces=())
    rsp = run(iq)
    [fatal] = [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert "a quota selects namespaces (namespaces, namespaceSelector or both) or is the " \
        "default for every namespace no other quota selects (default: true), not both" in \
        fatal.message


def test_a_malformed_replica_is_left_out_with_a_warning_never_an_exception():
    bad = held("x", "a", "h100")
    bad["spec"]["engines"][0]["members"] = 7
    rsp = run(quota(), [bad, held("y", "a", "h100")])
    assert composite(rsp)["status"]["limits"][0]["used"] == 8
    assert any("is malformed and left out of the quota's use" in r.message for r in rsp.results)
