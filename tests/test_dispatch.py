"""RunFunction dispatches on the composite's kind and never raises."""

from __future__ import annotations

from builders import composite, load_one, request
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.kit import requeue

from function.runtime import fn


def fatal_messages(rsp: fnv1.RunFunctionResponse) -> list[str]:
    return [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]


def test_an_unknown_kind_is_fatal_with_the_kinds_it_handles():
    rsp = fn.run_function(request({"apiVersion": "example.org/v1", "kind": "Bucket",
                                   "metadata": {"name": "b"}}))
    (msg,) = fatal_messages(rsp)
    assert "cannot compose Bucket (example.org/v1)" in msg
    assert ("InferenceCluster, InferenceQuota, ModelCache, ModelDeployment, ModelEndpoint, "
            "ModelReplica, ModelService") in msg


def test_a_known_kind_of_another_group_is_not_ours():
    rsp = fn.run_function(request({"apiVersion": "other.io/v1", "kind": "ModelDeployment",
                                   "metadata": {"name": "x"}}))
    assert "cannot compose ModelDeployment (other.io/v1)" in fatal_messages(rsp)[0]


def test_a_request_without_a_composite_is_fatal():
    rsp = fn.run_function(fnv1.RunFunctionRequest())
    assert "a request without an observed composite" in fatal_messages(rsp)[0]


def test_the_response_echoes_the_request_tag():
    req = request({"apiVersion": "example.org/v1", "kind": "Bucket"})
    req.meta.tag = "abc"
    assert fn.run_function(req).meta.tag == "abc"


def test_each_kind_reaches_its_module(monkeypatch):
    seen = []
    for kind in fn.HANDLERS:
        monkeypatch.setitem(fn.HANDLERS, kind, lambda req, rsp, kind=kind: seen.append(kind))
    for kind in ("InferenceCluster", "ModelDeployment", "ModelReplica"):
        fn.run_function(request({"apiVersion": "modelplane.ai/v1alpha1", "kind": kind}))
    assert seen == ["InferenceCluster", "ModelDeployment", "ModelReplica"]


def test_a_handler_that_raises_becomes_a_fatal_result_and_drops_partial_output(monkeypatch):
    def broken(req, rsp):
        rsp.desired.resources["half-built"].resource.update({"kind": "Oops"})
        raise ZeroDivisionError("boom")

    monkeypatch.setitem(fn.HANDLERS, "ModelReplica", broken)
    rsp = fn.run_function(request({"apiVersion": "modelplane.ai/v1alpha1",
                                   "kind": "ModelReplica"}))
    assert "internal error composing ModelReplica: ZeroDivisionError: boom" in \
        fatal_messages(rsp)[0]
    assert "half-built" not in rsp.desired.resources


def test_an_invalid_deployment_is_fatal_and_names_the_rule():
    md = load_one("examples/deployments/single-gpu.yaml")
    md["spec"]["template"]["spec"]["engines"][0]["phase"] = "Decode"
    (msg,) = fatal_messages(fn.run_function(request(md)))
    assert "engine phase is only allowed under serving mode PrefillDecode" in msg


def test_a_schema_invalid_deployment_is_fatal_with_the_path():
    md = load_one("examples/deployments/single-gpu.yaml")
    md["spec"]["replicas"] = "three"
    (msg,) = fatal_messages(fn.run_function(request(md)))
    assert "spec.replicas" in msg


def test_the_inference_cluster_reports_pool_capacity():
    ic = load_one("examples/fleet/us-east-1.yaml")
    rsp = fn.run_function(request(ic, required={"model-replicas": []}))
    pools = composite(rsp)["status"]["nodePools"]
    assert all(p["usedNodes"] == 0 and p["freeNodes"] == p["nodes"] for p in pools)


def test_a_cluster_whose_provider_config_is_missing_is_not_ready_and_says_why():
    ic = load_one("examples/fleet/eu-west-1.yaml")
    assert ic["spec"]["providerConfigRef"]["name"]
    rsp = fn.run_function(request(ic, required={"model-replicas": [], "provider-config": []}))
    (reachable,) = [c for c in rsp.conditions if c.type == "Reachable"]
    assert reachable.status == fnv1.STATUS_CONDITION_FALSE
    assert reachable.reason == "ProviderConfigMissing"
    assert ic["spec"]["providerConfigRef"]["name"] in reachable.message
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
    # Crossplane does not watch the config: look again soon, not in a minute.
    assert rsp.meta.ttl.ToTimedelta() == requeue.WAITING


def test_a_cluster_whose_provider_config_exists_is_ready():
    ic = load_one("examples/fleet/eu-west-1.yaml")
    pc = {"apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "ClusterProviderConfig",
          "metadata": {"name": ic["spec"]["providerConfigRef"]["name"]}}
    rsp = fn.run_function(request(ic, required={"model-replicas": [], "provider-config": [pc]}))
    assert rsp.desired.composite.ready == fnv1.READY_TRUE
    assert rsp.meta.ttl.ToTimedelta() > requeue.WAITING


class _Log:
    """What fn.run_function does with a logger: bind, then log."""

    def __init__(self, lines: list, bound: dict | None = None):
        self.lines, self.bound = lines, bound or {}

    def bind(self, **kw):
        return _Log(self.lines, {**self.bound, **kw})

    def __getattr__(self, level):
        return lambda event, **kw: self.lines.append((level, event, {**self.bound, **kw}))


def test_each_request_logs_with_crossplanes_tag_and_the_composites_kind_and_name():
    req = request(load_one("examples/fleet/us-east-1.yaml"), required={"model-replicas": []})
    req.meta.tag = "reconcile-1234"
    lines: list = []
    fn.run_function(req, _Log(lines))
    assert lines and all(b["tag"] == "reconcile-1234" and b["kind"] == "InferenceCluster"
                         and b["name"] == "us-east-1" for _, _, b in lines)
