"""Who may call a ModelService, live (docs/security.md, `spec.authentication`): API
keys on the front door, as an Envoy Gateway SecurityPolicy its real controller
accepts and its Envoy enforces. Real requests to the front door (loopback), a few
of each kind: without a key, with an unknown one, with a client's key."""

from __future__ import annotations

import json

from frontdoor import MODEL, body
from live import (MD, SERVING, SETTLE, apply_docs, delete_and_wait, ensure_namespace, get,
                  items, single_gpu, wait, wait_condition)
from traffic import call, first_answer

from e2e.controlplane.core import ControlPlane
from function.contract.api import LABEL_DEPLOYMENT

NS = "fleet-auth"
NAME = "keyed"
SERVICE = "keyed-chat"
MS = "modelservices.modelplane.ai"
POLICIES = "securitypolicies.gateway.envoyproxy.io"
KEY = "fms-e2e-3b9f1c7d2a"   # a client's key: not a secret outside this test's namespace
TRIES = 3                    # requests of each kind: bounded


def accepted(policy: dict) -> list[str]:
    """What keeps Envoy Gateway from having accepted a SecurityPolicy (empty: nothing)."""
    ancestors = (policy.get("status") or {}).get("ancestors") or []
    if not ancestors:
        return ["no ancestor status yet"]
    return [f"{c.get('type')}={c.get('status')}: {c.get('message', '')}"
            for a in ancestors for c in a.get("conditions") or []
            if c.get("type") == "Accepted" and c.get("status") != "True"]


def test_a_service_with_api_keys_answers_only_a_known_key(cp: ControlPlane):
    ensure_namespace(cp, NS)
    apply_docs(cp, [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "clients", "namespace": NS},
         "stringData": {"client-a": KEY}},
        single_gpu(NAME, NS, 1),
        {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService",
         "metadata": {"name": SERVICE, "namespace": NS},
         "spec": {"endpoints": [{"selector": {"matchLabels": {LABEL_DEPLOYMENT: NAME}}}],
                  "authentication": {"apiKeys": {"secretRef": {"name": "clients"}}}}}])
    try:
        wait_condition(cp, MD, NAME, NS, "Ready", SERVING)
        ms = wait_condition(cp, MS, SERVICE, NS, "Routed", SETTLE)

        def policy() -> dict:
            (p,) = items(cp, POLICIES, NS)
            problems = accepted(p)
            if problems:
                raise AssertionError(problems)
            return p
        p = wait("Envoy Gateway to accept the service's SecurityPolicy", policy, SETTLE)
        assert p["spec"]["apiKeyAuth"]["credentialRefs"] == [
            {"group": "", "kind": "Secret", "name": "clients"}], p["spec"]

        url = f"{ms['status']['address']}/v1/completions"
        first_answer(url, body(), headers={"Authorization": f"Bearer {KEY}"})
        for i in range(TRIES):
            status, text = call(url, body(i), headers={"Authorization": f"Bearer {KEY}"})
            assert status == 200 and json.loads(text)["model"] == MODEL, (status, text[:300])
            status, text = call(url, body(i))
            assert status == 401, ("no key", status, text[:300])
            status, text = call(url, body(i), headers={"Authorization": "Bearer not-a-key"})
            assert status == 401, ("unknown key", status, text[:300])
    finally:
        cp.kubectl("delete", MS, SERVICE, "-n", NS, "--ignore-not-found", "--wait=false")
        delete_and_wait(cp, NS, NAME)
        wait("the service's route and policy to go",
             lambda: not items(cp, POLICIES, NS) and get(cp, MS, SERVICE, NS) is None, SETTLE)
