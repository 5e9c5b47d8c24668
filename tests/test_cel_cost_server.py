"""One request never holds the others back (#33).

Crossplane sends every tenant's reconciles to one function server. Handlers
used to run on the gRPC server's event loop, one at a time, so a selector
that took a minute to evaluate held every other tenant's request for that
minute. Now the selector is refused by the cost estimates before it runs
(test_cel_cost.py), handlers run on a worker thread off the event loop, and
each request has a deadline: Crossplane's, capped by ours (runtime/fn.py).

Measured on this repository's 2-core machine, with the cost limit lifted and
selectors still evaluated in process (before #48): an unbounded selector
(bomb(14)) evaluating for 10.7 s held an ordinary request sent 0.5 s later
for 10.2 s, though the event loop sat idle: an evaluation holds the GIL. What
the estimates miss is now stopped by the sandbox (test_cel_sandbox_server.py).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import grpc
from builders import ROOT, load_one, request
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from fleetgen import World, cluster, condition, deployment, device, pool
from test_cel_cost import bomb
from test_transport import wait_listening

from function.runtime import fn
from function.tools import localrender

H100 = device("gpu", "H100", count=8)


def _cap_memory() -> None:  # in the server's process, before it starts
    import resource
    # Room for the server's threads and arenas, but not for the unbounded
    # evaluation this replaced, should it come back: it fails, not the machine.
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))


def _peak_rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc/{pid}/status")


def test_a_selector_bomb_and_an_ordinary_request_at_once_over_grpc():
    address = f"127.0.0.1:{localrender.free_port()}"
    server = subprocess.Popen(
        [sys.executable, "-m", "function.runtime.main", "serve", "--insecure", "--address", address],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_cap_memory)
    try:
        wait_listening(address, server)
        md = deployment("llama", replicas=1)
        md["spec"]["template"]["spec"]["engines"][0]["members"][0]["nodeSelector"]["devices"][0][
            "selectors"] = [{"cel": bomb(14)}]  # 2 * 4**14 characters, if it ever ran
        bomb_request = World(md, [cluster("a", pool("h100", 4, H100))]).request()
        ordinary = request(load_one("examples/fleet/us-east-1.yaml"), required={"model-replicas": []})
        with grpc.insecure_channel(address) as channel:
            stub = grpcv1.FunctionRunnerServiceStub(channel)
            stub.RunFunction(ordinary, timeout=30)  # warm: imports, caches
            answers: dict[str, tuple[float, fnv1.RunFunctionResponse | Exception]] = {}

            def send(name: str, req: fnv1.RunFunctionRequest) -> None:
                start = time.monotonic()
                got: fnv1.RunFunctionResponse | Exception
                try:
                    got = stub.RunFunction(req, timeout=60)
                except grpc.RpcError as e:
                    got = e
                answers[name] = (time.monotonic() - start, got)

            sending = threading.Thread(target=send, args=("bomb", bomb_request))
            sending.start()
            time.sleep(0.05)  # the bomb first
            send("ordinary", ordinary)
            sending.join(timeout=90)
        peak = _peak_rss_mb(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=10)

    ordinary_seconds, ordinary_rsp = answers["ordinary"]
    bomb_seconds, bomb_rsp = answers["bomb"]
    assert isinstance(ordinary_rsp, fnv1.RunFunctionResponse), ordinary_rsp
    assert ordinary_seconds < 2, f"the ordinary request waited {ordinary_seconds:.1f}s"
    assert isinstance(bomb_rsp, fnv1.RunFunctionResponse), bomb_rsp
    assert bomb_seconds < 10, f"the bomb was answered after {bomb_seconds:.1f}s"
    state, reason, message = condition(bomb_rsp, "ReplicasScheduled")
    assert (state, reason) == ("False", "InvalidSelector") and "too complex" in message
    assert peak < 1536, f"the server's peak memory was {peak:.0f} MB"


# --- The deadline ---------------------------------------------------------------

class _Context:
    """What the runner reads of a grpc.aio.ServicerContext: the time left."""

    def __init__(self, remaining: float | None):
        self.remaining = remaining

    def time_remaining(self) -> float | None:
        return self.remaining


def _slow_request(monkeypatch, seconds: float) -> fnv1.RunFunctionRequest:
    """An InferenceCluster request whose handler takes `seconds`."""
    from function.handlers import HANDLERS
    real = HANDLERS["InferenceCluster"]

    def slow(req, rsp):
        time.sleep(seconds)
        real(req, rsp)
    monkeypatch.setitem(HANDLERS, "InferenceCluster", slow)
    return request(load_one("examples/fleet/us-east-1.yaml"), required={"model-replicas": []})


def _fatal(rsp: fnv1.RunFunctionResponse) -> list[str]:
    return [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]


def test_a_request_past_crossplanes_deadline_is_answered_at_the_deadline(monkeypatch):
    req = _slow_request(monkeypatch, 2.0)
    runner = fn.FunctionRunner()
    start = time.monotonic()
    rsp = asyncio.run(runner.RunSerialized(req.SerializeToString(), _Context(0.2)))
    took = time.monotonic() - start
    assert took < 1.5, f"answered after {took:.2f}s"
    [message] = _fatal(rsp)
    assert "did not finish composing InferenceCluster within its deadline of 0.2s" in message
    assert "nothing was changed" in message
    assert not rsp.desired.resources  # a Fatal result applies nothing
    runner.pool.shutdown(wait=True)


def test_our_own_cap_applies_when_crossplane_sends_no_deadline(monkeypatch):
    req = _slow_request(monkeypatch, 2.0)
    runner = fn.FunctionRunner(deadline_seconds=0.2)
    rsp = asyncio.run(runner.RunFunction(req, _Context(None)))
    assert "within its deadline of 0.2s" in _fatal(rsp)[0]
    runner.pool.shutdown(wait=True)


def test_a_handler_past_its_deadline_stops_at_its_next_phase():
    # The deadline has passed when the handler starts (it waited for a worker).
    req = request(load_one("examples/fleet/us-east-1.yaml"), required={"model-replicas": []})
    rsp = fn.run_function(req, until=time.monotonic() - 1)
    [message] = _fatal(rsp)
    assert "before its deadline: it stopped before starting" in message
    assert not rsp.desired.resources
