"""Real requests for the e2e scenarios: OpenAI calls at loopback gateway URLs, and
the engines' own Prometheus counters read straight from their pods.

Every address here is a gateway URL on loopback (an InferenceCluster's
spec.gateway.address on make cluster), a pod IP inside a network namespace the
pods supervisor made on its cluster's bridge, or the address of a namespace a
test made the same way on a bridge of its own inside the same range (the external
provider's stand-in, frontdoor.py): nothing else is ever dialled. Each helper
sends a bounded number of requests, each with a timeout.
"""

from __future__ import annotations

import ipaddress
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from e2e.controlplane.pods import images

ROUTED = 60  # seconds for a new route to answer through its gateway
# No proxy from the environment: requests go straight to loopback or a pod namespace.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# pods.harness.pod_cidr's clusters (10.<64+i>.0.0/16) and frontdoor.PROVIDER_CIDR.
POD_NETWORK = ipaddress.ip_network("10.64.0.0/10")


def _allowed(url: str) -> None:
    host = ipaddress.ip_address(urllib.parse.urlsplit(url).hostname or "")
    if not (host.is_loopback or host in POD_NETWORK):
        raise AssertionError(f"{url}: neither loopback nor a harness pod address")


def call(url: str, body: dict[str, Any] | None = None, timeout: float = 10,
         headers: Mapping[str, str] | None = None) -> tuple[int, str]:
    _allowed(url)
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with OPENER.open(req, timeout=timeout) as rsp:
            return rsp.status, rsp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def first_answer(url: str, body: dict[str, Any], headers: Mapping[str, str] | None = None, *,
                 accept: Callable[[str], bool] = lambda text: True) -> str:
    """POST until the route answers 200 with a body `accept` takes (Envoy learns a new
    route within seconds): at most one request a second for ROUTED seconds."""
    deadline = time.monotonic() + ROUTED
    while True:
        try:
            status, text = call(url, body, headers=headers)
        except OSError as exc:
            status, text = 0, str(exc)
        if status == 200 and accept(text):
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} answered {status}"
                                 f"{' (not the answer wanted)' if status == 200 else ''} "
                                 f"for {ROUTED}s: {text[:300]}")
        time.sleep(1)


def host_header(md: Mapping[str, Any]) -> dict[str, str]:
    """The Host a request needs when the deployment's routes carry
    `serving.hostnames`: its first exact name (a wildcard matches no one name)."""
    names = ((md.get("spec") or {}).get("template", {}).get("spec", {})
             .get("serving") or {}).get("hostnames") or []
    exact = [n for n in names if not n.startswith("*")]
    return {"Host": exact[0]} if exact else {}


def stream_events(text: str) -> list[str]:
    """The `data:` payloads of a server-sent-events body."""
    return [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]


def prompt(prefix: str, words: int, salt: str) -> str:
    """`words` words after `prefix`, distinct per `salt`: long enough for the picker's
    prefix blocks and P/D's uncached-token threshold (the simulator's dummy
    tokenizer counts about a token a word)."""
    return (prefix + " " + " ".join(f"{salt}-{i}" for i in range(words))).strip()


# --- engines' own metrics --------------------------------------------------------------


def engine_port(pod: Mapping[str, Any]) -> int:
    """The port of the pod's engine container (vLLM or SGLang image)."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        role = images.role(c.get("image", ""))
        if role is not None and role.is_engine:
            for p in c.get("ports") or []:
                return int(p["containerPort"])
            args = list(c.get("args") or [])
            if "--port" in args:
                return int(args[args.index("--port") + 1])
            return 8000
    raise AssertionError(f"pod {pod['metadata']['name']} has no engine container")


def is_engine_pod(pod: Mapping[str, Any]) -> bool:
    return any((r := images.role(c.get("image", ""))) is not None and r.is_engine
               for c in (pod.get("spec") or {}).get("containers") or [])


def finished(pod: Mapping[str, Any]) -> Counter[str]:
    """`vllm:request_success_total` of the pod's engine by finish_reason, read from
    the engine's own /metrics at the pod's IP."""
    return finished_at(f"http://{pod['status']['podIP']}:{engine_port(pod)}")


def finished_at(base: str) -> Counter[str]:
    """`vllm:request_success_total` by finish_reason of the engine at `base`."""
    url = f"{base}/metrics"
    status, text = call(url)
    assert status == 200, f"{url}: {status} {text[:200]}"
    out: Counter[str] = Counter()
    for line in text.splitlines():
        if not line.startswith("vllm:request_success_total{"):
            continue
        labels, value = line.rsplit(" ", 1)
        reason = next((part.split("=", 1)[1].strip('"') for part in
                       labels[labels.index("{") + 1:labels.rindex("}")].split(",")
                       if part.startswith("finish_reason=")), "")
        out[reason] += int(float(value))
    return out


def served(pods: list[Mapping[str, Any]]) -> dict[str, Counter[str]]:
    """Each engine pod's finished requests by finish_reason, by pod name."""
    return {p["metadata"]["name"]: finished(p) for p in pods}


def delta(after: Mapping[str, Counter[str]], before: Mapping[str, Counter[str]]) -> dict[str, int]:
    """Requests each pod finished between two readings (every finish reason)."""
    return {name: sum((after[name] - before.get(name, Counter())).values()) for name in after}
