"""Envoy Gateway as the local control plane's Gateway implementation
(e2e/controlplane/envoy_gateway.py, hack/tools/envoy-gateway/patch.sh): its
configuration keeps it on loopback with no data plane, it runs once per API server
that holds a Gateway, the harness waits for its Gateways to be Accepted (never
Programmed, which needs a data plane), and the build-time patch fails loudly when upstream's text changes."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

from e2e.controlplane import envoy_gateway as eg
from e2e.controlplane import fleet

ROOT = pathlib.Path(__file__).resolve().parents[2]
PATCH = ROOT / "hack" / "tools" / "envoy-gateway" / "patch.sh"
GEN = 3


def test_the_config_runs_no_data_plane_and_listens_on_loopback_only():
    cfg = eg.config(admin_port=41234)
    assert cfg["kind"] == "EnvoyGateway"
    assert cfg["gateway"]["controllerName"] == fleet.GATEWAY_CONTROLLER
    provider = cfg["provider"]
    assert provider["type"] == "Custom"
    assert provider["custom"]["resource"]["type"] == "Kubernetes"
    assert "infrastructure" not in provider["custom"]       # no Envoy proxy is created
    assert provider["custom"]["resource"]["kubernetes"]["leaderElection"] == {"disable": True}
    assert cfg["admin"]["address"] == {"host": "127.0.0.1", "port": 41234}
    assert cfg["telemetry"]["metrics"]["prometheus"]["disable"] is True


def test_the_stacks_configuration_keeps_its_apis_under_the_harness_provider():
    """Where a cluster's stack installs Envoy Gateway, the local controller reads the
    configuration the stack composed (its chart's ConfigMap, the Backend API as the
    InferenceCluster declares it) and runs it with the harness's provider and
    listeners."""
    from function.cluster import stack as fn_stack
    from function.cluster import stackenvoy
    (chart,) = [m.manifest for m in fn_stack.rendered("envoyGateway").objects
                if m.manifest["kind"] == "ConfigMap"]
    for backend in (True, False):
        composed = stackenvoy.config_of(stackenvoy.configured(chart, backend))
        assert composed is not None and composed["provider"]["type"] == "Kubernetes"
        cfg = eg.config(admin_port=1, extension_port=2, composed=composed)
        assert cfg["extensionApis"] == ({"enableBackend": True} if backend else {})
        assert cfg["gateway"] == {"controllerName": fleet.GATEWAY_CONTROLLER}
        assert cfg["provider"]["type"] == "Custom"     # the harness's, not the chart's
        assert cfg["admin"]["address"]["host"] == "127.0.0.1"
    assert stackenvoy.config_of(None) is None
    assert stackenvoy.config_of({"data": {}}) is None
    # Without a stack's, the harness's own: the Backend API on for the front door.
    assert eg.config(admin_port=1)["extensionApis"] == {"enableBackend": True}


def test_inferencepools_are_handed_to_our_extension_server_on_loopback():
    """tools/inferencepool-extension/README.md's stanza: pools as backendRefs, both
    post hooks, everything in the translation (else pool routes answer 503), and the
    last good configuration kept while a hook fails."""
    assert "extensionManager" not in eg.config(admin_port=1)
    em = eg.config(admin_port=1, extension_port=5005)["extensionManager"]
    assert em["backendResources"] == [{"group": "inference.networking.k8s.io", "version": "v1",
                                       "kind": "InferencePool"}]
    hooks = em["hooks"]["xdsTranslator"]
    assert hooks["post"] == ["Cluster", "Translation"]
    assert set(hooks["translation"]) == {"listener", "route", "cluster", "secret"}
    assert all(v == {"includeAll": True} for v in hooks["translation"].values())
    assert em["service"] == {"ip": {"address": "127.0.0.1", "port": 5005}}
    assert em["failOpen"] is False
    argv = eg.extension_argv("/bin/ext", port=5005, kubeconfig=pathlib.Path("/kc"))
    assert argv == ("/bin/ext", "--listen=127.0.0.1:5005", "--kubeconfig=/kc",
                    f"--controller-name={fleet.GATEWAY_CONTROLLER}")


def test_the_environment_puts_every_listener_on_loopback_and_files_in_the_run_dir(tmp_path):
    env = eg.environment(kubeconfig=tmp_path / "kc", cert_dir=tmp_path / "certs",
                         home=tmp_path / "run", health_port=1, webhook_port=2, xds_port=3)
    assert env["EG_HEALTH_PROBE_ADDR"] == "127.0.0.1:1"
    assert env["EG_CR_METRICS_ADDR"] == "0"                  # off
    assert (env["EG_WEBHOOK_PORT"], env["EG_XDS_PORT"]) == ("2", "3")
    assert env["EG_XDS_CERT_DIR"] == env["EG_WEBHOOK_CERT_DIR"] == str(tmp_path / "certs")
    assert env["HOME"] == str(tmp_path / "run")
    assert env["ENVOY_GATEWAY_NAMESPACE"] == eg.NAMESPACE


def test_one_controller_per_cluster_that_holds_a_gateway():
    plan = fleet.plan_fleet(fleet.load_fleet(ROOT / "examples" / "fleet"))
    assert sorted(eg.clusters_with_gateways(plan)) == sorted(plan.clusters)
    no_gateway = fleet.load_fleet(ROOT / "examples" / "fleet")
    for ic in no_gateway:
        ic["spec"].pop("gateway", None)
    assert eg.clusters_with_gateways(fleet.plan_fleet(no_gateway)) == []


def test_the_fleets_gatewayclass_is_envoy_gateways():
    plan = fleet.plan_fleet(fleet.load_fleet(ROOT / "examples" / "fleet"))
    classes = [m for c in plan.clusters.values() for m in c.manifests
               if m["kind"] == "GatewayClass"]
    assert classes and all(gc["metadata"]["name"] == "eg" and
                           gc["spec"]["controllerName"] == eg.CONTROLLER for gc in classes)


def _obj(kind, name, ns=None, accepted=None, observed=GEN):
    meta = {"name": name, "generation": GEN} | ({"namespace": ns} if ns else {})
    spec = {"controllerName": eg.CONTROLLER} if kind == "GatewayClass" else \
        {"gatewayClassName": "eg"}
    obj = {"kind": kind, "metadata": meta, "spec": spec}
    if accepted is not None:
        obj["status"] = {"conditions": [
            {"type": "Accepted", "status": accepted, "reason": "R", "message": "m",
             "observedGeneration": observed},
            {"type": "Programmed", "status": "False", "reason": "AddressNotUsable",
             "message": "no data plane", "observedGeneration": observed}]}
    return obj


def test_accepted_gateways_are_enough_programmed_is_not_asked_for():
    gw = _obj("Gateway", "inference-gateway", "gateway-system", accepted="True")
    assert eg.not_accepted(_obj("GatewayClass", "eg", accepted="True"), [gw]) == []
    # Envoy Gateway's start-up race can leave the class Pending while its Gateways
    # are accepted: the Gateways are what routes attach to.
    pending = _obj("GatewayClass", "eg", accepted="Unknown")
    assert eg.not_accepted(pending, [gw]) == []


def test_gateways_of_other_classes_are_not_waited_for():
    other = _obj("Gateway", "g", "ns")
    other["spec"]["gatewayClassName"] = "other"
    assert eg.not_accepted(_obj("GatewayClass", "eg"), [other]) == []


@pytest.mark.parametrize("gc,gws,want", [
    (None, [], "GatewayClass eg does not exist"),
    ({"metadata": {"name": "eg"}, "spec": {"controllerName": "example.com/x"}}, [],
     f"GatewayClass eg names controller example.com/x, not {eg.CONTROLLER}"),
    (_obj("GatewayClass", "eg"), [_obj("Gateway", "g", "ns", accepted="False")],
     "Gateway ns/g: Accepted=False R: m"),
    (_obj("GatewayClass", "eg", accepted="True"),
     [_obj("Gateway", "g", "ns", accepted="True", observed=GEN - 1)],
     "Gateway ns/g: Accepted for generation 2, not 3"),
    (_obj("GatewayClass", "eg", accepted="True"), [_obj("Gateway", "g", "ns")],
     "Gateway ns/g: no Accepted condition yet"),
])
def test_what_is_not_accepted_yet_is_named(gc, gws, want):
    assert eg.not_accepted(gc, gws) == [want]


# ---- the build-time patch (hack/tools/envoy-gateway/patch.sh) ------------------------------

UPSTREAM_RUNNER = '''package runner

import (
\t"net"
\t"path/filepath"
\t"strconv"
)

const (
\tXdsServerAddress = "0.0.0.0"
\txdsTLSCertFilepath = "/certs/tls.crt"
\txdsTLSKeyFilepath = "/certs/tls.key"
\txdsTLSCaFilepath = "/certs/ca.crt"
)

func (r *Runner) serveXdsServer(ctx context.Context) {
\taddr := net.JoinHostPort(XdsServerAddress, strconv.Itoa(bootstrap.DefaultXdsServerPort))
}
'''
UPSTREAM_PROVIDER = '''package kubernetes

func f() {
\t\tmgrOpts.WebhookServer = webhook.NewServer(webhook.Options{
\t\t\tPort:     webhookTLSPort,
\t\t})
}
'''
UPSTREAM_IP = '''package net

const (
\tIPv4ListenerAddress = "0.0.0.0"
\tIPv6ListenerAddress = "::"
)
'''
UPSTREAM_BOOTSTRAP = '''package bootstrap

import (
\tnetutils "github.com/envoyproxy/gateway/internal/utils/net"
)

const (
\tEnvoyAdminAddress   = "127.0.0.1"
\tEnvoyAdminAddressV6 = "::1"
)

var _ = netutils.IPv4ListenerAddress
'''
UPSTREAM_HOST = '''package host

import (
\t"path/filepath"
\t"strings"
)

func f() {
\topts := &bootstrap.RenderBootstrapConfigOptions{
\t\tXdsServerHost:   new("0.0.0.0"),
\t\tAdminServerPort: new(int32(0)),
\t}
\t_, _ = filepath.Join, strings.Split
}
'''
UPSTREAM_WASM = '''package wasm

import (
\t"fmt"
\t"net/http"
)

func (s *HTTPServer) Start() {
\ts.server = &http.Server{
\t\tAddr:              fmt.Sprintf(":%d", serverPort),
\t}
}
'''


def _fake_module(root: pathlib.Path, runner: str = UPSTREAM_RUNNER) -> pathlib.Path:
    for rel, text in (("internal/xds/runner/runner.go", runner),
                      ("internal/provider/kubernetes/kubernetes.go", UPSTREAM_PROVIDER),
                      ("internal/utils/net/ip.go", UPSTREAM_IP),
                      ("internal/xds/bootstrap/bootstrap.go", UPSTREAM_BOOTSTRAP),
                      ("internal/infrastructure/host/proxy_infra.go", UPSTREAM_HOST),
                      ("internal/wasm/httpserver.go", UPSTREAM_WASM)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _patch(out: pathlib.Path, module: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(PATCH), str(out), str(module)], capture_output=True,
                          text=True, env=dict(os.environ))


def test_the_patch_moves_the_xds_server_and_the_webhook_to_loopback(tmp_path):
    proc = _patch(tmp_path / "out", _fake_module(tmp_path / "mod"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"-modfile={tmp_path / 'out' / 'go.mod'}"
    runner = (tmp_path / "out/gateway/internal/xds/runner/runner.go").read_text()
    assert 'XdsServerAddress = "127.0.0.1"' in runner and '"0.0.0.0"' not in runner
    assert '"/certs/' not in runner.split("// Added by")[0]
    assert 'os.Getenv("EG_XDS_CERT_DIR")' in runner and 'os.Getenv("EG_XDS_PORT")' in runner
    assert "net.JoinHostPort(XdsServerAddress, xdsServerPort())" in runner
    provider = (tmp_path / "out/gateway/internal/provider/kubernetes/kubernetes.go").read_text()
    assert '\t\t\tHost:     "127.0.0.1",' in provider
    gomod = (tmp_path / "out" / "go.mod").read_text()
    assert gomod.rstrip().endswith(
        f"replace github.com/envoyproxy/gateway => {tmp_path / 'out' / 'gateway'}")
    assert (tmp_path / "out" / "go.sum").read_bytes() == \
        (PATCH.parent / "go.sum").read_bytes()
    if shutil.which("gofmt"):
        fmt = subprocess.run(["gofmt", "-e", "-l", str(tmp_path / "out" / "gateway")],
                             capture_output=True, text=True)
        assert fmt.returncode == 0, fmt.stderr        # still parses as Go


def test_the_patch_puts_each_host_envoy_on_its_own_address_and_dials_its_own_controller(
        tmp_path):
    proc = _patch(tmp_path / "out", _fake_module(tmp_path / "mod"))
    assert proc.returncode == 0, proc.stderr
    gw = tmp_path / "out" / "gateway" / "internal"
    ip = (gw / "utils/net/ip.go").read_text()
    # Listeners and the readiness listener read this variable; unset, upstream's 0.0.0.0.
    assert 'IPv4ListenerAddress = "0.0.0.0"' not in ip
    assert 'var IPv4ListenerAddress = ProxyAddress("0.0.0.0")' in ip
    assert 'os.Getenv("EG_PROXY_ADDRESS")' in ip and 'import "os"' in ip
    boot = (gw / "xds/bootstrap/bootstrap.go").read_text()
    assert 'var EnvoyAdminAddress = netutils.ProxyAddress("127.0.0.1")' in boot
    assert 'EnvoyAdminAddress   = "127.0.0.1"' not in boot
    host = (gw / "infrastructure/host/proxy_infra.go").read_text()
    assert 'new("0.0.0.0")' not in host
    assert 'XdsServerHost:   new("127.0.0.1"),' in host
    assert "XdsServerPort:   new(hostXdsServerPort())," in host
    assert 'strconv.Atoi(os.Getenv("EG_XDS_PORT"))' in host
    assert '\t"os"\n\t"path/filepath"\n\t"strconv"\n\t"strings"\n' in host
    wasm = (gw / "wasm/httpserver.go").read_text()
    assert "Addr:              wasmServerAddress()," in wasm
    assert 'os.Getenv("EG_WASM_ADDRESS")' in wasm
    if shutil.which("gofmt"):
        fmt = subprocess.run(["gofmt", "-e", "-l", str(gw)], capture_output=True, text=True)
        assert fmt.returncode == 0, fmt.stderr        # still parses as Go


@pytest.mark.parametrize("rel,line", [
    ("internal/utils/net/ip.go", 'IPv4ListenerAddress = "0.0.0.0"'),
    ("internal/infrastructure/host/proxy_infra.go", 'XdsServerHost:   new("0.0.0.0"),'),
    ("internal/wasm/httpserver.go", 'Addr:              fmt.Sprintf(":%d", serverPort),'),
])
def test_a_host_data_plane_edit_whose_line_moved_fails_loudly(tmp_path, rel, line):
    mod = _fake_module(tmp_path / "mod")
    text = (mod / rel).read_text()
    (mod / rel).write_text(text.replace(line, line.replace("0", "1", 1) + " // changed"))
    proc = _patch(tmp_path / "out", mod)
    assert proc.returncode != 0
    assert f"expected exactly one line '{line}'" in proc.stderr


def test_the_patch_fails_loudly_when_upstream_changes(tmp_path):
    changed = UPSTREAM_RUNNER.replace('XdsServerAddress = "0.0.0.0"', 'XdsServerAddress = "::"')
    proc = _patch(tmp_path / "out", _fake_module(tmp_path / "mod", changed))
    assert proc.returncode != 0
    assert "expected exactly one line 'XdsServerAddress = \"0.0.0.0\"'" in proc.stderr
    assert proc.stdout == ""


def test_the_patch_fetches_the_pinned_module_into_a_cold_module_cache(tmp_path):
    # A clean CI machine has no module cache: `go list -m` printed no directory there
    # and the control plane never started. This is the real go command and proxy.
    env = {**os.environ, "GOMODCACHE": str(tmp_path / "modcache")}
    proc = subprocess.run(["bash", str(PATCH), str(tmp_path / "out")], capture_output=True,
                          text=True, env=env)
    try:
        assert proc.returncode == 0, proc.stderr
        runner = (tmp_path / "out/gateway/internal/xds/runner/runner.go").read_text()
        assert 'XdsServerAddress = "127.0.0.1"' in runner     # upstream's text still matches
        version = next(line.split()[-1] for line in (PATCH.parent / "go.mod").read_text()
                       .splitlines() if "github.com/envoyproxy/gateway " in line)
        assert (tmp_path / "modcache" / "github.com" / "envoyproxy"
                / f"gateway@{version}").is_dir()
    finally:
        # The module cache is read-only by design; go removes it properly.
        subprocess.run(["go", "clean", "-modcache"], env=env, capture_output=True)
