"""What `make bench-traffic` sends in one mode, and what it makes of the answers.

Latency: N pairs (one request through, one direct, alternating which goes first,
each with a prompt of its own of the same length), the percentiles of each path and
of the paired difference (through minus direct). Then requests/s at a fixed
concurrency through and direct. For the endpoint picker, the prefix-affinity rate:
groups of requests sharing a long prefix, sent one after another; of every group's
requests after its first, the fraction the copy that took its first served (random
choice over N copies gives 1/N); and the same for groups with nothing in common
(the control). Which copy served each request is the engine's own answer, in
`x-inference-pod`.

Bounded in count (the arguments) and time (a timeout per request, a cap per
throughput run). Runs against any Target: the tests point it at stand-in engines
on 127.0.0.1.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter

from benchmarks.traffic.client import POD_HEADER, Answer, Target
from benchmarks.traffic.deployments import MODEL
from benchmarks.traffic.stats import Affinity, Latency, Throughput, affinity, latency_row

PROMPT_WORDS = 40        # long enough for P/D's uncached-token threshold (traffic.prompt)
PREFIX_WORDS = 200       # the shared prefix of an affinity group


def completion(model: str, salt: str, prefix: str = "", words: int = PROMPT_WORDS) -> dict:
    """A completion of 8 tokens whose prompt is `words` words after `prefix`, distinct
    per `salt` (e2e/tests/traffic.prompt)."""
    from e2e.tests.traffic import prompt
    return {"model": model, "max_tokens": 8, "prompt": prompt(prefix, words, salt)}


def _ok(answer: Answer, where: str) -> Answer:
    if answer.status != 200:
        raise RuntimeError(f"{where}: {answer.status} {answer.body[:300]!r}")
    return answer


def until_answering(target: Target, model: str) -> None:
    """Every URL of the target answers 200 (a new route is programmed within seconds):
    at most one request a second per URL, for traffic.ROUTED seconds."""
    from e2e.tests.traffic import ROUTED
    for k in range(len(target.urls)):
        client = target.client(k)
        deadline = time.monotonic() + ROUTED
        try:
            while True:
                try:
                    a = client.post("/v1/completions", completion(model, f"first{k}"))
                    status, text = a.status, a.body[:300].decode(errors="replace")
                except (OSError, http.client.HTTPException) as exc:
                    status, text = 0, str(exc)
                if status == 200:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{target.urls[k]} answered {status} for {ROUTED}s: {text}")
                time.sleep(1)
        finally:
            client.close()


def measure_latency(mode: str, model: str, through: Target, direct: Target, pairs: int,
                    warmup: int) -> Latency:
    """`warmup` requests each way, then `pairs` sequential pairs, one request through
    and one direct, alternating which goes first; every answer must be 200."""
    via = [through.client(k) for k in range(len(through.urls))]
    to = [direct.client(k) for k in range(len(direct.urls))]
    try:
        for i in range(warmup):
            _ok(via[i % len(via)].post("/v1/completions", completion(model, f"warm-t{i}")), mode)
            _ok(to[i % len(to)].post("/v1/completions", completion(model, f"warm-d{i}")), mode)
        t_s: list[float] = []
        d_s: list[float] = []
        for i in range(pairs):
            a, b = via[i % len(via)], to[i % len(to)]
            if i % 2:
                d = _ok(b.post("/v1/completions", completion(model, f"lat-d{i}")), mode)
                t = _ok(a.post("/v1/completions", completion(model, f"lat-t{i}")), mode)
            else:
                t = _ok(a.post("/v1/completions", completion(model, f"lat-t{i}")), mode)
                d = _ok(b.post("/v1/completions", completion(model, f"lat-d{i}")), mode)
            t_s.append(t.seconds)
            d_s.append(d.seconds)
        return latency_row(mode, t_s, d_s)
    finally:
        for c in via + to:
            c.close()


def run_concurrently(target: Target, model: str, total: int, concurrency: int,
                     cap_seconds: float, salt: str) -> tuple[int, float, int]:
    """`total` requests from `concurrency` threads, each on its own connection (thread
    k to target.urls[k % len]), stopping early at `cap_seconds`: (answered 200,
    seconds, errors)."""
    lock = threading.Lock()
    state = {"next": 0, "ok": 0, "errors": 0}
    deadline = time.monotonic() + cap_seconds

    def worker(k: int) -> None:
        client = target.client(k)
        try:
            while time.monotonic() < deadline:
                with lock:
                    i = state["next"]
                    if i >= total:
                        return
                    state["next"] += 1
                try:
                    ok = client.post("/v1/completions", completion(model, f"{salt}{i}")).status == 200
                except (OSError, http.client.HTTPException):
                    ok = False
                with lock:
                    state["ok" if ok else "errors"] += 1
        finally:
            client.close()

    threads = [threading.Thread(target=worker, args=(k,), name=f"bench-{salt}{k}")
               for k in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return state["ok"], time.perf_counter() - t0, state["errors"]


def measure_throughput(mode: str, model: str, through: Target, direct: Target, total: int,
                       concurrency: int, cap_seconds: float) -> Throughput:
    d_ok, d_s, d_err = run_concurrently(direct, model, total, concurrency, cap_seconds, "tp-d")
    t_ok, t_s, t_err = run_concurrently(through, model, total, concurrency, cap_seconds, "tp-t")
    return Throughput(mode, concurrency, d_ok, d_s, d_err, t_ok, t_s, t_err)


def measure_affinity(target: Target, groups: int, per_group: int, copies: int,
                     shared: bool) -> tuple[Affinity, Counter[str]]:
    """Groups of `per_group` requests sent one by one; with `shared` each group's
    prompts share a PREFIX_WORDS-word prefix of their own (distinct from its first
    word on), otherwise nothing. The pod that served is the engine's own
    `x-inference-pod`; also returned counted per pod."""
    from e2e.tests.traffic import prompt
    client = target.client(0)
    kind = "shared" if shared else "control"
    seen: Counter[str] = Counter()
    served_by: list[list[str]] = []
    try:
        for g in range(groups):
            prefix = prompt("", PREFIX_WORDS, f"{kind}-group{g}") if shared else ""
            words = 8 if shared else PREFIX_WORDS + 8   # the same length either way
            pods = []
            for j in range(per_group):
                a = _ok(client.post("/v1/completions", completion(
                    MODEL, f"{kind}-g{g}-q{j}", prefix=prefix, words=words)), f"affinity {kind}")
                if not a.pod:
                    raise RuntimeError(f"no {POD_HEADER} in the answer: is POD_NAME set?")
                pods.append(a.pod)
                seen[a.pod] += 1
            served_by.append(pods)
    finally:
        client.close()
    return affinity(served_by, copies), seen
