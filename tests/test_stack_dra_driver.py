"""The serving stack's DRA driver (spec.stack.draDriver): observed, never installed.

A pool's DRA devices are claimed through the DeviceClass each names and allocated
from what its driver publishes. With `draDriver: {mode: External}` the stack says
whether the cluster has both, from what its Nodes, ResourceSlices and DeviceClasses
say (the inventory report of a remote cluster, read directly on the control-plane
cluster), and a cluster lacking them takes no new replica until it has them.
"""

from __future__ import annotations

import json

import pytest
from builders import desired
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from fleetgen import GPU, cluster, device, pool
from test_cluster_inventory import (
    NOW,
    h100_cluster,
    node,
    remote_cluster,
    report_object,
    run_cluster,
)
from test_cluster_stack import stack_ready, stack_status, with_stack

from function.cluster import reporter
from function.contract import inventory_report
from function.contract.published import MAX_CLASSES, pool_devices
from function.contract.records import Malformed
from function.contract.stack import spec_errors
from function.tools import stackpreview

EXTERNAL = {"draDriver": {"mode": "External"}}
CLASS = {"metadata": {"name": GPU},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}]}}


def gpus(node_name: str, n: int = 8, driver: str = GPU) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-{driver}"},
            "spec": {"driver": driver, "nodeName": node_name,
                     "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {
                         "productName": {"string": "H100"}, "index": {"int": i}}}
                         for i in range(n)]}}


def entry(rsp) -> dict:
    (got,) = [e for e in stack_status(rsp) if e["name"] == "draDriver"]
    return got


NODES = [node("a"), node("b")]


def local(*, nodes=NODES, slices=(), classes=(), **spec) -> fnv1.RunFunctionResponse:
    ic = with_stack(h100_cluster(2, **spec), **EXTERNAL)
    return run_cluster(ic, nodes={"h100": list(nodes)} if nodes is not None else None,
                       slices=slices, classes=classes)


# --- What the reduction reports ---------------------------------------------------

def test_the_reduction_names_each_pools_publishing_drivers_and_the_clusters_classes():
    other = {"metadata": {"name": "nic.example.com"}, "spec": {}}
    got = pool_devices([node("a"), node("b", ready=False), node("c", "cpu")],
                       [gpus("a"), gpus("b", driver="nic.example.com"), gpus("c", 0)],
                       [other, CLASS])
    # b is not Ready, so a (Ready) is the pool's measure; c's slice publishes nothing.
    assert got.drivers == {"h100": (GPU,), "cpu": ()}
    assert got.classes == (GPU, "nic.example.com")


def test_the_classes_reported_are_bounded():
    many = [{"metadata": {"name": f"class-{i:04d}"}} for i in range(MAX_CLASSES + 5)]
    got = pool_devices([], [], many)
    assert len(got.classes) == MAX_CLASSES and got.classes[0] == "class-0000"
    assert any(f"reporting the first {MAX_CLASSES}" in n for n in got.notes)


def test_the_report_carries_drivers_and_classes_and_reads_them_back():
    found = pool_devices(NODES, [gpus("a"), gpus("b")], [CLASS])
    text = inventory_report.render(inventory_report.summarize(NODES), NOW, found.devices,
                                   found.notes, None, found.drivers, found.classes)
    got = inventory_report.parse(text)
    assert got.drivers == {"h100": (GPU,)} and got.classes == (GPU,)
    doc = json.loads(text)
    assert doc["drivers"] == {"h100": [GPU]} and doc["deviceClasses"] == [GPU]
    # A reporter older than them wrote neither: nothing known, not "none".
    older = inventory_report.parse(inventory_report.render(inventory_report.summarize(NODES), NOW))
    assert older.drivers is None and older.classes is None


@pytest.mark.parametrize("extra, why", [
    ({"drivers": {"h100": "gpu"}}, "drivers is not"),
    ({"drivers": []}, "drivers is not"),
    ({"deviceClasses": [1]}, "deviceClasses is not"),
])
def test_malformed_drivers_or_classes_make_the_report_unreadable(extra, why):
    doc = json.loads(inventory_report.render(inventory_report.summarize(NODES), NOW))
    with pytest.raises(Malformed, match=why):
        inventory_report.parse(json.dumps({**doc, **extra}))


# --- The control-plane cluster: read directly -------------------------------------

def test_classes_present_and_drivers_publishing_are_observed_and_the_stack_ready():
    rsp = local(slices=[gpus("a"), gpus("b")], classes=[CLASS])
    got = entry(rsp)
    assert (got["mode"], got["phase"], got["reason"], got["version"]) == (
        "External", "Observed", "Published", "resource.k8s.io/v1")
    assert got["message"] == f"{GPU} publishing on 1 of 1 pools; 1 DeviceClasses"
    assert stack_ready(rsp)[0] == "True"
    assert not [k for k in desired(rsp) if k.startswith("stack")]  # it composes nothing


def test_a_missing_device_class_fails_the_stack_and_says_what_to_do():
    rsp = local(slices=[gpus("a"), gpus("b")], classes=[])
    got = entry(rsp)
    assert (got["phase"], got["reason"]) == ("Failed", "DeviceClassMissing")
    assert got["message"] == (f"pool h100's device gpu names DeviceClass {GPU}, which the "
                              "cluster does not have: install the driver that provides it, "
                              "or correct deviceClassName")
    assert stack_ready(rsp)[:2] == ("False", "Failed")
    assert "draDriver Failed: pool h100's device gpu" in stack_ready(rsp)[2]


def test_a_driver_that_publishes_nothing_on_the_pool_fails():
    rsp = local(slices=[gpus("a", driver="other.example.com")], classes=[CLASS])
    got = entry(rsp)
    assert (got["phase"], got["reason"]) == ("Failed", "NotPublished")
    assert got["message"] == (f"driver {GPU} publishes no device on pool h100's 2 Ready "
                              "nodes: run its kubelet plugin there")


def test_a_pool_without_nodes_is_not_judged_by_what_its_nodes_publish():
    got = entry(local(nodes=[], classes=[CLASS]))
    assert (got["phase"], got["reason"]) == ("Observed", "Published")


def test_before_the_nodes_are_read_it_is_progressing():
    got = entry(local(nodes=None))
    assert (got["phase"], got["reason"]) == ("Progressing", "NotObservedYet")
    assert "not observed yet: the cluster's Nodes are not read yet" in got["message"]


def test_pools_that_leave_devices_out_need_some_driver_publishing():
    def bare(nodes: int) -> dict:
        p = pool("h100", nodes)
        del p["devices"]
        return with_stack(cluster("local", p), **EXTERNAL)
    got = entry(run_cluster(bare(2), nodes={"h100": NODES}, slices=[gpus("a"), gpus("b")],
                            classes=[CLASS]))
    assert (got["phase"], got["reason"]) == ("Observed", "Published")
    got = entry(run_cluster(bare(2), nodes={"h100": NODES}, classes=[CLASS]))
    assert (got["phase"], got["reason"]) == ("Failed", "NoDevices")
    assert "take draDriver out of the stack" in got["message"]


def test_synthetic_devices_need_no_class_nor_driver():
    ic = with_stack(cluster("local", pool("cpu", 2, device("cores", claim="Synthetic")),
                            pool("h100", 2, device())), **EXTERNAL)
    got = entry(run_cluster(ic, nodes={"cpu": [node("c", "cpu")], "h100": NODES},
                            slices=[gpus("a"), gpus("b")], classes=[CLASS]))
    assert (got["phase"], got["reason"]) == ("Observed", "Published"), got
    assert got["message"].endswith("on 1 of 2 pools; 1 DeviceClasses")


def test_the_problems_are_named_a_few_at_a_time():
    ic = with_stack(cluster("local", *(pool(f"p{i}", 1, device(device_class=f"c{i}"))
                                       for i in range(4))), **EXTERNAL)
    got = entry(run_cluster(ic, nodes={f"p{i}": [node(f"n{i}", f"p{i}")] for i in range(4)}))
    # Per pool: no class, no driver.
    assert got["message"].count("pool p") == 3 and got["message"].endswith("(and 5 more)")


# --- A remote cluster: the inventory report ------------------------------------------

def remote(text: str | None) -> fnv1.RunFunctionResponse:
    ic = with_stack(remote_cluster(2), **EXTERNAL)
    observed = {reporter.REPORT: report_object(text)} if text is not None else None
    return run_cluster(ic, observed=observed)


def reported(slices: list[dict], classes: list[dict], *, older: bool = False) -> str:
    pools = inventory_report.summarize(NODES)
    if older:
        return inventory_report.render(pools, NOW)
    found = pool_devices(NODES, slices, classes)
    return inventory_report.render(pools, NOW, found.devices, found.notes, None,
                                   found.drivers, found.classes)


def test_a_remote_cluster_is_judged_from_its_report():
    assert entry(remote(reported([gpus("a"), gpus("b")], [CLASS])))["phase"] == "Observed"
    assert entry(remote(reported([gpus("a"), gpus("b")], [])))["reason"] == "DeviceClassMissing"
    got = entry(remote(None))
    assert (got["phase"], got["reason"]) == ("Progressing", "NotObservedYet")
    got = entry(remote(reported([], [], older=True)))
    assert (got["phase"], got["reason"]) == ("Progressing", "NotReported")


# --- Rules (the XRD's CEL says the same: tests/invalid/ic-stack-dra-driver-*) -----------

@pytest.mark.parametrize("mode, inventory, want", [
    ("Managed", None, "this release does not install a DRA driver (mode Managed)"),
    ("External", {"source": "Declared"}, "stack.draDriver is observed with the cluster's nodes"),
])
def test_the_function_refuses_what_admission_refuses(mode, inventory, want):
    ic = with_stack(remote_cluster(2), draDriver={"mode": mode})
    if inventory:
        ic["spec"]["inventory"] = inventory
    assert any(want in e for e in spec_errors(ic["spec"])), spec_errors(ic["spec"])
    rsp = run_cluster(ic)
    assert rsp.results and rsp.results[0].severity == fnv1.SEVERITY_FATAL
    assert spec_errors(with_stack(remote_cluster(2), **EXTERNAL)["spec"]) == []


def test_preview_lists_it_as_composing_nothing():
    ic = with_stack(remote_cluster(2), **EXTERNAL)
    ic["status"] = {"stack": {"components": [{"name": "draDriver", "version": "resource.k8s.io/v1"}]}}
    rows = stackpreview.lines({"eu-west-1": [ic]})
    assert rows[-1].split() == ["eu-west-1", "draDriver", "External", "resource.k8s.io/v1",
                                "nothing:", "observed", "with", "the", "cluster's", "nodes"]


def test_the_reporter_process_writes_the_drivers_and_classes():
    from test_cluster_inventory import FakeCore, FakeCustom

    from function.agent import inventory as tool
    core = FakeCore(NODES, page=1)
    custom = FakeCustom({"resourceslices": [gpus("a"), gpus("b")], "deviceclasses": [CLASS]},
                        page=1)
    tool.report_once(core, custom, "modelplane-system", lambda: NOW)
    [cm] = core.configmaps.values()
    got = inventory_report.parse(cm["data"]["inventory.json"])
    assert got.drivers == {"h100": (GPU,)} and got.classes == (GPU,)
