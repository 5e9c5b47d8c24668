"""Real requests through a ModelService's front door (test_services.py).

* Which replica answered: the engines' own `vllm:request_success_total`, read
  from each engine pod's IP before and after a batch (traffic.py); the front
  door's route sends the replica's Host on the request it forwards, and no
  header says on the response who answered.
* Shares: a batch's split over deployments and replicas, against the weights,
  within SIGMAS standard deviations of the binomial count (Envoy picks a
  weighted backend at random per request).
* `Paced`: requests at a fixed rate from a thread while the fleet changes, each
  outcome kept, so the requests that failed meanwhile can be counted.
* `provider_simulator`: an external provider stood in for by the llm-d inference
  simulator (INFERENCE_SIM). It binds 0.0.0.0 with no bind flag, so it runs in a
  network namespace of its own on a bridge of its own (e2e/controlplane/pods/netns.py,
  as the pods supervisor makes them: no default route, forwarding untouched), at
  PROVIDER_IP, which the front door's Envoy reaches through the bridge. Its names
  carry the harness's prefixes, so `make cluster-down` removes what a crash leaves.
  It serves the requested model under an alias, answering with PROVIDER_MODEL: a
  response names who answered.

Every request goes to the front door (loopback) or an address inside a namespace
the harness made, through traffic.call; every batch is bounded, every wait polls a
condition until a deadline.
"""

from __future__ import annotations

import bisect
import contextlib
import http.client
import json
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from live import IC, MR, OBJECT, items, replicas_of, serving_pods, wait
from traffic import call, delta, finished_at, is_engine_pod, served

from e2e.controlplane.core import ControlPlane
from e2e.controlplane.pods import netns
from e2e.controlplane.waits import wait_for
from function.composer.modelservice import slices
from function.contract.api import REPLICA_HOST_SUFFIX, SLICE_HOST_SUFFIX

MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # the single-GPU example's `vllm serve` model
PROVIDER_MODEL = "provider/llama-3.1-8b"   # the name the provider answers with
TIMEOUT = 5.0    # seconds per request
SIGMAS = 4       # a share's tolerance, in standard deviations: ~1 false alarm in 16,000
COUNTED = 15     # seconds for the engines' counters to catch up with their answers


def body(i: int = 0) -> dict[str, Any]:
    return {"model": MODEL, "prompt": f"Hello {i}", "max_tokens": 1}


# --- who answered ----------------------------------------------------------------------


@dataclass(frozen=True)
class Engine:
    deployment: str
    replica: str
    cluster: str
    pod: dict


def engines(cp: ControlPlane, ns: str, deployments: Sequence[str],
            skip_cluster: str | None = None) -> list[Engine]:
    """The engine pods of the deployments' replicas (read from each replica's cluster)."""
    out = []
    for name in deployments:
        for mr in replicas_of(cp, ns, name):
            if mr["spec"]["clusterName"] == skip_cluster:
                continue
            out += [Engine(name, mr["metadata"]["name"], mr["spec"]["clusterName"], p)
                    for p in serving_pods(cp, mr) if is_engine_pod(p)]
    return out


def answered(url: str, among: Sequence[Engine], n: int) -> dict[str, int]:
    """Send `n` requests to `url`, each answered 200; how many each replica of `among`
    served, by the engines' own counters, which must add up to `n`: every request
    was served by one of them."""
    pods = [e.pod for e in among]
    before = served(pods)
    for i in range(n):
        status, text = call(url, body(i), timeout=TIMEOUT)
        assert status == 200, f"request {i} of {n}: {status} {text[:300]}"

    def counted() -> dict[str, int]:
        got = delta(served(pods), before)
        if sum(got.values()) != n:
            raise AssertionError(f"the engines counted {sum(got.values())} of {n}: {got}")
        return got
    by_pod = wait(f"the engines to count the {n} requests", counted, COUNTED)
    replica_of = {e.pod["metadata"]["name"]: e.replica for e in among}
    out: dict[str, int] = {}
    for pod, count in by_pod.items():
        out[replica_of[pod]] = out.get(replica_of[pod], 0) + count
    return out


def tolerance(p: float, n: int) -> float:
    """SIGMAS standard deviations of a share p measured over n independent requests."""
    return SIGMAS * math.sqrt(p * (1 - p) / n)


def at_most(p: float, n: float) -> int:
    """A bound on how many of n requests land on a share p: the mean plus SIGMAS
    standard deviations, rounded up."""
    return math.ceil(p * n + SIGMAS * math.sqrt(n * p * (1 - p)))


# --- requests at a fixed rate ------------------------------------------------------------


class Paced:
    """POSTs `body` to `url` at `rate` requests a second from `workers` threads (request
    i leaves at i/rate seconds, from whichever worker is free in turn), at most `limit`
    in all, until stopped; keeps (seconds since the first when it left, status) of
    each, in the order they left (status 0: no HTTP answer). The pause between requests
    is the rate, not a wait; with one worker a slow answer delays the next."""

    def __init__(self, url: str, payload: dict[str, Any], rate: float, limit: int,
                 workers: int = 1) -> None:
        self.url, self.payload, self.rate, self.limit = url, payload, rate, limit
        self.results: list[tuple[float, int]] = []
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(k, workers),
                                          name=f"paced-{k}", daemon=True)
                         for k in range(workers)]
        self._t0 = time.monotonic()

    def _run(self, first: int, step: int) -> None:
        for i in range(first, self.limit, step):
            if self._done.wait(max(0.0, self._t0 + i / self.rate - time.monotonic())):
                return
            left = self.elapsed()
            try:
                status, _ = call(self.url, self.payload, timeout=TIMEOUT)
            except (OSError, http.client.HTTPException):
                status = 0
            with self._lock:
                bisect.insort(self.results, (left, status))

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def __enter__(self) -> Paced:
        self._t0 = time.monotonic()
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._done.set()
        for t in self._threads:
            t.join(TIMEOUT + 5)

    def mark(self) -> int:
        return len(self.results)

    def sent(self, since: int = 0) -> int:
        with self._lock:
            return len(self.results[since:])

    def failures(self, since: int = 0) -> list[tuple[float, int]]:
        with self._lock:
            return [r for r in self.results[since:] if r[1] != 200]

    def between(self, start: float, end: float) -> list[tuple[float, int]]:
        """The requests that left between two instants (seconds since the first)."""
        with self._lock:
            return [r for r in self.results if start <= r[0] < end]

    def streak(self) -> int:
        """How many of the latest requests were answered 200 in a row."""
        n = 0
        with self._lock:
            latest = list(self.results)
        for _, status in reversed(latest):
            if status != 200:
                break
            n += 1
        return n


# --- the external provider's stand-in ------------------------------------------------------

PROVIDER_KEY = "e2e-external-provider"  # names its bridge and namespace (hashed)
# In traffic.POD_NETWORK and beyond every cluster's pod CIDR (10.<64+i>.0.0/16).
PROVIDER_CIDR = "10.127.255.0/24"
# A private address: the front door's Envoy sends there only while its InferenceCluster
# lists it in spec.frontDoor.allowedDestinations (test_services.allow_provider).
PROVIDER_IP = "10.127.255.1"
PROVIDER_PORT = 8000
READY = 60  # seconds for the simulator to answer /health


FRONT_DOOR = "us-east-1"   # the InferenceCluster labelled modelplane.ai/front-door
ROUTES = "httproutes.gateway.networking.k8s.io"
LABEL_SERVICE = "modelplane.ai/model-service"


def front_route(cp: ControlPlane, ns: str, service: str) -> dict:
    """A ModelService's HTTPRoute on the front door: the one of its HTTPRoutes on the
    control plane without hostnames (its slices on this cluster have theirs)."""
    (r,) = [r for r in items(cp, ROUTES, ns, f"{LABEL_SERVICE}={service}")
            if not r["spec"].get("hostnames")]
    return r


def allow_provider(cp: ControlPlane, allow: bool) -> None:
    """The front door's platform team allows (or no longer allows) its Envoy to reach the
    provider's private address: a ModelEndpoint at a private address is left out of every
    route unless the front door's InferenceCluster lists it (docs/security.md)."""
    allowed = {"cidrs": [f"{PROVIDER_IP}/32"]} if allow else None
    cp.kubectl("patch", IC, FRONT_DOOR, "--type=merge", "-p", json.dumps(
        {"spec": {"frontDoor": {"enabled": True, "allowedDestinations": allowed}}}))


# --- what a route reaches ------------------------------------------------------------


def slice_members(cp: ControlPlane, ns: str, service: str) -> dict[str, dict[str, int]]:
    """Each slice's Host -> {replica: weight}, from the slices' HTTPRoutes (as-is on the
    control plane, wrapped in provider-kubernetes Objects for a remote cluster)."""
    selector = f"{LABEL_SERVICE}={service}"
    manifests = items(cp, ROUTES, ns, selector) + [
        o["spec"]["forProvider"]["manifest"] for o in items(cp, OBJECT, ns, selector)]
    replica_by_service = {slices.service_name(ns, mr["metadata"]["name"]): mr["metadata"]["name"]
                          for mr in items(cp, MR, ns)}
    out = {}
    for m in manifests:
        for host in (m.get("spec") or {}).get("hostnames") or []:
            if m.get("kind") == "HTTPRoute" and host.endswith("." + SLICE_HOST_SUFFIX):
                out[host] = {replica_by_service.get(b["name"], b["name"]): b.get("weight", 1)
                             for b in m["spec"]["rules"][0]["backendRefs"]}
    return out


def reaches(ref: Mapping[str, Any], have: Mapping[str, dict],
            members: Mapping[str, Mapping[str, int]]) -> dict[str, Fraction]:
    """The replicas a backendRef reaches, each with its part of the ref's weight: one
    (the Host its Backend's endpoint sends, `<replica>.<namespace>.replica...`), or a
    slice's (its Host, which the replicas' cluster gateway splits by weight); {} for
    an external endpoint."""
    backend = have.get(ref["name"]) or {}
    hostname = ((backend.get("spec") or {}).get("endpoints") or [{}])[0].get("hostname", "")
    if hostname.endswith("." + REPLICA_HOST_SUFFIX):
        return {hostname.split(".")[0]: Fraction(1)}
    if hostname.endswith("." + SLICE_HOST_SUFFIX):
        weights = members.get(hostname) or {"?": 1}
        return {r: Fraction(w, sum(weights.values())) for r, w in weights.items()}
    return {}


def replica_of(ref: Mapping[str, Any], have: Mapping[str, dict]) -> str | None:
    """The one replica a backendRef reaches by its own Host, None otherwise."""
    reached = reaches(ref, have, {})
    return next(iter(reached)) if len(reached) == 1 and "?" not in reached else None


def fallback(ref: Mapping[str, Any], have: Mapping[str, dict]) -> bool:
    """Whether a backendRef is the fallback tier's (Envoy's priority 1)."""
    return bool(((have.get(ref["name"]) or {}).get("spec") or {}).get("fallback"))


@dataclass(frozen=True)
class Provider:
    url: str  # http://PROVIDER_IP:PROVIDER_PORT, what the ModelEndpoint names

    def finished(self) -> int:
        """Requests it has answered, by its own counter."""
        return sum(finished_at(self.url).values())


@contextlib.contextmanager
def provider_simulator(binary: str, log_dir: Path,
                       extra: Sequence[str] = ()) -> Iterator[Provider]:
    """The simulator in a namespace of its own, answering (with `extra` flags: say,
    failure injection); stopped (its process group, SIGTERM then SIGKILL) and the
    namespace and bridge removed afterwards."""
    network = netns.Network()
    bridge = netns.Bridge.for_cluster(PROVIDER_KEY, PROVIDER_CIDR)
    ns = netns.netns_name(PROVIDER_KEY, "simulator")
    log_path = log_dir / "provider-simulator.log"
    proc: subprocess.Popen[bytes] | None = None
    with open(log_path, "ab") as log:
        try:
            network.ensure_bridge(bridge)
            network.add_pod(bridge, ns, PROVIDER_IP)
            proc = subprocess.Popen(
                [*network.exec_prefix(ns), binary, f"--model={MODEL}",
                 f"--port={PROVIDER_PORT}", "--force-dummy-tokenizer",
                 # Answers as PROVIDER_MODEL, and takes requests for MODEL too.
                 "--served-model-name", PROVIDER_MODEL, MODEL, *extra],
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(log_dir)},
                cwd=log_dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
            url = f"http://{PROVIDER_IP}:{PROVIDER_PORT}"
            started = proc
            wait_for(f"the provider's simulator at {url} to answer /health",
                     lambda: call(f"{url}/health", timeout=2)[0] == 200, READY,
                     interval=0.5, logs=[log_path],
                     died=lambda: None if started.poll() is None
                     else f"the simulator exited with {started.returncode}")
            yield Provider(url)
        finally:
            if proc is not None:
                _stop(proc)
            network.remove_pod(ns)
            network.remove_bridge(bridge)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group of our own child, SIGKILL if it outlives 5 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
