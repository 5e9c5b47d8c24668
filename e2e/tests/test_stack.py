"""The serving stack on the live control plane (docs/clusters.md#the-serving-stack):
`make cluster` starts the remote clusters bare of Gateway API, the Inference
Extension, LeaderWorkerSet and Envoy Gateway, and each InferenceCluster's stack
installs them there through provider-kubernetes, LeaderWorkerSet's and Envoy
Gateway's controllers included, and then the Gateway spec.gateway names; the control
plane's stack observes what the harness installed (its Gateway too). Every other
scenario then runs on what the stacks installed."""

from __future__ import annotations

import pytest
from day2 import NAME, NS, clusters_of, deploy
from live import (
    IC,
    OBJECT,
    SETTLE,
    apply_docs,
    condition,
    delete_and_wait,
    fleet_ready,
    get,
    is_true,
    items,
    wait,
    wait_condition,
)

from e2e.controlplane import stack as harness_stack
from e2e.controlplane.core import ControlPlane
from function.cluster import stack, stackenvoy, stackgateway
from function.contract.stack import (
    BY_FIELD,
    DRA_DRIVER,
    GATEWAY,
    LABEL_COMPONENT,
    object_name,
    objects_namespace,
)

REMOTE = ("eu-west-1", "us-central-batch")
USAGE = "usages.protection.crossplane.io"


def test_kubectl_get_ic_shows_every_clusters_stack_ready(cp: ControlPlane):
    # Ready again after whatever ran before (make e2e: this scenario, run last, once
    # read eu-west-1 mid-restart of its LWS manager).
    fleet_ready(cp)
    table = cp.kubectl("get", IC).stdout.splitlines()
    assert "STACKREADY" in table[0].split(), table[0]
    at = table[0].index("STACKREADY")  # columns are aligned; FREE DEVICES holds spaces
    rows = {line.split()[0]: line[at:].split()[0] for line in table[1:]}
    assert rows == {name: "True" for name in rows} and len(rows) == 3, "\n".join(table)
    for ic in items(cp, IC):
        name = ic["metadata"]["name"]
        declared = ic["spec"]["stack"]
        entries = {e["name"]: e for e in ic["status"]["stack"]["components"]}
        assert set(entries) == set(declared), (name, entries)
        for field, entry in entries.items():
            managed = declared[field]["mode"] == "Managed"
            assert entry["phase"] == ("Installed" if managed else "Observed"), (name, entry)
            if field == DRA_DRIVER.field:  # observed through the DRA API, nothing rendered
                assert entry["version"] == DRA_DRIVER.version, (name, entry)
                continue
            written_in = GATEWAY.version_of if field == GATEWAY.field else field
            assert entry["version"] == stack.rendered(written_in).version, (name, entry)


def dra_driver(cp: ControlPlane, cluster: str) -> dict:
    ic = get(cp, IC, cluster) or {}
    (entry,) = [e for e in ic["status"]["stack"]["components"] if e["name"] == DRA_DRIVER.field]
    return entry


def test_a_remote_clusters_missing_device_class_takes_it_out_of_placement_until_it_is_back(
        cp: ControlPlane):
    """The harness publishes each cluster's DeviceClasses as a DRA driver's install would;
    the stack observes them through the inventory reporter. One gone: StackReady False,
    saying which pool's device names it; back: ready again."""
    fleet_ready(cp)
    cluster = REMOTE[0]
    ic = get(cp, IC, cluster) or {}
    pool, device = next((p["name"], d) for p in ic["spec"]["nodePools"]
                        for d in p.get("devices") or [] if d.get("claim", "DRA") == "DRA")
    handle = cp.cluster(cluster)
    original = get(cp, "deviceclasses", device["deviceClassName"], cluster=handle)
    assert original is not None, device
    assert dra_driver(cp, cluster)["phase"] == "Observed"
    keep = {k: original[k] for k in ("apiVersion", "kind", "spec")}
    keep["metadata"] = {k: original["metadata"][k] for k in ("name", "labels")
                        if k in original["metadata"]}
    cp.kubectl("delete", "deviceclass", device["deviceClassName"], cluster=handle)
    try:
        def failed() -> dict:
            entry = dra_driver(cp, cluster)
            if (entry["phase"], entry["reason"]) != ("Failed", "DeviceClassMissing"):
                raise AssertionError(entry)
            return entry
        entry = wait(f"{cluster}'s draDriver to miss DeviceClass {device['deviceClassName']}",
                     failed, SETTLE)
        assert f"pool {pool}'s device {device['name']} names DeviceClass " \
            f"{device['deviceClassName']}" in entry["message"], entry
        ready = wait_condition(cp, IC, cluster, None, "StackReady", SETTLE, status="False")
        assert "draDriver Failed" in condition(ready, "StackReady")["message"]
    finally:
        apply_docs(cp, [keep], cluster=handle)
    wait_condition(cp, IC, cluster, None, "StackReady", SETTLE)
    assert dra_driver(cp, cluster)["phase"] == "Observed"


@pytest.mark.parametrize("cluster", REMOTE)
def test_the_remote_clusters_crds_are_the_ones_the_stack_installed(cp: ControlPlane, cluster):
    managed = [f for f, e in harness_stack.REMOTE_STACK.items() if e["mode"] == "Managed"]
    for field in managed:
        for m in stack.rendered(field).objects:
            if m.manifest["kind"] != "CustomResourceDefinition":
                continue
            crd = get(cp, "customresourcedefinitions", m.name, cluster=cp.cluster(cluster))
            assert crd is not None, (cluster, m.name)
            assert crd["metadata"]["labels"].get(LABEL_COMPONENT) == field, (cluster, m.name)
            assert is_true(crd, "Established"), (cluster, m.name)
            # Its Object: Ready, and without Delete among its policies.
            obj = get(cp, OBJECT, object_name(cluster, m.name), objects_namespace())
            assert obj is not None and is_true(obj, "Ready"), (cluster, m.name, obj)
            assert "Delete" not in obj["spec"]["managementPolicies"]


@pytest.mark.parametrize("cluster", REMOTE)
def test_the_remote_clusters_lws_manager_is_the_stacks_and_runs_as_its_pod(cp: ControlPlane,
                                                                          cluster):
    """LeaderWorkerSet's controller comes from its chart through the stack; the harness
    runs the Deployment's pod as a process (e2e/controlplane/pods), and the gangs of
    every other scenario are admitted by its webhooks and reconciled by it."""
    at = cp.cluster(cluster)
    chart = BY_FIELD["leaderWorkerSet"].chart
    assert chart is not None
    deployment = get(cp, "deployments", "lws-controller-manager", chart.namespace, cluster=at)
    assert deployment is not None, cluster
    assert deployment["metadata"]["labels"][LABEL_COMPONENT] == "leaderWorkerSet"
    assert is_true(deployment, "Available"), deployment.get("status")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"registry.k8s.io/lws/lws:{stack.rendered('leaderWorkerSet').version}"
    obj = get(cp, OBJECT, object_name(cluster, "deployment-lws-controller-manager"),
              objects_namespace())
    assert obj is not None and is_true(obj, "Ready") and \
        "Delete" not in obj["spec"]["managementPolicies"]
    pods = items(cp, "pods", chart.namespace, "control-plane=controller-manager", cluster=at)
    assert [is_true(p, "Ready") for p in pods] == [True], [p.get("status") for p in pods]
    # The manager issued its certificate and put its CA into the chart's webhooks.
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        hooks = [h for c in items(cp, kind, cluster=at)
                 if c["metadata"].get("labels", {}).get(LABEL_COMPONENT) == "leaderWorkerSet"
                 for h in c["webhooks"]]
        assert hooks and all(h["clientConfig"].get("caBundle") for h in hooks), (kind, hooks)
        assert all("service" in h["clientConfig"] for h in hooks), hooks  # the chart's, not a URL


@pytest.mark.parametrize("cluster", REMOTE)
def test_the_remote_clusters_envoy_gateway_is_the_stacks_with_the_backend_api_on(
        cp: ControlPlane, cluster):
    """Envoy Gateway's chart comes through the stack: its controller's Deployment (whose
    pod is kwok's: the harness's process stands in for it, e2e/controlplane/stack.py),
    its certgen Job run to completion, and the EnvoyGateway configuration with the
    Backend API on, which the harness's controller runs (it serves the Gateway below)."""
    at = cp.cluster(cluster)
    chart = BY_FIELD["envoyGateway"].chart
    assert chart is not None
    version = stack.rendered("envoyGateway").version
    deployment = get(cp, "deployments", "envoy-gateway", chart.namespace, cluster=at)
    assert deployment is not None and is_true(deployment, "Available"), cluster
    assert deployment["metadata"]["labels"][LABEL_COMPONENT] == "envoyGateway"
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"docker.io/envoyproxy/gateway:{version}"
    (job,) = [j for j in items(cp, "jobs", chart.namespace, cluster=at)
              if j["metadata"]["labels"].get(LABEL_COMPONENT) == "envoyGateway"]
    assert job["metadata"]["name"].endswith(version.replace(".", "-"))
    assert is_true(job, "Complete"), job.get("status")
    config = get(cp, "configmaps", stackenvoy.CONFIG_MAP, chart.namespace, cluster=at)
    assert config is not None
    assert (stackenvoy.config_of(config) or {}).get("extensionApis") == {"enableBackend": True}
    for name in ("deployment-envoy-gateway", f"job-{job['metadata']['name']}",
                 f"configmap-{stackenvoy.CONFIG_MAP}"):
        obj = get(cp, OBJECT, object_name(cluster, name), objects_namespace())
        assert obj is not None and is_true(obj, "Ready"), (cluster, name, obj)
        assert "Delete" not in obj["spec"]["managementPolicies"]


@pytest.mark.parametrize("cluster", REMOTE)
def test_the_remote_clusters_gateway_is_the_stacks_and_envoy_gateway_serves_it(
        cp: ControlPlane, cluster):
    """The harness makes no Gateway on a remote cluster: the stack composes the one
    spec.gateway names, last, and Envoy Gateway (the harness's, serving class eg)
    Accepts it; every routed scenario's requests go through it (test_dataplane.py
    checks it Programmed at its address: after an earlier scenario restarts the
    cluster's API server, its stand-in Envoy Deployment may stay unavailable)."""
    ic = get(cp, IC, cluster)
    assert ic is not None
    named = ic["spec"]["gateway"]
    gw = get(cp, "gateways.gateway.networking.k8s.io", named["name"], named["namespace"],
             cluster=cp.cluster(cluster))
    assert gw is not None, (cluster, named)
    assert gw["metadata"]["labels"].get(LABEL_COMPONENT) == GATEWAY.field
    assert gw["spec"]["gatewayClassName"] == ic["spec"]["stack"]["gateway"]["gatewayClassName"]
    assert is_true(gw, "Accepted"), gw.get("status")
    # Its class comes with the Envoy Gateway the stack installs; the harness's
    # EnvoyProxy (Host infrastructure) is named on it beside, each apply owning its fields.
    cls = get(cp, "gatewayclasses.gateway.networking.k8s.io", gw["spec"]["gatewayClassName"],
              cluster=cp.cluster(cluster))
    assert cls is not None and cls["metadata"]["labels"].get(LABEL_COMPONENT) == "envoyGateway"
    assert cls["spec"]["controllerName"] == stackgateway.controller_name()
    assert cls["spec"].get("parametersRef"), cls["spec"]
    obj = get(cp, OBJECT, object_name(cluster, f"gatewayclass-{cls['metadata']['name']}",
                                      GATEWAY.field), objects_namespace())
    assert obj is not None and is_true(obj, "Ready"), (cluster, obj)
    obj = get(cp, OBJECT, object_name(cluster, f"gateway-{named['name']}", GATEWAY.field),
              objects_namespace())
    assert obj is not None and is_true(obj, "Ready"), (cluster, obj)
    assert "Delete" not in obj["spec"]["managementPolicies"]


@pytest.fixture
def deployment(cp: ControlPlane):
    yield
    delete_and_wait(cp, NS, NAME)

    def gone() -> bool:
        left = [u["metadata"]["name"] for u in items(cp, USAGE, NS)]
        if left:
            raise AssertionError(left)
        return True
    wait("the stack's Usages of the deleted replicas to go", gone, 120)


def test_a_replica_on_a_stack_cluster_holds_a_usage_of_each_crd_it_needs(cp: ControlPlane,
                                                                          deployment):
    deploy(cp, 2)
    assert clusters_of(cp) == ["eu-west-1", "us-east-1"]
    (remote,) = [mr for mr in items(cp, "modelreplicas.modelplane.ai", NS)
                 if mr["spec"]["clusterName"] == "eu-west-1"]

    def held() -> dict[str, dict]:
        usages = {u["metadata"]["labels"][LABEL_COMPONENT]: u for u in items(cp, USAGE, NS)
                  if u["spec"]["by"]["resourceRef"]["name"] == remote["metadata"]["name"]}
        # A single-pod Unified replica composes an HTTPRoute of the stack's kinds: no
        # InferencePool, no LeaderWorkerSet.
        if set(usages) != {"gatewayAPI"}:
            raise AssertionError(sorted(usages))
        return usages

    usages = wait("the remote replica's Usages", held, 120)
    for field, usage in usages.items():
        # It holds the Object that carries the component's CRD on eu-west-1. (Crossplane
        # runs its Usage controller and webhook only with webhooks on; `make cluster`
        # runs core without them, so nothing marks the Object in use here.)
        of = usage["spec"]["of"]["resourceRef"]
        obj = get(cp, OBJECT, of["name"], of["namespace"])
        assert obj is not None, of
        assert obj["spec"]["forProvider"]["manifest"]["metadata"]["name"] == \
            BY_FIELD[field].probe, (field, of)
    # The control-plane cluster's replica holds none: its stack only observes.
    assert not [u for u in items(cp, USAGE, NS)
                if u["spec"]["by"]["resourceRef"]["name"] != remote["metadata"]["name"]]
