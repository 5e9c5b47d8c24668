"""The serving stack on the local control plane (e2e/controlplane/stack.py): which
CRDs the harness leaves to each cluster's stack, what waits for them, and what the
start-up waits on. Pure: the example fleet and the vendored crds/ in, decisions out.
"""

from __future__ import annotations

import functools
import types
import pathlib

from e2e.controlplane import addons, dataplane, fleet, stack
from function.contract.stack import spec_errors

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "fleet"


@functools.cache
def vendored() -> tuple[pathlib.Path, ...]:
    return tuple(addons.cluster_crds(ROOT))


def example_plan() -> fleet.FleetPlan:
    ics, _ = stack.declare(fleet.load_fleet(EXAMPLES))
    return dataplane.with_data_plane(fleet.plan_fleet(ics))


def test_a_fleet_without_stacks_gets_managed_remote_and_observed_control_plane_stacks():
    ics, said = stack.declare(fleet.load_fleet(EXAMPLES))
    stacks = {ic["metadata"]["name"]: ic["spec"]["stack"] for ic in ics}
    assert stacks["eu-west-1"]["leaderWorkerSet"] == {"mode": "Managed"}
    assert stacks["eu-west-1"]["envoyGateway"] == {"mode": "Managed"}
    assert {e["mode"] for e in stacks["us-east-1"].values()} == {"External"}
    assert len(said) == len(ics)
    assert "InferenceCluster eu-west-1: spec.stack gatewayAPI Managed, inferenceExtension " \
        "Managed, leaderWorkerSet Managed, envoyGateway Managed, draDriver External, " \
        "gateway Managed" in said
    # The Gateway spec.gateway names: the stack's on a remote cluster, of the class the
    # harness's Envoy Gateway serves; observed on the control plane's (the harness's).
    assert stacks["eu-west-1"]["gateway"] == {"mode": "Managed", "gatewayClassName": "eg"}
    assert stacks["us-east-1"]["gateway"] == {"mode": "External"}
    # The DRA driver the harness stands in for (its slices and classes): observed
    # wherever a pool declares a DRA device, as every example cluster's does.
    assert all(s["draDriver"] == {"mode": "External"} for s in stacks.values())
    # What the harness declares passes the function's own rules.
    assert all(spec_errors(ic["spec"]) == [] for ic in ics)


def test_a_cluster_without_dra_devices_declares_no_dra_driver():
    ics = fleet.load_fleet(EXAMPLES)
    for p in ics[0]["spec"]["nodePools"]:
        p["devices"] = [{**d, "claim": "Synthetic"} for d in p.get("devices") or []]
    out, _ = stack.declare(ics)
    assert "draDriver" not in out[0]["spec"]["stack"]
    assert "draDriver" in out[1]["spec"]["stack"]


def test_a_stack_the_fleet_declares_is_left_as_written():
    ics = fleet.load_fleet(EXAMPLES)
    ics[0]["spec"]["stack"] = {"gatewayAPI": {"mode": "External"}}
    out, said = stack.declare(ics)
    assert out[0]["spec"]["stack"] == {"gatewayAPI": {"mode": "External"}}
    assert not any(ics[0]["metadata"]["name"] + ":" in line for line in said)
    assert "stack" not in fleet.load_fleet(EXAMPLES)[1]["spec"]  # copies, not the input


def test_only_remote_clusters_have_anything_managed():
    plan = example_plan()
    assert stack.managed(plan, fleet.CONTROL_PLANE) == frozenset()
    assert stack.managed(plan, "eu-west-1") == {"gatewayAPI", "inferenceExtension",
                                                "leaderWorkerSet", "envoyGateway"}
    assert stack.stack_clusters(plan) == [n for n, c in plan.clusters.items() if c.remote]


def test_the_harness_leaves_exactly_the_managed_components_crds_to_the_stack():
    files = vendored()
    by_stack = stack.installed_by_stack(files, ROOT / "crds", {"leaderWorkerSet"})
    assert sorted(addons.crd_names(by_stack)) == [
        "disaggregatedsets.disaggregatedset.x-k8s.io",
        "leaderworkersets.leaderworkerset.x-k8s.io"]
    everything = stack.installed_by_stack(files, ROOT / "crds", stack.REMOTE_STACK)
    names = set(addons.crd_names(everything))
    assert {"httproutes.gateway.networking.k8s.io", "gateways.gateway.networking.k8s.io",
            "inferencepools.inference.networking.k8s.io"} <= names
    # Envoy Gateway's CRDs, all eight of its chart; the PodMonitor's stay the harness's.
    assert len([n for n in names if n.endswith("gateway.envoyproxy.io")]) == 8
    assert not [n for n in names if "monitoring" in n]


def test_the_gateway_manifests_wait_for_the_stack_and_the_rest_do_not():
    plan = example_plan()
    files = stack.installed_by_stack(vendored(), ROOT / "crds",
                                     stack.managed(plan, "eu-west-1"))
    now, later = stack.split_manifests(plan.clusters["eu-west-1"].manifests,
                                       stack.served_groups(files))
    # The Gateway (and its namespace) are the stack's: the harness brings the class only,
    # and the EnvoyProxy it names (of the stack's Envoy Gateway CRDs).
    assert [m["kind"] for m in later] == ["EnvoyProxy", "GatewayClass"]
    assert {"Node", "ResourceSlice", "DeviceClass"} <= {m["kind"] for m in now}
    assert "gateway-system" not in {m["metadata"]["name"] for m in now if m["kind"] == "Namespace"}
    assert len(now) + len(later) == len(plan.clusters["eu-west-1"].manifests)


def test_the_stack_composes_the_remote_gateways_and_the_harness_the_control_planes():
    plan = example_plan()
    remote = [n for n, c in plan.clusters.items() if c.remote]
    assert remote and all(stack.composes_gateways(plan, n) for n in remote)
    assert not stack.composes_gateways(plan, fleet.CONTROL_PLANE)
    local = plan.clusters[fleet.CONTROL_PLANE].manifests
    assert {"GatewayClass", "Gateway"} <= {m["kind"] for m in local}


def test_controllers_wait_only_for_the_components_they_watch():
    assert stack.waits_for_stack("lws", frozenset({"leaderWorkerSet"}))
    assert not stack.waits_for_stack("lws", frozenset({"gatewayAPI"}))
    assert stack.waits_for_stack("envoy-gateway", frozenset({"inferenceExtension"}))
    assert not stack.waits_for_stack("envoy-gateway", frozenset())


def test_the_start_up_waits_until_each_named_cluster_says_stack_ready():
    def ic(name, *conds):
        return {"metadata": {"name": name}, "status": {"conditions": list(conds)}}
    ready = {"type": "StackReady", "status": "True"}
    progressing = {"type": "StackReady", "status": "False", "reason": "Progressing",
                   "message": "gatewayAPI Progressing: 3 of 10 objects Ready"}
    items = [ic("a", ready), ic("b", progressing), ic("c")]
    assert stack.not_stack_ready(items, ["a"]) == []
    assert stack.not_stack_ready(items, ["a", "b", "c", "d"]) == [
        "b: StackReady=False (Progressing: gatewayAPI Progressing: 3 of 10 objects Ready)",
        "c: StackReady not reported yet", "d: StackReady not reported yet"]


def test_the_local_lws_manager_stands_in_only_where_the_stack_installs_no_controller(
        monkeypatch):
    managed = frozenset({"gatewayAPI", "inferenceExtension", "leaderWorkerSet"})
    # This contract's LWS component installs its controller (the chart's Deployment):
    # the harness starts none on a cluster whose stack manages LWS, and still does on
    # one where LWS is External.
    assert stack.runs_controller("leaderWorkerSet")
    assert stack.stack_runs("lws", managed)
    assert not stack.stack_runs("lws", frozenset({"gatewayAPI"}))
    assert not stack.stack_runs("envoy-gateway", managed)
    # A contract whose stack installed LWS's CRDs only: the harness runs the manager.
    monkeypatch.setitem(stack.BY_FIELD, "leaderWorkerSet", types.SimpleNamespace(controllers=False))
    assert not stack.stack_runs("lws", managed)


def test_the_local_envoy_gateway_stands_in_for_the_pod_of_the_controller_the_stack_installs():
    with_eg = frozenset({"gatewayAPI", "inferenceExtension", "envoyGateway"})
    # The stack installs its Deployment; the pod is kwok's and the harness's process
    # does the work, started once the stack's CRDs (its own among them) are served.
    assert stack.stack_installs("envoy-gateway", with_eg)
    assert not stack.stack_runs("envoy-gateway", with_eg)
    assert stack.starts_after_stack("envoy-gateway", with_eg)
    assert not stack.stack_installs("envoy-gateway", frozenset({"gatewayAPI"}))
    assert stack.REMOTE_STACK["envoyGateway"] == {"mode": "Managed"}
    assert stack.CONTROL_PLANE_STACK["envoyGateway"] == {"mode": "External"}


def test_the_stacks_lws_manager_serves_once_available_and_both_webhooks_have_a_ca():
    def config(name, *bundles):
        return {"metadata": {"name": name},
                "webhooks": [{"clientConfig": {"service": {"name": "lws-webhook-service"},
                                               **({"caBundle": b} if b else {})}}
                             for b in bundles]}
    mutating, validating = stack.LWS_WEBHOOK_CONFIGURATIONS
    available = {"status": {"availableReplicas": 1}}
    assert stack.lws_not_serving(None, []) == [
        "no Deployment lws-system/lws-controller-manager",
        f"{mutating}: no CA bundle yet", f"{validating}: no CA bundle yet"]
    assert stack.lws_not_serving({"status": {}}, [
        config(mutating, "Q0E=", ""), config(validating, "Q0E=", "Q0E=")]) == [
        "Deployment lws-system/lws-controller-manager: no available replica",
        f"{mutating}: no CA bundle yet"]
    assert stack.lws_not_serving(available, [
        config(mutating, "Q0E=", "Q0E="), config(validating, "Q0E=", "Q0E="),
        config("other", "")]) == []


def test_the_harness_waits_for_each_gateway_the_stack_composes_by_namespace_and_name():
    expected = [("gateway-system", "inference-gateway")]
    there = {"metadata": {"namespace": "gateway-system", "name": "inference-gateway"}}
    elsewhere = {"metadata": {"namespace": "default", "name": "inference-gateway"}}
    assert stack.not_composed(expected, [there]) == []
    assert stack.not_composed(expected, [elsewhere]) == [
        "Gateway gateway-system/inference-gateway not there yet"]
