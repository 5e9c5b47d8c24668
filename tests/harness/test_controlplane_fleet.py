"""The local control plane's fleet generation (e2e/controlplane/fleet.py): a pure
function from InferenceCluster YAML to the manifests of every cluster.

Every generated object validates (core kinds with kubernetes-validate's strict
schemas, Gateway API kinds with the reference CRDs); Synthetic devices are never
published; pool taints become node taints and cluster taints do not; counts of
nodes, slices and devices follow the pools.
"""

from __future__ import annotations

import copy
import pathlib
import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemas import Schemas

from e2e.controlplane import fleet

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "fleet"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class ClusterSchemas(Schemas):
    """The shared validator, with Kubernetes' own name rules per kind: DeviceClass
    names are DNS subdomains (`gpu.nvidia.com`), everything else here a DNS label."""

    @staticmethod
    def metadata_errors(obj):
        name = (obj.get("metadata") or {}).get("name")
        if obj.get("kind") == "DeviceClass":
            ok = isinstance(name, str) and len(name) <= 253 and DNS_SUBDOMAIN.match(name)
            return [] if ok else [f"metadata.name {name!r} is not a DNS subdomain"]
        return Schemas.metadata_errors(obj)


@pytest.fixture(scope="module")
def schemas() -> ClusterSchemas:
    return ClusterSchemas()


@pytest.fixture(scope="module")
def plan() -> fleet.FleetPlan:
    return fleet.plan_fleet(fleet.load_fleet(EXAMPLES))


def of_kind(manifests, kind):
    return [m for m in manifests if m["kind"] == kind]


def example(name: str) -> dict:
    for ic in fleet.load_fleet(EXAMPLES):
        if ic["metadata"]["name"] == name:
            return copy.deepcopy(ic)
    raise KeyError(name)


# ---- clusters --------------------------------------------------------------------

def test_the_control_plane_backs_clusters_without_a_provider_config(plan):
    assert set(plan.clusters) == {fleet.CONTROL_PLANE, "eu-west-1", "us-central-batch"}
    cp = plan.clusters[fleet.CONTROL_PLANE]
    assert cp.inference_clusters == ("us-east-1",) and not cp.remote
    assert cp.provider_config is None
    assert plan.clusters["eu-west-1"].remote
    assert plan.clusters["eu-west-1"].provider_config == "eu-west-1"
    assert plan.clusters["us-central-batch"].provider_config == "us-central-batch"
    assert plan.cluster_of("us-east-1").name == fleet.CONTROL_PLANE


def test_pools_of_different_clusters_never_mix(plan):
    for name, c in plan.clusters.items():
        owners = {m["metadata"]["labels"][fleet.CLUSTER_LABEL]
                  for m in c.manifests if m["kind"] in ("Node", "ResourceSlice")}
        assert owners == set(c.inference_clusters), name


def test_a_control_plane_is_planned_even_when_every_cluster_is_remote():
    plan = fleet.plan_fleet([example("eu-west-1")])
    assert plan.clusters[fleet.CONTROL_PLANE].manifests == ()
    assert plan.clusters[fleet.CONTROL_PLANE].inference_clusters == ()


def test_two_clusters_sharing_a_provider_config_are_refused():
    a, b = example("eu-west-1"), example("eu-west-1")
    b["metadata"]["name"] = "eu-west-2"
    with pytest.raises(fleet.FleetError, match="same ClusterProviderConfig eu-west-1"):
        fleet.plan_fleet([a, b])


def test_duplicate_names_and_namespaced_provider_configs_are_refused():
    with pytest.raises(fleet.FleetError, match="appears twice"):
        fleet.plan_fleet([example("us-east-1"), example("us-east-1")])
    ic = example("eu-west-1")
    ic["spec"]["providerConfigRef"]["kind"] = "ProviderConfig"
    with pytest.raises(fleet.FleetError, match="ProviderConfig is not supported"):
        fleet.plan_fleet([ic])
    ic = example("eu-west-1")
    ic["metadata"]["name"] = fleet.CONTROL_PLANE
    with pytest.raises(fleet.FleetError, match="may not be named"):
        fleet.plan_fleet([ic])


def test_load_fleet_reads_only_inference_clusters(tmp_path):
    (tmp_path / "a.yaml").write_text((EXAMPLES / "us-east-1.yaml").read_text()
                                     + "\n---\napiVersion: v1\nkind: ConfigMap\n"
                                       "metadata: {name: x}\n")
    assert [ic["metadata"]["name"] for ic in fleet.load_fleet(tmp_path)] == ["us-east-1"]
    with pytest.raises(fleet.FleetError, match="does not exist"):
        fleet.load_fleet(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(fleet.FleetError, match="no InferenceCluster"):
        fleet.load_fleet(tmp_path / "empty")


# ---- validity ------------------------------------------------------------------------

def test_every_generated_object_validates(plan, schemas):
    errors = []
    for c in plan.clusters.values():
        for m in c.manifests:
            errors += schemas.errors(m)
    assert errors == []


def test_every_kind_is_generated_in_apply_order(plan):
    kinds = [m["kind"] for m in plan.clusters["eu-west-1"].manifests]
    order = ["Namespace", "GatewayClass", "Gateway", "DeviceClass", "StorageClass",
             "PersistentVolume", "Node", "ResourceSlice"]
    assert sorted(set(kinds), key=order.index) == order
    assert kinds == sorted(kinds, key=order.index)   # namespaces first, slices after nodes


def test_names_are_unique_per_kind_and_namespace(plan):
    for c in plan.clusters.values():
        keys = Counter((m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"])
                       for m in c.manifests)
        assert [k for k, n in keys.items() if n > 1] == []


def test_provider_config_objects_are_what_the_docs_describe(schemas):
    secret, pc = fleet.provider_config_objects("eu-west-1", "apiVersion: v1\nkind: Config\n")
    assert secret["metadata"] == {"name": "eu-west-1-kubeconfig", "namespace": "crossplane-system"}
    assert secret["stringData"]["kubeconfig"].startswith("apiVersion: v1")
    assert pc["spec"]["credentials"] == {"source": "Secret", "secretRef": {
        "namespace": "crossplane-system", "name": "eu-west-1-kubeconfig", "key": "kubeconfig"}}
    assert schemas.errors(pc) == [] and schemas.errors(secret) == []


# ---- nodes ---------------------------------------------------------------------------

def test_each_pool_gets_its_nodes_with_label_annotation_and_room(plan):
    for c in plan.clusters.values():
        nodes = of_kind(c.manifests, "Node")
        for ic_name in c.inference_clusters:
            for pool in example(ic_name)["spec"]["nodePools"]:
                mine = [n for n in nodes if n["metadata"]["labels"][fleet.POOL_LABEL] == pool["name"]
                        and n["metadata"]["labels"][fleet.CLUSTER_LABEL] == ic_name]
                assert len(mine) == pool["nodes"], (ic_name, pool["name"])
                for n in mine:
                    assert n["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
                    assert n["status"]["allocatable"]["pods"] == fleet.NODE_RESOURCES["pods"]
                    assert n["metadata"]["labels"]["kubernetes.io/hostname"] == n["metadata"]["name"]


def test_pool_taints_become_node_taints_and_cluster_taints_do_not(plan):
    batch = of_kind(plan.clusters["us-central-batch"].manifests, "Node")
    gpu = [n for n in batch if n["metadata"]["labels"][fleet.POOL_LABEL] == "h200-8x-rdma"]
    cpu = [n for n in batch if n["metadata"]["labels"][fleet.POOL_LABEL] == "cpu"]
    assert all(n["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
               for n in gpu)
    # The cluster's taint (dedicated=batch) steers placement; it is no node taint.
    assert all(n["spec"]["taints"] == [] for n in cpu)


def test_a_taint_value_is_copied():
    ic = example("us-east-1")
    ic["spec"]["nodePools"][0]["taints"] = [{"key": "k", "value": "v", "effect": "NoExecute"}]
    nodes = of_kind(fleet.cluster_manifests([ic]), "Node")
    assert nodes[0]["spec"]["taints"] == [{"key": "k", "effect": "NoExecute", "value": "v"}]


# ---- devices ---------------------------------------------------------------------------

def test_a_synthetic_device_is_not_published(plan):
    for c in plan.clusters.values():
        drivers = {s["spec"]["driver"] for s in of_kind(c.manifests, "ResourceSlice")}
        assert not drivers & {"fabric.example.com", "cpu.example.com", "nvlink.example.com"}
        classes = {d["metadata"]["name"] for d in of_kind(c.manifests, "DeviceClass")}
        assert classes <= {"gpu.nvidia.com", "dranet"}
    cpu_nodes = {n["metadata"]["name"] for c in plan.clusters.values()
                 for n in of_kind(c.manifests, "Node")
                 if n["metadata"]["labels"][fleet.POOL_LABEL] == "cpu"}
    sliced = {s["spec"]["nodeName"] for c in plan.clusters.values()
              for s in of_kind(c.manifests, "ResourceSlice")}
    assert cpu_nodes and not cpu_nodes & sliced


def test_one_slice_per_node_and_driver_with_count_devices(plan):
    eu = plan.clusters["eu-west-1"].manifests
    slices = of_kind(eu, "ResourceSlice")
    h100 = [s for s in slices if s["metadata"]["labels"][fleet.POOL_LABEL] == "h100-8x-rdma"]
    assert Counter(s["spec"]["driver"] for s in h100) == {"gpu.nvidia.com": 4, "dra.net": 4}
    for s in h100:
        assert len(s["spec"]["devices"]) == 8
        assert s["spec"]["pool"] == {"name": s["spec"]["nodeName"], "generation": 1,
                                     "resourceSliceCount": 1}
    l4 = [s for s in slices if s["metadata"]["labels"][fleet.POOL_LABEL] == "l4-4x"]
    assert len(l4) == 2 and all(len(s["spec"]["devices"]) == 4 for s in l4)
    us_east = of_kind(plan.clusters[fleet.CONTROL_PLANE].manifests, "ResourceSlice")
    assert Counter(s["metadata"]["labels"][fleet.POOL_LABEL] for s in us_east) == \
        {"l4": 4, "h100-8x": 2}
    assert {len(s["spec"]["devices"]) for s in us_east
            if s["metadata"]["labels"][fleet.POOL_LABEL] == "l4"} == {1}


def test_attributes_keep_their_types_and_capacity_its_quantity(plan):
    slices = of_kind(plan.clusters["eu-west-1"].manifests, "ResourceSlice")
    gpu = next(s for s in slices if s["spec"]["driver"] == "gpu.nvidia.com")["spec"]["devices"][0]
    assert gpu == {"name": "gpu-0", "attributes": {
        "architecture": {"string": "Hopper"}, "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "550.54.15"}, "productName": {"string": "NVIDIA-H100-80GB"}},
        "capacity": {"memory": {"value": "80Gi"}}}
    nic = next(s for s in slices if s["spec"]["driver"] == "dra.net")["spec"]["devices"][7]
    assert nic["name"] == "nic-7"
    assert nic["attributes"]["rdma"] == {"bool": True}
    assert nic["attributes"]["linkSpeedGbps"] == {"int": 400}
    assert "capacity" not in nic


def test_a_device_without_claim_is_dra(plan):
    # eu-west-1's devices say no `claim`; they are published.
    assert of_kind(plan.clusters["eu-west-1"].manifests, "ResourceSlice")
    assert fleet.published({"name": "x", "driver": "d"})
    assert not fleet.published({"name": "x", "driver": "d", "claim": "Synthetic"})


def test_device_classes_select_their_driver(plan):
    classes = {d["metadata"]["name"]: d for d in of_kind(plan.clusters["eu-west-1"].manifests,
                                                          "DeviceClass")}
    assert classes["gpu.nvidia.com"]["spec"]["selectors"] == [
        {"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]
    assert classes["dranet"]["spec"]["selectors"] == [
        {"cel": {"expression": 'device.driver == "dra.net"'}}]


def test_a_class_shared_by_two_drivers_selects_both():
    ic = example("us-east-1")
    ic["spec"]["nodePools"][0]["devices"].append(
        {"name": "gpu2", "driver": "gpu.example.com", "deviceClassName": "gpu.nvidia.com"})
    dc = of_kind(fleet.cluster_manifests([ic]), "DeviceClass")
    assert dc[0]["spec"]["selectors"][0]["cel"]["expression"] == \
        'device.driver in ["gpu.example.com", "gpu.nvidia.com"]'


def test_more_than_128_devices_of_a_driver_split_into_slices(schemas):
    ic = example("us-east-1")
    ic["spec"]["nodePools"] = [{"name": "big", "nodes": 1, "devices": [
        {"name": f"gpu{i}", "driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com",
         "count": 100} for i in range(3)]}]
    slices = of_kind(fleet.cluster_manifests([ic]), "ResourceSlice")
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 128, 44]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {3}
    assert len({s["metadata"]["name"] for s in slices}) == 3
    assert all(schemas.errors(s) == [] for s in slices)


def test_a_bad_attribute_is_refused():
    ic = example("us-east-1")
    ic["spec"]["nodePools"][0]["devices"][0]["attributes"]["x"] = {"int": 1, "bool": True}
    with pytest.raises(fleet.FleetError, match="exactly one of"):
        fleet.cluster_manifests([ic])


# ---- gateways --------------------------------------------------------------------------

def test_each_cluster_gets_its_gateway_and_class(plan):
    for c in plan.clusters.values():
        if not c.inference_clusters:
            continue
        gws = of_kind(c.manifests, "Gateway")
        assert [(g["metadata"]["namespace"], g["metadata"]["name"]) for g in gws] == \
            [("gateway-system", "inference-gateway")]
        assert gws[0]["spec"]["gatewayClassName"] == fleet.GATEWAY_CLASS
        [gc] = of_kind(c.manifests, "GatewayClass")
        assert gc["spec"]["controllerName"] == fleet.GATEWAY_CONTROLLER
        assert {n["metadata"]["name"] for n in of_kind(c.manifests, "Namespace")} == \
            {"gateway-system"}


@pytest.mark.parametrize("address,want", [
    ("https://llm.eu-west-1.example.com", [{"type": "Hostname", "value": "llm.eu-west-1.example.com"}]),
    ("http://10.40.0.12:8080", [{"type": "IPAddress", "value": "10.40.0.12"}]),
    ("LLM.example.com:443", [{"type": "Hostname", "value": "llm.example.com"}]),
    ("http://[fd00::1]:80", [{"type": "IPAddress", "value": "fd00::1"}]),
    (None, []),
    # The local data plane's: Envoy Gateway reads it from the load-balancer status.
    ("http://127.0.0.3:8000", []),
])
def test_gateway_addresses(address, want):
    assert fleet.gateway_addresses(address) == want


@pytest.mark.parametrize("address,port", [
    ("https://llm.eu-west-1.example.com", 80), ("http://10.40.0.12:8080", 8080),
    ("LLM.example.com:443", 443), ("http://[fd00::1]:81", 81), ("http://[fd00::1]", 80),
    ("http://127.0.0.2:8000/", 8000), (None, 80),
])
def test_the_gateway_listens_on_its_addresss_port(address, port):
    assert fleet.gateway_port(address) == port
    ic = {"apiVersion": fleet.API_VERSION, "kind": "InferenceCluster", "metadata": {"name": "a"},
          "spec": {"gateway": {"name": "gw", "namespace": "ns", "address": address},
                   "nodePools": []}}
    [gw] = of_kind(fleet.cluster_manifests([ic]), "Gateway")
    assert [lis["port"] for lis in gw["spec"]["listeners"]] == [port]


# ---- names -------------------------------------------------------------------------------

def test_dns_label_keeps_short_names_and_shortens_long_ones():
    assert fleet.dns_label("us-east-1", "l4", "0") == "us-east-1-l4-0"
    long = fleet.dns_label("a" * 60, "pool", "12")
    assert len(long) <= 63 and re.match(r"^[a-z0-9-]+$", long)
    assert long != fleet.dns_label("a" * 60, "pool", "13")
    assert fleet.dns_label("node", "gpu.nvidia.com") != "node-gpu.nvidia.com"


# ---- any fleet within the API's bounds -------------------------------------------------------

_names = st.from_regex(r"[a-z][a-z0-9]{0,10}", fullmatch=True)
_attr = st.one_of(st.builds(lambda v: {"string": v}, st.from_regex(r"[A-Za-z0-9-]{1,10}", fullmatch=True)),
                  st.builds(lambda v: {"int": v}, st.integers(-1000, 1000)),
                  st.builds(lambda v: {"bool": v}, st.booleans()),
                  st.builds(lambda a, b: {"version": f"{a}.{b}.0"}, st.integers(0, 99),
                            st.integers(0, 99)))
_device = st.fixed_dictionaries({
    "driver": st.sampled_from(["gpu.nvidia.com", "dra.net", "fabric.example.com"]),
    "claim": st.sampled_from(["DRA", "Synthetic", None]),
    "count": st.integers(1, 128),
    "attributes": st.dictionaries(_names, _attr, max_size=3),
    "capacity": st.dictionaries(_names, st.builds(lambda v: {"value": v}, st.sampled_from(
        ["1", "24Gi", "80Gi", 64])), max_size=2),
})
_pool = st.fixed_dictionaries({"nodes": st.integers(0, 2),
                               "devices": st.lists(_device, max_size=3),
                               "taints": st.lists(st.fixed_dictionaries({
                                   "key": _names, "effect": st.sampled_from(
                                       ["NoSchedule", "NoExecute", "PreferNoSchedule"])}),
                                   max_size=2)})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pools=st.lists(_pool, min_size=1, max_size=3))
def test_any_fleet_generates_valid_objects_and_publishes_exactly_the_dra_devices(pools, schemas):
    ic = {"apiVersion": fleet.API_VERSION, "kind": "InferenceCluster",
          "metadata": {"name": "c1"},
          "spec": {"gateway": {"name": "gw", "namespace": "gw-ns"}, "nodePools": []}}
    for i, p in enumerate(pools):
        devices = []
        for j, d in enumerate(p["devices"]):
            d = {k: v for k, v in d.items() if v is not None}
            d["name"] = f"d{j}"
            if d.get("claim") != "Synthetic":
                d["deviceClassName"] = d["driver"]
            devices.append(d)
        ic["spec"]["nodePools"].append({"name": f"p{i}", "nodes": p["nodes"],
                                        "devices": devices, "taints": p["taints"]})
    manifests = fleet.cluster_manifests([ic])
    errors = [e for m in manifests for e in schemas.errors(m)]
    assert errors == []
    slices = of_kind(manifests, "ResourceSlice")
    for pool in ic["spec"]["nodePools"]:
        want = Counter()
        for d in pool["devices"]:
            if fleet.published(d):
                want[d["driver"]] += d["count"]
        for i in range(pool["nodes"]):
            node = fleet.node_name("c1", pool["name"], i)
            got = Counter()
            for s in slices:
                if s["spec"]["nodeName"] == node:
                    got[s["spec"]["driver"]] += len(s["spec"]["devices"])
            assert got == want
    assert len(of_kind(manifests, "Node")) == sum(p["nodes"] for p in pools)


def test_a_cluster_with_storage_gets_its_class_and_volumes_a_cache_can_bind(plan):
    manifests = plan.clusters["eu-west-1"].manifests
    [cls] = [m for m in manifests if m["kind"] == "StorageClass"]
    assert cls["metadata"]["name"] == "filestore-rwx"
    assert cls["volumeBindingMode"] == "Immediate"  # the PV controller binds at once
    volumes = [m for m in manifests if m["kind"] == "PersistentVolume"]
    assert len(volumes) == fleet.PERSISTENT_VOLUMES
    assert {(v["spec"]["storageClassName"], tuple(v["spec"]["accessModes"])) for v in volumes} \
        == {("filestore-rwx", ("ReadWriteMany",))}


def test_a_cluster_without_storage_gets_none(plan):
    kinds = {m["kind"] for m in plan.clusters["us-central-batch"].manifests}
    assert not kinds & {"StorageClass", "PersistentVolume"}
