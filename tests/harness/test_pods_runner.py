"""Pods run as processes (e2e/controlplane/pods/runner.py), with fake binaries that
record how they were started: the composer's own pods (tests/golden) get the
right binary, translated engine flags, downward-API env and ConfigMap files;
sidecars start first; stop() ends every process group (SIGKILL after the
grace) and removes the namespace; a failed start leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
import yaml

from e2e.controlplane.pods import probes
from e2e.controlplane.pods.images import Role
from e2e.controlplane.pods.podspec import PodConfigError
from e2e.controlplane.pods.runner import Binaries, PodRunner, RunnerError, plan

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
POD_IP = "127.0.0.1"  # no namespace in unit tests: probes reach the fakes on loopback

FAKE = f"""#!{sys.executable}
import http.server, json, os, signal, sys, time
json.dump({{"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(),
            "pid": os.getpid(), "pgid": os.getpgid(0)}}, open("record.json", "w"))
if os.environ.get("FAKE_IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.environ.get("FAKE_EXIT"):
    sys.exit(int(os.environ["FAKE_EXIT"]))
port = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--port=")]
if os.environ.get("FAKE_SERVE") and port:
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", int(port[0])), H).serve_forever()
while True:
    time.sleep(60)
"""


@pytest.fixture
def binaries(tmp_path):
    paths = {}
    for name in ("sim", "epp", "sidecar"):
        p = tmp_path / "bin" / name
        p.parent.mkdir(exist_ok=True)
        p.write_text(FAKE)
        p.chmod(0o755)
        paths[name] = str(p)
    return Binaries(paths["sim"], paths["epp"], paths["sidecar"], "/lws-manager")


OBJECTS: dict[tuple[str, str, str], dict[str, str]] = {
    ("Secret", "ml-team", "hf-token"): {"token": "hf_x"},
}


def lookup(kind, namespace, name):
    if kind == "ConfigMap" and name.endswith("-config"):
        return {"epp-config.yaml": "apiVersion: inference.networking.x-k8s.io/v1alpha1\n"}
    return OBJECTS.get((kind, namespace, name))


def golden_pod(file: str, match: str) -> dict:
    """The pod a composed Deployment would create: its template as a Pod."""
    for doc in yaml.safe_load_all((GOLDEN / file).read_text()):
        # Stage-2 output wraps workloads in provider-kubernetes Objects; some are bare.
        m = (doc.get("spec") or {}).get("forProvider", {}).get("manifest") or doc
        if m.get("kind") == "Deployment" and match in m["metadata"]["name"]:
            t = m["spec"]["template"]
            return {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": m["metadata"]["name"] + "-abcde",
                                 "namespace": m["metadata"]["namespace"],
                                 "uid": "uid-" + match, "labels": t["metadata"]["labels"]},
                    "spec": t["spec"]}
    raise AssertionError(f"no Deployment matching {match} in {file}")


def test_the_decode_pod_runs_its_sidecar_first_then_the_simulator(binaries, tmp_path):
    pod = golden_pod("prefill-decode.yaml", "decode")
    plans = plan(pod, "10.64.0.9", binaries, lookup, tmp_path / "pod")
    assert [(p.name, p.role, p.sidecar) for p in plans] == [
        ("routing-proxy", Role.SIDECAR, True), ("engine", Role.VLLM, False)]
    sidecar, engine = plans
    assert sidecar.argv == (binaries.pd_sidecar, "--port=8000", "--vllm-port=8200",
                            "--kv-connector=nixlv2", "--secure-proxy=false")
    assert engine.argv[:4] == (binaries.inference_sim, "--model=Qwen/Qwen3-32B", "--port=8200",
                               "--max-model-len=32768")
    assert "--block-size=16" in engine.argv and "--force-dummy-tokenizer" in engine.argv
    assert "--tensor-parallel-size 2" in engine.dropped
    # Downward API and Secret keys, as the composer wrote them.
    assert engine.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.64.0.9"
    assert engine.env["HF_TOKEN"] == "hf_x"
    assert engine.probe == {"httpGet": {"path": "/health", "port": 8200}, "timeoutSeconds": 5}


def test_the_epp_reads_its_configmap_from_a_file_and_gets_the_harness_env(binaries, tmp_path):
    pod = golden_pod("throughput-epp.yaml", "epp")
    plans = plan(pod, "10.64.0.4", binaries, lookup, tmp_path / "pod",
                 extra_env={Role.EPP: {"KUBECONFIG": "/harness/kubeconfig"}})
    (epp,) = plans
    config = tmp_path / "pod" / "volumes" / "config" / "epp-config.yaml"
    assert config.read_text().startswith("apiVersion:")
    assert f"--config-file={config}" in epp.argv
    assert epp.argv[0] == binaries.epp and "--grpc-health-port=9003" in epp.argv
    assert epp.env["NAMESPACE"] == "ml-team" and epp.env["POD_NAME"] == pod["metadata"]["name"]
    assert epp.env["KUBECONFIG"] == "/harness/kubeconfig"
    assert "grpc" in epp.probe


def test_unmapped_images_and_plain_init_containers_are_not_run(binaries, tmp_path):
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {
        "initContainers": [{"name": "fetch", "image": "busybox", "command": ["wget"]}],
        "containers": [{"name": "engine", "image": "vllm/vllm-openai:v1", "args": ["m"]},
                       {"name": "logger", "image": "fluent/fluent-bit:3"}]}}
    plans = plan(pod, "10.64.0.4", binaries, lookup, tmp_path)
    assert [(p.name, bool(p.argv)) for p in plans] == [("engine", True), ("logger", False)]
    assert "kwok-only" in plans[1].note


class FakeNetwork:
    def __init__(self):
        self.events: list[tuple[str, ...]] = []

    def add_pod(self, bridge, netns, pod_ip):
        self.events.append(("add", netns, pod_ip))

    def remove_pod(self, netns):
        self.events.append(("remove", netns))

    def exec_prefix(self, netns):
        return []  # run in this namespace: a test cannot assume root


def _runner(tmp_path, binaries, network=None, **kw):
    from e2e.controlplane.pods.netns import Bridge
    bridge = Bridge.for_cluster("test", "10.64.0.0/16") if network else None
    return PodRunner("test", binaries, tmp_path / "state", lookup, network=network,
                     bridge=bridge, **kw)


def _record(running, name):
    path = running.pod_dir / "containers" / name / "record.json"
    for _ in range(100):
        if path.exists() and path.stat().st_size:
            try:
                return json.loads(path.read_text())
            except json.JSONDecodeError:
                pass  # still being written
        time.sleep(0.05)
    raise AssertionError(f"{name} never started ({path})")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_start_runs_each_container_in_its_own_group_and_stop_ends_them(binaries, tmp_path):
    net = FakeNetwork()
    r = _runner(tmp_path, binaries, net)
    running = r.start(golden_pod("prefill-decode.yaml", "decode"), POD_IP)
    try:
        engine, sidecar = _record(running, "engine"), _record(running, "routing-proxy")
        assert engine["argv"][1:3] == ["--model=Qwen/Qwen3-32B", "--port=8200"]
        assert engine["env"]["HF_TOKEN"] == "hf_x" and engine["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5557"
        assert "FMS_SHOULD_NOT_LEAK" not in engine["env"]
        assert engine["cwd"].endswith("/containers/engine")
        # Its own /tmp, as in a pod: not the machine's, not the sidecar's.
        assert engine["env"]["TMPDIR"] == engine["cwd"] + "/tmp" != sidecar["env"]["TMPDIR"]
        assert engine["pgid"] == engine["pid"] and sidecar["pgid"] == sidecar["pid"]
        pids = [engine["pid"], sidecar["pid"]]
    finally:
        r.stop(running, grace=2)
    assert not any(_alive(p) for p in pids)
    ns = running.pod_dir.name
    assert net.events == [("add", ns, POD_IP), ("remove", ns)]
    r.stop(running)  # again: nothing left to do, no error
    assert net.events[-1] == ("remove", ns)


@pytest.fixture(autouse=True)
def _no_leak(monkeypatch):
    # A harness variable must not reach a pod: kubelet gives containers only their own env.
    monkeypatch.setenv("FMS_SHOULD_NOT_LEAK", "1")


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(binaries, tmp_path):
    r = _runner(tmp_path, binaries, extra_env={Role.VLLM: {"FAKE_IGNORE_TERM": "1"}})
    running = r.start(golden_pod("single-gpu.yaml", "vllm"), POD_IP)
    pid = _record(running, "engine")["pid"]
    start = time.monotonic()
    r.stop(running, grace=1)
    took = time.monotonic() - start
    assert not _alive(pid)
    assert 1 <= took < 4
    assert running.procs["engine"].returncode == -signal.SIGKILL


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _engine_pod(port):
    return {"metadata": {"name": "e", "namespace": "ml-team", "uid": f"u{port}"}, "spec": {
        "containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.10.1.1",
                        "command": ["vllm", "serve"], "args": ["m", "--port", str(port)],
                        "readinessProbe": {"httpGet": {"path": "/health", "port": port},
                                           "timeoutSeconds": 1}}]}}


def test_ready_comes_from_the_pods_own_probe(binaries, tmp_path):
    port = _free_port()
    serving = _runner(tmp_path, binaries, extra_env={Role.VLLM: {"FAKE_SERVE": "1"}})
    running = serving.start(_engine_pod(port), POD_IP)
    try:
        results = serving.wait_ready(running, timeout=20, period=0.1)
        assert results["engine"] == probes.Result(True, "GET /health -> 200")
    finally:
        serving.stop(running, grace=2)
    # Same pod, nothing listening: running but never ready.
    silent = _runner(tmp_path / "b", binaries)
    running = silent.start(_engine_pod(port), POD_IP)
    try:
        assert not silent.ready(running)
        with pytest.raises(RunnerError, match="not ready: engine: GET /health"):
            silent.wait_ready(running, timeout=1, period=0.2)
    finally:
        silent.stop(running, grace=2)


def test_an_exited_process_is_reported_and_not_ready(binaries, tmp_path):
    r = _runner(tmp_path, binaries, extra_env={Role.VLLM: {"FAKE_EXIT": "3"}})
    running = r.start(_engine_pod(_free_port()), POD_IP)
    try:
        with pytest.raises(RunnerError, match="exited with 3"):
            r.wait_ready(running, timeout=20, period=0.1)
        assert r.exited(running) == {"engine": 3}
    finally:
        r.stop(running)


def test_a_pod_that_cannot_start_leaves_no_process_and_no_namespace(binaries, tmp_path):
    pod = golden_pod("prefill-decode.yaml", "decode")
    # The sidecar would start before the engine; the engine's Secret is missing.
    pod["spec"]["containers"][0]["env"].append(
        {"name": "X", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}})
    net = FakeNetwork()
    r = _runner(tmp_path, binaries, net)
    with pytest.raises(PodConfigError, match="absent not found"):
        r.start(pod, POD_IP)
    assert [e[0] for e in net.events] == ["add", "remove"]
    assert not (tmp_path / "state" / net.events[0][1] / "containers").exists()


def test_binaries_come_from_the_tools_env_and_a_missing_one_is_named():
    b = Binaries.from_env({"INFERENCE_SIM": "/s", "EPP": "/e", "PD_SIDECAR": "/p",
                          "LWS_MANAGER": "/l"})
    assert (b.path(Role.SGLANG), b.path(Role.EPP), b.path(Role.SIDECAR), b.path(Role.LWS)) \
        == ("/s", "/e", "/p", "/l")
    with pytest.raises(RunnerError, match="PD_SIDECAR, LWS_MANAGER"):
        Binaries.from_env({"INFERENCE_SIM": "/s", "EPP": "/e"})
