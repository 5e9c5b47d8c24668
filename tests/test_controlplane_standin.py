"""The local control plane's stand-in for a Gateway controller
(e2e/controlplane/gateway_standin.py): the statuses it writes are valid for the
reference CRDs and are what the function's readiness judges accept; a resync of
unchanged objects writes nothing (no patch loop)."""

from __future__ import annotations

import copy

import pytest
from schemas import Schemas

from e2e.controlplane import gateway_standin as gs
from function.composer import readiness

NOW, LATER = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


@pytest.fixture(scope="module")
def schemas(shared_crds) -> Schemas:
    return Schemas(shared_crds)


def gatewayclass(controller=gs.CONTROLLER):
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "modelplane-gateway-stand-in", "generation": 1},
            "spec": {"controllerName": controller}}


def gateway(name="inference-gateway", ns="gateway-system", addresses=None):
    spec = {"gatewayClassName": "modelplane-gateway-stand-in",
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
    objs = {"gatewayclasses": [gatewayclass()], "gateways": [gateway()],
            "httproutes": [route()], "inferencepools": []}
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


def test_gateway_is_accepted_and_programmed_with_its_addresses(schemas):
    objs = apply(world(gateways=[gateway(addresses=[{"type": "Hostname", "value": "llm.example.com"}])]))
    gw = objs["gateways"][0]
    conds = {c["type"]: c for c in gw["status"]["conditions"]}
    assert conds["Accepted"]["status"] == conds["Programmed"]["status"] == "True"
    assert conds["Programmed"]["observedGeneration"] == 2
    assert gw["status"]["addresses"] == [{"type": "Hostname", "value": "llm.example.com"}]
    assert gw["status"]["listeners"][0]["attachedRoutes"] == 1
    assert schemas.errors(gw) == []
    gc = objs["gatewayclasses"][0]
    assert gc["status"]["conditions"][0]["type"] == "Accepted"
    assert schemas.errors(gc) == []


def test_a_gateway_without_addresses_reports_loopback():
    gw = apply(world())["gateways"][0]
    assert gw["status"]["addresses"] == [{"type": "IPAddress", "value": "127.0.0.1"}]


def test_route_to_an_existing_gateway_is_accepted_and_ready(schemas):
    r = apply(world())["httproutes"][0]
    [parent] = r["status"]["parents"]
    assert parent["controllerName"] == gs.CONTROLLER
    assert parent["parentRef"] == {"name": "inference-gateway", "namespace": "gateway-system"}
    assert {c["type"]: c["status"] for c in parent["conditions"]} == \
        {"Accepted": "True", "ResolvedRefs": "True"}
    assert schemas.errors(r) == []
    assert ready(r)


def test_route_to_a_missing_gateway_gets_no_parent():
    r = apply(world(httproutes=[route(parents=[("gateway-system", "nope")])]))["httproutes"][0]
    assert "status" not in r           # none of the stand-in's business: nothing written
    assert not ready(r)
    # A parent it wrote earlier goes when the gateway does.
    accepted = apply(world())["httproutes"][0]
    gone = apply(world(gateways=[], httproutes=[accepted]))["httproutes"][0]
    assert gone["status"]["parents"] == []


def test_gateways_of_other_classes_are_left_alone():
    objs = world(gatewayclasses=[gatewayclass("example.com/other")])
    changed = gs.desired(objs, NOW)
    assert changed == []


def test_other_controllers_parents_are_kept():
    r = route()
    other = {"parentRef": {"name": "x"}, "controllerName": "example.com/other",
             "conditions": [{"type": "Accepted", "status": "False", "reason": "NoMatchingParent",
                             "message": "", "lastTransitionTime": NOW}]}
    r["status"] = {"parents": [other]}
    out = apply(world(httproutes=[r]))["httproutes"][0]
    assert out["status"]["parents"][0] == other
    assert out["status"]["parents"][1]["controllerName"] == gs.CONTROLLER


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
    objs["httproutes"][0]["metadata"]["generation"] = 4
    [(kind, _, status)] = gs.desired(objs, LATER)
    assert kind == "httproutes"
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
