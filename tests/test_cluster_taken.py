"""Observed, not assumed: the devices other claims already hold on a pool's nodes.

The scheduler charges every ModelReplica's pods itself; what the rest of the
cluster holds (ResourceClaims of pods this project did not compose) it learns
from the InferenceCluster's status: per pool, each counted node (Ready,
uncordoned, repelling none of its pods) and the pool's devices others hold
there. The control-plane cluster's claims are read directly, a remote one's
through the inventory reporter; the scheduler reads them back as Pool.taken
while the observation counts.
"""

from __future__ import annotations

import copy
import datetime
import json

from builders import request
from fleetgen import cluster, condition, pool
from test_cluster_inventory import (
    GPU_TAINT,
    NOW,
    FakeCore,
    FakeCustom,
    clock,  # noqa: F401 - the autouse fixture: the clock the reports are judged by
    node,
    pool_entry,
    remote_cluster,
    report_object,
    run_cluster,
)
from test_published_devices import CLASS, GPU, H100_8, gpu, slice_of

from function.cluster import reporter
from function.contract import allocated, inventory_report
from function.contract.published import pool_devices
from function.contract.records import parse_cluster
from function.runtime import fn

A100_4 = {"name": "a100", "driver": GPU, "deviceClassName": "gpu.nvidia.com", "count": 4,
          "attributes": {"productName": {"string": "NVIDIA-A100"}},
          "capacity": {"memory": {"value": "40Gi"}}}


def gpu_node(name: str, **kw) -> tuple[dict, dict]:
    """A node of pool h100 (tainted as GPU nodes are) and its slice of eight H100s."""
    return node(name, **kw), slice_of(name, [gpu(i, node_name=name) for i in range(8)])


def claim(name: str, node_name: str, *gpus: int, namespace: str = "other-team",
          labels: dict | None = None, **meta) -> dict:
    """A ResourceClaim allocated `gpus` of node_name's slice (its resource pool is the node)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}, **meta},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": len(gpus)}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": GPU, "pool": node_name, "device": f"gpu-{i}"}
                for i in gpus]}}}}


def local(*devices: dict, nodes: int = 2) -> dict:
    """The control-plane cluster with pool h100 declaring `devices`."""
    p = pool("h100", nodes)
    p.update(devices=list(devices) or [H100_8], taints=[GPU_TAINT])
    return cluster("local", p)


def observe(ic: dict, pairs, claims) -> list[dict]:
    rsp = run_cluster(ic, nodes={"h100": [n for n, _ in pairs]}, slices=[s for _, s in pairs],
                      classes=[CLASS], claims=claims)
    return pool_entry(rsp).get("takenDevices"), rsp


# --- What counts as taken -------------------------------------------------------

def test_a_foreign_claims_devices_show_on_their_node_as_the_pools_device():
    taken, rsp = observe(local(), [gpu_node("a"), gpu_node("b")],
                         [claim("batch-job", "b", 0, 1, 2), claim("notebook", "b", 5)])
    assert taken == [{"node": "b", "devices": [{"name": "gpu", "count": 4}]}]
    assert condition(rsp, "CapacityObserved")[:2] == ("True", "Observed")


def test_the_project_s_own_claims_are_not_taken_twice():
    ours = {"modelplane.ai/replica": "llama-local-0-1a2b3c", "modelplane.ai/deployment": "llama"}
    # A claim made from a template composed before the labels: known by its pod.
    legacy = claim("old", "a", 4, annotations={"resource.kubernetes.io/pod-claim-name": "devices"},
                   ownerReferences=[{"apiVersion": "v1", "kind": "Pod", "controller": True,
                                     "name": "llama-local-0-1a2b3c-vllm-0f1e2d3c-deploy-"
                                             "5d8f7c9b-x2k4q", "uid": "u"}])
    taken, _ = observe(local(), [gpu_node("a")],
                       [claim("engine", "a", 0, 1, labels=ours), legacy,
                        claim("theirs", "a", 7)])
    assert taken == [{"node": "a", "devices": [{"name": "gpu", "count": 1}]}]
    # The same pod claim name on a pod no composed workload names is someone else's.
    legacy["metadata"]["ownerReferences"][0]["name"] = "jupyter-0"
    taken, _ = observe(local(), [gpu_node("a")], [legacy])
    assert taken == [{"node": "a", "devices": [{"name": "gpu", "count": 1}]}]


def test_a_cordoned_not_ready_or_repelling_node_contributes_nothing():
    pairs = [gpu_node("cordoned", cordoned=True), gpu_node("down", ready=False),
             gpu_node("draining", taints=[GPU_TAINT, {"key": "gpu-health",
                                                      "effect": "NoExecute"}]),
             gpu_node("ok")]
    claims = [claim(f"c-{n}", n, 0) for n in ("cordoned", "down", "draining", "ok")]
    taken, _ = observe(local(nodes=4), pairs, claims)
    assert taken == [{"node": "ok", "devices": [{"name": "gpu", "count": 1}]}]


def test_each_kind_becomes_the_pool_device_it_is():
    # One node with four A100s and four H100s; the pool declares both.
    devices = [gpu(i, "NVIDIA-A100", "40Gi", "a") for i in range(4)] + \
              [gpu(i, "NVIDIA-H100", "80Gi", "a") for i in range(4, 8)]
    pair = (node("a"), slice_of("a", devices))
    ic = local(A100_4, dict(H100_8, count=4), nodes=1)
    taken, _ = observe(ic, [pair], [claim("x", "a", 0, 5, 6)])
    assert taken == [{"node": "a", "devices": [{"name": "a100", "count": 1},
                                               {"name": "gpu", "count": 2}]}]


def test_a_declaration_that_misdescribes_its_only_device_still_loses_what_is_taken():
    # Declared "H100" where the driver says "NVIDIA-H100": the pool's only device of
    # that driver is still the one a taken device is.
    ic = local(dict(H100_8, attributes={"productName": {"string": "H100"}}))
    taken, _ = observe(ic, [gpu_node("a")], [claim("x", "a", 3)])
    assert taken == [{"node": "a", "devices": [{"name": "gpu", "count": 1}]}]


def test_a_shared_device_counts_once_and_admin_access_takes_nothing():
    shared = [claim("one", "a", 2), claim("two", "a", 2)]
    admin = claim("monitor", "a", 3)
    admin["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    pending = claim("pending", "a")
    del pending["status"]
    taken, _ = observe(local(), [gpu_node("a")], [*shared, admin, pending])
    assert taken == [{"node": "a", "devices": [{"name": "gpu", "count": 1}]}]


def test_a_device_no_slice_lists_is_placed_by_the_allocations_node():
    c = claim("x", "gone-pool", 0)
    c["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["a"]}]}]}
    taken, _ = observe(local(), [gpu_node("a")], [c])
    assert taken == [{"node": "a", "devices": [{"name": "gpu", "count": 1}]}]


def test_thousands_of_nodes_report_the_busiest_and_say_the_rest_were_left_out():
    pairs = [gpu_node(f"n{i:04d}") for i in range(300)]
    claims = [claim(f"c{i}", f"n{i:04d}", *range(1 + (i == 7))) for i in range(300)]
    taken, rsp = observe(local(nodes=300), pairs, claims)
    assert len(taken) == allocated.MAX_NODES
    assert {"node": "n0007", "devices": [{"name": "gpu", "count": 2}]} in taken
    assert [t["node"] for t in taken] == sorted(t["node"] for t in taken)
    assert "other claims hold devices on 300 nodes; reporting the 256" in \
        condition(rsp, "CapacityObserved")[2]


def test_the_control_plane_cluster_asks_for_every_claim_on_every_call():
    for ic in (local(), copy.deepcopy(local())):
        rsp = fn.run_function(request(ic))
        sel = rsp.requirements.resources["resource-claims"]
        assert (sel.api_version, sel.kind, dict(sel.match_labels.labels)) == \
            ("resource.k8s.io/v1", "ResourceClaim", {})
    # Until Crossplane resolves them, nothing is observed (the declared view).
    rsp = run_cluster(local())
    assert "takenDevices" not in pool_entry(rsp)


# --- A remote cluster: through the reporter ----------------------------------------

def test_the_reporter_reports_what_others_hold_and_may_list_claims():
    from function.agent import inventory as tool
    (a, sa), (b, sb) = gpu_node("a"), gpu_node("b")
    core = FakeCore([a, b], page=1)
    custom = FakeCustom({"resourceslices": [sa, sb], "deviceclasses": [CLASS],
                         "resourceclaims": [claim(f"c{i}", "a", i) for i in range(3)]}, page=2)
    tool.report_once(core, custom, "modelplane-system", lambda: NOW)
    [cm] = core.configmaps.values()
    text = cm["data"]["inventory.json"]
    assert json.loads(text)["taken"]["pools"]["h100"]["nodes"] == [
        {"node": "a", "taints": ["nvidia.com/gpu:NoSchedule"],
         "devices": [{"kind": 0, "count": 3}]}]
    ic = remote_cluster(2)
    ic["spec"]["nodePools"][0]["devices"] = [H100_8]
    rsp = run_cluster(ic, observed={reporter.REPORT: report_object(text)})
    assert pool_entry(rsp)["takenDevices"] == [
        {"node": "a", "devices": [{"name": "gpu", "count": 3}]}]
    role = reporter.objects(parse_cluster(ic))["inventory-clusterrole"]
    rules = role["spec"]["forProvider"]["manifest"]["rules"]
    assert any("resourceclaims" in r["resources"] and "list" in r["verbs"] for r in rules)


def test_a_report_from_an_older_reporter_takes_nothing_and_a_stale_one_is_not_written():
    ic = remote_cluster(2)
    older = inventory_report.render(inventory_report.summarize([node("a")]), NOW)
    assert inventory_report.parse(older).taken is None
    rsp = run_cluster(ic, observed={reporter.REPORT: report_object(older)})
    assert "takenDevices" not in pool_entry(rsp)
    (a, sa) = gpu_node("a")
    others = allocated.taken([a], [sa], allocated.held([claim("x", "a", 0)]))
    stale = inventory_report.render(inventory_report.summarize([a]),
                                    NOW - datetime.timedelta(hours=1), taken=others)
    rsp = run_cluster(ic, observed={reporter.REPORT: report_object(stale)})
    assert "takenDevices" not in pool_entry(rsp)


def test_a_report_reads_back_as_it_was_written_and_refuses_malformed_taken():
    (a, sa) = gpu_node("a")
    others = allocated.taken([a], [sa], allocated.held([claim("x", "a", 0, 1)]))
    found = pool_devices([a], [sa], [CLASS])
    text = inventory_report.render(inventory_report.summarize([a]), NOW, found.devices,
                                   found.notes, others)
    assert inventory_report.parse(text).taken == others
    doc = json.loads(text)
    doc["taken"]["pools"]["h100"]["nodes"][0]["devices"][0]["kind"] = 5  # no such kind
    try:
        inventory_report.parse(json.dumps(doc))
    except inventory_report.Malformed as exc:
        assert "taken devices are malformed" in str(exc)
    else:
        raise AssertionError("a report naming a kind it lacks was read")


# --- The scheduler reads it back --------------------------------------------------

def with_taken(ic: dict, taken: list[dict], schedulable: int, counted: bool = True) -> dict:
    ic = copy.deepcopy(ic)
    ic["status"] = {
        "conditions": [{"type": "CapacityObserved", "status": "True" if counted else "False"}],
        "nodePools": [{"name": "h100", "schedulableNodes": schedulable, "takenDevices": taken}]}
    return ic


def test_parse_cluster_yields_pool_taken_by_node_name_while_the_observation_counts():
    taken = [{"node": "b", "devices": [{"name": "gpu", "count": 3}]},
             {"node": "a", "devices": [{"name": "gpu", "count": 9},      # more than a node has
                                       {"name": "nic", "count": 1}]}]    # not the pool's device
    ic = local(nodes=4)
    assert parse_cluster(with_taken(ic, taken, 4)).pools[0].taken == (
        (("gpu", 8),), (("gpu", 3),))
    assert parse_cluster(with_taken(ic, taken, 4, counted=False)).pools[0].taken == ()
    assert parse_cluster(ic).pools[0].taken == ()


def test_a_pool_capped_by_its_declaration_counts_its_freest_nodes():
    # Declared 2, schedulable 3, of which two hold others' devices: the pool counts the
    # untaken node and the one holding least.
    taken = [{"node": "a", "devices": [{"name": "gpu", "count": 6}]},
             {"node": "b", "devices": [{"name": "gpu", "count": 1}]}]
    assert parse_cluster(with_taken(local(nodes=2), taken, 3)).pools[0].taken == (
        (("gpu", 1),),)
    assert parse_cluster(with_taken(local(nodes=1), taken, 3)).pools[0].taken == ()


def test_the_status_counts_the_same_freest_nodes_the_scheduler_reads():
    # Declared 1 of 2 schedulable nodes; someone else holds 6 GPUs of "a" and 1 of
    # "b". The scheduler counts the freest node ("b", 7 free); so does the status.
    _, rsp = observe(local(nodes=1), [gpu_node("a"), gpu_node("b")],
                     [claim("big", "a", 0, 1, 2, 3, 4, 5), claim("small", "b", 0)])
    gpu = next(d for d in pool_entry(rsp)["devices"] if d["name"] == "gpu")
    assert (gpu["total"], gpu["free"], gpu["largestFree"]) == (8, 7, 7)


def test_the_reduction_is_deterministic_whatever_the_order_of_its_inputs():
    pairs = [gpu_node(n) for n in ("a", "b", "c")]
    claims = [claim(f"c{i}", "abc"[i % 3], i % 8, (i + 3) % 8) for i in range(9)]
    nodes, slices = [n for n, _ in pairs], [s for _, s in pairs]
    forward = allocated.taken(nodes, slices, allocated.held(claims))
    backward = allocated.taken(nodes[::-1], slices[::-1], allocated.held(claims[::-1]))
    assert inventory_report.render({}, NOW, taken=forward) == \
        inventory_report.render({}, NOW, taken=backward)
