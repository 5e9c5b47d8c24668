"""Capacity truth: the nodes an InferenceCluster counts are the nodes that exist now.

The control-plane cluster's Nodes are read directly; a remote cluster's come
from the inventory reporter composed onto it. Either way a pool counts its
Ready, uncordoned nodes that repel none of its pods, never more than
declared, and falls back to the declared nodes, saying why, when there is no
fresh observation. The scheduler counts what the cluster reports.
"""

from __future__ import annotations

import copy
import datetime
import json

import pytest
from builders import composite, desired, request
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from fleetgen import (
    World,
    cluster,
    condition,
    device,
    one_node,
    own_replica,
    placements,
    pool,
    stamp,
    to_plain,
)
from schemas import Schemas

import function.cluster as cluster_fn
from function.cluster import reporter
from function.contract import inventory_report
from function.contract.inventory_report import NodeGroup
from function.contract.records import Malformed, Taint, parse_cluster
from function.runtime import fn

NOW = datetime.datetime(2026, 11, 22, 12, 0, 0, tzinfo=datetime.UTC)
GPU_TAINT = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
H100 = device("gpu", "H100", count=8)


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    monkeypatch.setattr(cluster_fn, "now", lambda: NOW)


def node(name: str, pool_name: str | None = "h100", *, ready: bool = True,
         cordoned: bool = False, taints: list[dict] | None = None) -> dict:
    labels = {"modelplane.ai/pool": pool_name} if pool_name else {}
    spec: dict = {"taints": taints if taints is not None else [GPU_TAINT]}
    if cordoned:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "spec": spec,
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def h100_cluster(nodes: int = 4, **spec) -> dict:
    p = pool("h100", nodes, H100)
    p["taints"] = [GPU_TAINT]
    ic = cluster("local", p)
    ic["spec"].update(spec)
    return ic


# --- The report: one reduction of Nodes for both readers ----------------------

def test_a_pool_counts_ready_uncordoned_nodes_that_repel_none_of_its_pods():
    nodes = [
        node("a"),                                   # schedulable
        node("b"),                                   # schedulable
        node("c", cordoned=True),                    # ready, cordoned
        node("d", ready=False),                      # NotReady
        node("e", taints=[GPU_TAINT, {"key": "gpu-health", "value": "xid79",
                                      "effect": "NoExecute"}]),  # a taint beyond the pool's
        node("f", taints=[GPU_TAINT, {"key": "hint", "effect": "PreferNoSchedule"}]),
        node("g", pool_name=None),                   # in no pool
    ]
    groups = inventory_report.summarize(nodes)
    assert set(groups) == {"h100"}
    assert inventory_report.count(groups["h100"], [Taint("nvidia.com/gpu", "", "NoSchedule")]) == (5, 3)
    # Without the pool's own taint declared, the GPU taint repels the pods too.
    assert inventory_report.count(groups["h100"], []) == (5, 0)


def test_the_report_groups_nodes_by_state_not_by_name():
    groups = inventory_report.summarize([node(f"n{i}") for i in range(1000)] + [node("x", ready=False)])
    assert groups["h100"] == (NodeGroup(False, False, ("nvidia.com/gpu:NoSchedule",), 1),
                              NodeGroup(True, False, ("nvidia.com/gpu:NoSchedule",), 1000))


def test_a_report_reads_back_as_it_was_written():
    groups = inventory_report.summarize([node("a"), node("b", cordoned=True)])
    text = inventory_report.render(groups, NOW)
    got = inventory_report.parse(text)
    assert got.pools == groups and got.observed_at == "2026-11-22T12:00:00Z"
    assert inventory_report.render(groups, NOW) == text  # canonical: byte-identical


@pytest.mark.parametrize("text, why", [
    (None, "not a string"),
    ("{", "not JSON"),
    ('{"version": 2}', "not version 1"),
    ('{"version": 1, "observedAt": "yesterday", "pools": {}}', "not RFC 3339"),
    ('{"version": 1, "observedAt": "2026-11-22T12:00:00Z", "pools": []}', "pools is not"),
    ('{"version": 1, "observedAt": "2026-11-22T12:00:00Z", "pools": {"p": [{"nodes": -1}]}}',
     "malformed"),
])
def test_a_malformed_report_says_what_is_wrong(text, why):
    with pytest.raises(Malformed, match=why):
        inventory_report.parse(text)


# --- The control-plane cluster: its Nodes, read directly ----------------------

def run_cluster(ic: dict, *, nodes: dict[str, list] | None = None, observed=None,
                replicas=(), slices=(), classes=(), claims=()) -> fnv1.RunFunctionResponse:
    """The cluster function with its requirements resolved: the replicas, and
    when `nodes` are given, each pool's Nodes and the cluster's ResourceSlices,
    DeviceClasses and ResourceClaims (none unless given)."""
    required = {"model-replicas": list(replicas)}
    for name, ns in (nodes or {}).items():
        required[f"nodes/{name}"] = ns
    if nodes is not None:
        required.update({"resource-slices": list(slices), "device-classes": list(classes),
                         "resource-claims": list(claims)})
    return fn.run_function(request(ic, required=required, observed=observed))


def pools_status(rsp) -> list[dict]:
    return to_plain(composite(rsp))["status"]["nodePools"]


def test_the_control_plane_cluster_asks_for_each_pools_nodes():
    rsp = fn.run_function(request(h100_cluster()))
    by_name = {k: v for k, v in rsp.requirements.resources.items()}
    sel = by_name["nodes/h100"]
    assert (sel.api_version, sel.kind) == ("v1", "Node")
    assert dict(sel.match_labels.labels) == {"modelplane.ai/pool": "h100"}


def test_cordoned_and_not_ready_nodes_are_not_counted():
    rsp = run_cluster(h100_cluster(4), nodes={"h100": [
        node("a"), node("b"), node("c", cordoned=True), node("d", ready=False)]})
    assert pools_status(rsp) == [{
        "name": "h100", "nodes": 2, "declaredNodes": 4, "readyNodes": 3, "schedulableNodes": 2,
        "observedAt": "2026-11-22T12:00:00Z", "usedNodes": 0, "freeNodes": 2,
        # Devices on the nodes that count, not the declared ones.
        "devices": [{"name": "gpu", "perNode": 8, "total": 16, "used": 0, "free": 16,
                     "largestFree": 8}],
        "publishedDevices": [],  # no DRA driver publishes anything here
        "takenDevices": []}]     # and no claim holds anything
    assert condition(rsp, "CapacityObserved") == (
        "True", "Observed", "schedulable of declared: h100 2/4")


def test_more_nodes_than_declared_never_count_beyond_the_declaration():
    # An autoscaler's burst or a pool label on the wrong nodes: declared is the ceiling.
    rsp = run_cluster(h100_cluster(2), nodes={"h100": [node(f"n{i}") for i in range(5)]})
    [entry] = pools_status(rsp)
    assert (entry["nodes"], entry["schedulableNodes"]) == (2, 5)
    assert condition(rsp, "CapacityObserved")[2] == "every pool has its declared nodes schedulable"


def test_the_observation_time_moves_only_when_the_counts_change():
    ic = h100_cluster(4)
    ic["status"] = {"nodePools": [{"name": "h100", "readyNodes": 2, "schedulableNodes": 2,
                                   "observedAt": "2026-11-22T09:00:00Z"}]}
    same = run_cluster(ic, nodes={"h100": [node("a"), node("b")]})
    assert pools_status(same)[0]["observedAt"] == "2026-11-22T09:00:00Z"
    changed = run_cluster(ic, nodes={"h100": [node("a"), node("b", cordoned=True)]})
    assert pools_status(changed)[0]["observedAt"] == "2026-11-22T12:00:00Z"


def test_declared_inventory_reads_no_nodes_and_says_so():
    ic = h100_cluster(4, inventory={"source": "Declared"})
    rsp = fn.run_function(request(ic))
    assert not any(k.startswith("nodes/") for k in rsp.requirements.resources)
    rsp = run_cluster(ic)
    assert pools_status(rsp) == [{"name": "h100", "nodes": 4, "declaredNodes": 4,
                                  "usedNodes": 0, "freeNodes": 4, "devices": [
                                      {"name": "gpu", "perNode": 8, "total": 32, "used": 0,
                                       "free": 32, "largestFree": 8}]}]
    assert condition(rsp, "CapacityObserved")[:2] == ("False", "Declared")
    assert desired(rsp) == {}


# --- A remote cluster: the inventory reporter ---------------------------------

def remote_cluster(nodes: int = 4, **spec) -> dict:
    ic = h100_cluster(nodes, **spec)
    ic["metadata"]["name"] = "eu-west-1"
    ic["spec"]["providerConfigRef"] = {"name": "eu-west-1", "kind": "ClusterProviderConfig"}
    return ic


def report_object(text: str | None) -> dict:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "modelplane-inventory", "namespace": "modelplane-system"}}
    if text is not None:
        manifest["data"] = {"inventory.json": text}
    return {"apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "Object",
            "metadata": {"name": "x", "namespace": "crossplane-system"},
            "status": {"atProvider": {"manifest": manifest}}}


def report(*nodes: dict, at: datetime.datetime = NOW) -> str:
    return inventory_report.render(inventory_report.summarize(nodes), at)


def test_a_remote_cluster_runs_the_reporter_and_reads_its_report_back():
    rsp = run_cluster(remote_cluster(), observed={reporter.REPORT: report_object(report(
        node("a"), node("b"), node("c"), node("d", cordoned=True)))})
    objs = desired(rsp)
    assert set(objs) == {"inventory-namespace", "inventory-serviceaccount",
                         "inventory-clusterrole", "inventory-clusterrolebinding",
                         "inventory-role", "inventory-rolebinding", "inventory-deployment",
                         reporter.REPORT}
    schemas = Schemas()
    assert [e for o in objs.values() for e in schemas.errors(to_plain(o))] == []
    for key, o in objs.items():
        assert o["spec"]["providerConfigRef"] == {"name": "eu-west-1",
                                                  "kind": "ClusterProviderConfig"}
        # The reporter's health is in CapacityObserved, never in the cluster's readiness.
        assert rsp.desired.resources[key].ready == fnv1.READY_TRUE
    assert objs[reporter.REPORT]["spec"]["managementPolicies"] == ["Observe"]
    assert "Delete" not in objs["inventory-namespace"]["spec"]["managementPolicies"]
    pod = objs["inventory-deployment"]["spec"]["forProvider"]["manifest"]["spec"]["template"]
    assert pod["spec"]["containers"][0]["command"][1] == "inventory"
    assert pool_entry(rsp)["nodes"] == 3
    assert condition(rsp, "CapacityObserved")[:2] == ("True", "Observed")


def pool_entry(rsp) -> dict:
    (entry,) = pools_status(rsp)
    return entry


def test_a_stale_report_falls_back_to_the_declared_nodes_and_says_so():
    old = NOW - datetime.timedelta(seconds=301)
    rsp = run_cluster(remote_cluster(), observed={reporter.REPORT: report_object(
        report(node("a"), at=old))})
    assert pool_entry(rsp) == {"name": "h100", "nodes": 4, "declaredNodes": 4, "readyNodes": 1,
                               "schedulableNodes": 1, "observedAt": "2026-11-22T11:54:59Z",
                               "usedNodes": 0, "freeNodes": 4, "devices": [
                                   {"name": "gpu", "perNode": 8, "total": 32, "used": 0,
                                    "free": 32, "largestFree": 8}]}
    state, reason, msg = condition(rsp, "CapacityObserved")
    assert (state, reason) == ("False", "Stale")
    assert "older than 300s (spec.inventory.staleAfterSeconds)" in msg
    # Within a shorter staleAfterSeconds' window the reporter is looked at sooner.
    rsp = run_cluster(remote_cluster(inventory={"staleAfterSeconds": 60}),
                      observed={reporter.REPORT: report_object(report(node("a")))})
    assert rsp.meta.ttl.ToTimedelta() == datetime.timedelta(seconds=30)


@pytest.mark.parametrize("observed, why", [
    ({}, "not observed yet"),
    ({reporter.REPORT: report_object(None)}, "has not reported yet"),
    ({reporter.REPORT: report_object("{oops")}, "unreadable: the report is not JSON"),
])
def test_without_a_report_the_declared_nodes_count(observed, why):
    rsp = run_cluster(remote_cluster(), observed=observed)
    assert pool_entry(rsp)["nodes"] == 4
    state, reason, msg = condition(rsp, "CapacityObserved")
    assert (state, reason) == ("False", "NotObserved") and why in msg
    assert msg.endswith("counting the declared nodes")


def test_a_namespaced_provider_config_is_not_observed_and_says_why():
    ic = remote_cluster()
    ic["spec"]["providerConfigRef"]["kind"] = "ProviderConfig"
    rsp = run_cluster(ic)
    assert desired(rsp) == {}
    assert "needs a ClusterProviderConfig" in condition(rsp, "CapacityObserved")[2]


def test_the_reporter_image_and_namespace_follow_the_environment(monkeypatch):
    monkeypatch.setenv("MODELPLANE_INVENTORY_IMAGE", "registry.local/fms:dev")
    monkeypatch.setenv("MODELPLANE_INVENTORY_NAMESPACE", "platform")
    objs = desired(run_cluster(remote_cluster()))
    dep = objs["inventory-deployment"]
    assert dep["metadata"]["namespace"] == "platform"
    assert dep["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"][
        "containers"][0]["image"] == "registry.local/fms:dev"


# --- The scheduler counts what the cluster reports ---------------------------

def observed_status(ic: dict, schedulable: int, counted: bool = True) -> dict:
    ic = copy.deepcopy(ic)
    ic["status"] = {
        "conditions": [{"type": "CapacityObserved", "status": "True" if counted else "False",
                        "reason": "Observed" if counted else "Stale"}],
        "nodePools": [{"name": p["name"], "schedulableNodes": schedulable, "readyNodes": 8}
                      for p in ic["spec"]["nodePools"]]}
    return ic


def test_the_scheduler_counts_observed_schedulable_nodes_only_while_they_count():
    ic = h100_cluster(4)
    assert parse_cluster(observed_status(ic, 1)).pools[0].nodes == 1
    assert parse_cluster(observed_status(ic, 1, counted=False)).pools[0].nodes == 4
    assert parse_cluster(observed_status(ic, 9)).pools[0].nodes == 4  # never beyond declared
    assert parse_cluster(ic).pools[0].nodes == 4


def test_replicas_go_where_the_nodes_are_not_where_they_were_typed():
    md = one_node("llama", 3)  # a whole node each
    a, b = cluster("a", pool("h100", 4, H100)), cluster("b", pool("h100", 4, H100))
    rsp = World(md, [observed_status(a, 1), b]).run()
    assert sorted(c for c, _ in placements(rsp).values()) == ["a", "b", "b"]


def test_a_pool_that_loses_nodes_moves_its_youngest_replicas_and_keeps_the_oldest():
    md = one_node("llama", 3)  # a whole node each
    observed = {f"llama-a-{i}": own_replica(md, "a", i, {"vllm": "h100"}, created=stamp(i))
                for i in range(3)}
    a = observed_status(cluster("a", pool("h100", 3, H100)), 1)
    b = cluster("b", pool("h100", 4, H100))
    world = World(md, [a, b], observed=observed)
    rsp = world.run()
    by_index = {i: c for i, (c, _) in placements(rsp).items()}
    assert by_index == {0: "a", 1: "b", 2: "b"}  # the oldest stays, nothing is dropped


def test_the_report_is_json_a_person_can_read():
    doc = json.loads(report(node("a"), node("b", ready=False)))
    assert doc["pools"]["h100"][0] == {"nodes": 1, "ready": False, "taints":
                                       ["nvidia.com/gpu:NoSchedule"], "unschedulable": False}


# --- The reporter process -----------------------------------------------------

class FakeCustom:
    """CustomObjectsApi as the reporter uses it: ResourceSlices and DeviceClasses in pages."""

    def __init__(self, objects: dict[str, list[dict]], page: int) -> None:
        self.objects, self.page, self.calls = objects, page, []

    def list_cluster_custom_object(self, group, version, plural, limit, _continue):
        self.calls.append(f"{group}/{version}/{plural}")
        items = self.objects.get(plural, [])
        start = int(_continue or 0)
        end = start + min(limit, self.page)
        return {"items": items[start:end],
                "metadata": {"continue": str(end)} if end < len(items) else {}}


class FakeCore:
    """CoreV1Api as the reporter uses it: Nodes in pages, one ConfigMap."""

    def __init__(self, nodes: list[dict], page: int) -> None:
        self.nodes, self.page, self.configmaps, self.selectors = nodes, page, {}, []

    def list_node(self, label_selector, limit, _continue, _preload_content):
        self.selectors.append(label_selector)
        start = int(_continue or 0)
        end = start + min(limit, self.page)
        more = {"continue": str(end)} if end < len(self.nodes) else {}

        class Rsp:
            data = json.dumps({"items": self.nodes[start:end], "metadata": more}).encode()
        return Rsp()

    def replace_namespaced_config_map(self, name, namespace, body):
        from kubernetes.client.exceptions import ApiException
        if (namespace, name) not in self.configmaps:
            raise ApiException(status=404)
        self.configmaps[(namespace, name)] = body

    def create_namespaced_config_map(self, namespace, body):
        self.configmaps[(namespace, body["metadata"]["name"])] = body


def test_the_reporter_lists_every_page_and_writes_one_configmap():
    from function.agent import inventory as tool
    core = FakeCore([node(f"n{i}") for i in range(7)] + [node("c", cordoned=True)], page=3)
    custom = FakeCustom({}, page=3)
    for _ in range(2):  # the first report creates the ConfigMap, the next replaces it
        pools = tool.report_once(core, custom, "modelplane-system", lambda: NOW)
    assert core.selectors == ["modelplane.ai/pool"] * 6
    assert custom.calls == ["resource.k8s.io/v1/resourceslices",
                            "resource.k8s.io/v1/deviceclasses",
                            "resource.k8s.io/v1/resourceclaims"] * 2
    assert sum(g.nodes for g in pools["h100"]) == 8
    [(where, cm)] = core.configmaps.items()
    assert where == ("modelplane-system", "modelplane-inventory")
    assert inventory_report.parse(cm["data"]["inventory.json"]).pools == pools


def test_nodes_not_read_yet_are_not_observed_as_none():
    rsp = run_cluster(h100_cluster(4))  # Crossplane has not resolved nodes/h100 yet
    assert pool_entry(rsp)["nodes"] == 4
    assert condition(rsp, "CapacityObserved")[:2] == ("False", "NotObserved")
    # Resolved to nothing, it is an observation: no node carries the pool's label,
    # so no pod of the pool can land anywhere.
    rsp = run_cluster(h100_cluster(4), nodes={"h100": []})
    assert pool_entry(rsp)["nodes"] == 0
