"""What real requests show about each serving mode, checked on a replica that serves.

test_examples.py calls `answers` on every serving replica of every example (one
completion at its status.endpoint, with the model its engine serves), and the
mode's own check on the examples that exercise one (BY_EXAMPLE):

- throughput-epp (Unified, router EndpointPicker, four copies): Envoy asks the
  replica's real EPP (ext_proc, through the InferencePool extension server) which
  copy takes each request. Distinct prompts reach more than one copy; prompts
  sharing a long prefix all reach one copy, which random choice over four would
  do with probability 4^-7.
- prefill-decode (PrefillDecode): Envoy -> EPP (a decode pod and a prefill pod)
  -> the decode pod's sidecar -> the prefill engine (do_remote_decode) -> the
  decode engine. The prefill engine counts each request finished `remote_decode`,
  the decode engines count it decoded; streaming works.
- multinode-gang (a LeaderWorkerSet): the leader's `ray start --head && exec vllm
  serve ...` runs as the simulator; a worker's `ray start --address=...` starts
  nothing here (the simulator has no Ray), so the gang answers through its leader.

Where each request went is read from the engines' own counters at their pods.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from live import serving_pods
from traffic import (call, delta, first_answer, is_engine_pod, prompt, served,
                     stream_events)

from e2e.controlplane.pods import images
from e2e.controlplane.pods.translate import translate

SPREAD = 16    # requests with prompts that share nothing
AFFINE = 8     # requests whose prompts share a long prefix
SYSTEM = " ".join(f"You are a careful assistant, rule {i}." for i in range(40))
PD_REQUESTS = 4


def engines_of(cp, mr: Mapping[str, Any]) -> list[dict]:
    """The replica's engine pods (the EPP's left out), by name."""
    return sorted((p for p in serving_pods(cp, mr) if is_engine_pod(p)),
                  key=lambda p: p["metadata"]["name"])


def served_model(pod: Mapping[str, Any]) -> str | None:
    """The model name the pod's engine serves (its --served-model-name, else its
    model), read from its command line as the simulator runs it; None for an engine
    that serves nothing (a Ray or headless worker)."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        role = images.role(c.get("image", ""))
        if role is None or not role.is_engine:
            continue
        env = {e["name"]: e["value"] for e in c.get("env") or [] if "value" in e}
        argv = list(translate(role, c.get("command") or [], c.get("args") or [], env).argv)
        for flag in ("--served-model-name", "--model"):
            for i, arg in enumerate(argv):
                if arg.startswith(flag + "="):
                    return arg.split("=", 1)[1]
                if arg == flag and i + 1 < len(argv):
                    return argv[i + 1]
    return None


def model_of(engines: list[dict]) -> str:
    models = {m for p in engines if (m := served_model(p))}
    assert len(models) == 1, f"engines serve {models or 'nothing'}"
    return models.pop()


def answers(cp, mr: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> str:
    """One completion at the replica's endpoint; the model it asked for. `headers`:
    the Host a deployment with serving.hostnames routes on (traffic.host_header)."""
    model = model_of(engines_of(cp, mr))
    text = first_answer(f"{mr['status']['endpoint']}/v1/completions",
                        {"model": model, "prompt": prompt("", 40, "hello"), "max_tokens": 2},
                        headers)
    assert json.loads(text)["model"] == model, text
    return model


def endpoint_picker(cp, mr: Mapping[str, Any], timings: dict[str, float]) -> None:
    engines = engines_of(cp, mr)
    assert len(engines) == 4, [p["metadata"]["name"] for p in engines]
    model = model_of(engines)
    url = f"{mr['status']['endpoint']}/v1/completions"

    before = served(engines)
    for i in range(SPREAD):
        status, text = call(url, {"model": model, "max_tokens": 2,
                                  "prompt": prompt("", 40, f"distinct{i}")})
        assert status == 200, text
    spread = delta(served(engines), before)
    assert sum(spread.values()) == SPREAD, spread
    assert sum(1 for n in spread.values() if n) >= 2, f"one copy took all: {spread}"

    before = served(engines)
    for i in range(AFFINE):
        status, text = call(url, {"model": model, "max_tokens": 2,
                                  "prompt": prompt(SYSTEM, 8, f"question{i}")})
        assert status == 200, text
    affine = delta(served(engines), before)
    assert max(affine.values()) == AFFINE, f"a shared prefix spread: {affine}"
    timings["endpoint picker: copies that took the distinct prompts"] = \
        sum(1 for n in spread.values() if n)


def prefill_decode(cp, mr: Mapping[str, Any], timings: dict[str, float]) -> None:
    engines = engines_of(cp, mr)
    engine_of = {p["metadata"]["name"]: p["metadata"]["labels"]["modelplane.ai/engine"]
                 for p in engines}
    assert sorted(engine_of.values()) == ["decode", "decode", "prefill"], engine_of
    model = model_of(engines)
    url = mr["status"]["endpoint"]

    before = served(engines)
    for i in range(PD_REQUESTS):
        status, text = call(f"{url}/v1/completions", {
            "model": model, "max_tokens": 4, "prompt": prompt("", 40, f"pd{i}")})
        assert status == 200, text
        assert json.loads(text)["choices"][0]["text"], text
    status, text = call(f"{url}/v1/chat/completions", {
        "model": model, "stream": True, "max_tokens": 4,
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


def through_the_leader(cp, mr: Mapping[str, Any], timings: dict[str, float]) -> None:
    engines = engines_of(cp, mr)
    role = {p["metadata"]["name"]: p["metadata"]["labels"]["modelplane.ai/role"]
            for p in engines}
    assert sorted(role.values()) == ["Leader", "Worker"], role
    leader = next(p for p in engines if role[p["metadata"]["name"]] == "Leader")
    worker = next(p for p in engines if role[p["metadata"]["name"]] == "Worker")
    before = served([leader])
    answers(cp, mr)
    assert sum(delta(served([leader]), before).values()) >= 1
    # Nothing listens in the worker's namespace: kwok-only in all but its Ready.
    try:
        status, _ = call(f"http://{worker['status']['podIP']}:8000/health", timeout=2)
    except OSError:
        status = 0
    assert status == 0, "a worker runs an engine of its own"


# Example file stem -> what its mode shows with real requests.
BY_EXAMPLE: Mapping[str, Callable[[Any, Mapping[str, Any], dict[str, float]], None]] = {
    "throughput-epp": endpoint_picker,
    "prefill-decode": prefill_decode,
    "multinode-gang": through_the_leader,
}
