"""A deployment the Day-2 and fault scenarios share: single-gpu (one L4 per
replica), which fits the example fleet's prod clusters twelve times over (four L4
nodes of one GPU, two of four)."""

from __future__ import annotations

import copy

from builders import load_one
from conftest import FLEET, REPO
from live import (IC, MD, SERVING, SETTLE, apply_docs, claims_on_their_pool, ensure_namespace,
                  fleet_ready, replicas_of, wait, wait_condition)

from e2e.controlplane import stack
from e2e.controlplane.core import ControlPlane

DEPLOYMENT = load_one(REPO / "examples" / "deployments" / "single-gpu.yaml")
NS, NAME = DEPLOYMENT["metadata"]["namespace"], DEPLOYMENT["metadata"]["name"]


def inference_cluster(cp: ControlPlane, name: str) -> dict:
    """The example InferenceCluster as `make cluster` applied it: its gateway's
    address is this machine's URL for that cluster (cp.gateways), not the example's,
    and it declares the harness's serving stack (e2e/controlplane/stack.py)."""
    (ic,) = stack.declare([load_one(FLEET / f"{name}.yaml")])[0]
    local = cp.gateways.get(name)
    if local:
        ic["spec"]["gateway"]["address"] = local["url"]
    return ic


def restore(cp: ControlPlane, name: str) -> None:
    """Apply the example InferenceCluster again and wait until it takes replicas:
    Ready, and its serving stack ready (the scheduler places nothing on a cluster
    whose StackReady is not True, so the next scenario would place elsewhere)."""
    cp.apply([inference_cluster(cp, name)])
    for condition in ("Ready", "StackReady"):
        wait_condition(cp, IC, name, None, condition, SETTLE)


def deploy(cp: ControlPlane, replicas: int) -> dict:
    fleet_ready(cp)  # every cluster able to take replicas first
    md = copy.deepcopy(DEPLOYMENT)
    md["spec"]["replicas"] = replicas
    ensure_namespace(cp, NS)
    apply_docs(cp, [md])
    return ready(cp, replicas)


def ready(cp: ControlPlane, replicas: int) -> dict:
    """Wait until the deployment is Ready with `replicas` replicas serving; then
    the placement promise: the real kube-scheduler has every claim of every
    replica allocated on a node of the pool the replica was placed on."""
    def check():
        obj = wait_condition(cp, MD, NAME, NS, "Ready", 1)
        got = obj["status"]["replicas"]
        if got != {"desired": replicas, "scheduled": replicas, "ready": replicas}:
            raise AssertionError(f"status.replicas {got}")
        # Replicas on their way out (scaled down, moved) are not checked.
        for mr in replicas_of(cp, NS, NAME):
            problems = [] if mr["metadata"].get("deletionTimestamp") \
                else claims_on_their_pool(cp, mr)
            if problems:
                raise AssertionError(f"{mr['metadata']['name']}: {problems}")
        return obj
    return wait(f"{NS}/{NAME} Ready with {replicas} replicas, claims on their pools", check,
                SERVING)


def clusters_of(cp: ControlPlane) -> list[str]:
    return sorted(mr["spec"]["clusterName"] for mr in replicas_of(cp, NS, NAME))
