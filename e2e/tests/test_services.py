"""One URL for a model across the fleet, live (issue #16).

Two deployments of one model serve on the example fleet; the scheduler emits a
ModelEndpoint per serving replica; a ModelService splits traffic 95/5 between
the two deployments, with an external provider as fallback, on the front door
(us-east-1's gateway, the InferenceCluster labelled modelplane.ai/front-door).
What is proven against Envoy Gateway's real controller (its Envoy runs, but this
scenario sends no request: e2e/tests/test_dataplane.py does): the route and its
Backends exist, Envoy Gateway accepts the route and resolves every Backend, the
shares hold per entry as replicas come and go, and the fallback takes the route
only while no primary replica serves.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from live import (IC, MD, MR, SERVING, SETTLE, accepted_and_resolved, apply_docs, condition,
                  delete_and_wait, ensure_namespace, get, items, single_gpu, wait, wait_condition)

from e2e.controlplane.core import ControlPlane
from function.contract.api import HEADER_REPLICA, LABEL_DEPLOYMENT

NS = "fleet-route"
ME = "modelendpoints.modelplane.ai"
MS = "modelservices.modelplane.ai"
ROUTES = "httproutes.gateway.networking.k8s.io"
BACKENDS = "backends.gateway.envoyproxy.io"
LABEL_SERVICE = "modelplane.ai/model-service"
FRONT_DOOR = "us-east-1"   # the InferenceCluster labelled modelplane.ai/front-door
SERVICE = "chat"


EXTERNAL = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelEndpoint",
            "metadata": {"name": "provider", "namespace": NS,
                         "labels": {"provider": "external"}},
            # A provider's stand-in on loopback, where nothing listens and no request
            # goes: a provider's name would have the front door's Envoy resolve it in DNS.
            "spec": {"url": "http://127.0.0.1:9", "rewritePath": "/"}}
SERVICE_DOC = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService",
               "metadata": {"name": SERVICE, "namespace": NS},
               "spec": {"endpoints": [
                   {"weight": 95, "selector": {"matchLabels": {LABEL_DEPLOYMENT: "stable"}}},
                   {"weight": 5, "selector": {"matchLabels": {LABEL_DEPLOYMENT: "canary"}}}],
                        "fallback": [{"selector": {"matchLabels": {"provider": "external"}}}]}}


def route(cp: ControlPlane) -> dict:
    (r,) = items(cp, ROUTES, NS, f"{LABEL_SERVICE}={SERVICE}")
    return r


def backends(cp: ControlPlane) -> dict[str, dict]:
    return {b["metadata"]["name"]: b for b in items(cp, BACKENDS, NS,
                                                     f"{LABEL_SERVICE}={SERVICE}")}


def serving_endpoints(cp: ControlPlane, deployment_name: str) -> list[dict]:
    return items(cp, ME, NS, f"{LABEL_DEPLOYMENT}={deployment_name}")


def routed_to(cp: ControlPlane, expect: Mapping[str, int]) -> dict:
    """The route once it sends to exactly the endpoints `expect` counts per
    deployment (or "external"), Envoy Gateway has accepted it and resolved
    every Backend, and each backend the route names exists."""
    def check():
        r = route(cp)
        refs = ((r["spec"]["rules"] or [{}])[0]).get("backendRefs") or []
        have = backends(cp)
        missing = [ref["name"] for ref in refs if ref["name"] not in have]
        got: dict[str, int] = {}
        for ref in refs:
            b = have.get(ref["name"])
            headers = [h for f in ref.get("filters") or []
                       for h in f.get("requestHeaderModifier", {}).get("set", [])]
            owner = next((h["value"].split("/")[1].split("-")[0] for h in headers
                          if h["name"] == HEADER_REPLICA), "external") if b else "?"
            got[owner] = got.get(owner, 0) + 1
        problems = accepted_and_resolved(r)
        if got != dict(expect) or missing or problems:
            raise AssertionError(f"backends per deployment {got}, want {dict(expect)}; "
                                 f"missing {missing}; {problems}")
        return r
    return wait(f"the fleet route to send to {dict(expect)}", check, SETTLE)


def share(r: Mapping[str, Any], deployment_name: str) -> Fraction:
    refs = r["spec"]["rules"][0]["backendRefs"]
    total = sum(ref["weight"] for ref in refs)
    mine = sum(ref["weight"] for ref in refs
               if any(h["name"] == HEADER_REPLICA and
                      h["value"].split("/")[1].startswith(deployment_name + "-")
                      for f in ref.get("filters") or []
                      for h in f.get("requestHeaderModifier", {}).get("set", [])))
    return Fraction(mine, total)


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
            (r,) = items(cp, ROUTES, NS, f"{LABEL_SERVICE}={RULES}")
            problems = accepted_and_resolved(r)
            if len(r["spec"]["rules"]) != 3 or problems:
                raise AssertionError(f"{len(r['spec']['rules'])} rules; {problems}")
            return r
        r = wait(f"Envoy Gateway to accept {RULES}'s rules", accepted, SETTLE)
        paths = [rule["matches"][0]["path"] for rule in r["spec"]["rules"]]
        assert paths == [{"type": "PathPrefix", "value": f"/{NS}/{RULES}{CANARY_PATH}"},
                         {"type": "PathPrefix", "value": f"/{NS}/{RULES}"},
                         {"type": "PathPrefix", "value": f"/{NS}/{RULES}"}]
        sends = [{h["value"].split("/")[1].split("-")[0] for ref in rule["backendRefs"]
                  for f in ref.get("filters") or []
                  for h in f.get("requestHeaderModifier", {}).get("set", [])
                  if h["name"] == HEADER_REPLICA} for rule in r["spec"]["rules"]]
        assert sends == [{"canary"}, {"stable"}, {"stable"}]
        ms = wait_condition(cp, MS, RULES, NS, "Routed", SETTLE)
        assert [rule["name"] for rule in ms["status"]["rules"]] == [
            "canary-testers", "all-canary-headers"]

        apply_docs(cp, [rules_doc(reverse=True)])
        ms = wait_condition(cp, MS, RULES, NS, "Routed", SETTLE, status="False")
        assert condition(ms, "Routed")["reason"] == "RuleConflict"
        (kept,) = items(cp, ROUTES, NS, f"{LABEL_SERVICE}={RULES}")
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


def test_a_service_splits_by_entry_and_falls_back_only_while_no_replica_serves(
        cp: ControlPlane):
    ensure_namespace(cp, NS)
    apply_docs(cp, [single_gpu("stable", NS, 2), single_gpu("canary", NS, 1), EXTERNAL,
                    SERVICE_DOC])
    try:
        for name, want in (("stable", 2), ("canary", 1)):
            wait_condition(cp, MD, name, NS, "Ready", SERVING)
            wait_endpoints(cp, name, want)
        # A replica's endpoint names its cluster gateway and the header its route matches.
        for ep in serving_endpoints(cp, "stable"):
            name = ep["metadata"]["name"]  # the replica's
            mr = get(cp, MR, name, NS)
            assert mr is not None and mr["status"]["phase"] == "Serving"
            assert mr["status"]["endpoint"] == f"{ep['spec']['url']}/{NS}/{name}"
            assert ep["spec"]["requestHeaders"] == [
                {"name": HEADER_REPLICA, "value": f"{NS}/{name}"}]

        r = routed_to(cp, {"stable": 2, "canary": 1})
        assert share(r, "stable") == Fraction(95, 100)
        ms = wait_condition(cp, MS, SERVICE, NS, "Routed", SETTLE)
        # The front door's address is its InferenceCluster's (make cluster's local URL).
        door = get(cp, IC, FRONT_DOOR)["spec"]["gateway"]["address"]
        assert ms["status"]["address"] == f"{door}/{NS}/{SERVICE}"
        assert ms["status"]["active"] == "Primary"
        parent = r["spec"]["parentRefs"][0]
        assert (parent["name"], parent["namespace"]) == ("inference-gateway", "gateway-system")

        # Ordered rules: Envoy Gateway accepts them in order, each with its own backends;
        # an order it would not keep is refused and the route left as it was.
        check_rules(cp)

        # Scale-down: the entry's share holds whatever its replica count.
        scale(cp, "stable", 1)
        r = routed_to(cp, {"stable": 1, "canary": 1})
        assert share(r, "stable") == Fraction(95, 100)

        # No primary replica serves: the fallback alone takes the route.
        scale(cp, "stable", 0)
        scale(cp, "canary", 0)
        routed_to(cp, {"external": 1})
        wait(f"ModelService {SERVICE} on its fallback",
             lambda: (get(cp, MS, SERVICE, NS) or {}).get("status", {}).get("active")
             == "Fallback", SETTLE)

        # A primary serves again: the fallback leaves the route.
        scale(cp, "canary", 1)
        r = routed_to(cp, {"canary": 1})
        assert share(r, "canary") == 1
        wait(f"ModelService {SERVICE} Routed again",
             lambda: condition(get(cp, MS, SERVICE, NS), "Routed").get("status") == "True",
             SETTLE)
    finally:
        cp.kubectl("delete", MS, SERVICE, "-n", NS, "--ignore-not-found", "--wait=false")
        cp.kubectl("delete", ME, "provider", "-n", NS, "--ignore-not-found", "--wait=false")
        # Both at once: the wait for one looks at every pod of the namespace.
        cp.kubectl("delete", MD, "stable", "canary", "-n", NS, "--ignore-not-found",
                   "--wait=false")
        for name in ("stable", "canary"):
            delete_and_wait(cp, NS, name)
        wait("the fleet route to be gone", lambda: not items(
            cp, ROUTES, NS, f"{LABEL_SERVICE}={SERVICE}"), SETTLE)
