"""Router EndpointPicker under Unified: an InferencePool and endpoint picker over every
serving pod, instead of a Service; the engines' pods exactly as under router Service."""

from __future__ import annotations

import copy

import pytest
import yaml
from composer_support import REMOTE, compose, gang, replica, standalone, template

from function.composer import kinds

POOL = ("inference.networking.k8s.io/v1", "InferencePool")


def unified(*engines, router: str | None = "EndpointPicker", **kw) -> dict:
    mr = replica(*engines, **kw)
    if router:
        mr["spec"]["serving"]["router"] = router
    return mr


def picker_config(out) -> dict:
    return yaml.safe_load(out.one("ConfigMap")["data"]["epp-config.yaml"])


def workloads(out) -> dict:
    return {k: m for k, m in out.manifests().items()
            if m["kind"] in ("Deployment", "LeaderWorkerSet") and k != "epp"}


def test_router_service_is_the_default_and_composes_as_before():
    mr = replica(standalone(copies=2))
    assert compose(unified(standalone(copies=2), router="Service")).desired == \
        compose(mr).desired
    assert {m["kind"] for m in compose(mr).manifests().values()} == {
        "Deployment", "ResourceClaimTemplate", "Service", "HTTPRoute"}


def test_the_endpoint_picker_replaces_the_service():
    out = compose(unified(standalone(copies=4)))
    assert not out.fatal and not out.warnings
    services = [m["metadata"]["name"] for m in out.of_kind("Service")]
    assert services == [out.one("InferencePool")["spec"]["endpointPickerRef"]["name"]]
    pool = out.one("InferencePool")
    assert pool["spec"]["selector"]["matchLabels"] == {
        "modelplane.ai/serving": "llama-us-east-1-0"}
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    for rule in [r for route in out.of_kind("HTTPRoute") for r in route["spec"]["rules"]]:
        assert rule["backendRefs"] == [{"group": "inference.networking.k8s.io",
                                        "kind": "InferencePool",
                                        "name": pool["metadata"]["name"]}]
    assert out.status["endpoint"] == "https://llm.us-east-1.example.com/ml-team/llama-us-east-1-0"


@pytest.mark.parametrize("engines", [(standalone(copies=2),), (gang("g"), standalone("s"))],
                         ids=["standalone", "gang-and-standalone"])
def test_the_engines_pods_are_exactly_as_under_router_service(engines):
    picked = compose(unified(*copy.deepcopy(engines)))
    served = compose(unified(*copy.deepcopy(engines), router=None))
    assert workloads(picked) == workloads(served)


def test_one_plain_profile_scores_prefix_cache_and_load():
    config = picker_config(compose(unified(standalone(
        template=template(args=["m", "--port", "8000", "--block-size", "32"])))))
    types = [p["type"] for p in config["plugins"]]
    assert types == ["single-profile-handler", "prefix-cache-scorer", "queue-scorer",
                     "kv-cache-utilization-scorer", "max-score-picker"]
    assert config["plugins"][1]["parameters"]["blockSizeTokens"] == 32
    (profile,) = config["schedulingProfiles"]
    assert profile["name"] == "default"
    assert {p["pluginRef"]: p.get("weight") for p in profile["plugins"]} == {
        "max-score-picker": None, "prefix-cache-scorer": 2, "queue-scorer": 1,
        "kv-cache-utilization-scorer": 1}
    assert "featureGates" not in config  # no P/D decider to feed


def test_engines_with_different_block_sizes_get_the_first_ones_and_a_warning():
    out = compose(unified(
        standalone("a", template=template(args=["m", "--block-size=32"])),
        standalone("b", template=template(args=["m", "--block-size=16"]))))
    assert picker_config(out)["plugins"][1]["parameters"]["blockSizeTokens"] == 32
    (warning,) = out.warnings
    assert "'a' 32, 'b' 16" in warning and "--block-size" in warning


def test_every_routing_object_is_routing_and_records_it():
    out = compose(unified(standalone(pool="l4-4x"), cluster=REMOTE))
    for key, obj in out.desired.items():
        role = kinds.role_of(obj)
        if key in ("vllm-deployment", "vllm-standalone-claims", "namespace"):
            assert role is not kinds.Role.ROUTE, key
        else:
            assert role is kinds.Role.ROUTE, key
    assert out.desired["epp"]["spec"]["readiness"]["celQuery"] == kinds.DEPLOYMENT.cel_ready
    assert out.desired["inferencepool"]["spec"]["readiness"]["celQuery"] == \
        kinds.KINDS[POOL].cel_ready


def test_a_malformed_setting_routes_nothing_and_keeps_the_workloads(monkeypatch):
    monkeypatch.setenv("MODELPLANE_EPP_REPLICAS", "many")
    out = compose(unified(standalone()))
    status, reason, message = out.condition("Routed")
    assert (status, reason) == ("False", "ServingConfigInvalid")
    assert "EndpointPicker" in message and "MODELPLANE_EPP_REPLICAS" in message
    assert set(out.desired) == {"vllm-deployment", "vllm-standalone-claims"}
    assert not out.fatal
