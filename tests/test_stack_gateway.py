"""The Gateway a cluster's stack composes or observes (spec.stack.gateway): the one
spec.gateway names, last in install order, Ready when its class's controller has
Accepted it; External Gateways observed, on a remote cluster and on the control
plane's; the rules admission and the function both hold."""

from __future__ import annotations

import pytest
from builders import conditions, desired, request
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from fleetgen import to_plain
from schemas import Schemas
from test_cluster_inventory import h100_cluster, run_cluster
from test_cluster_stack import MANAGED, install, ready, remote, stack_ready, stack_status, with_stack

from function.cluster import stackgateway
from function.contract.stack import spec_errors
from function.runtime import fn

GATEWAY = {"gateway": {"mode": "Managed", "gatewayClassName": "eg"}}
KEY, NAMESPACE_KEY, PROBE_KEY = (stackgateway.GATEWAY_KEY, stackgateway.NAMESPACE_KEY,
                                 stackgateway.PROBE_KEY)


def manifest(obj: dict) -> dict:
    return obj["spec"]["forProvider"]["manifest"]


def entry(rsp) -> dict:
    return next(e for e in stack_status(rsp) if e["name"] == "gateway")


def observed_gateway(obj: dict, accepted: dict | None, *, ready_: bool = False,
                     generation: int = 1) -> dict:
    """The Object `obj` as observed: Ready or not, its Gateway with an Accepted condition."""
    gw = {**manifest(obj), "metadata": {**manifest(obj)["metadata"], "generation": generation}}
    if accepted is not None:
        gw["status"] = {"conditions": [{"type": "Accepted", "observedGeneration": generation,
                                        **accepted}]}
    return {**obj, "status": {"conditions": [{"type": "Ready",
                                              "status": "True" if ready_ else "False"},
                                             {"type": "Synced", "status": "True"}],
                              "atProvider": {"manifest": gw}}}


# --- Managed: last in install order --------------------------------------------------

def test_the_gateway_waits_for_every_components_objects_and_its_namespace_does_not():
    rsp = run_cluster(remote(**MANAGED, **GATEWAY))
    objs = desired(rsp)
    assert NAMESPACE_KEY in objs and KEY not in objs
    assert manifest(objs[NAMESPACE_KEY])["metadata"]["name"] == "gateway-system"
    assert entry(rsp)["phase"] == "Progressing" and entry(rsp)["reason"] == "Waiting"
    assert stack_ready(rsp)[0] == "False"


def test_once_the_components_are_ready_the_gateway_is_composed_as_spec_gateway_names_it():
    objs, _ = install(remote(**MANAGED, **GATEWAY))
    gw = manifest(objs[KEY])
    assert (gw["apiVersion"], gw["kind"]) == ("gateway.networking.k8s.io/v1", "Gateway")
    assert (gw["metadata"]["name"], gw["metadata"]["namespace"]) == ("gw", "gateway-system")
    assert gw["spec"] == {"gatewayClassName": "eg", "listeners": [{
        "name": "http", "protocol": "HTTP", "port": 80,
        "allowedRoutes": {"namespaces": {"from": "All"}}}]}
    spec = objs[KEY]["spec"]
    # Never deleted by the stack; Ready when its class's controller took this generation.
    assert spec["managementPolicies"] == ["Observe", "Create", "Update", "LateInitialize"]
    assert "Accepted" in spec["readiness"]["celQuery"] and spec["watch"] is True
    assert "observedGeneration" in spec["readiness"]["celQuery"]
    schemas = Schemas()
    for key in (KEY, NAMESPACE_KEY):
        assert schemas.errors(to_plain(objs[key])) == [], key


def test_the_gateway_once_composed_stays_while_a_component_flickers():
    objs, observed = install(remote(**MANAGED, **GATEWAY))
    flicker = {k: ready(v, "False") if k != KEY else v for k, v in observed.items()}
    assert KEY in desired(run_cluster(remote(**MANAGED, **GATEWAY), observed=flicker))


@pytest.mark.parametrize("address, port, want", [
    ("https://eu-west-1.example.com", None, 80),
    ("http://10.40.0.12:8080", None, 8080),
    ("http://10.40.0.12:8080", 9000, 9000),
    ("llm.example.com:8443", None, 8443),
])
def test_its_listener_port_is_the_stacks_else_the_addresss_else_80(address, port, want):
    ic = remote(**MANAGED, gateway={"mode": "Managed", "gatewayClassName": "eg",
                                    **({"port": port} if port else {})})
    ic["spec"]["gateway"]["address"] = address
    objs, _ = install(ic)
    assert manifest(objs[KEY])["spec"]["listeners"][0]["port"] == want


def test_a_gateway_in_a_components_namespace_has_an_object_of_its_own():
    ic = remote(**MANAGED, **GATEWAY)
    ic["spec"]["gateway"]["namespace"] = "lws-system"  # the LWS chart's namespace
    objs, _ = install(ic)
    names = [o["metadata"]["name"] for o in objs.values()]
    assert len(names) == len(set(names))


# --- What it reports ---------------------------------------------------------------

def reported(ic: dict, accepted: dict | None, **kw) -> tuple[dict, tuple]:
    objs, observed = install(ic)
    observed[KEY] = observed_gateway(objs[KEY], accepted, **kw)
    rsp = run_cluster(ic, observed=observed)
    return entry(rsp), stack_ready(rsp)


def test_accepted_the_gateway_is_installed_and_the_stack_ready():
    got, (status, _, _) = reported(remote(**MANAGED, **GATEWAY),
                                   {"status": "True", "reason": "Accepted"}, ready_=True)
    assert (got["phase"], got["reason"], got["mode"]) == ("Installed", "Accepted", "Managed")
    assert got["version"] == stackgateway.rendered("gatewayAPI").version
    assert status == "True"


@pytest.mark.parametrize("status_", ["Unknown", "False"])
def test_without_a_controller_the_gateway_is_progressing_and_says_so(status_):
    got, (status, reason, message) = reported(
        remote(**MANAGED, **GATEWAY),
        {"status": status_, "reason": "Pending", "message": "Waiting for controller"})
    assert (got["phase"], got["reason"]) == ("Progressing", "NotAccepted")
    assert "Waiting for controller" in got["message"]
    assert (status, reason) == ("False", "Progressing") and "gateway-system/gw" in message


def test_refused_by_its_controller_the_gateway_fails_with_the_controllers_word():
    got, (status, reason, _) = reported(
        remote(**MANAGED, **GATEWAY),
        {"status": "False", "reason": "InvalidParameters", "message": "no such EnvoyProxy"})
    assert (got["phase"], got["reason"]) == ("Failed", "NotAccepted")
    assert "no such EnvoyProxy" in got["message"] and (status, reason) == ("False", "Failed")


def test_accepted_for_an_older_generation_is_not_accepted():
    ic = remote(**MANAGED, **GATEWAY)
    objs, observed = install(ic)
    obj = observed_gateway(objs[KEY], {"status": "True", "reason": "Accepted"}, generation=2)
    obj["status"]["atProvider"]["manifest"]["status"]["conditions"][0]["observedGeneration"] = 1
    observed[KEY] = obj
    assert entry(run_cluster(ic, observed=observed))["phase"] == "Progressing"


def test_a_gateway_the_provider_cannot_apply_fails_with_its_message():
    ic = remote(**MANAGED, **GATEWAY)
    objs, observed = install(ic)
    observed[KEY] = {**objs[KEY], "status": {"conditions": [
        {"type": "Ready", "status": "False"},
        {"type": "Synced", "status": "False", "reason": "ReconcileError",
         "message": "gateways is forbidden"}]}}
    got = entry(run_cluster(ic, observed=observed))
    assert (got["phase"], got["reason"]) == ("Failed", "ReconcileError")
    assert "forbidden" in got["message"]


# --- External ----------------------------------------------------------------------

def test_an_external_gateway_on_a_remote_cluster_is_observed_not_composed():
    ic = remote(**MANAGED, gateway={"mode": "External"})
    objs, observed = install(ic)
    assert KEY not in objs and NAMESPACE_KEY not in objs
    probe = objs[PROBE_KEY]
    assert probe["spec"]["managementPolicies"] == ["Observe"]
    assert manifest(probe) == {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                               "metadata": {"name": "gw", "namespace": "gateway-system"}}
    # An observe-only manifest only names what to read: the Object is what must validate.
    envelope = to_plain(probe)
    envelope["spec"]["forProvider"]["manifest"] = {"apiVersion": "v1", "kind": "ConfigMap",
                                                   "metadata": {"name": "x"}}
    assert Schemas().errors(envelope) == []
    observed[PROBE_KEY] = observed_gateway(probe, {"status": "True"}, ready_=True)
    got = entry(run_cluster(ic, observed=observed))
    assert (got["phase"], got["mode"]) == ("Observed", "External")


def test_an_external_gateway_that_is_not_there_fails_and_says_what_to_do():
    ic = remote(**MANAGED, gateway={"mode": "External"})
    objs, observed = install(ic)
    observed[PROBE_KEY] = {**objs[PROBE_KEY], "status": {"conditions": [
        {"type": "Ready", "status": "False"},
        {"type": "Synced", "status": "False", "message": "not found"}]}}
    got = entry(run_cluster(ic, observed=observed))
    assert (got["phase"], got["reason"]) == ("Failed", "NotFound")
    assert "create it or mark stack.gateway Managed" in got["message"]


def control_plane(required_gateway: list | None) -> fnv1.RunFunctionResponse:
    ic = with_stack(h100_cluster(inventory={"source": "Declared"}),
                    gatewayAPI={"mode": "External"}, gateway={"mode": "External"})
    required = {"model-replicas": []}
    if required_gateway is not None:
        required[stackgateway.REQUIRE] = required_gateway
    return fn.run_function(request(ic, required=required))


def test_the_control_plane_clusters_gateway_is_required_by_name_and_judged():
    rsp = control_plane(None)
    req = rsp.requirements.resources[stackgateway.REQUIRE]
    assert (req.api_version, req.kind, req.match_name, req.namespace) == (
        "gateway.networking.k8s.io/v1", "Gateway", "gw", "gateway-system")
    assert entry(rsp)["reason"] == "NotObservedYet"
    assert entry(control_plane([]))["reason"] == "NotFound"
    accepted = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": "gw", "namespace": "gateway-system", "generation": 3},
                "status": {"conditions": [{"type": "Accepted", "status": "True",
                                           "observedGeneration": 3}]}}
    assert entry(control_plane([accepted]))["phase"] == "Observed"
    # Only the Gateway it names counts.
    other = {**accepted, "metadata": {**accepted["metadata"], "namespace": "elsewhere"}}
    assert entry(control_plane([other]))["reason"] == "NotFound"


# --- Rules (the XRD's CEL says the same: tests/invalid/ic-stack-gateway-*) ----------------

@pytest.mark.parametrize("stack, gateway, managed_on_control_plane, want", [
    ({"gateway": {"mode": "Managed", "gatewayClassName": "eg"}}, True, False,
     "stack.gateway needs stack.gatewayAPI"),
    ({**MANAGED, "gateway": {"mode": "Managed"}}, True, False, "needs gatewayClassName"),
    ({**MANAGED, "gateway": {"mode": "External", "port": 80}}, True, False,
     "shape the Gateway the stack composes: mode Managed"),
    ({**MANAGED, **GATEWAY}, False, False, "set spec.gateway's name and namespace"),
    ({"gatewayAPI": {"mode": "External"}, **GATEWAY}, True, True,
     "the control-plane cluster's stack (no providerConfigRef) only observes"),
])
def test_the_function_refuses_what_admission_refuses(stack, gateway, managed_on_control_plane,
                                                     want):
    ic = remote(**stack) if not managed_on_control_plane else with_stack(h100_cluster(), **stack)
    if not gateway:
        del ic["spec"]["gateway"]
    errors = spec_errors(ic["spec"])
    assert any(want in e for e in errors), errors
    rsp = run_cluster(ic)
    assert rsp.results and rsp.results[0].severity == fnv1.SEVERITY_FATAL
    assert not [k for k in desired(rsp) if k.startswith("stack-")]


def test_a_valid_gateway_stack_breaks_no_rule():
    assert spec_errors(remote(**MANAGED, **GATEWAY)["spec"]) == []
    assert spec_errors(remote(**MANAGED, gateway={"mode": "External"})["spec"]) == []
    rsp = run_cluster(remote(**MANAGED, **GATEWAY))
    assert not rsp.results and "StackReady" in conditions(rsp)
