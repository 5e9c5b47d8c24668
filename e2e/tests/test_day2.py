"""Day 2 on the live control plane: scaling, draining, losing a cluster,
shrinking a pool, and the PrefillDecode routing layer on a real API server."""

from __future__ import annotations

import copy
import urllib.parse

import pytest
from builders import load_one
from conftest import REPO
from day2 import DEPLOYMENT, NAME, NS, clusters_of, deploy, inference_cluster, ready, restore
from frontdoor import front_route
from live import (IC, SETTLE, accepted_and_resolved, apply_docs, delete_and_wait,
                  ensure_namespace, get, items, replicas_of, serving_pods, wait, wait_condition)

from e2e.controlplane.core import ControlPlane
from function.contract.api import LABEL_REPLICA


@pytest.fixture
def deployment(cp: ControlPlane):
    yield
    delete_and_wait(cp, NS, NAME)


def test_scale_up_and_down_with_kubectl_scale(cp, deployment):
    deploy(cp, 2)
    cp.kubectl("scale", "md", NAME, "-n", NS, "--replicas=4")
    ready(cp, 4)
    assert clusters_of(cp) == ["eu-west-1", "eu-west-1", "us-east-1", "us-east-1"]
    cp.kubectl("scale", "md", NAME, "-n", NS, "--replicas=1")
    ready(cp, 1)
    # The surplus replicas go, with everything they composed.
    wait("the surplus replicas to be deleted", lambda: len(replicas_of(cp, NS, NAME)) == 1,
         SETTLE)


def claim_templates(cp: ControlPlane, mr: dict) -> list[dict]:
    """The ResourceClaimTemplates of a replica, on its cluster."""
    return items(cp, "resourceclaimtemplates", NS,
                 f"{LABEL_REPLICA}={mr['metadata']['name']}",
                 cluster=cp.cluster(mr["spec"]["clusterName"]))


def test_an_edited_device_selector_rolls_each_replica_onto_a_new_claim_template(
        cp, deployment):
    """A template's spec is immutable: an edited selector gives each replica a new
    template (a new name), its pods follow in a rolling update and the old template
    goes, on the control plane's cluster and through provider-kubernetes alike."""
    deploy(cp, 2)
    assert clusters_of(cp) == ["eu-west-1", "us-east-1"]
    before = {mr["metadata"]["name"]: [t["metadata"]["name"] for t in claim_templates(cp, mr)]
              for mr in replicas_of(cp, NS, NAME)}
    assert all(len(names) == 1 for names in before.values()), before
    md = copy.deepcopy(DEPLOYMENT)
    md["spec"]["replicas"] = 2
    (member,) = md["spec"]["template"]["spec"]["engines"][0]["members"]
    (gpu,) = member["nodeSelector"]["devices"]
    # Still every L4 (24Gi), written differently.
    gpu["selectors"][1]["cel"] = gpu["selectors"][1]["cel"].replace('"20Gi"', '"16Gi"')
    apply_docs(cp, [md])

    def rolled() -> bool:
        for mr in replicas_of(cp, NS, NAME):
            (t,) = claim_templates(cp, mr)
            name = t["metadata"]["name"]
            assert name not in before[mr["metadata"]["name"]], (mr["metadata"]["name"], name)
            (request,) = t["spec"]["spec"]["devices"]["requests"]
            assert '"16Gi"' in request["exactly"]["selectors"][1]["cel"]["expression"]
            pods = serving_pods(cp, mr)
            assert pods and all(c["resourceClaimTemplateName"] == name
                                for p in pods for c in p["spec"]["resourceClaims"]), name
        return True
    wait("each replica on a new claim template, its pods with it", rolled, SETTLE)
    assert clusters_of(cp) == ["eu-west-1", "us-east-1"]  # nothing moved
    ready(cp, 2)


SERVICE = "day2-route"


SERVICE = "day2-route"
MS = "modelservices.modelplane.ai"


def routed_hosts(cp: ControlPlane) -> set[str]:
    """The gateways the fleet route for the deployment sends to, once Envoy Gateway
    has accepted it and resolved every Backend it names."""
    selector = f"modelplane.ai/model-service={SERVICE}"
    route = front_route(cp, NS, SERVICE)  # its slices' HTTPRoutes have hostnames
    problems = accepted_and_resolved(route)
    if problems:
        raise AssertionError(problems)
    backends = {b["metadata"]["name"]: b
                for b in items(cp, "backends.gateway.envoyproxy.io", NS, selector)}
    return {(e.get("fqdn") or {}).get("hostname") or (e.get("ip") or {}).get("address")
            for rule in route["spec"]["rules"] for ref in rule.get("backendRefs") or []
            for e in backends[ref["name"]]["spec"]["endpoints"]}


def gateway_host(cp: ControlPlane, cluster: str) -> str:
    """The host of a cluster's gateway address as the InferenceCluster says it."""
    ic = get(cp, IC, cluster) or {}
    return urllib.parse.urlsplit(ic["spec"]["gateway"]["address"]).hostname or ""


def test_a_noexecute_taint_drains_the_cluster_and_replaces_its_replica(cp, deployment):
    """The drained cluster's replica moves, and the fleet route (a ModelService over
    the deployment) leaves the drained cluster's gateway as it does."""
    deploy(cp, 2)
    assert clusters_of(cp) == ["eu-west-1", "us-east-1"]
    (remote,) = [mr for mr in replicas_of(cp, NS, NAME) if mr["spec"]["clusterName"] == "eu-west-1"]
    apply_docs(cp, [{"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService",
                     "metadata": {"name": SERVICE, "namespace": NS},
                     "spec": {"endpoints": [{"selector": {"matchLabels": {
                         "modelplane.ai/deployment": NAME}}}]}}])
    both = {gateway_host(cp, "eu-west-1"), gateway_host(cp, "us-east-1")}
    wait("the fleet route to send to both clusters' gateways",
         lambda: routed_hosts(cp) == both, SETTLE)
    tainted = inference_cluster(cp, "eu-west-1")
    tainted["spec"]["taints"] = [{"key": "maintenance", "effect": "NoExecute"}]
    cp.apply([tainted])
    try:
        wait("the replica on eu-west-1 to move to us-east-1",
             lambda: clusters_of(cp) == ["us-east-1", "us-east-1"], SETTLE)
        ready(cp, 2)
        wait("the drained replica's pods to leave eu-west-1",
             lambda: serving_pods(cp, remote) == [], SETTLE)
        wait("the fleet route to leave the drained cluster's gateway",
             lambda: routed_hosts(cp) == {gateway_host(cp, "us-east-1")}, SETTLE)
    finally:
        cp.kubectl("delete", MS, SERVICE, "-n", NS, "--ignore-not-found", "--wait=false")
        restore(cp, "eu-west-1")


def test_deleting_an_inference_cluster_recreates_its_replicas_elsewhere(cp, deployment):
    deploy(cp, 2)
    before = get(cp, IC, "eu-west-1")
    assert before is not None
    cp.kubectl("delete", IC, "eu-west-1", "--wait=true")
    try:
        wait("the replica of the deleted cluster to be re-created on us-east-1",
             lambda: clusters_of(cp) == ["us-east-1", "us-east-1"], SETTLE)
        ready(cp, 2)
    finally:
        restore(cp, "eu-west-1")


def test_a_pool_shrunk_below_its_usage_re_places_its_youngest_replica(cp, deployment):
    deploy(cp, 3)
    assert clusters_of(cp) == ["eu-west-1", "eu-west-1", "us-east-1"]
    # Spread, ties by name: two replicas on eu-west-1's l4-4x pool, one GPU each of
    # its eight. Shrunk to one node offering one L4, the pool holds one of them.
    shrunk = inference_cluster(cp, "eu-west-1")
    (l4,) = [p for p in shrunk["spec"]["nodePools"] if p["name"] == "l4-4x"]
    l4["nodes"] = 1
    (gpu,) = [d for d in l4["devices"] if d["name"] == "gpu"]
    gpu["count"] = 1
    oldest = min((mr for mr in replicas_of(cp, NS, NAME)
                  if mr["spec"]["clusterName"] == "eu-west-1"),
                 key=lambda mr: mr["metadata"]["creationTimestamp"] + mr["metadata"]["name"])
    cp.apply([shrunk])
    try:
        wait("the overcommitted l4-4x pool of eu-west-1 to be repaired",
             lambda: clusters_of(cp) == ["eu-west-1", "us-east-1", "us-east-1"], SETTLE)
        ready(cp, 3)
        kept = [mr for mr in replicas_of(cp, NS, NAME) if mr["spec"]["clusterName"] == "eu-west-1"]
        assert [mr["metadata"]["uid"] for mr in kept] == [oldest["metadata"]["uid"]]
    finally:
        restore(cp, "eu-west-1")


def test_prefill_decode_composes_pool_picker_sidecar_and_route(cp: ControlPlane):
    md = load_one(REPO / "examples" / "deployments" / "prefill-decode.yaml")
    ns, name = md["metadata"]["namespace"], md["metadata"]["name"]
    ensure_namespace(cp, ns)
    apply_docs(cp, [md])
    try:
        wait_condition(cp, "modeldeployments.modelplane.ai", name, ns, "Ready", 300)
        for mr in replicas_of(cp, ns, name):
            on = mr["spec"]["clusterName"]
            (pool,) = items(cp, "inferencepools.inference.networking.k8s.io", ns, cluster=on)
            routes = items(cp, "httproutes.gateway.networking.k8s.io", ns, cluster=on)
            assert any(ref.get("kind") == "InferencePool" and ref["name"] == pool["metadata"]["name"]
                       for r in routes for rule in r["spec"]["rules"]
                       for ref in rule.get("backendRefs") or []), routes
            # The endpoint picker runs, and the pool sends to it.
            picker = pool["spec"]["endpointPickerRef"]["name"]
            assert get(cp, "service", picker, ns, cluster=on) is not None
            deployments = items(cp, "deployments", ns, cluster=on)
            assert any(d["status"].get("availableReplicas") for d in deployments
                       if "epp" in d["metadata"]["name"] or "picker" in d["metadata"]["name"]), \
                [d["metadata"]["name"] for d in deployments]
            # Decode pods carry the routing sidecar (a native sidecar).
            roles = {}
            for pod in serving_pods(cp, mr):
                roles.setdefault(pod["metadata"]["labels"].get("llm-d.ai/role"), []).append(pod)
            decode = roles.get("decode") or []
            assert decode, roles.keys()
            for pod in decode:
                sidecars = [c for c in pod["spec"].get("initContainers") or []
                            if c.get("restartPolicy") == "Always"]
                assert sidecars, pod["metadata"]["name"]
    finally:
        delete_and_wait(cp, ns, name)
