"""`make bench-traffic`: what the data plane adds, on a real local control plane.

A measurement, not a test: nothing here asserts a target (benchmarks/README.md
records a run). On the engines of `make cluster` (the llm-d inference simulator
with zero simulated latency, e2e/controlplane/pods/translate.Settings), every
millisecond a request takes is the data path's: so the same requests are sent
through the gateway and straight to an engine pod, and the difference is what the
gateway adds.

Modes (one ModelDeployment at a time, in namespace bench-traffic):

- Unified: the single-GPU example, one replica, at its ModelReplica's
  status.endpoint (the cluster's Envoy -> the replica's HTTPRoute -> its Service).
- ModelService: a ModelService over that replica, at its status.address on the
  front door (us-east-1's Envoy -> a Backend, the replica's cluster gateway, ->
  the replica's route -> the pod).
- EndpointPicker: examples/deployments/throughput-epp.yaml (four copies) at its
  endpoint (Envoy -> ext_proc to the real llm-d EPP -> the copy it picked); direct
  requests go round robin over the four pods.
- PrefillDecode: examples/deployments/prefill-decode.yaml at its endpoint (Envoy ->
  EPP -> a decode pod's P/D sidecar -> the prefill engine, then the decode engine);
  direct requests go to the decode engines themselves (port 8200, behind the
  sidecar). A second row sends the same requests to the sidecar with the
  `x-prefiller-host-port` header the EPP would set, to split what Envoy and the EPP
  add from what the P/D hop adds.

Per mode: N latency pairs (one request through, one direct, alternating which goes
first, each with a prompt of its own of the same length), the percentiles of each
path and of the paired difference (through minus direct); then requests/s at a
fixed concurrency through and direct. For the endpoint picker, the prefix-affinity
rate: groups of requests sharing a long prefix, sent one after another; of every
group's requests after its first, the fraction the copy that took its first served
(random choice over N copies gives 1/N); and the same for groups with nothing in
common (the control). Which copy served each request is the engine's own answer:
the simulator names its pod in `x-inference-pod` when POD_NAME is set, so the
benchmark's deployments set it through the downward API; the per-pod counts are
checked against the engines' `vllm:request_success_total`.

Client: http.client with one persistent (keep-alive) connection per target and
thread, so a measurement is a request and its whole response over an open
connection, timed with time.perf_counter. Requests go only to loopback gateway URLs
and harness pod addresses (e2e/tests/traffic.py's guard), bounded in count (the
arguments) and time (a timeout per request, a cap per throughput run).

With E2E_REUSE=1 it uses the control plane `make cluster` left running
(E2E_STATE_DIR, default .cluster/) and leaves it running; otherwise it starts one
from examples/fleet, as `make e2e` does, and stops it after. What it applied is
deleted, and waited for, either way.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import math
import os
import platform
import sys
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
NS = "bench-traffic"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"   # the single-GPU and EPP examples' model
PD_MODEL = "Qwen/Qwen3-32B"                   # the prefill-decode example's
PREFILL_HEADER = "x-prefiller-host-port"      # what the EPP sets for the P/D sidecar
POD_HEADER = "x-inference-pod"                # the simulator's answer: which pod served
PROMPT_WORDS = 40        # long enough for P/D's uncached-token threshold (traffic.prompt)
PREFIX_WORDS = 200       # the shared prefix of an affinity group
TIMEOUT = 10.0           # seconds per request


# --- the arithmetic (tests/test_bench_traffic.py) --------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between the closest ranks (numpy's default)."""
    if not values:
        raise ValueError("no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def added(through: Sequence[float], direct: Sequence[float]) -> list[float]:
    """What the path added to each pair: through minus direct, pair by pair."""
    if len(through) != len(direct):
        raise ValueError(f"{len(through)} requests through but {len(direct)} direct")
    return [t - d for t, d in zip(through, direct)]


@dataclass
class Latency:
    """Milliseconds: each path's percentiles and those of the paired difference."""

    mode: str
    pairs: int
    direct_p50: float
    direct_p99: float
    through_p50: float
    through_p99: float
    added_p50: float
    added_p99: float


def latency_row(mode: str, through_s: Sequence[float], direct_s: Sequence[float]) -> Latency:
    """Seconds in (as measured), milliseconds out."""
    ms = 1000.0
    diff = added(through_s, direct_s)
    return Latency(mode, len(diff),
                   percentile(direct_s, 50) * ms, percentile(direct_s, 99) * ms,
                   percentile(through_s, 50) * ms, percentile(through_s, 99) * ms,
                   percentile(diff, 50) * ms, percentile(diff, 99) * ms)


@dataclass
class Affinity:
    groups: int
    followers: int          # requests after each group's first
    on_first: int           # of those, served by the copy that served the group's first
    copies: int

    @property
    def rate(self) -> float:
        return self.on_first / self.followers if self.followers else float("nan")

    @property
    def random(self) -> float:
        """What choosing a copy at random gives: 1/N."""
        return 1 / self.copies


def affinity(groups: Sequence[Sequence[str]], copies: int) -> Affinity:
    """Each group: the pods that served its requests, in the order they were sent."""
    followers = on_first = 0
    for served_by in groups:
        if not served_by:
            continue
        first, rest = served_by[0], served_by[1:]
        followers += len(rest)
        on_first += sum(1 for pod in rest if pod == first)
    return Affinity(sum(1 for g in groups if g), followers, on_first, copies)


@dataclass
class Throughput:
    mode: str
    concurrency: int
    direct_requests: int
    direct_seconds: float
    direct_errors: int
    through_requests: int
    through_seconds: float
    through_errors: int

    @property
    def direct_rps(self) -> float:
        return rate(self.direct_requests, self.direct_seconds)

    @property
    def through_rps(self) -> float:
        return rate(self.through_requests, self.through_seconds)


def rate(requests: int, seconds: float) -> float:
    return requests / seconds if seconds > 0 else float("nan")


@dataclass
class Results:
    machine: dict[str, Any] = field(default_factory=dict)
    latency: list[Latency] = field(default_factory=list)
    throughput: list[Throughput] = field(default_factory=list)
    affinity: Affinity | None = None
    control: Affinity | None = None
    notes: list[str] = field(default_factory=list)


def _f(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


def render(res: Results) -> str:
    """The markdown tables."""
    out = []
    m = res.machine
    if m:
        out.append(f"Machine: {m.get('cpu')}, {m.get('nproc')} CPUs, {m.get('memory_gib')} GiB; "
                   f"load {m.get('load_before')} before, {m.get('load_after')} after; "
                   f"{m.get('date')}.")
        out.append("")
    if res.latency:
        out += ["| mode | pairs | direct p50 | direct p99 | through p50 | through p99 "
                "| added p50 | added p99 |",
                "|---|---|---|---|---|---|---|---|"]
        for r in res.latency:
            out.append(f"| {r.mode} | {r.pairs} | {_f(r.direct_p50)} | {_f(r.direct_p99)} | "
                       f"{_f(r.through_p50)} | {_f(r.through_p99)} | **{_f(r.added_p50)}** | "
                       f"**{_f(r.added_p99)}** |")
        out += ["", "Milliseconds; added = the percentile of (through − direct) over the pairs.", ""]
    if res.throughput:
        out += ["| mode | concurrency | direct requests | direct req/s | through requests "
                "| through req/s | through / direct | errors |",
                "|---|---|---|---|---|---|---|---|"]
        for t in res.throughput:
            out.append(f"| {t.mode} | {t.concurrency} | {t.direct_requests} | {_f(t.direct_rps, 0)} | "
                       f"{t.through_requests} | {_f(t.through_rps, 0)} | "
                       f"{_f(t.through_rps / t.direct_rps)} | "
                       f"{t.direct_errors + t.through_errors} |")
        out.append("")
    if res.affinity is not None:
        out += ["| EPP, groups sent one by one | groups | requests after the first | "
                "on the first's copy | rate | random (1/N) |",
                "|---|---|---|---|---|---|"]
        for name, a in (("shared long prefix", res.affinity), ("nothing shared (control)", res.control)):
            if a is not None:
                out.append(f"| {name} | {a.groups} | {a.followers} | {a.on_first} | "
                           f"**{_f(a.rate)}** | {_f(a.random)} |")
        out.append("")
    out += [f"- {n}" for n in res.notes]
    return "\n".join(out).rstrip() + "\n"


def machine() -> dict[str, Any]:
    """nproc, the CPU model and the memory of this machine, from /proc."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {"cpu": cpu or platform.processor(), "nproc": len(os.sched_getaffinity(0)),
            "memory_gib": round(mem_kib / 1024 / 1024, 1),
            "date": time.strftime("%Y-%m-%d"), "load_before": _load()}


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f}/{five:.1f}"


# --- a keep-alive client that dials only loopback and harness pods --------------------


@dataclass
class Answer:
    status: int
    seconds: float
    pod: str      # x-inference-pod: the engine pod that served, when the engine says
    body: bytes


class Tally:
    """The 200s answered through one target, counted across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ok = 0

    def add(self) -> None:
        with self._lock:
            self.ok += 1


class Client:
    """One persistent HTTP/1.1 connection to one base URL (a gateway URL with its path
    prefix, or an engine pod's address); `headers` go with every request."""

    def __init__(self, base: str, headers: Mapping[str, str] | None = None,
                 tally: Tally | None = None, timeout: float = TIMEOUT) -> None:
        from e2e.tests.traffic import _allowed  # loopback or a harness pod, nothing else
        _allowed(base)
        parts = urllib.parse.urlsplit(base)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{base}: not an http:// URL")
        self.host, self.port = parts.hostname, parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.tally = tally
        self.timeout = timeout
        self.conn: http.client.HTTPConnection | None = None

    def post(self, path: str, body: Mapping[str, Any]) -> Answer:
        data = json.dumps(body).encode()
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            t0 = time.perf_counter()
            try:
                self.conn.request("POST", self.prefix + path, body=data, headers=self.headers)
                rsp = self.conn.getresponse()
                raw = rsp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # A keep-alive connection the server closed while idle: once more, afresh.
                self.close()
                if attempt:
                    raise
                continue
            except (OSError, http.client.HTTPException):
                self.close()
                raise
            seconds = time.perf_counter() - t0
            if rsp.will_close:
                self.close()
            if rsp.status == 200 and self.tally is not None:
                self.tally.add()
            return Answer(rsp.status, seconds, rsp.getheader(POD_HEADER) or "", raw)
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


@dataclass
class Target:
    """Where requests go: base URLs (taken round robin) and the headers they carry;
    `tally` counts the 200s, to check against the engines' own counters."""

    urls: list[str]
    headers: dict[str, str] = field(default_factory=dict)
    tally: Tally = field(default_factory=Tally)

    def client(self, k: int) -> Client:
        return Client(self.urls[k % len(self.urls)], self.headers, self.tally)


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


# --- measuring one mode ------------------------------------------------------------------


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


# --- the deployments -------------------------------------------------------------------


def with_pod_name(md: dict[str, Any]) -> dict[str, Any]:
    """Every engine container gets POD_NAME from the downward API, so the simulator
    names the pod that served in `x-inference-pod` (a real vLLM ignores it)."""
    from e2e.controlplane.pods import images
    for engine in md["spec"]["template"]["spec"]["engines"]:
        for member in engine["members"]:
            for c in member["template"]["spec"]["containers"]:
                role = images.role(c.get("image", ""))
                if role is not None and role.is_engine:
                    env = [e for e in c.get("env") or [] if e.get("name") != "POD_NAME"]
                    env.append({"name": "POD_NAME",
                                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
                    c["env"] = env
    return md


def example(file: str, name: str) -> dict[str, Any]:
    """examples/deployments/`file` as bench-traffic/`name`, without its Hugging Face
    token (no Secret in this namespace; the simulator needs none)."""
    from e2e.tests.live import without_hf_token
    md = yaml.safe_load((REPO / "examples" / "deployments" / file).read_text())
    md = without_hf_token(md)
    md["metadata"] = {"name": name, "namespace": NS}
    return with_pod_name(md)


def _total(counts: Mapping[str, int]) -> int:
    return sum(counts.values())


def _check(what: str, counted: int, answered: int) -> str:
    verdict = "equal" if counted == answered else "DIFFERENT"
    return f"{what}: the engines counted {counted}, the client got {answered} 200s ({verdict})"


class Bench:
    """The live part: apply, wait until Ready, warm up, measure, delete."""

    def __init__(self, cp: Any, args: argparse.Namespace, say: Callable[[str], None]) -> None:
        self.cp = cp
        self.args = args
        self.say = say
        self.res = Results(machine=machine())

    def _serving(self, name: str, md: dict[str, Any]) -> tuple[dict, list[Mapping[str, Any]]]:
        from e2e.tests import live
        from e2e.tests.traffic import is_engine_pod
        t0 = time.monotonic()
        live.apply_docs(self.cp, [md])
        live.wait_condition(self.cp, live.MD, name, NS, "Ready", live.SERVING)
        (mr,) = live.replicas_of(self.cp, NS, name)
        pods: list[Mapping[str, Any]] = sorted(
            (p for p in live.serving_pods(self.cp, mr) if is_engine_pod(p)),
            key=lambda p: p["metadata"]["name"])
        self.say(f"{name}: Ready on {mr['spec']['clusterName']} after "
                 f"{time.monotonic() - t0:.0f}s, {len(pods)} engine pod(s)")
        return mr, pods

    def _delete(self, name: str) -> None:
        from e2e.tests import live
        self.say(f"{name}: deleting, waiting until it is gone")
        live.delete_and_wait(self.cp, NS, name)

    def _mode(self, mode: str, model: str, through: Target, direct: Target) -> None:
        a = self.args
        until_answering(through, model)
        until_answering(direct, model)
        self.say(f"{mode}: {a.warmup} warm-up requests each way, {a.pairs} latency pairs")
        self.res.latency.append(measure_latency(mode, model, through, direct, a.pairs, a.warmup))
        self.say(f"{mode}: {a.requests} requests each way at concurrency {a.concurrency}")
        self.res.throughput.append(measure_throughput(mode, model, through, direct, a.requests,
                                                      a.concurrency, a.cap_seconds))

    def _settled(self, pods: list[Mapping[str, Any]], done: Callable[[dict[str, Counter[str]]], bool],
                 seconds: float = 10.0) -> dict[str, Counter[str]]:
        """The engines' counters once `done` holds, or after `seconds` (the simulator
        updates them asynchronously, just after it answers)."""
        from e2e.tests.traffic import served
        deadline = time.monotonic() + seconds
        while True:
            now = served(pods)
            if done(now) or time.monotonic() > deadline:
                return now
            time.sleep(0.2)

    @staticmethod
    def _url(pod: Mapping[str, Any]) -> str:
        from e2e.tests.traffic import engine_port
        return f"http://{pod['status']['podIP']}:{engine_port(pod)}"

    def unified_and_service(self) -> None:
        from e2e.tests import live
        from e2e.tests.traffic import delta, served
        from function.contract.api import LABEL_DEPLOYMENT
        name, svc = "unified", "front"
        ms_kind, routes = "modelservices.modelplane.ai", "httproutes.gateway.networking.k8s.io"
        try:
            mr, (pod,) = self._serving(name, with_pod_name(live.single_gpu(name, NS, 1)))
            cluster = mr["spec"]["clusterName"]
            before = served([pod])
            direct, unified = Target([self._url(pod)]), Target([mr["status"]["endpoint"]])
            self._mode(f"Unified ({cluster})", MODEL, unified, direct)
            live.apply_docs(self.cp, [{
                "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService",
                "metadata": {"name": svc, "namespace": NS},
                "spec": {"endpoints": [{"selector": {"matchLabels": {LABEL_DEPLOYMENT: name}}}]}}])
            ms = live.wait_condition(self.cp, ms_kind, svc, NS, "Routed", live.SETTLE)
            service = Target([ms["status"]["address"]])
            self.say(f"ModelService {svc}: {ms['status']['address']} -> the replica on {cluster}")
            self._mode(f"ModelService (front door us-east-1 -> {cluster})", MODEL, service, direct)
            answered = unified.tally.ok + service.tally.ok + direct.tally.ok
            after = self._settled([pod], lambda now: _total(delta(now, before)) >= answered)
            self.res.notes.append(_check("Unified and ModelService", _total(delta(after, before)),
                                         answered))
        finally:
            self.cp.kubectl("delete", ms_kind, svc, "-n", NS, "--ignore-not-found", "--wait=true")
            live.wait(f"ModelService {svc}'s route to be gone", lambda: not live.items(
                self.cp, routes, NS, f"modelplane.ai/model-service={svc}"), live.SETTLE)
            self._delete(name)

    def endpoint_picker(self) -> None:
        from e2e.tests.traffic import delta, served
        name = "picked"
        a = self.args
        try:
            mr, pods = self._serving(name, example("throughput-epp.yaml", name))
            url = mr["status"]["endpoint"]
            before = served(pods)
            through, direct = Target([url]), Target([self._url(p) for p in pods])
            self._mode(f"EndpointPicker ({mr['spec']['clusterName']}, {len(pods)} copies)", MODEL,
                       through, direct)
            measured = through.tally.ok + direct.tally.ok
            middle = self._settled(pods, lambda now: _total(delta(now, before)) >= measured)
            self.say(f"EndpointPicker: affinity, {a.groups} groups of {a.per_group} each way")
            shared, control = Target([url]), Target([url])
            self.res.affinity, seen = measure_affinity(shared, a.groups, a.per_group, len(pods), True)
            self.res.control, seen_c = measure_affinity(control, a.groups, a.per_group, len(pods),
                                                        False)
            grouped = shared.tally.ok + control.tally.ok
            after = self._settled(pods, lambda now: _total(delta(now, middle)) >= grouped)
            counted = {_short(k): v for k, v in delta(after, middle).items() if v}
            named = {_short(k): v for k, v in (seen + seen_c).items()}
            self.res.notes.append(
                f"EndpointPicker, affinity runs: requests per pod by x-inference-pod {named}, by "
                f"the engines' vllm:request_success_total {counted} "
                f"({'equal' if named == counted else 'DIFFERENT'})")
            self.res.notes.append(_check("EndpointPicker", _total(delta(after, before)),
                                         measured + grouped))
        finally:
            self._delete(name)

    def prefill_decode(self) -> None:
        from e2e.tests.traffic import delta, engine_port, served
        from function.composer.naming import LABEL_ENGINE
        name = "disaggregated"
        try:
            mr, pods = self._serving(name, example("prefill-decode.yaml", name))
            engine = {p["metadata"]["name"]: p["metadata"]["labels"][LABEL_ENGINE] for p in pods}
            (pre,) = [p for p in pods if engine[p["metadata"]["name"]] == "prefill"]
            decode = [p for p in pods if engine[p["metadata"]["name"]] == "decode"]
            before = served(pods)
            gateway = Target([mr["status"]["endpoint"]])
            direct = Target([self._url(p) for p in decode])   # the decode engines, not the sidecar
            self._mode(f"PrefillDecode ({mr['spec']['clusterName']}, 1 prefill + "
                       f"{len(decode)} decode)", PD_MODEL, gateway, direct)
            # The sidecar straight, told the prefill engine as the EPP tells it.
            sidecar = Target([f"http://{p['status']['podIP']}:{_sidecar_port(p)}" for p in decode],
                             {PREFILL_HEADER: f"{pre['status']['podIP']}:{engine_port(pre)}"})
            self._mode("PrefillDecode: the sidecar and prefill hop alone, no gateway", PD_MODEL,
                       sidecar, direct)
            answered = gateway.tally.ok + sidecar.tally.ok + direct.tally.ok
            prefilled = gateway.tally.ok + sidecar.tally.ok
            names = [p["metadata"]["name"] for p in decode]
            pname = pre["metadata"]["name"]

            def done(now: dict[str, Counter[str]]) -> bool:
                d = delta({n: now[n] for n in names}, before)
                return _total(d) >= answered and \
                    (now[pname] - before[pname])["remote_decode"] >= prefilled

            after = self._settled(pods, done)
            self.res.notes.append(_check("PrefillDecode, decode engines", _total(
                delta({n: after[n] for n in names}, before)), answered))
            self.res.notes.append(
                f"PrefillDecode, prefill engine: finished {dict(after[pname] - before[pname])} "
                f"(by finish_reason) for {prefilled} requests through the gateway or the sidecar")
        finally:
            self._delete(name)


def _short(pod: str) -> str:
    """A pod's name by its random suffix (`...-deploy-8cffc564c-2ktd7` -> `…2ktd7`)."""
    return "…" + pod.rsplit("-", 1)[-1]


def _sidecar_port(pod: Mapping[str, Any]) -> int:
    """The P/D sidecar's port (its container's port, else its --port flag)."""
    from e2e.controlplane.pods import images
    spec = pod["spec"]
    for c in (spec.get("initContainers") or []) + spec["containers"]:
        if images.role(c.get("image", "")) is images.Role.SIDECAR:
            for p in c.get("ports") or []:
                return int(p["containerPort"])
            args = list(c.get("args") or [])
            for i, arg in enumerate(args):
                if arg.startswith("--port="):
                    return int(arg.split("=", 1)[1])
                if arg == "--port" and i + 1 < len(args):
                    return int(args[i + 1])
    raise RuntimeError(f"pod {pod['metadata']['name']} has no P/D sidecar")


# --- the control plane -----------------------------------------------------------------


@contextlib.contextmanager
def control_plane(say: Callable[[str], None]) -> Iterator[Any]:
    """The running one under E2E_REUSE=1 (left running), else a fresh one from
    examples/fleet, stopped after (as e2e/tests/conftest.py's cp fixture)."""
    from e2e.controlplane.core import DEFAULT_STATE_DIR, ControlPlane
    state = Path(os.environ.get("E2E_STATE_DIR") or DEFAULT_STATE_DIR)
    if os.environ.get("E2E_REUSE") == "1":
        say(f"using the control plane in {state}")
        yield ControlPlane.load(state)
        return
    say(f"starting a control plane from examples/fleet in {state}")
    plane = ControlPlane.up(REPO / "examples" / "fleet", state)
    try:
        yield plane
    finally:
        say("stopping the control plane")
        plane.down()


def remove_namespace(cp: Any, say: Callable[[str], None]) -> None:
    """bench-traffic on every cluster: the control plane's, and the ones the function
    created on remote clusters (it never deletes those: they may be shared)."""
    for handle in {id(h): h for h in cp.clusters.values()}.values():
        proc = cp.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=true",
                          "--timeout=240s", cluster=handle, check=False, timeout=300)
        if proc.returncode != 0:
            say(f"namespace {NS} on {handle.name}: {proc.stderr.strip()}")


MODES = ("unified", "epp", "pd")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.traffic",
                                description="What the gateway adds to a request, against "
                                            "straight to the engine pod (make bench-traffic).")
    p.add_argument("--pairs", type=int, default=2000, help="latency pairs per mode (%(default)s)")
    p.add_argument("--warmup", type=int, default=100,
                   help="warm-up requests each way per mode (%(default)s)")
    p.add_argument("--requests", type=int, default=4000,
                   help="requests each way for requests/s (%(default)s)")
    p.add_argument("--concurrency", type=int, default=4, help="(%(default)s)")
    p.add_argument("--cap-seconds", type=float, default=60.0,
                   help="at most this long per requests/s run (%(default)s)")
    p.add_argument("--groups", type=int, default=32, help="affinity groups (%(default)s)")
    p.add_argument("--per-group", type=int, default=8, help="requests per group (%(default)s)")
    p.add_argument("--modes", default=",".join(MODES), help="some of %(default)s")
    p.add_argument("--json", type=Path, help="also write the results to this file")
    args = p.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if set(modes) - set(MODES):
        p.error(f"unknown modes {sorted(set(modes) - set(MODES))}")
    for name in ("pairs", "requests", "concurrency", "groups", "per_group"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")

    def say(msg: str) -> None:
        print(f"[bench-traffic {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    from e2e.tests import live
    with control_plane(say) as cp:
        bench = Bench(cp, args, say)
        try:
            live.ensure_namespace(cp, NS)
            if "unified" in modes:
                bench.unified_and_service()
            if "epp" in modes:
                bench.endpoint_picker()
            if "pd" in modes:
                bench.prefill_decode()
        finally:
            remove_namespace(cp, say)
    bench.res.machine["load_after"] = _load()
    print(render(bench.res))
    if args.json:
        out = asdict(bench.res)
        for key in ("affinity", "control"):
            a = getattr(bench.res, key)
            if a is not None:
                out[key] |= {"rate": a.rate, "random": a.random}
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
