"""Every example deployment on the example fleet, live: the replicas land where
`preview` (the offline render) says, the real kube-scheduler allocates their
claims on the chosen pools, Envoy Gateway accepts their HTTPRoutes, the
deployment becomes Ready, and every serving replica answers a real completion at
its endpoint. The examples that exercise a routing mode also show it with real
requests (modes_traffic.py: the endpoint picker's spread and prefix affinity,
prefill on a prefill engine and decode behind the sidecar, a gang through its
leader), on the same deployment rather than one applied again."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from builders import load_one
from conftest import FLEET, REPO, measure_memory
from modes_traffic import BY_EXAMPLE, answers
from traffic import host_header
from live import (MD, SERVING, Stopwatch, apply_docs, claims_on_their_pool, delete_and_wait,
                  ensure_namespace, fleet_conditions, fleet_ready, get, is_true, placement, replicas_of,
                  routes_accepted_by_envoy_gateway, wait, wait_condition)

from e2e.controlplane.core import ControlPlane
from function.tools import localrender, preview

EXAMPLES = sorted((REPO / "examples" / "deployments").glob("*.yaml"))


@pytest.fixture(scope="module")
def predict():
    """Offline placements of a deployment file on the example fleet (what
    `function-model-serving preview` prints), from the same function code."""
    tools = localrender.find_tools()
    with localrender.serve_locally() as address, tempfile.TemporaryDirectory() as tmp:
        def run(path: Path):
            stage1, _, _ = preview.render_all(tools, address, FLEET, path, None, Path(tmp))
            md = next(d for d in stage1 if d["kind"] == "ModelDeployment")
            placed = sorted(placement(d) for d in stage1 if d["kind"] == "ModelReplica")
            return md, placed
        yield run


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_an_example_serves_where_preview_places_it(cp: ControlPlane, predict, timings, path):
    md = load_one(path)
    ns, name = md["metadata"]["namespace"], md["metadata"]["name"]
    offline, predicted = predict(path)
    want = md["spec"].get("replicas", 1)
    assert predicted, f"preview places no replica of {path.name}; the example fleet must fit it"

    ensure_namespace(cp, ns)
    fleet_ready(cp)  # preview places on the whole fleet: so must the live scheduler
    clock = Stopwatch()
    apply_docs(cp, [md])
    try:
        live = wait(f"{len(predicted)} ModelReplicas of {name} placed as preview says",
                    lambda: _placed(cp, ns, name, predicted), SERVING)
        assert sorted(placement(mr) for mr in live) == predicted
        if len(predicted) == want:
            # Ready on the deployment: what `kubectl wait --for=condition=Ready` reads.
            obj = wait_condition(cp, MD, name, ns, "Ready", SERVING)
            timings[f"{path.stem}: apply to Ready (s)"] = clock.seconds()
            assert is_true(obj, "ReplicasReady") and is_true(obj, "ReplicasScheduled")
            assert obj["status"]["replicas"] == {"desired": want, "scheduled": want,
                                                 "ready": want}
        else:
            # The fleet is short: what is placed serves, the rest is explained.
            obj = wait(f"{name}'s placed replicas serving",
                       lambda: _all_serving(cp, ns, name), SERVING)
            assert obj["status"]["unscheduled"] == offline["status"]["unscheduled"]
            assert not is_true(obj, "Ready")
        measure_memory(cp)
        for mr in replicas_of(cp, ns, name):
            assert mr["status"]["phase"] == "Serving"
            assert is_true(mr, "Ready") and is_true(mr, "WorkloadsReady") and is_true(mr, "Routed")
            assert mr["status"]["endpoint"].endswith(f"/{ns}/{mr['metadata']['name']}")
            assert claims_on_their_pool(cp, mr) == []
            # Routed is Envoy Gateway's word, and every backend resolved.
            assert routes_accepted_by_envoy_gateway(cp, mr) == []
            answers(cp, mr, host_header(md))
        timings[f"{path.stem}: apply to answering (s)"] = clock.seconds()
        mode = BY_EXAMPLE.get(path.stem)
        if mode is not None:
            for mr in replicas_of(cp, ns, name):
                mode(cp, mr, timings)
    finally:
        delete_and_wait(cp, ns, name)


def _placed(cp, ns, name, predicted):
    live = replicas_of(cp, ns, name)
    if sorted(placement(mr) for mr in live) != predicted:
        raise AssertionError(f"live placements {sorted(placement(mr) for mr in live)}, "
                             f"preview's {predicted}; the fleet now:\n{fleet_conditions(cp)}")
    return live


def _all_serving(cp, ns, name):
    live = replicas_of(cp, ns, name)
    phases = {mr["metadata"]["name"]: (mr.get("status") or {}).get("phase") for mr in live}
    if set(phases.values()) != {"Serving"}:
        raise AssertionError(f"phases {phases}")
    obj = get(cp, MD, name, ns)
    if (obj.get("status") or {}).get("replicas", {}).get("ready") != len(live):
        raise AssertionError(f"status.replicas {obj.get('status', {}).get('replicas')}")
    return obj
