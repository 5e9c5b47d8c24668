"""Requests flow: a Unified deployment's replicas answer real OpenAI requests at the
endpoints their status names. (Every example answers too, and the routing modes show
what they do with real requests: test_examples.py with modes_traffic.py.)

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
import urllib.parse

from live import (MD, SERVING, Stopwatch, apply_docs, delete_and_wait, ensure_namespace,
                  replicas_of, serving_pods, single_gpu, wait_condition)
from traffic import call, first_answer, stream_events

from e2e.controlplane.core import ControlPlane

NS = "e2e-requests"
NAME = "chat"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # the single-GPU example's `vllm serve` model


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
            events = stream_events(text)
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

