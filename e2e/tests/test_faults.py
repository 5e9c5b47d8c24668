"""Faults on the live control plane. Under each, nothing the spec still wants is
deleted (the UIDs of every replica and every object it composed, on every
cluster, are the same before and after), a condition says what is wrong where
one can, and the deployment is Ready again once the fault is gone."""

from __future__ import annotations

import contextlib
import copy

import pytest
import yaml
from day2 import DEPLOYMENT, NAME, NS, deploy, inference_cluster, ready
from live import (IC, MD, MR, OBJECT, SETTLE, apply_docs, condition, delete_and_wait, get,
                  is_true, items, replicas_of, uids, wait, wait_condition)

from e2e.controlplane.core import ControlPlane
from function.contract.api import LABEL_DEPLOYMENT

COMPOSED = ("deployments", "services", "resourceclaimtemplates",
            "httproutes.gateway.networking.k8s.io", "pods", "resourceclaims")


def everything(cp: ControlPlane) -> dict:
    out = uids(cp, NS, COMPOSED)
    # The deployment's own replicas and Objects (labelled with its name).
    for kind in (MR, OBJECT):
        for obj in items(cp, kind, NS, f"{LABEL_DEPLOYMENT}={NAME}"):
            out[("control-plane", kind, obj["metadata"]["name"])] = obj["metadata"]["uid"]
    return out


@contextlib.contextmanager
def stopped(cp: ControlPlane, component: str):
    """The component stopped for the block, started again (and ready) after it."""
    cp.stop(component)
    try:
        yield
    finally:
        cp.start(component)


@pytest.fixture
def serving(cp: ControlPlane):
    """Two replicas serving (one local, one remote), and what they composed. Deleted
    after, even when this setup fails: the next scenario must not inherit its replicas
    (one misplaced deployment once failed every later setup here)."""
    try:
        deploy(cp, 2)
        before = everything(cp)
        assert any(k[1] == OBJECT for k in before) and any(k[1] == "pods" for k in before), \
            sorted(mr["spec"]["clusterName"] for mr in replicas_of(cp, NS, NAME))
        yield before
    finally:
        delete_and_wait(cp, NS, NAME)


def test_the_function_server_killed_mid_reconcile_deletes_nothing(cp, serving):
    # Ask for a reconcile, and kill the server while Crossplane runs it.
    cp.kubectl("annotate", MD, NAME, "-n", NS, "e2e.modelplane.ai/poke=1", "--overwrite")
    with stopped(cp, "function"):
        wait_condition(cp, MD, NAME, NS, "Synced", SETTLE, status="False")
    ready(cp, 2)
    assert everything(cp) == serving


def test_a_remote_api_server_down_and_back_deletes_nothing(cp, serving):
    with stopped(cp, "apiserver:eu-west-1"):
        def remote_object_unsynced():
            objs = [o for o in cp.get_json(OBJECT, "-n", NS)["items"]
                    if condition(o, "Synced").get("status") == "False"]
            if not objs:
                raise AssertionError("every Object still Synced")
            return objs
        wait("provider-kubernetes to notice eu-west-1 is down", remote_object_unsynced, SETTLE)
        # The replica is kept where it is: the cluster still exists.
        assert sorted(mr["spec"]["clusterName"] for mr in replicas_of(cp, NS, NAME)) == \
            ["eu-west-1", "us-east-1"]
    ready(cp, 2)
    assert everything(cp) == serving


def test_provider_kubernetes_down_while_the_deployment_scales_deletes_nothing(cp, serving):
    with stopped(cp, "provider-kubernetes"):
        cp.kubectl("scale", "md", NAME, "-n", NS, "--replicas=3")
        wait("the third replica to be composed", lambda: len(replicas_of(cp, NS, NAME)) == 3,
             SETTLE)
    ready(cp, 3)
    after = everything(cp)
    assert {k: v for k, v in after.items() if k in serving} == serving


def test_a_selector_edited_into_invalid_cel_keeps_every_replica(cp, serving):
    md = copy.deepcopy(DEPLOYMENT)
    md["spec"]["replicas"] = 2
    selectors = md["spec"]["template"]["spec"]["engines"][0]["members"][0]["nodeSelector"]
    selectors["devices"][0]["selectors"][0]["cel"] = 'device.attributes["gpu.nvidia.com"].productName =='
    apply_docs(cp, [md])
    try:
        obj = wait_condition(cp, MD, NAME, NS, "ReplicasScheduled", SETTLE, status="False")
        assert condition(obj, "ReplicasScheduled")["reason"] == "InvalidSelector"
        # The replicas keep the selector they were placed with: the scheduler
        # passes nothing on until the selector compiles.
        placed_with = _first_selector(DEPLOYMENT["spec"]["template"]["spec"]["engines"][0]
                                      ["members"][0]["nodeSelector"]["devices"][0])
        for mr in replicas_of(cp, NS, NAME):
            member = mr["spec"]["engines"][0]["members"][0]
            assert _first_selector(member["deviceRequests"][0]) == placed_with
            assert is_true(mr, "Ready")
        assert everything(cp) == serving
    finally:
        fixed = copy.deepcopy(DEPLOYMENT)
        fixed["spec"]["replicas"] = 2
        apply_docs(cp, [fixed])
    ready(cp, 2)
    assert everything(cp) == serving


def test_a_malformed_inference_cluster_is_refused_at_admission_and_deletes_nothing(cp, serving):
    """As far as admission lets one in: it lets none of these in, so the
    scheduler's own check (a malformed cluster is skipped with a warning,
    tests/test_scheduler_rules.py) never has to act here."""
    def broken(edit):
        ic = inference_cluster(cp, "us-east-1")
        ic["metadata"] = {"name": "broken", "labels": {"tier": "prod"}}
        edit(ic["spec"]["nodePools"][0])
        return ic
    for edit in (lambda p: p["devices"][0].pop("deviceClassName"),
                 lambda p: p.update(name="Not_A_Label"),
                 lambda p: p["devices"][0].update(claim="Sometimes"),
                 lambda p: p["devices"][0].update(deviceClassName="UPPER/case")):
        proc = cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(broken(edit)), check=False)
        assert proc.returncode != 0 and "is invalid" in proc.stderr, proc.stdout
    assert get(cp, IC, "broken") is None
    cp.kubectl("annotate", MD, NAME, "-n", NS, "e2e.modelplane.ai/poke=2", "--overwrite")
    ready(cp, 2)
    assert everything(cp) == serving


def test_crossplane_restarted_deletes_nothing(cp, serving):
    cp.restart("crossplane")
    ready(cp, 2)
    assert everything(cp) == serving


def _first_selector(request: dict) -> str:
    return request["selectors"][0]["cel"]
