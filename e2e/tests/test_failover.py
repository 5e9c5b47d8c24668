"""Failover judged in the front door's data plane, under steady load (#49 items 1, 2, 7).

Two replicas of one model serve, one on us-east-1 (the front door's own cluster)
and one on eu-west-1, behind a ModelService. Requests go to the service's address
at RATE a second from WORKERS threads (frontdoor.Paced: loopback only, bounded in
count and time). Then a fault on eu-west-1 (e2e/controlplane/faults.py, `make
fault`): its engine killed (the pods supervisor starts it again after its
back-off, as a kubelet would), its gateway's Envoy killed while its API server
answers (nothing the control plane reads changes), or the whole cluster lost
(gateway, controller-manager and API server, as test_services' lost cluster).

Of the requests sent from the fault to WINDOW seconds after it, at most SHARE fail,
and none that left more than QUIET seconds after it: the front door's Envoy sees
the refused connections or the gateway's 503s, ejects the endpoint, and retries
each failed attempt on the other replica before answering (modelservice/traffic.py).
The fault repaired, requests reach the recovered replica again. The failover time,
from the fault to the last failed request, is recorded per kind.

Overflow between tiers: a primary tier that answers 429 (an llm-d simulator standing in
for a provider, its failure injection answering every request `rate_limit`) spills to
the fallback tier, the two replicas, in the data plane: every request is answered 200,
by the replicas, and no 429 reaches the client.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from frontdoor import MODEL, Paced, allow_provider, body, engines, front_route, provider_simulator
from live import (MD, SERVING, SETTLE, Stopwatch, accepted_and_resolved, apply_docs, condition,
                  delete_and_wait, ensure_namespace, get, items, single_gpu, wait,
                  wait_condition)
from traffic import call, delta, first_answer, served

from e2e.controlplane import faults
from e2e.controlplane.core import ControlPlane

NS = "failover"
NAME = "stable"
SERVICE = "chat"
MS = "modelservices.modelplane.ai"
ME = "modelendpoints.modelplane.ai"
ROUTES = "httproutes.gateway.networking.k8s.io"
LOST = "eu-west-1"      # a prod cluster that is not the front door's
RATE = 20               # requests a second
WORKERS = 4             # threads sending them: a slow answer does not slow the rate
WINDOW = 30.0           # seconds after the fault whose requests are counted
QUIET = 2.0             # seconds after the fault past which no request may fail
SHARE = 0.01            # of the requests in the window that may fail
BACK = 180.0            # seconds for requests to reach the repaired replica again
LABEL_SERVICE = "modelplane.ai/model-service"


def service_doc() -> dict:
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService",
            "metadata": {"name": SERVICE, "namespace": NS},
            "spec": {"endpoints": [{"selector": {"matchLabels": {
                "modelplane.ai/deployment": NAME}}}]}}


def route_ready(cp: ControlPlane, n: int) -> dict:
    """The service's route, accepted and resolved, once it sends to n replicas."""
    def check():
        r = front_route(cp, NS, SERVICE)
        refs = (r["spec"]["rules"][0]).get("backendRefs") or []
        problems = accepted_and_resolved(r)
        if len(refs) != n or problems:
            raise AssertionError(f"{len(refs)} backends, want {n}; {problems}")
        return r
    return wait(f"the route to send to {n} replicas", check, SETTLE)


@pytest.fixture(scope="module")
def url(cp: ControlPlane) -> Iterator[str]:
    """Two replicas (us-east-1, eu-west-1) behind the service; its address."""
    ensure_namespace(cp, NS)
    apply_docs(cp, [single_gpu(NAME, NS, 2), service_doc()])
    try:
        wait_condition(cp, MD, NAME, NS, "Ready", SERVING)
        wait(f"2 ModelEndpoints of {NAME}",
             lambda: len(items(cp, ME, NS, f"modelplane.ai/deployment={NAME}")) == 2, SERVING)
        route_ready(cp, 2)
        ms = wait_condition(cp, MS, SERVICE, NS, "Routed", SETTLE)
        address = f"{ms['status']['address']}/v1/completions"
        first_answer(address, body())
        clusters = {e.cluster for e in engines(cp, NS, [NAME])}
        assert clusters == {"us-east-1", LOST}, clusters
        yield address
    finally:
        cp.kubectl("delete", MS, SERVICE, "-n", NS, "--ignore-not-found", "--wait=false")
        delete_and_wait(cp, NS, NAME)


def lost_replica(cp: ControlPlane) -> str:
    (replica,) = {e.replica for e in engines(cp, NS, [NAME]) if e.cluster == LOST}
    return replica


def stop(cp: ControlPlane, part: str) -> list[str]:
    """The fault; what to start again (components, for a lost cluster)."""
    if part == "cluster":
        on = cp.gateways[LOST]["cluster"]
        stopped = []
        for component in faults.cluster_components(cp.components(), on, faults.LOST_CLUSTER):
            cp.stop(component)
            stopped.append(component)
        return stopped
    faults.run(cp, faults.Request(cluster=LOST, part=part, action="stop",
                                  replica=lost_replica(cp) if part == "engine" else None,
                                  namespace=NS if part == "engine" else None),
               say=lambda line: None)
    return []


def repair(cp: ControlPlane, part: str, replica: str, stopped: list[str]) -> None:
    if part == "cluster":
        for component in reversed(stopped):  # the API server first
            if not cp.running(component):
                cp.start(component)
        return
    faults.run(cp, faults.Request(cluster=LOST, part=part, action="start",
                                  replica=replica if part == "engine" else None,
                                  namespace=NS if part == "engine" else None),
               say=lambda line: None)


@pytest.mark.parametrize("part", ["engine", "gateway", "cluster"])
def test_a_fault_fails_few_requests_for_at_most_seconds_and_traffic_returns(
        cp: ControlPlane, url: str, part: str, timings) -> None:
    replica = lost_replica(cp)
    lost_pods = [e.pod for e in engines(cp, NS, [NAME]) if e.cluster == LOST]
    limit = int(RATE * (WINDOW + BACK + 120))
    stopped: list[str] = []
    with Paced(url, body(), RATE, limit=limit, workers=WORKERS) as paced:
        try:
            wait("the front door to answer at a steady rate",
                 lambda: paced.streak() >= 2 * RATE, 60)
            t_fault = paced.elapsed()
            stopped = stop(cp, part)
            wait(f"{WINDOW:.0f}s of requests after the fault",
                 lambda: paced.elapsed() >= t_fault + WINDOW + 5 + 1, WINDOW + 60)
            window = paced.between(t_fault, t_fault + WINDOW)
            failed = [r for r in window if r[1] != 200]

            clock = Stopwatch()
            before = served(lost_pods) if part != "cluster" else {}
            repair(cp, part, replica, stopped)
            stopped = []
            if part != "cluster":
                # The repaired replica answers requests again: its engine counts some.
                wait(f"requests to reach {replica} on {LOST} again",
                     lambda: sum(delta(served(lost_pods), before).values()) > 0, BACK)
                timings[f"failover ({part}): repaired -> its replica answers (s)"] = \
                    clock.seconds()
        finally:
            if stopped:
                repair(cp, part, replica, stopped)
    timings[f"failover ({part}): requests sent in {WINDOW:.0f}s after the fault"] = len(window)
    timings[f"failover ({part}): of them failed"] = len(failed)
    timings[f"failover ({part}): fault -> last failed request (s)"] = round(
        max((t - t_fault for t, _ in failed), default=0.0), 2)
    assert len(window) >= RATE * WINDOW * 0.8, f"only {len(window)} requests sent"
    late = [(round(t - t_fault, 2), status) for t, status in failed if t - t_fault > QUIET]
    assert not late, f"{len(late)} requests failed more than {QUIET}s after the fault: {late[:10]}"
    assert len(failed) <= math.floor(SHARE * len(window)), (
        f"{len(failed)} of {len(window)} requests failed: {failed[:10]}")
    # Whole, the fleet serves: the service is routed and both replicas are back.
    wait(f"{NAME} Ready again", lambda: condition(get(cp, MD, NAME, NS), "Ready").get(
        "status") == "True", SERVING)
    route_ready(cp, 2)


SPILL = "spill"         # the service whose primary tier answers 429
SPILLED = 100           # requests sent to it


def test_a_tier_answering_429_spills_to_the_next_with_no_429_to_the_client(
        cp: ControlPlane, url: str, tmp_path: Path, timings) -> None:
    rate_limited = ["--failure-injection-rate=100", "--failure-types=rate_limit"]
    with provider_simulator(cp.tools["INFERENCE_SIM"], tmp_path, rate_limited) as provider:
        assert call(f"{provider.url}/v1/completions", body())[0] == 429  # as configured
        allow_provider(cp, True)
        try:
            apply_docs(cp, [
                {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelEndpoint",
                 "metadata": {"name": "busy", "namespace": NS, "labels": {"tier": "busy"}},
                 "spec": {"url": provider.url, "rewritePath": "/", "healthPath": "/health"}},
                {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService",
                 "metadata": {"name": SPILL, "namespace": NS},
                 "spec": {"endpoints": [{"selector": {"matchLabels": {"tier": "busy"}}}],
                          "fallback": [{"selector": {"matchLabels": {
                              "modelplane.ai/deployment": NAME}}}]}}])

            def tiered() -> dict:
                r = front_route(cp, NS, SPILL)
                have = {b["metadata"]["name"]: b for b in items(
                    cp, "backends.gateway.envoyproxy.io", NS, f"{LABEL_SERVICE}={SPILL}")}
                refs = r["spec"]["rules"][0].get("backendRefs") or []
                fallbacks = [ref for ref in refs
                             if (have.get(ref["name"]) or {}).get("spec", {}).get("fallback")]
                problems = accepted_and_resolved(r)
                if len(refs) != 3 or len(fallbacks) != 2 or problems:
                    raise AssertionError(f"{len(refs)} backends, {len(fallbacks)} fallbacks; "
                                         f"{problems}")
                return r
            wait("the spill service's route with the replicas as its priority 1", tiered,
                 SETTLE)
            ms = wait_condition(cp, MS, SPILL, NS, "Routed", SETTLE)
            spill = f"{ms['status']['address']}/v1/completions"
            first_answer(spill, body(), accept=lambda text: json.loads(text)["model"] == MODEL)
            pods = [e.pod for e in engines(cp, NS, [NAME])]
            before, busy = served(pods), provider.finished()
            statuses = [call(spill, body(i))[0] for i in range(SPILLED)]
            timings["spill: requests answered 200 of those sent"] = \
                f"{statuses.count(200)}/{SPILLED}"
            assert statuses == [200] * SPILLED, {s: statuses.count(s) for s in set(statuses)}
            # The replicas answered them all; the busy tier finished none.
            wait(f"the replicas to count {SPILLED} requests",
                 lambda: sum(delta(served(pods), before).values()) == SPILLED, 30)
            assert provider.finished() == busy
        finally:
            cp.kubectl("delete", MS, SPILL, "-n", NS, "--ignore-not-found", "--wait=false")
            cp.kubectl("delete", ME, "busy", "-n", NS, "--ignore-not-found", "--wait=false")
            allow_provider(cp, False)
