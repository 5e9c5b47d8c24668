"""Requests flow: a Unified deployment's replicas answer real OpenAI requests at the
endpoints their status names.

Each request goes to the replica's `status.endpoint` (its cluster's gateway URL, a
loopback address of this machine), through that cluster's Envoy (started by Envoy
Gateway) and the replica's HTTPRoute, to its Service's endpoint: the engine pod's IP
inside the network namespace the pods supervisor made, where the llm-d inference
simulator runs the pod's vLLM command line. Readiness came from the pod's own probe.
Bounded: at most one request a second per replica while its route is programmed
(ROUTED seconds), then four requests per replica.
"""

from __future__ import annotations

import ipaddress
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from live import (MD, SERVING, Stopwatch, apply_docs, delete_and_wait, ensure_namespace,
                  replicas_of, serving_pods, single_gpu, wait_condition)

from e2e.controlplane.core import ControlPlane

NS = "e2e-requests"
NAME = "chat"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # the single-GPU example's `vllm serve` model
ROUTED = 60  # seconds for a new route to answer through its gateway
# No proxy from the environment: requests go straight to loopback.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def call(url: str, body: dict[str, Any] | None = None, timeout: float = 10) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with OPENER.open(req, timeout=timeout) as rsp:
            return rsp.status, rsp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def first_answer(url: str, body: dict[str, Any]) -> str:
    """POST until the route answers 200 (Envoy learns a new route within seconds)."""
    deadline = time.monotonic() + ROUTED
    while True:
        try:
            status, text = call(url, body)
        except OSError as exc:
            status, text = 0, str(exc)
        if status == 200:
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} answered {status} for {ROUTED}s: {text[:300]}")
        time.sleep(1)


def test_a_unified_deployment_answers_completions_and_streaming_chat_at_each_endpoint(
        cp: ControlPlane, timings):
    ensure_namespace(cp, NS)
    clock = Stopwatch()
    apply_docs(cp, [single_gpu(NAME, NS, 2)])
    try:
        wait_condition(cp, MD, NAME, NS, "Ready", SERVING)
        timings["requests: apply -> Ready with real engines (s)"] = clock.seconds()
        replicas = replicas_of(cp, NS, NAME)
        assert len(replicas) == 2
        assert len({mr["spec"]["clusterName"] for mr in replicas}) == 2, "spread over two clusters"
        for mr in replicas:
            endpoint = mr["status"]["endpoint"]
            host = urllib.parse.urlsplit(endpoint).hostname or ""
            assert ipaddress.ip_address(host).is_loopback, endpoint
            # Ready came from the engine's own probe, on the real process.
            (pod,) = serving_pods(cp, mr)
            assert pod["status"]["podIP"].startswith("10."), pod["status"]

            text = first_answer(f"{endpoint}/v1/completions",
                                {"model": MODEL, "prompt": "Hello", "max_tokens": 8})
            completion = json.loads(text)
            assert completion["object"] == "text_completion" and completion["model"] == MODEL
            assert completion["choices"][0]["text"], completion

            status, text = call(f"{endpoint}/v1/chat/completions", {
                "model": MODEL, "stream": True, "max_tokens": 8,
                "messages": [{"role": "user", "content": "Hello"}]})
            assert status == 200, text
            events = [line.removeprefix("data: ") for line in text.splitlines()
                      if line.startswith("data: ")]
            assert events[-1] == "[DONE]" and len(events) >= 3, events
            chunks = [json.loads(e) for e in events[:-1]]
            assert all(c["object"] == "chat.completion.chunk" for c in chunks)

            status, text = call(f"{endpoint}/v1/models")
            assert status == 200 and MODEL in [m["id"] for m in json.loads(text)["data"]], text

            # The engine's own metrics count what it served.
            status, text = call(f"{endpoint}/metrics")
            assert status == 200
            served = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                         if line.startswith("vllm:request_success_total"))
            assert served >= 2, [line for line in text.splitlines() if "success" in line]
        timings["requests: apply -> both replicas answered (s)"] = clock.seconds()
    finally:
        delete_and_wait(cp, NS, NAME)
