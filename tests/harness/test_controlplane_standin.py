"""The local control plane's stand-in for an InferencePool-aware Gateway implementation
(e2e/controlplane/gateway_standin.py): it writes InferencePool status and nothing else
(Envoy Gateway writes GatewayClass, Gateway and HTTPRoute status); what it writes is
valid for the reference CRDs and is what the function's readiness judge accepts; a
resync of unchanged objects writes nothing (no patch loop)."""

from __future__ import annotations

import copy

import pytest
from schemas import Schemas

from e2e.controlplane import gateway_standin as gs
from function.composer import readiness

NOW, LATER = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


@pytest.fixture(scope="module")
def schemas() -> Schemas:
    return Schemas()


def gateway(name="inference-gateway", ns="gateway-system", addresses=None):
    spec = {"gatewayClassName": "eg",
            "listeners": [{"name": "http", "protocol": "HTTP", "port": 80,
                           "allowedRoutes": {"namespaces": {"from": "All"}}}]}
    if addresses:
        spec["addresses"] = addresses
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": ns, "generation": 2}, "spec": spec}


def route(name="r", ns="ml-team", parents=(("gateway-system", "inference-gateway"),),
          backend=None):
    rules = [{"backendRefs": [backend or {"name": "svc", "port": 8000}]}]
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": ns, "generation": 3},
            "spec": {"parentRefs": [{"name": n, "namespace": p} for p, n in parents],
                     "rules": rules}}


def pool(name="p", ns="ml-team"):
    return {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
            "metadata": {"name": name, "namespace": ns, "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, "targetPorts": [{"number": 8000}],
                     "endpointPickerRef": {"name": "epp", "port": {"number": 9002}}}}


def ready(obj) -> bool:
    """What the function's own readiness judge (function/composer/readiness.py) says."""
    judge = getattr(readiness, obj["kind"].lower())
    return judge(obj).ready


def world(**extra):
    objs = {"gateways": [gateway()], "httproutes": [route()], "inferencepools": []}
    objs.update(extra)
    return objs


def apply(objects, now=NOW):
    """Write every desired status into the objects (what the API server would hold)."""
    objects = copy.deepcopy(objects)
    for kind, obj, status in gs.desired(objects, now):
        for o in objects[kind]:
            if o["metadata"] == obj["metadata"]:
                o["status"] = status
    return objects


def test_only_inferencepools_are_written():
    """Gateways and HTTPRoutes are Envoy Gateway's: the stand-in never writes them, with
    or without a pool, and never lists GatewayClasses."""
    backend = {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "p"}
    objs = world(httproutes=[route(backend=backend), route("plain")], inferencepools=[pool()])
    assert {kind for kind, _, _ in gs.desired(objs, NOW)} == {"inferencepools"}
    assert gs.desired(world(), NOW) == []
    assert set(gs.KINDS) == {"gateways", "httproutes", "inferencepools"}


def test_other_controllers_pool_parents_are_kept():
    other = {"parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                           "name": "x", "namespace": "y"},
             "controllerName": "example.com/other",
             "conditions": [{"type": "Accepted", "status": "False", "reason": "x",
                             "message": "", "lastTransitionTime": NOW}]}
    p = pool()
    p["status"] = {"parents": [other]}
    out = apply(world(httproutes=[], inferencepools=[p]))["inferencepools"][0]
    assert out["status"]["parents"][0] == other
    assert out["status"]["parents"][1]["controllerName"] == gs.CONTROLLER


def test_no_gateway_on_the_cluster_no_pool_status():
    assert gs.desired(world(gateways=[], httproutes=[], inferencepools=[pool()]), NOW) == []


def test_pool_parents_follow_the_routes_that_reference_it(schemas):
    backend = {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "p"}
    objs = apply(world(httproutes=[route(backend=backend)], inferencepools=[pool()]))
    p = objs["inferencepools"][0]
    [parent] = p["status"]["parents"]
    assert parent["parentRef"] == {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                   "namespace": "gateway-system", "name": "inference-gateway"}
    assert {c["type"]: c["status"] for c in parent["conditions"]} == \
        {"Accepted": "True", "ResolvedRefs": "True"}
    assert schemas.errors(p) == []
    assert ready(p)


def test_a_pool_no_route_references_yet_is_accepted_by_the_clusters_gateway():
    p = apply(world(httproutes=[], inferencepools=[pool()]))["inferencepools"][0]
    assert [x["parentRef"]["name"] for x in p["status"]["parents"]] == ["inference-gateway"]


def test_a_second_resync_writes_nothing_and_keeps_transition_times():
    backend = {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "p"}
    objs = apply(world(httproutes=[route(backend=backend)], inferencepools=[pool()]))
    assert gs.desired(objs, LATER) == []
    # A spec change (new generation) rewrites observedGeneration, not the transition time.
    objs["inferencepools"][0]["metadata"]["generation"] = 4
    [(kind, _, status)] = gs.desired(objs, LATER)
    assert kind == "inferencepools"
    cond = status["parents"][0]["conditions"][0]
    assert cond["observedGeneration"] == 4 and cond["lastTransitionTime"] == NOW


def test_merge_conditions_keeps_time_only_when_status_is_unchanged():
    old = [{"type": "Accepted", "status": "False", "lastTransitionTime": NOW}]
    new = gs.merge_conditions(old, [gs.condition("Accepted", "True", "Accepted", "", 1, LATER)])
    assert new[0]["lastTransitionTime"] == LATER
    again = gs.merge_conditions(new, [gs.condition("Accepted", "True", "Accepted", "", 1, "x")])
    assert again[0]["lastTransitionTime"] == LATER


def test_parent_refs_default_their_namespace_and_ignore_other_kinds():
    assert gs.parent_gateway({"name": "g"}, "ns") == ("ns", "g")
    assert gs.parent_gateway({"name": "g", "kind": "Service", "group": ""}, "ns") is None


def test_the_command_line_wants_name_equals_kubeconfig(capsys):
    with pytest.raises(SystemExit):
        gs.main(["just-a-name"])
    assert "NAME=KUBECONFIG" in capsys.readouterr().err
