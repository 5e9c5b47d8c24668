"""Refusals that keep tenants apart (#33 finding 11).

- A model's workloads land in a namespace named like its own, on the control
  plane and on every workload cluster: a ModelDeployment, ModelReplica or
  ModelCache in kube-*, default, the platform's or the gateways' namespaces is
  refused (a Fatal result, which keeps whatever exists). CRD validation rules
  cannot see an object's namespace (only apiVersion, kind, metadata.name and
  generateName), so the API server's half is a ValidatingAdmissionPolicy in
  security/admission.yaml (e2e/tests/test_security.py).
- An InferenceQuota that fails validation closes the namespaces it selects to
  new replicas instead of being skipped (a cap nobody can evaluate is no cap);
  one whose selection cannot be read at all closes every namespace.
"""

from __future__ import annotations

import pytest
import yaml
from cel_expr_python import cel
from builders import EXAMPLES, ROOT, conditions, desired, load_one, request
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from composer_support import compose, replica
from crossplane.function import resource
from fleetgen import (
    World,
    cluster,
    condition,
    deployment,
    device,
    fatal,
    key,
    own_replica,
    placements,
    pool,
    stamp,
    status,
)

from function.contract.api import REQUIRE_NAMESPACES, REQUIRE_QUOTA_CLUSTERS, REQUIRE_QUOTAS
from function.contract.names import RESERVED_NAMESPACES, reserved_namespace
from function.runtime import fn

H100 = device("gpu", "H100", count=8)
RESERVED = ["kube-system", "kube-public", "kube-node-lease", *RESERVED_NAMESPACES]


# --- reserved namespaces ------------------------------------------------------------------


def test_the_reserved_namespaces_are_the_ones_the_admission_policy_names():
    docs = list(yaml.safe_load_all((ROOT / "security" / "admission.yaml").read_text()))
    (policy,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
                 and d["metadata"]["name"] == "modelplane-reserved-namespaces"]
    expression = policy["spec"]["validations"][0]["expression"]
    assert "startsWith('kube-')" in expression
    for ns in RESERVED_NAMESPACES:
        assert f"'{ns}'" in expression
    assert {r for rule in policy["spec"]["matchConstraints"]["resourceRules"]
            for r in rule["resources"]} == {"modeldeployments", "modelreplicas", "modelcaches",
                                            "modelservices", "modelendpoints"}


def test_every_namespace_the_serving_stack_installs_into_is_reserved():
    from function.contract import stack
    namespaces = {c.chart.namespace for c in stack.COMPONENTS if c.chart is not None}
    assert "lws-system" in namespaces
    assert {ns for ns in namespaces if not reserved_namespace(ns)} == set()


@pytest.mark.parametrize("namespace", ["lws-system", "kube-system", "default"])
def test_a_service_in_a_reserved_namespace_keeps_its_route_and_says_why(namespace):
    ms = load_one(EXAMPLES / "services" / "llama.yaml")
    ms["metadata"]["namespace"] = namespace
    rsp = fn.run_function(request(ms))
    routed = conditions(rsp)["Routed"]
    assert (routed.status, routed.reason) == (fnv1.STATUS_CONDITION_FALSE, "InvalidSpec")
    assert f"metadata.namespace: {namespace} is reserved" in routed.message
    assert desired(rsp) == {}


@pytest.mark.parametrize("namespace", ["lws-system", "kube-public"])
def test_an_endpoint_in_a_reserved_namespace_is_never_used(namespace):
    from function.composer.modelservice.endpoint import check
    me = next(d for d in yaml.safe_load_all((EXAMPLES / "services" / "endpoints.yaml")
                                            .read_text()) if d and d["kind"] == "ModelEndpoint")
    me["metadata"]["namespace"] = namespace
    bad = check(me)
    assert bad is not None and bad.reason == "ReservedNamespace"
    assert f"{namespace} is reserved" in str(bad)


@pytest.mark.parametrize("namespace", [*RESERVED, "kube", "kubeflow", "defaults", "ml-team"])
def test_the_admission_policy_and_the_function_agree_on_every_namespace(namespace):
    """The policy's CEL, compiled and run (CEL-C++, as devicecel uses it) with the
    request's namespace, refuses exactly what the function refuses."""
    docs = list(yaml.safe_load_all((ROOT / "security" / "admission.yaml").read_text()))
    (policy,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
                 and d["metadata"]["name"] == "modelplane-reserved-namespaces"]
    env = cel.NewEnv(variables={"request.namespace": cel.Type.STRING})
    (rule,) = policy["spec"]["validations"]
    admitted = env.compile(rule["expression"]).eval(
        env.Activation({"request.namespace": namespace})).value()
    assert admitted is not reserved_namespace(namespace)
    message = env.compile(rule["messageExpression"]).eval(
        env.Activation({"request.namespace": namespace})).value()
    assert message.startswith(f"namespace {namespace} is reserved")


@pytest.mark.parametrize("namespace", RESERVED)
def test_a_deployment_in_a_reserved_namespace_is_refused_and_keeps_what_exists(namespace):
    md = deployment("llama", namespace=namespace)
    mr = own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))
    rsp = World(md, [cluster("a", pool("h100", 4, H100))], observed={key("a", 0): mr}).run()
    (message,) = fatal(rsp)
    assert message.startswith(f"ModelDeployment {namespace}/llama is invalid: "
                              f"metadata.namespace: {namespace} is reserved")
    assert "models run in a namespace of their own" in message


@pytest.mark.parametrize("namespace", ["kube", "defaults", "team-kube-system", "ml-team"])
def test_a_namespace_that_only_looks_reserved_is_not(namespace):
    rsp = World(deployment("llama", namespace=namespace),
                [cluster("a", pool("h100", 4, H100))]).run()
    assert not fatal(rsp)
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}


def test_a_replica_in_a_reserved_namespace_composes_nothing():
    out = compose(replica(namespace="kube-system"))
    assert out.desired == {}
    (message,) = out.fatal
    assert "metadata.namespace: kube-system is reserved" in message


def test_a_cache_in_a_reserved_namespace_is_refused():
    mc = load_one(EXAMPLES / "caches" / "qwen3-8b.yaml")
    mc["metadata"]["namespace"] = "default"
    rsp = fn.run_function(request(mc))
    assert [r.message for r in rsp.results if "is reserved" in r.message]
    assert desired(rsp) == {}


# --- an invalid InferenceQuota closes its namespaces --------------------------------------


def bad_quota(**spec) -> dict:
    """A quota the schema refuses (a negative limit), selecting as `spec` says."""
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceQuota",
            "metadata": {"name": "broken"},
            "spec": {"limits": [{"name": "h100", "devices": -1}], **spec}}


def namespace(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def run(world: World, quotas, namespaces=()):
    req = world.request()
    for name, objs in {REQUIRE_QUOTAS: quotas, REQUIRE_QUOTA_CLUSTERS: world.clusters,
                       REQUIRE_NAMESPACES: namespaces}.items():
        for obj in objs:
            req.required_resources[name].items.add().resource.CopyFrom(
                resource.dict_to_struct(obj))
    return fn.run_function(req)


CLUSTERS = [cluster("a", pool("h100", 4, H100)), cluster("b", pool("h100", 4, H100))]


@pytest.mark.parametrize("selection, namespaces", [
    ({"namespaces": ["ml-team"]}, ()),
    ({"namespaceSelector": {"matchLabels": {"team": "ml"}}}, [namespace("ml-team", team="ml")]),
], ids=["by-name", "by-labels"])
def test_an_invalid_quota_closes_the_namespaces_it_selects_to_new_replicas(selection, namespaces):
    rsp = run(World(deployment("llama"), CLUSTERS), [bad_quota(**selection)], namespaces)
    assert placements(rsp) == {}
    (entry,) = status(rsp)["unscheduled"]
    assert entry["reason"].startswith("0/2 clusters fit replica 0: 2 are closed to namespace "
                                      "ml-team: InferenceQuota broken is invalid (")
    assert condition(rsp, "ReplicasScheduled")[:2] == ("False", "Unschedulable")
    assert any("InferenceQuota broken is invalid and closes its namespaces" in r.message
               for r in rsp.results)


def test_an_invalid_quota_leaves_the_namespaces_it_does_not_select_alone():
    rsp = run(World(deployment("llama"), CLUSTERS), [bad_quota(namespaces=["team-b"])])
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}


@pytest.mark.parametrize("selection", [
    {"namespaces": "ml-team"},
    {"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]}},
    {"namespaceSelector": "team=ml"},
    {},
], ids=["names-not-a-list", "unknown-selector", "selector-not-an-object", "selects-nothing"])
def test_an_invalid_quota_whose_selection_cannot_be_read_closes_every_namespace(selection):
    rsp = run(World(deployment("llama", namespace="team-z"), CLUSTERS), [bad_quota(**selection)])
    assert placements(rsp) == {}
    assert "closed to namespace team-z: InferenceQuota broken is invalid" in \
        status(rsp)["unscheduled"][0]["reason"]


def test_replicas_already_placed_stay_under_an_invalid_quota():
    md = deployment("llama", replicas=2)
    mr = own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))
    world = World(md, CLUSTERS, observed={key("a", 0): mr})
    rsp = run(world, [bad_quota(namespaces=["ml-team"])])
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}
    assert key("a", 0) in desired(rsp)
