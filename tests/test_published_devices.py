"""Devices a pool leaves undeclared are the devices its cluster publishes.

A DRA driver publishes each node's devices in ResourceSlices; a pool whose
spec leaves `devices` out counts what every Ready node of it publishes, each
kind with the first DeviceClass that selects it. Both readers of a cluster
(the function, for the control-plane cluster; the inventory reporter, for a
remote one) reduce slices alike, the InferenceCluster's status carries the
result, and the scheduler places by it.
"""

from __future__ import annotations

import copy
import datetime
import json

import pytest
from builders import desired, request
from fleetgen import World, cluster, condition, deployment, device, placements, pool
from test_cluster_inventory import (
    NOW,
    node,
    pool_entry,
    remote_cluster,
    report_object,
    run_cluster,
)

from function.cluster import reporter
from function.contract import inventory_report
from function.contract.published import pool_devices
from function.contract.records import Malformed, parse_cluster
from function.runtime import fn

GPU = "gpu.nvidia.com"
CLASS = {"metadata": {"name": "gpu.nvidia.com"},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}]}}
ANY = {"metadata": {"name": "any"}, "spec": {}}  # no selector: selects every device


def gpu(i: int, product: str = "NVIDIA-H100", memory: str = "80Gi", node_name: str = "") -> dict:
    """A device as NVIDIA's DRA driver publishes it: identity attributes included."""
    return {"name": f"gpu-{i}",
            "attributes": {"uuid": {"string": f"GPU-{node_name}-{i}"}, "index": {"int": i},
                           "pciBusID": {"string": f"0000:{i:02x}:00.0"},
                           "productName": {"string": product}},
            "capacity": {"memory": {"value": memory}}}


def slice_of(node_name: str, devices: list[dict], driver: str = GPU, generation: int = 1,
             slices: int = 1, pool_name: str | None = None) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-{driver}-{generation}-{len(devices)}"},
            "spec": {"driver": driver, "nodeName": node_name, "devices": devices,
                     "pool": {"name": pool_name or node_name, "generation": generation,
                              "resourceSliceCount": slices}}}


def h100_node(name: str, gpus: int = 8, **kw) -> tuple[dict, dict]:
    return node(name, **kw), slice_of(name, [gpu(i, node_name=name) for i in range(gpus)])


def reduce(*pairs: tuple[dict, dict], classes=(CLASS,)):
    return pool_devices([n for n, _ in pairs], [s for _, s in pairs], list(classes))


H100_8 = {"name": "gpu", "driver": GPU, "deviceClassName": "gpu.nvidia.com", "count": 8,
          "attributes": {"productName": {"string": "NVIDIA-H100"}},
          "capacity": {"memory": {"value": "80Gi"}}}


# --- The reduction -------------------------------------------------------------

def test_identical_nodes_publish_one_kind_without_the_attributes_that_tell_devices_apart():
    got = reduce(h100_node("a"), h100_node("b"))
    assert got.devices == {"h100": (H100_8,)} and got.notes == ()


def test_a_pool_counts_what_every_ready_node_publishes_and_says_when_nodes_disagree():
    got = reduce(h100_node("a"), h100_node("b", gpus=6), h100_node("c", gpus=2, ready=False))
    assert got.devices["h100"][0]["count"] == 6  # the NotReady node is not the measure
    assert got.notes == ("pool h100: its nodes publish 6 to 8 gpu devices of gpu.nvidia.com; "
                         "counting 6, what every node has",)


def test_a_node_that_publishes_nothing_leaves_the_pool_without_the_devices():
    got = reduce(h100_node("a"), (node("b"), slice_of("b", [])))
    assert got.devices == {"h100": ()}
    assert "publish 0 to 8" in got.notes[0]


def test_two_models_on_one_node_are_two_kinds_with_names_of_their_own():
    devices = [gpu(i, "NVIDIA-A100", "40Gi", "a") for i in range(4)] + \
              [gpu(i, "NVIDIA-H100", "80Gi", "a") for i in range(4, 8)]
    got = pool_devices([node("a")], [slice_of("a", devices)], [CLASS])
    assert [(d["name"], d["count"], d["attributes"]["productName"]["string"])
            for d in got.devices["h100"]] == [("gpu", 4, "NVIDIA-A100"), ("gpu-2", 4, "NVIDIA-H100")]


def test_with_one_device_per_node_an_attribute_that_differs_on_every_node_is_identity():
    got = reduce(h100_node("a", 1), h100_node("b", 1), h100_node("c", 1))
    (d,) = got.devices["h100"]
    # uuid differs on every node; index and PCI address repeat; productName is shared.
    assert sorted(d["attributes"]) == ["index", "pciBusID", "productName"]
    assert d["count"] == 1


def test_the_first_class_with_selectors_that_selects_a_kind_is_its_class():
    other = {"metadata": {"name": "a-other"},
             "spec": {"selectors": [{"cel": {"expression": 'device.driver == "nic.example.com"'}}]}}
    broken = {"metadata": {"name": "a-broken"}, "spec": {"selectors": [{"cel": {"expression": "("}}]}}
    got = reduce(h100_node("a"), classes=[ANY, other, broken, CLASS])
    assert got.devices["h100"][0]["deviceClassName"] == "gpu.nvidia.com"
    assert reduce(h100_node("a"), classes=[ANY]).devices["h100"][0]["deviceClassName"] == "any"


def test_a_kind_no_class_selects_cannot_be_claimed_and_is_left_out():
    got = reduce(h100_node("a"), classes=[])
    assert got.devices == {"h100": ()}
    assert got.notes == ("pool h100: no DeviceClass selects its gpu devices of gpu.nvidia.com, "
                         "so pods cannot claim them: left out",)


def test_only_the_newest_complete_generation_of_a_resource_pool_counts():
    n = node("a")
    old = slice_of("a", [gpu(i) for i in range(8)], generation=1)
    new = [slice_of("a", [gpu(i) for i in range(4)], generation=2, slices=2),
           slice_of("a", [gpu(i) for i in range(4, 8)], generation=2, slices=2)]
    assert pool_devices([n], [old, *new], [CLASS]).devices["h100"][0]["count"] == 8
    half = pool_devices([n], [old, new[0]], [CLASS])
    assert half.devices == {"h100": ()}
    assert half.notes[0] == "resource pool 'a' of driver gpu.nvidia.com has 1 of its 2 " \
                            "slices: left out until it is complete"


def test_slices_that_no_node_of_a_pool_holds_are_not_a_pools():
    network = slice_of("a", [gpu(0)])
    network["spec"].pop("nodeName")
    network["spec"]["allNodes"] = True
    stranger = slice_of("elsewhere", [gpu(0)])
    assert pool_devices([node("a")], [network, stranger], [CLASS]).devices == {"h100": ()}


def test_a_device_that_does_not_fit_the_xrd_is_left_out_and_noted():
    long = [dict(gpu(i), attributes={"productName": {"string": "x" * 65}}) for i in range(2)]
    got = pool_devices([node("a")], [slice_of("a", long)], [CLASS])
    assert got.devices == {"h100": ()}
    assert "does not fit an InferenceCluster device" in got.notes[0]


def test_the_reduction_is_deterministic_whatever_the_order_of_its_inputs():
    pairs = [h100_node(n) for n in "abc"]
    forward = reduce(*pairs, classes=[CLASS, ANY])
    backward = reduce(*reversed(pairs), classes=[ANY, CLASS])
    assert json.dumps(forward.devices) == json.dumps(backward.devices)


# --- The cluster's status carries them -------------------------------------------

def undeclared(ic: dict) -> dict:
    ic = copy.deepcopy(ic)
    for p in ic["spec"]["nodePools"]:
        p.pop("devices", None)
    return ic


def local_ic() -> dict:
    ic = undeclared(cluster("local", pool("h100", 2)))
    ic["spec"]["nodePools"][0]["taints"] = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    return ic


def test_the_control_plane_cluster_reads_every_slice_and_class():
    rsp = fn.run_function(request(local_ic()))
    got = {k: (v.api_version, v.kind, dict(v.match_labels.labels))
           for k, v in rsp.requirements.resources.items()}
    assert got["resource-slices"] == ("resource.k8s.io/v1", "ResourceSlice", {})
    assert got["device-classes"] == ("resource.k8s.io/v1", "DeviceClass", {})


def test_the_control_plane_cluster_reports_what_its_nodes_publish():
    (a, sa), (b, sb) = h100_node("a"), h100_node("b", gpus=7)
    rsp = run_cluster(local_ic(), nodes={"h100": [a, b]}, slices=[sa, sb], classes=[CLASS])
    assert pool_entry(rsp)["publishedDevices"] == [dict(H100_8, count=7)]
    assert "; published devices: pool h100: its nodes publish 7 to 8" in \
        condition(rsp, "CapacityObserved")[2]


def test_a_remote_cluster_reports_them_through_the_reporter():
    (a, sa) = h100_node("a")
    found = pool_devices([a], [sa], [CLASS])
    text = inventory_report.render(inventory_report.summarize([a]), NOW, found.devices, found.notes)
    rsp = run_cluster(undeclared(remote_cluster(1)),
                      observed={reporter.REPORT: report_object(text)})
    assert pool_entry(rsp)["publishedDevices"] == [H100_8]


def test_without_a_new_word_the_last_published_devices_stay():
    stale = inventory_report.render(inventory_report.summarize([node("a")]),
                             NOW - datetime.timedelta(hours=1))  # a report without devices
    ic = undeclared(remote_cluster(1))
    ic["status"] = {"nodePools": [{"name": "h100", "publishedDevices": [H100_8]}]}
    for observed in ({}, {reporter.REPORT: report_object(stale)}):
        rsp = run_cluster(ic, observed=observed)
        assert pool_entry(rsp)["publishedDevices"] == [H100_8]


def test_an_older_report_without_devices_still_reads():
    text = json.dumps({"version": 1, "observedAt": "2026-11-22T12:00:00Z", "pools": {}})
    got = inventory_report.parse(text)
    assert (got.devices, got.notes) == ({}, ())


def test_a_report_with_malformed_devices_says_so():
    text = json.dumps({"version": 1, "observedAt": "2026-11-22T12:00:00Z", "pools": {},
                       "devices": {"h100": "gpu"}})
    with pytest.raises(Malformed, match="devices is not an object"):
        inventory_report.parse(text)


def test_a_reported_device_the_xrd_would_refuse_never_reaches_the_status():
    bad = dict(H100_8, name="Not A Label")
    text = inventory_report.render(inventory_report.summarize([node("a")]), NOW, {"h100": [bad, H100_8]})
    rsp = run_cluster(undeclared(remote_cluster(1)),
                      observed={reporter.REPORT: report_object(text)})
    assert pool_entry(rsp)["publishedDevices"] == [H100_8]
    assert "a reported device does not fit" in condition(rsp, "CapacityObserved")[2]


# --- The scheduler places by them -------------------------------------------------

def with_published(ic: dict, *devices: dict) -> dict:
    ic = copy.deepcopy(ic)
    ic["status"] = {"nodePools": [{"name": p["name"], "publishedDevices": list(devices)}
                                 for p in ic["spec"]["nodePools"]]}
    return ic


def test_a_pool_that_leaves_devices_out_takes_the_published_ones():
    ic = with_published(undeclared(cluster("a", pool("h100", 4))), H100_8)
    (p,) = parse_cluster(ic).pools
    assert [(d.name, d.count, d.device_class) for d in p.devices] == [("gpu", 8, "gpu.nvidia.com")]


def test_declared_devices_win_and_an_empty_list_declares_none():
    declared = cluster("a", pool("h100", 4, device("gpu", "H100", count=2)))
    assert parse_cluster(with_published(declared, H100_8)).pools[0].devices[0].count == 2
    none = cluster("a", pool("cpu", 4))
    assert none["spec"]["nodePools"][0]["devices"] == []
    assert parse_cluster(with_published(none, H100_8)).pools[0].devices == ()


def test_malformed_published_devices_make_the_cluster_malformed_not_the_reconcile():
    ic = with_published(undeclared(cluster("a", pool("h100", 4))), {"name": "gpu", "driver": 7})
    with pytest.raises(Malformed):
        parse_cluster(ic)


def test_replicas_go_to_the_pool_whose_nodes_publish_the_devices():
    md = deployment("llama", replicas=2)  # one fleetgen H100 per replica
    h100 = device("gpu", "H100", count=8)
    published = with_published(undeclared(cluster("a", pool("h100", 4))), h100)
    empty = with_published(undeclared(cluster("b", pool("h100", 4))))
    rsp = World(md, [published, empty]).run()
    assert sorted(c for c, _ in placements(rsp).values()) == ["a", "a"]
    # Each replica claims through the class the published device was matched to.
    for mr in desired(rsp).values():
        if mr["kind"] == "ModelReplica":
            requests = [r for e in mr["spec"]["engines"] for m in e["members"]
                        for r in m.get("deviceRequests") or []]
            assert requests and {r["deviceClassName"] for r in requests} == \
                {h100["deviceClassName"]}
