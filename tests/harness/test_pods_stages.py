"""The kwok stages that hand runnable pods to the harness (e2e/controlplane/pods/stages):
evaluated by kwok's own selector code (tools/kwokselect, built from the kwok module
hack/tools/kwok pins), every Pending pod matches exactly one of pod-ready (kwok
calls it Ready at once) and pod-start (Running with its pod IP, Ready left to its
probes), and a pod is pod-start's exactly when images.py maps one of its images."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from e2e.controlplane import tools
from e2e.controlplane.pods import images

ROOT = Path(__file__).resolve().parents[2]
STAGES = ROOT / "e2e" / "controlplane" / "pods" / "stages"
READY, START = STAGES / "pod-ready.yaml", STAGES / "pod-start.yaml"
GOLDEN = ROOT / "tests" / "golden"


@pytest.fixture(scope="module")
def kwokselect() -> str:
    build = subprocess.run([str(ROOT / "hack" / "build-go-tool.sh"), "kwokselect"],
                           capture_output=True, text=True, check=False)
    if build.returncode != 0:
        pytest.fail(f"hack/build-go-tool.sh kwokselect failed:\n{build.stderr}", pytrace=False)
    return build.stdout.strip()


def select(kwokselect: str, pods: list[dict]) -> dict[str, list[bool]]:
    proc = subprocess.run([kwokselect, str(READY), str(START)], input=json.dumps(pods),
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def golden_pods() -> list[tuple[str, dict]]:
    """Every pod template the composer writes (Deployments, LWS leader and worker), as Pending pods."""
    out = []

    def walk(o, where):
        if isinstance(o, dict):
            spec = o.get("spec")
            if isinstance(spec, dict) and isinstance(spec.get("containers"), list) \
                    and "metadata" in o:
                out.append((where, {"apiVersion": "v1", "kind": "Pod", "metadata": {
                    "name": "p", "namespace": "ns", "uid": "u"}, "spec": spec,
                    "status": {"phase": "Pending"}}))
            for v in o.values():
                walk(v, where)
        elif isinstance(o, list):
            for v in o:
                walk(v, where)
    for path in sorted(GOLDEN.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            walk(doc, path.name)
    return out


def test_every_pending_pod_is_taken_by_exactly_one_stage(kwokselect):
    pods = golden_pods()
    assert len(pods) > 10
    kwok_only = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b"}, "status": {
        "phase": "Pending"}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}
    near_miss = copy.deepcopy(kwok_only)
    near_miss["spec"]["containers"][0]["image"] = "vllm/vllm-openai-cpu:v0.10.1"
    pods += [("busybox", kwok_only), ("near-miss", near_miss)]
    got = select(kwokselect, [p for _, p in pods])
    for i, (where, pod) in enumerate(pods):
        runs = images.runnable(pod)
        assert (got["pod-ready"][i], got["pod-start"][i]) == (not runs, runs), (
            where, [c["image"] for c in pod["spec"]["containers"]])
    # The composer's pods do include both kinds: engines and P/D decode pods run, EPPs
    # stay kwok-only (images.LIVE); nothing is vacuous.
    assert any(got["pod-start"]) and got["pod-ready"][-2:] == [True, True]


def test_a_sidecar_alone_makes_a_pod_runnable_and_digests_match(kwokselect):
    pod = {"metadata": {"name": "d"}, "status": {"phase": "Pending"}, "spec": {
        "initContainers": [{"name": "routing-proxy", "restartPolicy": "Always",
                            "image": "ghcr.io/llm-d/llm-d-routing-sidecar:v0.7.1"}],
        "containers": [{"name": "x", "image": "docker.io/library/busybox"}]}}
    digest = {"metadata": {"name": "e"}, "status": {"phase": "Pending"}, "spec": {
        "containers": [{"name": "e", "image": "docker.io/vllm/vllm-openai@sha256:" + "0" * 64}]}}
    assert select(kwokselect, [pod, digest]) == {"pod-ready": [False, False],
                                                 "pod-start": [True, True]}


def test_the_lws_charts_manager_is_started_by_the_harness(kwokselect):
    # The pod of the chart's lws-controller-manager Deployment (a stack's controllers tier).
    manager = {"metadata": {"name": "lws-controller-manager-0", "namespace": "lws-system"},
               "status": {"phase": "Pending"}, "spec": {"containers": [
                   {"name": "manager", "image": "registry.k8s.io/lws/lws:v0.9.0",
                    "command": ["/manager"]}]}}
    assert images.runnable(manager)
    assert select(kwokselect, [manager]) == {"pod-ready": [False], "pod-start": [True]}


def test_neither_stage_touches_a_started_ready_or_deleted_pod(kwokselect):
    base = {"metadata": {"name": "e"}, "spec": {
        "containers": [{"name": "e", "image": "vllm/vllm-openai:v0.10.1.1"}]}}
    running = copy.deepcopy(base) | {"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "False"}]}}
    deleting = copy.deepcopy(base) | {"status": {"phase": "Pending"}}
    deleting["metadata"]["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    busy_ready = {"metadata": {"name": "b"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                  "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "True"}]}}
    got = select(kwokselect, [running, deleting, busy_ready])
    assert got == {"pod-ready": [False, False, False], "pod-start": [False, False, False]}


def _key(doc: dict) -> str:
    return next(e["key"] for e in doc["spec"]["selector"]["matchExpressions"]
                if "test(" in e["key"])


def test_both_stages_embed_the_image_expression_images_py_makes():
    want = json.dumps(images.image_regex())  # the jq string literal, quotes and escapes
    for path in (READY, START):
        assert want in _key(yaml.safe_load(path.read_text())), path.name


def test_pod_ready_is_kwoks_own_plus_one_expression():
    upstream_path = tools.module_dir(ROOT, "kwok", "sigs.k8s.io/kwok") / \
        "kustomize/stage/pod/fast/pod-ready.yaml"
    upstream = yaml.safe_load(upstream_path.read_text())
    ours = yaml.safe_load(READY.read_text())
    added = [e for e in ours["spec"]["selector"]["matchExpressions"] if "test(" in e["key"]]
    assert added == [{"key": _key(ours), "operator": "In", "values": ["false"]}]
    ours["spec"]["selector"]["matchExpressions"].remove(added[0])
    assert ours == upstream
