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

import copy
import ipaddress
import json
import urllib.parse

from builders import load_one
from conftest import REPO
from live import (MD, SERVING, Stopwatch, apply_docs, delete_and_wait, ensure_namespace,
                  replicas_of, serving_pods, single_gpu, wait_condition, without_hf_token)
from traffic import (call, delta, first_answer, is_engine_pod, prompt, served,
                     stream_events)

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


# --- Unified behind the endpoint picker ----------------------------------------------

EPP_EXAMPLE = load_one(REPO / "examples" / "deployments" / "throughput-epp.yaml")
SPREAD = 16    # requests with prompts that share nothing
AFFINE = 8     # requests whose prompts share a long prefix
SYSTEM = " ".join(f"You are a careful assistant, rule {i}." for i in range(40))


def _the_replica(cp: ControlPlane, ns: str, name: str) -> tuple[dict, list[dict]]:
    (mr,) = replicas_of(cp, ns, name)
    return mr, sorted((p for p in serving_pods(cp, mr) if is_engine_pod(p)),
                      key=lambda p: p["metadata"]["name"])


def test_the_endpoint_picker_spreads_requests_and_keeps_a_shared_prefix_on_one_copy(
        cp: ControlPlane, timings):
    """Envoy asks the replica's real EPP (ext_proc, through the InferencePool extension
    server) which copy takes each request; the engines' own counters show where they
    went. Distinct prompts reach more than one copy; prompts sharing a long prefix all
    reach one copy, which random choice over four would do with probability 4^-7."""
    ensure_namespace(cp, NS)
    md = without_hf_token(copy.deepcopy(EPP_EXAMPLE))
    md["metadata"] = {"name": "picked", "namespace": NS}
    clock = Stopwatch()
    apply_docs(cp, [md])
    try:
        wait_condition(cp, MD, "picked", NS, "Ready", SERVING)
        mr, engines = _the_replica(cp, NS, "picked")
        assert len(engines) == 4, [p["metadata"]["name"] for p in engines]
        url = f"{mr['status']['endpoint']}/v1/completions"
        first_answer(url, {"model": MODEL, "prompt": "warm up", "max_tokens": 2})
        timings["endpoint picker: apply -> answering through the EPP (s)"] = clock.seconds()

        before = served(engines)
        for i in range(SPREAD):
            status, text = call(url, {"model": MODEL, "max_tokens": 2,
                                      "prompt": prompt("", 40, f"distinct{i}")})
            assert status == 200, text
        spread = delta(served(engines), before)
        assert sum(spread.values()) == SPREAD, spread
        assert sum(1 for n in spread.values() if n) >= 2, f"one copy took all: {spread}"

        before = served(engines)
        for i in range(AFFINE):
            status, text = call(url, {"model": MODEL, "max_tokens": 2,
                                      "prompt": prompt(SYSTEM, 8, f"question{i}")})
            assert status == 200, text
        affine = delta(served(engines), before)
        assert sorted(affine.values())[-1] == AFFINE, f"a shared prefix spread: {affine}"
    finally:
        delete_and_wait(cp, NS, "picked")


# --- PrefillDecode through the routing sidecar ----------------------------------------

PD_EXAMPLE = load_one(REPO / "examples" / "deployments" / "prefill-decode.yaml")
PD_MODEL = "Qwen/Qwen3-32B"
PD_REQUESTS = 4


def test_prefill_decode_prefills_on_a_prefill_pod_and_decodes_through_the_sidecar(
        cp: ControlPlane, timings):
    """Each request goes Envoy -> EPP (which picks a decode pod and a prefill pod) ->
    the decode pod's sidecar -> the prefill engine (do_remote_decode) -> the decode
    engine (do_remote_prefill). The prefill engine counts every request as finished
    with `remote_decode`, the decode engines count them as decoded; streaming works."""
    ensure_namespace(cp, NS)
    md = without_hf_token(copy.deepcopy(PD_EXAMPLE))
    md["metadata"] = {"name": "disaggregated", "namespace": NS}
    clock = Stopwatch()
    apply_docs(cp, [md])
    try:
        wait_condition(cp, MD, "disaggregated", NS, "Ready", SERVING)
        mr, engines = _the_replica(cp, NS, "disaggregated")
        engine_of = {p["metadata"]["name"]: p["metadata"]["labels"]["modelplane.ai/engine"]
                     for p in engines}
        assert sorted(engine_of.values()) == ["decode", "decode", "prefill"], engine_of
        url = mr["status"]["endpoint"]
        first_answer(f"{url}/v1/completions",
                     {"model": PD_MODEL, "prompt": prompt("", 40, "warm"), "max_tokens": 2})
        timings["prefill-decode: apply -> answering through the sidecar (s)"] = clock.seconds()

        before = served(engines)
        for i in range(PD_REQUESTS):
            status, text = call(f"{url}/v1/completions", {
                "model": PD_MODEL, "max_tokens": 4, "prompt": prompt("", 40, f"pd{i}")})
            assert status == 200, text
            assert json.loads(text)["choices"][0]["text"], text
        status, text = call(f"{url}/v1/chat/completions", {
            "model": PD_MODEL, "stream": True, "max_tokens": 4,
            "messages": [{"role": "user", "content": prompt("", 40, "streamed")}]})
        assert status == 200, text
        events = stream_events(text)
        assert events[-1] == "[DONE]" and len(events) >= 3, events
        after = served(engines)

        by_engine: dict[str, dict[str, int]] = {"prefill": {}, "decode": {}}
        for pod, counts in after.items():
            for reason, n in (counts - before[pod]).items():
                slot = by_engine[engine_of[pod]]
                slot[reason] = slot.get(reason, 0) + n
        assert by_engine["prefill"] == {"remote_decode": PD_REQUESTS + 1}, by_engine
        assert sum(by_engine["decode"].values()) == PD_REQUESTS + 1, by_engine
        assert "remote_decode" not in by_engine["decode"], by_engine
    finally:
        delete_and_wait(cp, NS, "disaggregated")


# --- a multi-node gang (LeaderWorkerSet) ------------------------------------------------

GANG_EXAMPLE = load_one(REPO / "examples" / "deployments" / "multinode-gang.yaml")
GANG_MODEL = "meta-llama/Llama-3.1-405B-Instruct-FP8"


def test_a_multi_node_gang_answers_through_its_leader_while_its_workers_run_nothing(
        cp: ControlPlane, timings):
    """The leader's `ray start --head && exec vllm serve ...` runs as the simulator; a
    worker's `ray start --address=...` starts nothing here (the simulator has no Ray),
    so the worker pod is Ready with no process and the gang answers through its leader."""
    ensure_namespace(cp, NS)
    md = without_hf_token(copy.deepcopy(GANG_EXAMPLE))
    md["metadata"] = {"name": "gang", "namespace": NS}
    clock = Stopwatch()
    apply_docs(cp, [md])
    try:
        wait_condition(cp, MD, "gang", NS, "Ready", SERVING)
        mr, engines = _the_replica(cp, NS, "gang")
        role = {p["metadata"]["name"]: p["metadata"]["labels"]["modelplane.ai/role"]
                for p in engines}
        assert sorted(role.values()) == ["Leader", "Worker"], role
        leader = next(p for p in engines if role[p["metadata"]["name"]] == "Leader")
        worker = next(p for p in engines if role[p["metadata"]["name"]] == "Worker")
        url = f"{mr['status']['endpoint']}/v1/completions"
        before = served([leader])
        text = first_answer(url, {"model": GANG_MODEL, "prompt": "Hello", "max_tokens": 4})
        assert json.loads(text)["model"] == GANG_MODEL, text
        timings["multi-node gang: apply -> answering through its leader (s)"] = clock.seconds()
        assert sum(delta(served([leader]), before).values()) >= 1
        # Nothing listens in the worker's namespace: kwok-only in all but its Ready.
        try:
            status, _ = call(f"http://{worker['status']['podIP']}:8000/health", timeout=2)
        except OSError:
            status = 0
        assert status == 0, "a worker runs an engine of its own"
    finally:
        delete_and_wait(cp, NS, "gang")
