"""One URL for a model across the fleet, live, with real requests (issues #16, #31).

Two deployments of one model serve on the example fleet; the scheduler emits a
ModelEndpoint per serving replica; a ModelService splits traffic 75/25 between the
two deployments, with an external provider as fallback, on the front door
(us-east-1's gateway, the InferenceCluster labelled modelplane.ai/front-door).
Against Envoy Gateway's real controller and its Envoys: the route and its Backends
exist, Envoy Gateway accepts the route and resolves every Backend, and the shares
hold per entry as replicas come and go. Then real OpenAI requests through the
service's status.address (frontdoor.py), counted by the engines' own metrics:

* the weights hold: REQUESTS requests split 75/25 over the deployments, and evenly
  over a deployment's replicas, within SIGMAS binomial standard deviations;
* a replica's cluster lost (its gateway, controller-manager and API server stopped):
  requests at RATE a second keep coming; the front door's Envoy retries those that
  fail there on another cluster and ejects the lost gateway, the control plane then
  withdraws it from the route, and the failures stay within what the control plane's
  path alone would fail (lose_a_cluster); after it, every answer comes from the other
  clusters' engines,
  and once the cluster is back the shares hold again;
* a replica scaled away under light load (RATE a second): it drains (the scheduler keeps
  it, without its ModelEndpoint, until the service's route has left it), and no
  request fails while it goes (scale_down_under_load);
* the fallback: an llm-d inference simulator standing in for an external provider,
  in a network namespace the test makes, answers (as PROVIDER_MODEL) only while no
  primary replica serves, and requests go back to the primary once one serves.

A cluster whose gateway dies while its API server answers is noticed by the front
door's Envoy alone (nothing the control plane reads changes): test_failover.py.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from frontdoor import (FRONT_DOOR, MODEL, PROVIDER_MODEL, Paced, allow_provider, answered,
                       fallback, front_route, reaches, replica_of, slice_members,
                       at_most, body, engines, provider_simulator, tolerance)
from live import (IC, MD, MR, SERVING, SETTLE, Stopwatch, accepted_and_resolved,
                  apply_docs,
                  condition, delete_and_wait, ensure_namespace, get, items, replicas_of,
                  serving_pods, single_gpu, wait, wait_condition)
from traffic import ROUTED, call, delta, first_answer, served

from e2e.controlplane import faults
from e2e.controlplane.core import ControlPlane
from e2e.controlplane.waits import scale as timeout_scale
from function.contract.api import LABEL_DEPLOYMENT
from function.kit import requeue

NS = "fleet-route"
ME = "modelendpoints.modelplane.ai"
MS = "modelservices.modelplane.ai"
ROUTES = "httproutes.gateway.networking.k8s.io"
BACKENDS = "backends.gateway.envoyproxy.io"
LABEL_SERVICE = "modelplane.ai/model-service"
SERVICE = "chat"
# 75/25 rather than a 95/5 canary: a 5 % share would need thousands of requests to be
# told apart from 0 % or 10 % (REQUESTS below tells 25 % within about 6 points).
WEIGHTS = {"stable": 75, "canary": 25}


def external(url: str) -> dict[str, Any]:
    """The provider's ModelEndpoint, at the simulator standing in for it (frontdoor.py):
    an address inside a namespace the test made, as a provider's IP would be (a
    provider's DNS name would have the front door's Envoy resolve it in DNS)."""
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelEndpoint",
            "metadata": {"name": "provider", "namespace": NS,
                         "labels": {"provider": "external"}},
            "spec": {"url": url, "rewritePath": "/"}}


SERVICE_DOC = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService",
               "metadata": {"name": SERVICE, "namespace": NS},
               "spec": {"endpoints": [
                   {"weight": w, "selector": {"matchLabels": {LABEL_DEPLOYMENT: name}}}
                   for name, w in WEIGHTS.items()],
                        "fallback": [{"selector": {"matchLabels": {"provider": "external"}}}]}}


def route(cp: ControlPlane) -> dict:
    r = front_route(cp, NS, SERVICE)
    return r


def backends(cp: ControlPlane) -> dict[str, dict]:
    return {b["metadata"]["name"]: b for b in items(cp, BACKENDS, NS,
                                                     f"{LABEL_SERVICE}={SERVICE}")}


def serving_endpoints(cp: ControlPlane, deployment_name: str) -> list[dict]:
    return items(cp, ME, NS, f"{LABEL_DEPLOYMENT}={deployment_name}")


def routed_to(cp: ControlPlane, expect: Mapping[str, int], timeout: float = SETTLE) -> dict:
    """The route once it sends to exactly the replicas `expect` counts per deployment
    (or "external" endpoints) at priority 0 (a fallback tier beside them is not
    counted), each through its cluster gateway's slice, Envoy Gateway has accepted it
    and resolved every Backend, and each backend the route names exists."""
    def check():
        r = route(cp)
        refs = ((r["spec"]["rules"] or [{}])[0]).get("backendRefs") or []
        have = backends(cp)
        missing = [ref["name"] for ref in refs if ref["name"] not in have]
        members = slice_members(cp, NS, SERVICE)
        got: dict[str, int] = {}
        apart = []
        for ref in refs:
            if fallback(ref, have):
                continue  # priority 1: takes only what the primaries cannot serve
            if replica_of(ref, have) is not None:
                apart.append(ref["name"])  # not yet in its slice
            owners = [replica.split("-")[0] for replica in reaches(ref, have, members)] \
                or ["external"] if ref["name"] in have else ["?"]
            for owner in owners:
                got[owner] = got.get(owner, 0) + 1
        problems = accepted_and_resolved(r)
        if got != dict(expect) or missing or problems or apart:
            raise AssertionError(f"replicas per deployment {got}, want {dict(expect)}; "
                                 f"missing {missing}; not in a slice yet {apart}; "
                                 f"{problems}")
        return r
    return wait(f"the fleet route to send to {dict(expect)}", check, timeout)


def share(cp: ControlPlane, r: Mapping[str, Any], deployment_name: str) -> Fraction:
    return share_of(cp, r, lambda replica: replica.startswith(deployment_name + "-"))


def share_of(cp: ControlPlane, r: Mapping[str, Any], mine) -> Fraction:
    """The route's weight on the replicas `mine` takes, as a fraction of all its weight."""
    have, members = backends(cp), slice_members(cp, NS, SERVICE)
    refs = [ref for ref in r["spec"]["rules"][0]["backendRefs"] if not fallback(ref, have)]
    total = sum(ref["weight"] for ref in refs)
    return sum((ref["weight"] * part for ref in refs
                for replica, part in reaches(ref, have, members).items() if mine(replica)),
               Fraction(0)) / total


RULES = "chat-rules"
CANARY_PATH = "/v1/chat/completions"


def rules_doc(reverse: bool = False) -> dict[str, Any]:
    """A service whose canary-testers rule sends requests with `x-canary: true` on the
    chat path to the canary, and everything else to stable. Reversed, a broader rule
    comes first and the narrower one after it: Gateway API would rank the later above."""
    rules = [{"name": "canary-testers",
              "matches": [{"path": {"value": CANARY_PATH},
                           "headers": [{"name": "x-canary", "value": "true"}]}],
              "endpoints": [{"selector": {"matchLabels": {LABEL_DEPLOYMENT: "canary"}}}]},
             {"name": "all-canary-headers",
              "matches": [{"headers": [{"name": "x-canary", "value": "true"}]}],
              "endpoints": [{"selector": {"matchLabels": {LABEL_DEPLOYMENT: "stable"}}}]}]
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService",
            "metadata": {"name": RULES, "namespace": NS},
            "spec": {"rules": rules[::-1] if reverse else rules,
                     "endpoints": [{"selector": {"matchLabels": {LABEL_DEPLOYMENT: "stable"}}}]}}


def check_rules(cp: ControlPlane) -> None:
    apply_docs(cp, [rules_doc()])
    try:
        def accepted():
            r = front_route(cp, NS, RULES)
            problems = accepted_and_resolved(r)
            if len(r["spec"]["rules"]) != 3 or problems:
                raise AssertionError(f"{len(r['spec']['rules'])} rules; {problems}")
            return r
        r = wait(f"Envoy Gateway to accept {RULES}'s rules", accepted, SETTLE)
        paths = [rule["matches"][0]["path"] for rule in r["spec"]["rules"]]
        assert paths == [{"type": "PathPrefix", "value": f"/{NS}/{RULES}{CANARY_PATH}"},
                         {"type": "PathPrefix", "value": f"/{NS}/{RULES}"},
                         {"type": "PathPrefix", "value": f"/{NS}/{RULES}"}]
        have = {b["metadata"]["name"]: b for b in items(cp, BACKENDS, NS,
                                                        f"{LABEL_SERVICE}={RULES}")}
        members = slice_members(cp, NS, RULES)
        sends = [{replica.split("-")[0] for ref in rule["backendRefs"]
                  for replica in reaches(ref, have, members)} for rule in r["spec"]["rules"]]
        assert sends == [{"canary"}, {"stable"}, {"stable"}]
        ms = wait_condition(cp, MS, RULES, NS, "Routed", SETTLE)
        assert [rule["name"] for rule in ms["status"]["rules"]] == [
            "canary-testers", "all-canary-headers"]

        apply_docs(cp, [rules_doc(reverse=True)])
        ms = wait_condition(cp, MS, RULES, NS, "Routed", SETTLE, status="False")
        assert condition(ms, "Routed")["reason"] == "RuleConflict"
        kept = front_route(cp, NS, RULES)
        assert kept["spec"] == r["spec"]  # never destructive: the accepted route stays
    finally:
        cp.kubectl("delete", MS, RULES, "-n", NS, "--ignore-not-found", "--wait=false")
        wait(f"{RULES}'s route to be gone", lambda: not items(
            cp, ROUTES, NS, f"{LABEL_SERVICE}={RULES}"), SETTLE)


def scale(cp: ControlPlane, name: str, replicas: int) -> None:
    cp.kubectl("scale", MD, name, "-n", NS, f"--replicas={replicas}")


def wait_endpoints(cp: ControlPlane, name: str, want: int) -> None:
    wait(f"{want} ModelEndpoints of {name}",
         lambda: len(serving_endpoints(cp, name)) == want, SERVING)


# --- real requests through the front door ------------------------------------------------

DEPLOYMENTS = tuple(WEIGHTS)
REQUESTS = 800  # per share measurement: about a second of requests on loopback


def check_shares(cp: ControlPlane, url: str, timings, when: str) -> None:
    """REQUESTS requests through the front door split by the weights: each deployment
    takes its entry's share and each replica an even part of it, by the engines' own
    counters, within SIGMAS binomial standard deviations (Envoy picks a weighted
    backend at random per request)."""
    among = engines(cp, NS, DEPLOYMENTS)
    by_replica = answered(url, among, REQUESTS)
    total = sum(WEIGHTS.values())
    replicas = Counter(e.deployment for e in among)
    problems = []
    for name, weight in WEIGHTS.items():
        want = weight / total
        got = sum(n for replica, n in by_replica.items() if replica.startswith(name + "-"))
        timings[f"front door: {name}'s share of {REQUESTS} requests, {when} "
                f"(want {want:.3f})"] = round(got / REQUESTS, 3)
        if abs(got / REQUESTS - want) > tolerance(want, REQUESTS):
            problems.append(f"{name}: {got / REQUESTS:.3f}, want {want:.3f} "
                            f"± {tolerance(want, REQUESTS):.3f}")
        for e in (e for e in among if e.deployment == name):
            each = want / replicas[name]
            mine = by_replica.get(e.replica, 0) / REQUESTS
            if abs(mine - each) > tolerance(each, REQUESTS):
                problems.append(f"replica {e.replica}: {mine:.3f}, want {each:.3f} "
                                f"± {tolerance(each, REQUESTS):.3f}")
    assert not problems, f"shares of {REQUESTS} requests ({by_replica}): {problems}"


LOST = "eu-west-1"  # the prod cluster that is not the front door: spread puts a stable replica there
RATE = 4            # requests a second while the cluster is lost
# How long the front door may take to leave a lost cluster, in seconds: provider-kubernetes
# polls every remote Object each minute (--poll=1m), and says Synced=False once the API
# server is gone, which makes the replica Failed and its ModelEndpoint withdrawn at once;
# the ModelService looks at its required ModelEndpoints again within requeue.FOLLOW
# (15 s); then 30 s for the reconciles in between and Envoy Gateway's translation and
# xDS push. Measured: 51-62 s over six runs while services waited on Crossplane's
# one-minute poll (a budget of 150 s then); since, 6.6-41 s over four runs.
CONVERGE = 60 + int(requeue.FOLLOW.total_seconds()) + 30
TAIL = 40           # answers in a row after which the front door has converged
DRAIN_FAILURES = 0  # requests that may fail while a replica drains and goes


def lose_a_cluster(cp: ControlPlane, url: str, timings) -> None:
    """LOST's gateway, controller-manager and API server stop (the cluster gone, as the
    control plane and the front door see it) while requests go to the front door at
    RATE a second.

    A request fails only when Envoy's weighted pick lands on a backend on LOST (its
    share s of the route), until the route leaves it, which takes at most CONVERGE
    seconds; so of the RATE·CONVERGE requests sent meanwhile at most s·RATE·CONVERGE
    fail, plus SIGMAS binomial standard deviations. Stopping only the gateway would not
    do: nothing the control plane reads changes (measured: the route kept its share
    for minutes). All three are started again before this returns.

    The controller-manager goes with its API server: one left running judges the
    nodes by the leases it last saw, and the moment the API server is back marks every
    node NotReady and its pods Ready=False (seen at 3 s). kwok renews the leases, but
    nothing writes the pods Ready again (the pods supervisor writes Ready only when
    its own probes change; a kubelet would re-assert it), so the replicas there would
    stay unready. Started after its API server, it sees fresh leases."""
    lost = {mr["metadata"]["name"] for name in DEPLOYMENTS for mr in replicas_of(cp, NS, name)
            if mr["spec"]["clusterName"] == LOST}
    assert any(name.startswith("stable-") for name in lost), f"no stable replica on {LOST}"
    s = share_of(cp, route(cp), lambda replica: replica in lost)
    kept = engines(cp, NS, DEPLOYMENTS, skip_cluster=LOST)
    expect = Counter(deployment for deployment, _ in {(e.deployment, e.replica) for e in kept})
    assert kept, f"every replica is on {LOST}"
    on = cp.gateways[LOST]["cluster"]  # the API server (and Envoy Gateway) that serve it
    budget = CONVERGE * timeout_scale()
    stopped: list[str] = []
    with Paced(url, body(), RATE, limit=int(RATE * (budget + 120))) as paced:
        try:
            wait("the front door to answer at a steady rate", lambda: paced.streak() >= 8, 30)
            mark, since = paced.mark(), paced.elapsed()
            clock = Stopwatch()
            for component in faults.cluster_components(cp.components(), on,
                                                       faults.LOST_CLUSTER):
                cp.stop(component)
                stopped.append(component)
            routed_to(cp, expect, CONVERGE)  # wait() scales its deadline itself
            timings["front door: cluster lost -> the route leaves it (s)"] = clock.seconds()
            wait(f"{TAIL} answers in a row through the front door",
                 lambda: paced.streak() >= TAIL, 60)
            paced.stop()
            failed, sent = paced.failures(mark), paced.sent(mark)
            # Every answer now comes from the clusters left.
            answered(url, kept, TAIL)
        finally:
            paced.stop()
            for component in reversed(stopped):  # the API server first
                if not cp.running(component):
                    cp.start(component)
    bound = at_most(float(s), RATE * budget)
    timings["front door: requests failed while it left a lost cluster"] = len(failed)
    timings["front door: requests sent meanwhile"] = sent
    timings["front door: the lost cluster's share of the route"] = round(float(s), 3)
    if failed:
        timings["front door: cluster lost -> last failed request (s)"] = round(
            failed[-1][0] - since, 1)
    # The bound of the control plane's path alone; the front door's own health checks
    # and retries usually fail none (test_failover.py holds it to 1 % and 2 s).
    assert len(failed) <= bound, (
        f"{len(failed)} of {sent} requests failed while the front door left {LOST} "
        f"(its share {float(s):.3f}); bound {bound}: {failed[:5]}...")
    # Healthy again: the cluster's replicas serve, the route sends to them, and so
    # does the front door's Envoy (one request a poll, until the cluster's engines count one).
    for name in DEPLOYMENTS:
        wait_condition(cp, MD, name, NS, "Ready", SERVING)
    routed_to(cp, {"stable": 2, "canary": 1})
    back = [e.pod for e in engines(cp, NS, DEPLOYMENTS) if e.cluster == LOST]
    before = served(back)

    def reached() -> bool:
        status, text = call(url, body())
        assert status == 200, text[:300]
        return sum(delta(served(back), before).values()) > 0
    wait(f"the front door to send to {LOST} again", reached, ROUTED)


def scale_down_under_load(cp: ControlPlane, url: str, timings) -> dict:
    """stable scaled 2 -> 1 while requests come to the front door at RATE a second.

    The scheduler withdraws the leaving replica's ModelEndpoint at once and keeps the
    replica serving while the service's status says its route still sends to it
    (function/scheduler/drain.py); the route leaves it when Crossplane next reconciles
    the service (it requires its ModelEndpoints, it does not watch them: within
    requeue.FOLLOW), and the replica goes on the deployment's next reconcile (within
    requeue.WAITING), with its Deployment, Service and HTTPRoute on its cluster. So no
    request should find it gone: the failures counted while it drained and went must
    stay within DRAIN_FAILURES (measured: 0 of 231, 232 and 58 in three runs, the route
    leaving the replica 14-55 s after the scale: at the longest, most of it the deployment's own
    reconcile seeing the scale, which Crossplane's watch circuit breaker may hold back
    after a burst of events; then the service's, within 15 s). Without the drain, every
    request the route sent to it until the service's next reconcile failed (measured
    with the drain removed: 13 of 90, all 404 from the leaving replica's gateway, its
    share 0.375, the route leaving it 14 s after the scale).
    Returns the route once the replica is gone."""
    before = {mr["metadata"]["name"]: mr for mr in replicas_of(cp, NS, "stable")}
    s = share_of(cp, route(cp), lambda replica: replica.startswith("stable-")) / len(before)
    budget = CONVERGE * timeout_scale()
    with Paced(url, body(), RATE, limit=int(RATE * (budget + 180))) as paced:
        wait("the front door to answer at a steady rate", lambda: paced.streak() >= 8, 30)
        mark, since = paced.mark(), paced.elapsed()
        clock = Stopwatch()
        scale(cp, "stable", 1)
        r = routed_to(cp, {"stable": 1, "canary": 1}, CONVERGE)
        timings["front door: scale-down -> the route leaves the replica (s)"] = clock.seconds()
        wait("the drained replica to go", lambda: len(replicas_of(cp, NS, "stable")) == 1,
             SETTLE)
        (gone,) = set(before) - {mr["metadata"]["name"] for mr in replicas_of(cp, NS, "stable")}
        wait(f"{gone}'s engine pod to be deleted from its cluster",
             lambda: serving_pods(cp, before[gone]) == [], SETTLE)
        timings["front door: scale-down -> the replica's pod gone (s)"] = clock.seconds()
        wait(f"{TAIL} answers in a row through the front door",
             lambda: paced.streak() >= TAIL, 60)
        paced.stop()
        failed, sent = paced.failures(mark), paced.sent(mark)
    timings["front door: requests failed while a replica drained"] = len(failed)
    timings["front door: requests sent meanwhile (scale-down)"] = sent
    timings["front door: the leaving replica's share of the route"] = round(float(s), 3)
    if failed:
        timings["front door: scale-down -> last failed request (s)"] = round(
            failed[-1][0] - since, 1)
        timings["front door: scale-down failures by status"] = dict(
            sorted(Counter(status for _, status in failed).items()))
    assert len(failed) <= DRAIN_FAILURES, (
        f"{len(failed)} of {sent} requests failed while a stable replica drained "
        f"(its share {float(s):.3f}): {failed[:5]}...")
    return r


def answers_from(url: str, model: str, n: int) -> None:
    """`n` requests through the front door, each answered 200 by `model`'s server."""
    for i in range(n):
        status, text = call(url, body(i))
        assert status == 200 and json.loads(text)["model"] == model, (status, text[:300])


def check_fallback(cp: ControlPlane, url: str, provider, n: int = 20) -> None:
    """No primary replica serves: the provider answers every request (as
    PROVIDER_MODEL, and by its own counter); one primary serves again: it answers
    them all and the provider none."""
    scale(cp, "stable", 0)
    scale(cp, "canary", 0)
    routed_to(cp, {"external": 1})
    wait(f"ModelService {SERVICE} on its fallback",
         lambda: (get(cp, MS, SERVICE, NS) or {}).get("status", {}).get("active")
         == "Fallback", SETTLE)
    first_answer(url, body(), accept=lambda text: json.loads(text)["model"] == PROVIDER_MODEL)
    before = provider.finished()
    answers_from(url, PROVIDER_MODEL, n)
    wait(f"the provider to count {n} requests", lambda: provider.finished() - before == n, 15)

    # A primary serves again: the fallback becomes priority 1 again, and takes none
    # of the requests while the primary is healthy.
    scale(cp, "canary", 1)
    wait_condition(cp, MD, "canary", NS, "Ready", SERVING)
    r = routed_to(cp, {"canary": 1})
    assert share(cp, r, "canary") == 1
    wait(f"ModelService {SERVICE} Routed again",
         lambda: condition(get(cp, MS, SERVICE, NS), "Routed").get("status") == "True",
         SETTLE)
    first_answer(url, body(), accept=lambda text: json.loads(text)["model"] == MODEL)
    before = provider.finished()
    answered(url, engines(cp, NS, ["canary"]), n)
    assert provider.finished() == before, "the provider still answers"


def test_a_service_splits_by_entry_and_falls_back_only_while_no_replica_serves(
        cp: ControlPlane, timings, tmp_path):
    ensure_namespace(cp, NS)
    with provider_simulator(cp.tools["INFERENCE_SIM"], tmp_path) as provider:
        allow_provider(cp, True)
        apply_docs(cp, [single_gpu("stable", NS, 2), single_gpu("canary", NS, 1),
                        external(provider.url), SERVICE_DOC])
        try:
            for name, want in (("stable", 2), ("canary", 1)):
                wait_condition(cp, MD, name, NS, "Ready", SERVING)
                wait_endpoints(cp, name, want)
            # A replica's endpoint names its cluster gateway and the replica, whose
            # Host (of the endpoint's own namespace) the route sends and its fleet
            # route on the cluster gateway matches.
            for ep in serving_endpoints(cp, "stable"):
                name = ep["metadata"]["name"]  # the replica's
                mr = get(cp, MR, name, NS)
                assert mr is not None and mr["status"]["phase"] == "Serving"
                assert mr["status"]["endpoint"] == f"{ep['spec']['url']}/{NS}/{name}"
                assert ep["spec"]["replica"] == name and "requestHeaders" not in ep["spec"]

            r = routed_to(cp, {"stable": 2, "canary": 1})
            assert share(cp, r, "stable") == Fraction(WEIGHTS["stable"], sum(WEIGHTS.values()))
            # The provider (an IP without filters) joins the rule's Envoy cluster as
            # the fallback tier, Envoy's priority 1: the replicas are in slices, one per
            # cluster gateway (routed_to waits for them), so no two endpoints share an
            # address.
            have = backends(cp)
            refs = r["spec"]["rules"][0]["backendRefs"]
            assert [replica_of(ref, have) for ref in refs if fallback(ref, have)] == [None]
            ms = wait_condition(cp, MS, SERVICE, NS, "Routed", SETTLE)
            # The front door's address is its InferenceCluster's (make cluster's local URL).
            door = get(cp, IC, FRONT_DOOR)["spec"]["gateway"]["address"]
            assert ms["status"]["address"] == f"{door}/{NS}/{SERVICE}"
            assert ms["status"]["active"] == "Primary"
            parent = r["spec"]["parentRefs"][0]
            assert (parent["name"], parent["namespace"]) == ("inference-gateway",
                                                             "gateway-system")

            # Real requests at the service's address split by the weights.
            url = f"{ms['status']['address']}/v1/completions"
            first_answer(url, body())
            check_shares(cp, url, timings, "all serving")

            # Ordered rules: Envoy Gateway accepts them in order, each with its own
            # backends; an order it would not keep is refused and the route left as it was.
            check_rules(cp)

            # A replica's cluster lost: the front door leaves it; back, the shares hold.
            lose_a_cluster(cp, url, timings)
            check_shares(cp, url, timings, "after a lost cluster came back")

            # Scale-down under light load: the requests that failed while a replica
            # drained are counted; the entry's share holds whatever its replica count.
            r = scale_down_under_load(cp, url, timings)
            assert share(cp, r, "stable") == Fraction(WEIGHTS["stable"], sum(WEIGHTS.values()))

            # The fallback answers only while no primary replica serves.
            check_fallback(cp, url, provider)
        finally:
            cp.kubectl("delete", MS, SERVICE, "-n", NS, "--ignore-not-found", "--wait=false")
            cp.kubectl("delete", ME, "provider", "-n", NS, "--ignore-not-found",
                       "--wait=false")
            allow_provider(cp, False)
            # Both at once: the wait for one looks at every pod of the namespace.
            cp.kubectl("delete", MD, "stable", "canary", "-n", NS, "--ignore-not-found",
                       "--wait=false")
            for name in ("stable", "canary"):
                delete_and_wait(cp, NS, name)
            wait("the fleet route to be gone", lambda: not items(
                cp, ROUTES, NS, f"{LABEL_SERVICE}={SERVICE}"), SETTLE)
