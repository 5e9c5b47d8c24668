"""`make fault` (e2e/controlplane/faults.py): the arguments, and which recorded components
each PART/ACTION acts on, planned over a stand-in for a running control plane."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.controlplane import __main__ as cli
from e2e.controlplane import core, faults, procs
from e2e.controlplane.faults import FaultError, Request
from e2e.controlplane.pods import harness, netns

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Handle:
    name: str


class Plane:
    """What `make cluster` records for examples/fleet: us-east-1 on the control plane's own
    API server (with the harness's LWS), two remote clusters (their LWS a stack pod)."""

    def __init__(self, stopped: set[str] | None = None, extra: dict[str, str] | None = None,
                 recorded: list[str] | None = None) -> None:
        self.clusters = {"us-east-1": Handle("control-plane"), "eu-west-1": Handle("eu-west-1"),
                         "us-central-batch": Handle("us-central-batch")}
        for ic, api in (extra or {}).items():
            self.clusters[ic] = Handle(api)
        self.gateways = {ic: {"cluster": h.name, "namespace": "gateway-system",
                              "name": "inference-gateway", "address": f"127.0.0.{i + 2}",
                              "port": 8000}
                         for i, (ic, h) in enumerate(self.clusters.items())}
        apis = ["control-plane", "eu-west-1", "us-central-batch"]
        self.recorded = recorded if recorded is not None else [
            "etcd", *(f"{kind}:{a}" for a in apis for kind in (
                "apiserver", "controller-manager", "scheduler", "kwok", "pods")),
            "lws:control-plane", *(f"{kind}:{a}" for a in apis for kind in (
                "inferencepool-extension", "envoy-gateway")),
            "registry", "crossplane", "function", "provider-kubernetes"]
        self.stopped = stopped or set()

    def components(self) -> list[str]:
        return list(self.recorded)

    def running(self, component: str) -> bool:
        assert component in self.recorded, component
        return component not in self.stopped


def plan(plane: Plane, cluster: str, part: str, action: str, **kw: str) -> faults.Plan:
    return faults.plan(plane, Request(cluster, part, action, **kw))


EU = ["pods:eu-west-1", "envoy-gateway:eu-west-1", "inferencepool-extension:eu-west-1",
      "kwok:eu-west-1", "scheduler:eu-west-1", "controller-manager:eu-west-1",
      "apiserver:eu-west-1"]


# ---- what each PART touches ---------------------------------------------------------------

def test_the_cluster_kinds_are_down_s_order_of_one_cluster_s_components():
    assert faults.CLUSTER_KINDS == ("pods", "envoy-gateway", "inferencepool-extension", "lws",
                                    "kwok", "scheduler", "controller-manager", "apiserver")
    assert all(f"{k}:" in core.STOP_ORDER_PREFIXES for k in faults.CLUSTER_KINDS)


def test_a_lost_cluster_is_what_the_front_door_test_always_stopped_in_its_order():
    # e2e/tests/test_services.py lose_a_cluster: its gateway, controller-manager, API server.
    assert faults.cluster_components(Plane().components(), "eu-west-1", faults.LOST_CLUSTER) == [
        "envoy-gateway:eu-west-1", "controller-manager:eu-west-1", "apiserver:eu-west-1"]


def test_cluster_stop_stops_every_process_of_its_api_server_consumers_first():
    p = plan(Plane(), "eu-west-1", "cluster", "stop")
    assert p.api_server == "eu-west-1"
    assert list(p.components) == EU
    assert p.also == ()


def test_cluster_stop_includes_a_harness_lws_and_leaves_other_clusters_alone():
    plane = Plane()
    plane.recorded.append("lws:eu-west-1")
    p = plan(plane, "eu-west-1", "cluster", "stop")
    assert list(p.components) == EU[:3] + ["lws:eu-west-1"] + EU[3:]
    assert all(c.endswith(":eu-west-1") for c in p.components)


def test_cluster_stop_skips_what_is_stopped_already():
    p = plan(Plane(stopped={"pods:eu-west-1", "kwok:eu-west-1"}), "eu-west-1", "cluster", "stop")
    assert list(p.components) == [c for c in EU if c not in ("pods:eu-west-1", "kwok:eu-west-1")]


def test_cluster_start_starts_what_is_stopped_api_server_first():
    p = plan(Plane(stopped=set(EU)), "eu-west-1", "cluster", "start")
    assert list(p.components) == EU[::-1]
    partly = plan(Plane(stopped={"apiserver:eu-west-1", "envoy-gateway:eu-west-1"}),
                  "eu-west-1", "cluster", "start")
    assert list(partly.components) == ["apiserver:eu-west-1", "envoy-gateway:eu-west-1"]


def test_cluster_with_nothing_to_do_says_so():
    with pytest.raises(FaultError, match="nothing running on eu-west-1"):
        plan(Plane(stopped=set(EU)), "eu-west-1", "cluster", "stop")
    with pytest.raises(FaultError, match="nothing to start"):
        plan(Plane(), "eu-west-1", "cluster", "start")


def test_the_control_plane_s_own_cluster_is_refused():
    for action in faults.ACTIONS:
        with pytest.raises(FaultError, match="control plane's own API server"):
            plan(Plane(), "us-east-1", "cluster", action)


def test_inference_clusters_sharing_an_api_server_are_named():
    plane = Plane(extra={"eu-west-1b": "eu-west-1"})
    assert plan(plane, "eu-west-1", "cluster", "stop").also == ("eu-west-1b",)
    assert plan(plane, "eu-west-1b", "gateway", "stop").also == ("eu-west-1",)


def test_gateway_stop_acts_through_envoy_gateway_and_keeps_the_api_server():
    p = plan(Plane(), "eu-west-1", "gateway", "stop")
    assert p.components == ("envoy-gateway:eu-west-1",)
    assert p.keeps == ("envoy-gateway:eu-west-1", "apiserver:eu-west-1")
    # The control plane's cluster may lose its gateway (the front door) alone.
    assert plan(Plane(), "us-east-1", "gateway", "stop").components == (
        "envoy-gateway:control-plane",)


def test_gateway_start_restarts_envoy_gateway_after_its_extension_when_that_is_stopped():
    assert plan(Plane(), "eu-west-1", "gateway", "start").components == (
        "envoy-gateway:eu-west-1",)
    p = plan(Plane(stopped={"inferencepool-extension:eu-west-1", "envoy-gateway:eu-west-1"}),
             "eu-west-1", "gateway", "start")
    assert p.components == ("inferencepool-extension:eu-west-1", "envoy-gateway:eu-west-1")


def test_gateway_refusals():
    with pytest.raises(FaultError, match="nothing running: envoy-gateway:eu-west-1 is stopped"):
        plan(Plane(stopped={"envoy-gateway:eu-west-1"}), "eu-west-1", "gateway", "stop")
    with pytest.raises(FaultError, match="apiserver:eu-west-1 is stopped"):
        plan(Plane(stopped={"apiserver:eu-west-1"}), "eu-west-1", "gateway", "start")
    plane = Plane()
    del plane.gateways["eu-west-1"]
    with pytest.raises(FaultError, match="has no gateway"):
        plan(plane, "eu-west-1", "gateway", "stop")
    plane = Plane()
    plane.recorded.remove("envoy-gateway:eu-west-1")
    with pytest.raises(FaultError, match="no envoy-gateway:eu-west-1 recorded"):
        plan(plane, "eu-west-1", "gateway", "stop")


def test_engine_acts_through_the_cluster_s_pods_supervisor():
    for action in faults.ACTIONS:
        p = plan(Plane(), "eu-west-1", "engine", action, replica="r-0", namespace="ml-team")
        assert p.components == ("pods:eu-west-1",)
        assert p.request.replica == "r-0" and p.request.namespace == "ml-team"
    assert plan(Plane(), "us-east-1", "engine", "stop", replica="r").components == (
        "pods:control-plane",)


def test_engine_refusals():
    with pytest.raises(FaultError, match="PART=engine needs REPLICA"):
        plan(Plane(), "eu-west-1", "engine", "stop")
    with pytest.raises(FaultError, match="nothing running: pods:eu-west-1 is stopped"):
        plan(Plane(stopped={"pods:eu-west-1"}), "eu-west-1", "engine", "stop", replica="r")
    with pytest.raises(FaultError, match="PART=cluster ACTION=start starts it"):
        plan(Plane(stopped={"pods:eu-west-1"}), "eu-west-1", "engine", "start", replica="r")
    with pytest.raises(FaultError, match="apiserver:eu-west-1 is stopped"):
        plan(Plane(stopped={"apiserver:eu-west-1"}), "eu-west-1", "engine", "stop", replica="r")


# ---- arguments -----------------------------------------------------------------------------

def test_bad_requests_are_refused_with_what_is_allowed():
    with pytest.raises(FaultError, match=r"unknown part 'node': PART is one of engine, gateway"):
        plan(Plane(), "eu-west-1", "node", "stop")
    with pytest.raises(FaultError, match="unknown action 'restart'"):
        plan(Plane(), "eu-west-1", "gateway", "restart")
    with pytest.raises(FaultError, match=r"no InferenceCluster 'mars'.*eu-west-1, us-central"):
        plan(Plane(), "mars", "gateway", "stop")
    with pytest.raises(FaultError, match="CLUSTER=<InferenceCluster> is missing"):
        plan(Plane(), "", "gateway", "stop")
    with pytest.raises(FaultError, match="REPLICA and NAMESPACE are for PART=engine"):
        plan(Plane(), "eu-west-1", "gateway", "stop", replica="r")
    with pytest.raises(FaultError, match="REPLICA and NAMESPACE are for PART=engine"):
        plan(Plane(), "eu-west-1", "cluster", "stop", namespace="ml-team")
    # API server names are not InferenceClusters.
    with pytest.raises(FaultError, match="no InferenceCluster 'control-plane'"):
        plan(Plane(), "control-plane", "gateway", "stop")


@pytest.mark.parametrize("argv", [
    ["--cluster", "eu-west-1", "--part", "node", "--action", "stop"],
    ["--cluster", "eu-west-1", "--part", "gateway", "--action", "restart"],
    ["--part", "gateway", "--action", "stop"],
    ["--cluster", "eu-west-1", "--action", "stop"],
])
def test_the_command_line_refuses_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["fault", *argv])
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_the_command_says_what_is_wrong_and_exits_1(monkeypatch, tmp_path, capsys):
    assert cli.main(["--state-dir", str(tmp_path), "fault", "--cluster", "eu-west-1",
                     "--part", "gateway", "--action", "stop"]) == 1
    assert "no control plane" in capsys.readouterr().err
    monkeypatch.setattr(cli.ControlPlane, "load", classmethod(lambda cls, *a, **k: Plane()))
    assert cli.main(["fault", "--cluster", "mars", "--part", "gateway", "--action", "stop"]) == 1
    assert "no InferenceCluster 'mars'" in capsys.readouterr().err
    assert cli.main(["fault", "--cluster", "eu-west-1", "--part", "engine",
                     "--action", "stop"]) == 1
    assert "PART=engine needs REPLICA" in capsys.readouterr().err


def test_the_command_passes_its_request_to_run(monkeypatch):
    seen = []
    monkeypatch.setattr(cli.ControlPlane, "load", classmethod(lambda cls, *a, **k: Plane()))
    monkeypatch.setattr(faults, "run", lambda cp, req: seen.append(req))
    assert cli.main(["fault", "--cluster", "eu-west-1", "--part", "engine", "--action", "start",
                     "--replica", "r-0", "--namespace", "ml-team"]) == 0
    assert seen == [Request("eu-west-1", "engine", "start", "r-0", "ml-team")]


def _make_n(*args: str) -> list[str]:
    out = subprocess.run(["make", "-s", "-n", "fault", *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return shlex.split(out.replace("\\\n", " "))


def test_make_fault_calls_the_subcommand_with_its_variables():
    argv = _make_n("CLUSTER=eu-west-1", "PART=engine", "ACTION=stop", "REPLICA=r-0",
                   "NAMESPACE=ml-team")
    assert argv[1:] == ["-m", "e2e.controlplane", "fault", "--cluster", "eu-west-1", "--part",
                        "engine", "--action", "stop", "--replica", "r-0", "--namespace", "ml-team"]
    # NAMESPACE goes only with REPLICA; an empty variable is an empty argument, not a gap.
    assert _make_n("CLUSTER=eu-west-1", "PART=gateway", "ACTION=start", "NAMESPACE=x")[4:] == [
        "--cluster", "eu-west-1", "--part", "gateway", "--action", "start"]
    assert _make_n()[4:] == ["--cluster", "", "--part", "", "--action", ""]


# ---- engines: which ModelReplica, which containers, where they run --------------------------

def _mr(name: str, ns: str) -> dict:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"clusterName": "eu-west-1"}}


def test_choose_replica():
    items = [_mr("a-0", "ml-team"), _mr("a-0", "research"), _mr("b-0", "ml-team")]
    assert faults.choose_replica(items, "b-0", None)["metadata"]["namespace"] == "ml-team"
    assert faults.choose_replica(items, "a-0", "research")["metadata"]["namespace"] == "research"
    with pytest.raises(FaultError, match="in namespaces ml-team, research: give NAMESPACE"):
        faults.choose_replica(items, "a-0", None)
    with pytest.raises(FaultError, match="no ModelReplica research/b-0"):
        faults.choose_replica(items, "b-0", "research")


def test_engine_containers_and_where_the_supervisor_runs_them(tmp_path):
    pod = {"metadata": {"uid": "u-1", "name": "p", "namespace": "ml-team"}, "spec": {
        "initContainers": [{"name": "sidecar", "restartPolicy": "Always",
                            "image": "ghcr.io/llm-d/llm-d-routing-sidecar:v0.3.0"}],
        "containers": [{"name": "vllm", "image": "docker.io/vllm/vllm-openai:v0.10.1.1"},
                       {"name": "sglang", "image": "lmsysorg/sglang:v0.5"},
                       {"name": "epp", "image": "ghcr.io/llm-d/llm-d-inference-scheduler:v1"},
                       {"name": "other", "image": "busybox"}]}}
    assert [c["name"] for c in harness.engine_containers(pod)] == ["vllm", "sglang"]
    spec = harness.supervisor_spec("eu-west-1", kubeconfig=tmp_path / "kc", cidr="10.65.0.0/16",
                                   state_dir=tmp_path / "pods",
                                   tools={k: k.lower() for k in ("INFERENCE_SIM", "EPP",
                                                                "PD_SIDECAR", "LWS_MANAGER")},
                                   repo=ROOT).to_json()
    assert harness.state_dir_of(spec) == tmp_path / "pods"
    assert harness.container_dir(tmp_path / "pods", "eu-west-1", pod, "vllm") == (
        tmp_path / "pods" / netns.netns_name("eu-west-1", "u-1") / "containers" / "vllm")
    relative = {"argv": ["python", "--state-dir", "x/pods"], "cwd": str(tmp_path)}
    assert harness.state_dir_of(relative) == tmp_path / "x" / "pods"


# ---- processes: children, and stopping them by PID and start time --------------------------

def _child(script: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_terminate_stops_a_child_and_kills_one_that_ignores_sigterm():
    polite = _child("import time; print('ready', flush=True); time.sleep(60)")
    stubborn = _child("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                      "print('ready', flush=True); time.sleep(60)")
    try:
        assert {polite.pid, stubborn.pid} <= set(procs.children(os.getpid()))
        a, b = procs.Proc.of(polite.pid, "polite"), procs.Proc.of(stubborn.pid, "stubborn")
        assert a is not None and b is not None and a.alive() and b.alive()
        assert procs.terminate([a], group=True, timeout=10) == []
        assert not a.alive()
        assert procs.terminate([b], group=False, timeout=0.5) == [b]
        assert not b.alive()
        assert polite.pid not in procs.children(os.getpid())
        # A PID whose start time differs is another process: never signalled.
        assert not procs.Proc(os.getpid(), -1).alive()
    finally:
        for p in (polite, stubborn):
            p.kill()
            p.wait(timeout=10)
