"""Envoy Gateway installed by a cluster's stack (spec.stack.envoyGateway: Managed).

Its chart's CRDs and controller, rendered at build time from the pinned module
(charts/gateway-helm): the CRDs with the other components', then the controller,
its RBAC, its certgen Job and its EnvoyGateway configuration, whose Backend API the
stack turns on per cluster (as a front door needs), and nothing of Helm's left.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import yaml
from builders import desired
from fleetgen import to_plain
from schemas import Schemas
from test_cluster_inventory import run_cluster
from test_cluster_stack import MANAGED, ROOT, install, ready, remote, stack_status

from function.cluster import stack, stackenvoy, stackgateway
from function.contract.stack import BY_FIELD, Tier

sys.path.insert(0, str(ROOT / "hack"))
import gen_stack  # noqa: E402
import vendor_charts  # noqa: E402

WITH_EG = {**MANAGED, "envoyGateway": {"mode": "Managed"}}
GATEWAY = {"gateway": {"mode": "Managed", "gatewayClassName": "inference"}}
CONFIG = stack.object_key("envoyGateway", "configmap-envoy-gateway-config")
DEPLOYMENT = stack.object_key("envoyGateway", "deployment-envoy-gateway")
JOB = stack.object_key("envoyGateway", "job-eg-gateway-helm-certgen-v1-9-1")


def envoy_objects(objs: dict) -> dict[str, dict]:
    return {k: v["spec"]["forProvider"]["manifest"] for k, v in objs.items()
            if k.startswith("stack-envoyGateway-")}


def config_of(objs: dict) -> dict:
    data = objs[CONFIG]["spec"]["forProvider"]["manifest"]["data"]
    return yaml.safe_load(data[stackenvoy.CONFIG_KEY])


def test_its_crds_come_first_with_the_others_then_its_controller():
    first = envoy_objects(desired(run_cluster(remote(**WITH_EG))))
    kinds = sorted({m["kind"] for m in first.values()})
    assert kinds == ["CustomResourceDefinition", "Namespace"]
    # Every CRD of the chart, Backend among them (the probe an External one observes).
    assert len(first) == 9 and stack.object_key("envoyGateway", BY_FIELD[
        "envoyGateway"].probe) in first
    objs, _ = install(remote(**WITH_EG))
    every = envoy_objects(objs)
    assert {m["kind"] for m in every.values()} >= {
        "Deployment", "ConfigMap", "Job", "ClusterRole", "Service", "ServiceAccount",
        "MutatingWebhookConfiguration"}
    schemas = Schemas()
    for key, manifest in every.items():
        assert objs[key]["spec"]["managementPolicies"] == stack.KEEP, key  # never deleted
        assert schemas.errors(to_plain(objs[key])) == [], key
        meta = manifest["metadata"]
        assert meta["labels"]["modelplane.ai/stack-component"] == "envoyGateway"
        assert meta["labels"].get("app.kubernetes.io/managed-by") != "Helm"
        assert not any(a.startswith("helm.sh/hook") for a in meta.get("annotations") or {}), key
        if meta.get("namespace"):
            assert meta["namespace"] == "envoy-gateway-system", key


def test_the_controller_is_the_pinned_version_and_ready_when_available():
    objs, _ = install(remote(**WITH_EG))
    deployment = objs[DEPLOYMENT]
    (container,) = deployment["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"][
        "containers"]
    assert container["image"] == "docker.io/envoyproxy/gateway:v1.9.1"
    assert container["args"] == ["server", "--config-path=/config/envoy-gateway.yaml"]
    assert deployment["spec"]["readiness"] == {"policy": "DeriveFromCelQuery",
                                               "celQuery": stack.AVAILABLE}


def test_its_certgen_job_is_ready_when_complete_kept_and_named_after_the_version():
    objs, _ = install(remote(**WITH_EG))
    job = objs[JOB]
    assert job["spec"]["readiness"] == {"policy": "DeriveFromCelQuery",
                                        "celQuery": stack.COMPLETE}
    spec = job["spec"]["forProvider"]["manifest"]["spec"]
    # No TTL: a Job deleted once done would be made again by its Object, and run again.
    assert "ttlSecondsAfterFinished" not in spec
    assert spec["template"]["spec"]["containers"][0]["command"] == ["envoy-gateway", "certgen"]
    assert gen_stack.versioned_job({"kind": "Job", "metadata": {"name": "x"}}, "v2.0.0-rc.1") \
        == {"kind": "Job", "metadata": {"name": "x-v2-0-0-rc-1"}}
    assert gen_stack.versioned_job({"kind": "Role", "metadata": {"name": "x"}}, "v1") \
        == {"kind": "Role", "metadata": {"name": "x"}}


def test_the_backend_api_is_on_by_default_and_off_when_declared_off():
    on, _ = install(remote(**WITH_EG))
    config = config_of(on)
    assert config["extensionApis"] == {"enableBackend": True}
    # The rest of the configuration is the chart's.
    assert config["gateway"] == {"controllerName": "gateway.envoyproxy.io/gatewayclass-controller"}
    assert config["provider"]["type"] == "Kubernetes"
    off, _ = install(remote(**{**WITH_EG, "envoyGateway": {"mode": "Managed",
                                                            "backendAPI": False}}))
    assert config_of(off)["extensionApis"] == {}
    # Nothing but the configuration differs.
    assert {k: v for k, v in on.items() if k != CONFIG} == \
        {k: v for k, v in off.items() if k != CONFIG}


def test_configuring_leaves_other_manifests_and_other_apis_alone():
    other = {"kind": "ConfigMap", "metadata": {"name": "lws-manager-config"},
             "data": {"a": "b"}}
    assert stackenvoy.configured(other, True) is other
    chart = {"kind": "ConfigMap", "metadata": {"name": stackenvoy.CONFIG_MAP},
             "data": {stackenvoy.CONFIG_KEY: "extensionApis:\n  enableEnvoyPatchPolicy: true\n"}}
    got = yaml.safe_load(stackenvoy.configured(chart, True)["data"][stackenvoy.CONFIG_KEY])
    assert got == {"extensionApis": {"enableBackend": True, "enableEnvoyPatchPolicy": True}}
    assert chart["data"][stackenvoy.CONFIG_KEY].startswith("extensionApis:\n  enableEnvoyPatch")
    assert stackenvoy.backend_api({}) and not stackenvoy.backend_api({"backendAPI": False})


def test_installed_once_every_object_is_ready_and_progressing_while_its_job_runs():
    objs, observed = install(remote(**WITH_EG))
    assert [c["phase"] for c in stack_status(run_cluster(remote(**WITH_EG), observed=observed))
            if c["name"] == "envoyGateway"] == ["Installed"]
    observed[JOB] = ready(objs[JOB], "False")
    (eg,) = [c for c in stack_status(run_cluster(remote(**WITH_EG), observed=observed))
             if c["name"] == "envoyGateway"]
    assert (eg["phase"], eg["reason"]) == ("Progressing", "Installing")
    assert "job-eg-gateway-helm-certgen-v1-9-1" in eg["message"]


def test_the_chart_is_rendered_from_its_values_template_with_every_placeholder_filled():
    component = BY_FIELD["envoyGateway"]
    chart = component.chart
    assert chart is not None
    version = vendor_charts.pinned(component.tool, component.module)
    src = vendor_charts.module_dir(component.tool, component.module, version)
    filled = vendor_charts.filled_values(chart, src, version)
    assert "${" not in filled and f"docker.io/envoyproxy/gateway:{version}" in filled
    # A placeholder the table does not fill fails the build, not the rendering.
    with pytest.raises(SystemExit, match="GatewayImage"):
        vendor_charts.filled_values(dataclasses.replace(chart, template_values=()), src, version)
    # The Gateway API CRDs are the gatewayAPI component's: the chart's copies stay off.
    flags = vendor_charts.flags(chart, version, "values.yaml")
    assert flags[flags.index("--values") + 1] == "values.yaml"
    assert "crds.enabled=false" in flags
    rendered = json.loads((ROOT / "function/cluster/stackdata/envoyGateway.json").read_text())
    assert not [o for o in rendered["objects"] if o["tier"] == Tier.CONTROLLERS
                and o["manifest"]["kind"] == "CustomResourceDefinition"]


def test_its_labels_say_the_pinned_version_not_the_modules_placeholder(tmp_path):
    # The module's Chart.yaml says v0.0.0-latest until Envoy Gateway's release stamps it.
    component = BY_FIELD["envoyGateway"]
    chart = component.chart
    assert chart is not None and chart.stamp_version
    version = vendor_charts.pinned(component.tool, component.module)
    src = vendor_charts.module_dir(component.tool, component.module, version)
    folder = vendor_charts.stamped(chart, src, version, tmp_path)
    meta = yaml.safe_load((folder / "Chart.yaml").read_text())
    assert (meta["version"], meta["appVersion"]) == (version, version)
    assert "latest" in (src / chart.path / "Chart.yaml").read_text()  # the module's untouched
    rendered = json.loads((ROOT / "function/cluster/stackdata/envoyGateway.json").read_text())
    labels = [o["manifest"]["metadata"]["labels"] for o in rendered["objects"]
              if "app.kubernetes.io/version" in o["manifest"]["metadata"].get("labels", {})]
    assert labels and {(x["app.kubernetes.io/version"], x["helm.sh/chart"]) for x in labels} \
        == {(version, f"gateway-helm-{version}")}
    # A chart without a version to stamp fails the build.
    bare = tmp_path / "bare"
    (bare / chart.path).mkdir(parents=True)
    (bare / chart.path / "Chart.yaml").write_text("apiVersion: v2\nname: x\n")
    with pytest.raises(SystemExit, match="no version and appVersion"):
        vendor_charts.stamped(chart, bare, version, tmp_path / "out")

# --- the GatewayClass of the stack's Gateway -----------------------------------------

def test_with_envoy_gateway_installed_the_gateways_class_comes_with_the_gateway():
    first = desired(run_cluster(remote(**WITH_EG, **GATEWAY)))
    assert stackgateway.CLASS_KEY not in first  # the Gateways' tier, once the rest is Ready
    objs, _ = install(remote(**WITH_EG, **GATEWAY))
    obj = objs[stackgateway.CLASS_KEY]
    cls = obj["spec"]["forProvider"]["manifest"]
    assert (cls["kind"], cls["metadata"]["name"]) == ("GatewayClass", "inference")
    # The controller Envoy Gateway's configuration (the chart's, as rendered) names.
    config = config_of(objs)
    assert cls["spec"] == {"controllerName": config["gateway"]["controllerName"]}
    assert cls["spec"]["controllerName"] == "gateway.envoyproxy.io/gatewayclass-controller"
    assert cls["metadata"]["labels"]["modelplane.ai/stack-component"] == "envoyGateway"
    assert obj["spec"]["managementPolicies"] == stack.KEEP
    assert obj["spec"]["readiness"] == {"policy": "SuccessfulCreate"}
    assert Schemas().errors(to_plain(obj)) == []
    gateway = objs[stackgateway.GATEWAY_KEY]["spec"]["forProvider"]["manifest"]
    assert gateway["spec"]["gatewayClassName"] == "inference"


def test_without_envoy_gateway_installed_the_class_is_the_platforms():
    for envoy in ({}, {"envoyGateway": {"mode": "External"}}):
        objs, _ = install(remote(**MANAGED, **envoy, **GATEWAY))
        assert stackgateway.GATEWAY_KEY in objs and stackgateway.CLASS_KEY not in objs


def test_a_class_the_provider_cannot_apply_fails_the_gateway_with_its_message():
    ic = remote(**WITH_EG, **GATEWAY)
    objs, observed = install(ic)
    observed[stackgateway.CLASS_KEY] = {**objs[stackgateway.CLASS_KEY], "status": {
        "conditions": [{"type": "Ready", "status": "False"},
                       {"type": "Synced", "status": "False", "reason": "ReconcileError",
                        "message": "spec.controllerName: Invalid value: field is immutable"}]}}
    (got,) = [c for c in stack_status(run_cluster(ic, observed=observed))
              if c["name"] == "gateway"]
    assert (got["phase"], got["reason"]) == ("Failed", "ReconcileError")
    assert "immutable" in got["message"]
