"""Replicas behind one cluster gateway reached as one slice (#49 items 1-3).

Envoy keys an Envoy cluster's hosts by address: two replicas behind one cluster
gateway, two endpoints of the front door's cluster, merged into one host live, one
replica taking both shares. A slice is the front door's one endpoint for them: the
gateway's address with a Host of its own, which an HTTPRoute the ModelService
composes on the replicas' cluster splits among their Services by the same weights.
"""

from __future__ import annotations

import copy

from builders import desired
from composer_support import compose, replica, standalone
from test_frontdoor_health import backends, policies
from test_modelservice import DOOR, NS, TRUE, endpoint, route, routed, run, service

from function.composer.modelservice import slices

EAST = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
        "metadata": {"name": "east", "labels": {}},
        "spec": {"gateway": {"name": "gw", "namespace": "gateway-system",
                             "address": "http://10.0.5.5:8000"},
                 "providerConfigRef": {"name": "east"}, "nodePools": []}}
WEST = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
        "metadata": {"name": "west", "labels": {}},
        "spec": {"gateway": {"name": "gw", "namespace": "gateway-system",
                             "address": "http://10.0.6.6:8000"}, "nodePools": []}}
STABLE = {"modelplane.ai/deployment": "stable"}


def mr(name, cluster, router=None):
    serving = {"router": router} if router else {}
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"clusterName": cluster, "serving": serving}}


def replica_endpoint(name, address):
    return endpoint(name, address, STABLE, rewritePath="/", replica=name,
                    healthPath="/health")


EPS = [replica_endpoint("s-0", "http://10.0.5.5:8000"), replica_endpoint("s-1", "http://10.0.5.5:8000"),
       replica_endpoint("s-2", "http://10.0.6.6:8000")]
MRS = [mr("s-0", "east"), mr("s-1", "east"), mr("s-2", "west")]


def fleet(observed=None, eps=EPS, mrs=MRS, ms=None):
    return run(ms or service(((3, STABLE),)), [eps], observed=observed, required_extra={
        "inference-clusters": [DOOR, EAST, WEST], "model-replicas": mrs})


def accepted(obj):
    """What Crossplane observes once the slice's HTTPRoute is accepted."""
    out = copy.deepcopy(obj)
    if out["kind"] == "Object":  # provider-kubernetes says Ready from the remote status
        out["status"] = {"conditions": [{"type": "Ready", "status": "True"},
                                        {"type": "Synced", "status": "True"}]}
    else:
        out["status"] = {"parents": [{"conditions": [{"type": "Accepted", "status": "True"}],
                                      "controllerName": "gateway.envoyproxy.io/gatewayclass-controller",
                                      "parentRef": out["spec"]["parentRefs"][0]}]}
    return out


def test_replicas_behind_one_gateway_are_one_slice_once_their_gateway_serves_it():
    first = fleet()
    out = desired(first)
    # The slices: one per cluster, each an HTTPRoute beside its replicas.
    east = out["east-slice-0-primary"]
    assert east["kind"] == "Object"
    assert east["spec"]["providerConfigRef"]["name"] == "east"
    east_route = east["spec"]["forProvider"]["manifest"]
    (host,) = east_route["spec"]["hostnames"]
    assert host.endswith(f".{NS}.slice.modelplane.internal")
    (rule,) = east_route["spec"]["rules"]
    assert rule["backendRefs"] == [
        {"group": "", "kind": "Service", "name": slices.service_name(NS, r), "port": 8000,
         "weight": w} for r, w in (("s-0", 1), ("s-1", 1))]
    assert out["east-slice-0-primary-policy"]["spec"]["forProvider"]["manifest"]["kind"] == \
        "BackendTrafficPolicy"
    west = out["control-plane-slice-0-primary"]  # west is the control plane itself
    assert west["kind"] == "HTTPRoute"
    # Not served yet: the front door keeps the replicas apart, one cluster each.
    refs = route(first)["spec"]["rules"][0]["backendRefs"]
    assert len(refs) == 3 and all("filters" in r for r in refs)

    observed = {k: accepted(v) if "-slice-" in k and not k.endswith("-policy") else v
                for k, v in out.items()}
    second = fleet(observed)
    refs = route(second)["spec"]["rules"][0]["backendRefs"]
    assert [r["weight"] for r in refs] == [2, 1]  # each gateway's replicas' shares
    assert all("filters" not in r for r in refs)  # one Envoy cluster: health and retries
    hosts = sorted(b["endpoints"][0]["hostname"] for b in backends(second).values())
    assert host in hosts
    (policy,) = [p for p in policies(second)
                 if p["targetRefs"][0]["name"] == route(second)["metadata"]["name"]]
    assert policy["healthCheck"]["active"]["http"]["path"] == "/health"
    assert routed(second).status == TRUE


def test_the_slices_services_are_the_replicas_own():
    out = compose(replica(standalone(), name="s-0", namespace=NS))
    (svc,) = out.of_kind("Service")
    assert svc["metadata"]["name"] == slices.service_name(NS, "s-0")


def test_replicas_behind_an_endpoint_picker_are_no_slice():
    rsp = fleet(mrs=[mr("s-0", "east", "EndpointPicker"), mr("s-1", "east", "EndpointPicker"),
                     mr("s-2", "west")])
    assert not any(k.startswith("east-slice") for k in desired(rsp))
    assert "control-plane-slice-0-primary" in desired(rsp)


def test_a_replica_on_another_cluster_than_its_gateways_is_no_slice():
    rsp = fleet(mrs=[mr("s-0", "west"), mr("s-1", "east"), mr("s-2", "west")])
    east = desired(rsp)["east-slice-0-primary"]["spec"]["forProvider"]["manifest"]
    assert [r["name"] for r in east["spec"]["rules"][0]["backendRefs"]] == [
        slices.service_name(NS, "s-1")]


def test_a_slice_the_route_leaves_goes_one_reconcile_after_the_route_leaves_it():
    out = desired(fleet())
    observed = {k: accepted(v) if "-slice-" in k and not k.endswith("-policy") else v
                for k, v in out.items()}
    served = desired(fleet(observed))
    # Both east replicas gone: the slice is no longer planned, but the route Crossplane
    # observes still sends to it.
    gone = fleet({k: accepted(v) if "-slice-" in k and not k.endswith("-policy") else v
                  for k, v in served.items()}, eps=EPS[2:], mrs=MRS[2:])
    assert "east-slice-0-primary" in desired(gone)
    assert "east-slice-0-primary-policy" in desired(gone)
    later = fleet(desired(gone), eps=EPS[2:], mrs=MRS[2:])
    assert "east-slice-0-primary" not in desired(later)


def test_a_slice_in_use_stays_in_use_while_its_cluster_stops_answering():
    # A lost cluster's Objects turn unready; its replicas leave the route the control
    # plane's way, not by the route switching back to them one by one.
    out = desired(fleet())
    observed = {k: accepted(v) if "-slice-" in k and not k.endswith("-policy") else v
                for k, v in out.items()}
    served = desired(fleet(observed))
    unready = fleet(served)  # the slices' Objects observed without a Ready status
    refs = route(unready)["spec"]["rules"][0]["backendRefs"]
    assert [r["weight"] for r in refs] == [2, 1] and all("filters" not in r for r in refs)
