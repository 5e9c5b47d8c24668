"""A composed vLLM pod run for real (e2e/controlplane/pods): the llm-d inference
simulator, started by runner.py from the composer's own single-gpu Deployment,
inside a network namespace holding a test-net pod IP on a bridge of its own.

Needs root (network namespaces) and the simulator (hack/tools.sh --dataplane,
built here on a cache miss); either missing is a failure, never a skip. It uses
no control plane (no `cp` fixture), so `make e2e` runs it without starting one.
Traffic: a handful of requests from this namespace to the pod IP, each bounded
by a timeout; nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from e2e.controlplane.pods import netns
from e2e.controlplane.pods.runner import Binaries, PodRunner

REPO = Path(__file__).resolve().parents[2]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TIMEOUT = 10  # seconds, per request


def _dataplane() -> dict[str, str]:
    """INFERENCE_SIM, EPP, PD_SIDECAR from the environment, else from hack/tools.sh."""
    if all(os.environ.get(k) for k in ("INFERENCE_SIM", "PD_SIDECAR")):
        return dict(os.environ)
    proc = subprocess.run(["bash", "hack/tools.sh", "--dataplane", "--env"], cwd=REPO,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.fail(f"hack/tools.sh --dataplane failed; no simulator:\n{proc.stderr[-4000:]}",
                    pytrace=False)
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def _simulator() -> str:
    return _dataplane()["INFERENCE_SIM"]


def _golden_pod(file: str = "single-gpu.yaml", match: str = "") -> dict:
    """The pod one of the composer's Deployments would create."""
    for doc in yaml.safe_load_all((REPO / "tests/golden" / file).read_text()):
        m = (doc.get("spec") or {}).get("forProvider", {}).get("manifest") or {}
        if m.get("kind") == "Deployment" and match in m["metadata"]["name"]:
            t = m["spec"]["template"]
            return {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": m["metadata"]["name"] + "-live", "uid": f"live-{os.getpid()}",
                                 "namespace": m["metadata"]["namespace"],
                                 "labels": t["metadata"]["labels"]},
                    "spec": t["spec"]}
    raise AssertionError("no Deployment in tests/golden/single-gpu.yaml")


def _post(url: str, body: dict) -> urllib.request.Request:
    return urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                  headers={"content-type": "application/json"})


def _finished(base: str, model: str, want: int, within: float = 5.0) -> float:
    """vllm:request_success_total for model, read from /metrics until it reaches want.

    The simulator counts a request just after answering it, so a read right after
    the response can be one short: poll (at most 25 reads), then return what is there.
    """
    deadline = time.monotonic() + within
    while True:
        with urllib.request.urlopen(f"{base}/metrics", timeout=TIMEOUT) as resp:
            metrics = resp.read().decode()
        finished = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                       if line.startswith("vllm:request_success_total{")
                       and f'model_name="{model}"' in line)
        if finished >= want or time.monotonic() > deadline:
            return finished
        time.sleep(0.2)


def _netns_of(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def _ip_forward() -> str:
    return Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()


def test_a_composed_vllm_pod_serves_completions_from_its_own_namespace(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("needs root: it creates a bridge and a network namespace", pytrace=False)
    sim = _simulator()
    assert Path(sim).is_file(), f"INFERENCE_SIM={sim} does not exist"
    forward_before = _ip_forward()

    # A test-net /24 chosen by PID, so two runs at once do not share a subnet.
    third = 20 + os.getpid() % 200
    cluster = f"pods-live-{os.getpid()}"
    bridge = netns.Bridge.for_cluster(cluster, f"10.244.{third}.0/24")
    pod_ip = f"10.244.{third}.7"
    network = netns.Network()
    network.ensure_bridge(bridge)
    runner = PodRunner(cluster, Binaries(sim, "/absent/epp", "/absent/pd-sidecar",
                                         "/absent/lws-manager"), tmp_path,
                       lambda kind, ns, name: {"token": "hf_unused"},
                       network=network, bridge=bridge)
    running = None
    try:
        running = runner.start(_golden_pod(), pod_ip)
        ns = running.netns
        assert ns in netns.list_namespaces()
        pid = running.procs["engine"].pid
        # The pod can reach nothing beyond its subnet.
        routes = subprocess.run(["ip", "-n", ns, "route", "show", "default"],
                                capture_output=True, text=True, check=True).stdout
        assert routes.strip() == ""

        # Readiness: the pod's own httpGet /health probe, run inside the namespace.
        results = runner.wait_ready(running, timeout=60, period=0.5)
        assert results["engine"].ok and "/health -> 200" in results["engine"].detail
        # Serving, so past `ip netns exec`'s setns: the engine is in the pod's
        # namespace, the very one the bind mount under /run/netns names.
        assert _netns_of(pid) != _netns_of(os.getpid())
        assert os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{ns}").st_ino

        base = f"http://{pod_ip}:8000"
        with urllib.request.urlopen(_post(f"{base}/v1/completions", {
                "model": MODEL, "prompt": "The capital of France is", "max_tokens": 8}),
                timeout=TIMEOUT) as resp:
            assert resp.status == 200
            body = json.load(resp)
        assert body["model"] == MODEL and body["choices"][0]["text"]

        with urllib.request.urlopen(_post(f"{base}/v1/chat/completions", {
                "model": MODEL, "stream": True, "max_tokens": 8,
                "messages": [{"role": "user", "content": "Say hello"}]}),
                timeout=TIMEOUT) as resp:
            assert resp.status == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            events = [line[len(b"data: "):].strip() for line in resp.read().splitlines()
                      if line.startswith(b"data: ")]
        assert events[-1] == b"[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert len(chunks) >= 2
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])

        assert _finished(base, MODEL, want=2) == 2
    finally:
        if running is not None:
            start = time.monotonic()
            runner.stop(running)
            stop_took = time.monotonic() - start
        network.remove_bridge(bridge)

    assert running is not None
    assert all(p.poll() is not None for p in running.procs.values())
    assert not Path(f"/proc/{pid}").exists()
    assert running.netns not in netns.list_namespaces()
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=True).stdout
    assert netns.veth_name(running.netns) not in links and bridge.name not in links
    assert stop_took < 6  # SIGTERM is enough: the simulator shuts down on it
    assert _ip_forward() == forward_before == "0"


def test_the_pd_decode_pods_sidecar_reaches_its_engine_at_localhost(tmp_path):
    """The decode pod of prefill-decode: the real routing sidecar (an init container
    with restartPolicy Always) on :8000 and the simulator on :8200 share one namespace;
    the sidecar dials `localhost:8200`, so a completion through :8000 proves it."""
    if os.geteuid() != 0:
        pytest.fail("needs root: it creates a bridge and a network namespace", pytrace=False)
    tools = _dataplane()
    third = 20 + (os.getpid() + 100) % 200
    cluster = f"pods-live-pd-{os.getpid()}"
    bridge = netns.Bridge.for_cluster(cluster, f"10.244.{third}.0/24")
    pod_ip = f"10.244.{third}.9"
    network = netns.Network()
    network.ensure_bridge(bridge)
    runner = PodRunner(cluster, Binaries(tools["INFERENCE_SIM"], "/absent/epp", tools["PD_SIDECAR"],
                                         "/absent/lws-manager"),
                       tmp_path, lambda kind, ns, name: {"token": "hf_unused"},
                       network=network, bridge=bridge)
    running = None
    try:
        running = runner.start(_golden_pod("prefill-decode.yaml", "decode"), pod_ip)
        assert set(running.procs) == {"routing-proxy", "engine"}
        results = runner.wait_ready(running, timeout=60, period=0.5)
        assert results["routing-proxy"].detail == "tcp 8000 open"
        with urllib.request.urlopen(_post(f"http://{pod_ip}:8000/v1/completions", {
                "model": "Qwen/Qwen3-32B", "prompt": "hi", "max_tokens": 4}),
                timeout=TIMEOUT) as resp:
            assert resp.status == 200 and json.load(resp)["choices"]
        # The engine behind the sidecar served it.
        assert _finished(f"http://{pod_ip}:8200", "Qwen/Qwen3-32B", want=1) == 1
    finally:
        if running is not None:
            runner.stop(running)
        network.remove_bridge(bridge)
    assert all(p.poll() is not None for p in running.procs.values())
    assert running.netns not in netns.list_namespaces()
