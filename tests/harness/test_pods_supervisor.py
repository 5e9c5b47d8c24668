"""The pods supervisor (e2e/controlplane/pods/supervisor.py): a kubelet's part for the
pods kwok hands over, with a fake runner and API. It starts a runnable Running pod
with an IP, writes Ready only when the probes' verdict changes, restarts an exited
container after a back-off, and stops a pod being deleted."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path

from e2e.controlplane.pods import netns, probes, supervisor
from e2e.controlplane.pods.runner import PodRunner, RunningPod

ENGINE = "vllm/vllm-openai:v0.10.1.1"


def pod(name="p", *, image=ENGINE, phase="Running", ip="10.64.0.7", deleting=False,
        period=None) -> dict:
    probe = {"httpGet": {"path": "/health", "port": 8000}}
    if period:
        probe["periodSeconds"] = period
    meta = {"name": name, "namespace": "ml-team", "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "False"}],
              "containerStatuses": [{"name": "vllm", "ready": False}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "spec": {"containers": [
        {"name": "vllm", "image": image, "readinessProbe": probe}]}, "status": status}


@dataclass
class FakeRunner:
    ok: bool = True
    exit_codes: dict[str, int] = field(default_factory=dict)
    fail_start: bool = False
    started: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    probed: int = 0
    synced: list[str] = field(default_factory=list)  # the pod names whose volumes were re-read
    fail_sync: bool = False

    def start(self, p, ip) -> RunningPod:
        if self.fail_start:
            raise RuntimeError("ConfigMap ml-team/x not found")
        self.started.append(p["metadata"]["name"])
        return RunningPod(PodRunner.pod_key(p), ip, None, Path("/nonexistent"), [])

    def exited(self, running):
        return dict(self.exit_codes)

    def probe(self, running):
        self.probed += 1
        return {"vllm": probes.Result(self.ok, "200" if self.ok else "connection refused")}

    def stop(self, running):
        self.stopped.append(running.key)

    def sync_volumes(self, p, running):
        if self.fail_sync:
            raise RuntimeError("connection refused")
        self.synced.append(p["metadata"]["name"])
        return ["cert/tls.crt"]


@dataclass
class FakeApi:
    writes: list[tuple[str, bool, str]] = field(default_factory=list)
    ready_nodes: set[str] = field(default_factory=set)
    node_reads: int = 0

    def set_ready(self, p, ready, message):
        self.writes.append((p["metadata"]["name"], ready, message))

    def node_ready(self, name):
        self.node_reads += 1
        return name in self.ready_nodes


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(**kw):
    runner, api, clock = FakeRunner(**kw), FakeApi(), Clock()
    return supervisor.Supervisor(runner, api, clock=clock), runner, api, clock


def test_a_running_pod_is_started_and_ready_is_written_once_when_its_probe_passes():
    sup, runner, api, clock = make()
    sup.observe("ADDED", pod())
    assert runner.started == ["p"]
    sup.tick()
    assert api.writes == [("p", True, "")]
    clock.now += 1  # before its period: not probed again
    sup.tick()
    assert runner.probed == 1
    clock.now += 10  # probed again, still ready: nothing written
    sup.tick()
    assert runner.probed == 2 and api.writes == [("p", True, "")]


def test_a_failing_probe_writes_not_ready_with_the_reason_and_the_period_is_the_pods():
    sup, runner, api, clock = make(ok=False)
    sup.observe("ADDED", pod(period=3))
    sup.tick()
    assert api.writes == [("p", False, "vllm: connection refused")]
    runner.ok = True
    clock.now += 3
    sup.tick()
    assert api.writes[-1] == ("p", True, "")


def test_a_running_pods_volumes_follow_their_sources_at_its_period_but_not_more_often():
    sup, runner, _, clock = make()
    sup.observe("ADDED", pod("lws", period=10))
    sup.tick()
    assert runner.synced == []  # just written by start
    clock.now += 10
    sup.tick()
    assert runner.synced == ["lws"]
    clock.now += 5
    sup.tick()
    assert runner.synced == ["lws"]
    # A 2 s probe still re-reads its sources only every VOLUME_SYNC seconds.
    fast, fast_runner, _, fast_clock = make()
    fast.observe("ADDED", pod("engine", period=2))
    fast.tick()
    for _ in range(int(supervisor.VOLUME_SYNC // 2)):
        fast_clock.now += 2
        fast.tick()
    assert fast_runner.synced == ["engine"] and fast_runner.probed == 6


def test_volumes_that_cannot_be_read_now_leave_the_pod_probed_and_are_tried_again():
    sup, runner, api, clock = make(fail_sync=True)
    sup.observe("ADDED", pod())
    clock.now += supervisor.VOLUME_SYNC
    sup.tick()
    assert api.writes == [("p", True, "")] and runner.synced == []
    runner.fail_sync = False
    clock.now += supervisor.VOLUME_SYNC
    sup.tick()
    assert runner.synced == ["p"]


def test_pods_kwok_keeps_and_pods_without_an_ip_or_being_deleted_are_not_started():
    sup, runner, api, _ = make()
    sup.observe("ADDED", pod("kwok-only", image="registry.k8s.io/pause:3.10"))
    sup.observe("ADDED", pod("pending", phase="Pending", ip=None))
    sup.observe("ADDED", pod("leaving", deleting=True))
    assert runner.started == [] and api.writes == []
    sup.observe("MODIFIED", pod("pending"))  # kwok gave it an IP and Running
    assert runner.started == ["pending"]


def test_a_pod_being_deleted_or_gone_is_stopped():
    sup, runner, _, _ = make()
    sup.observe("ADDED", pod("a"))
    sup.observe("ADDED", pod("b"))
    sup.observe("MODIFIED", pod("a", deleting=True))
    sup.observe("DELETED", pod("b"))
    assert runner.stopped == ["uid-a", "uid-b"] and sup.tracked == {}


def test_an_exited_container_makes_the_pod_not_ready_and_restarts_after_a_back_off():
    sup, runner, api, clock = make()
    sup.observe("ADDED", pod())
    sup.tick()
    runner.exit_codes = {"vllm": 1}
    sup.tick()
    assert api.writes[-1] == ("p", False, "vllm: exited with 1")
    assert runner.started == ["p"]
    clock.now += supervisor.BACKOFF_FIRST
    sup.tick()
    assert runner.started == ["p", "p"] and runner.stopped == ["uid-p"]
    runner.exit_codes = {}
    sup.tick()
    assert api.writes[-1] == ("p", True, "")
    assert sup.tracked["uid-p"].restarts == 1


def test_a_pod_that_cannot_start_is_said_not_ready_and_the_others_go_on():
    sup, runner, api, _ = make(fail_start=True)
    sup.observe("ADDED", pod("bad"))
    assert api.writes == [("bad", False, "does not start: ConfigMap ml-team/x not found")]
    runner.fail_start = False
    sup.observe("ADDED", pod("good"))
    assert runner.started == ["good"]


def test_a_pod_that_cannot_start_yet_is_retried_after_a_back_off_as_a_kubelet_retries_a_mount():
    sup, runner, api, clock = make(fail_start=True)
    sup.observe("ADDED", pod("epp"))
    sup.observe("MODIFIED", pod("epp"))  # the Ready write's own event: no second try
    sup.tick()
    assert runner.started == [] and len(api.writes) == 1
    clock.now += supervisor.BACKOFF_FIRST
    sup.tick()  # still missing: the same reason is not written again, the wait doubles
    assert len(api.writes) == 1 and sup.waiting["uid-epp"].attempts == 2
    runner.fail_start = False  # the ConfigMap arrived
    clock.now += supervisor.BACKOFF_FIRST
    sup.tick()
    assert runner.started == []
    clock.now += supervisor.BACKOFF_FIRST
    sup.tick()
    assert runner.started == ["epp"] and sup.waiting == {}
    sup.tick()
    assert api.writes[-1] == ("epp", True, "")


def test_ready_written_by_someone_else_is_rewritten_from_the_probes():
    sup, runner, api, _ = make()
    sup.observe("ADDED", pod())
    sup.tick()
    assert api.writes == [("p", True, "")]
    ours = pod()
    ours["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    sup.observe("MODIFIED", ours)  # our own write's event: nothing to do
    sup.tick()
    assert len(api.writes) == 1
    marked = pod()  # the node lifecycle controller marked it unready
    sup.observe("MODIFIED", marked)
    sup.tick()
    assert api.writes[-1] == ("p", True, "") and len(api.writes) == 2


def test_a_waiting_pod_that_is_deleted_is_not_retried():
    sup, runner, _, clock = make(fail_start=True)
    sup.observe("ADDED", pod("gone"))
    sup.observe("DELETED", pod("gone"))
    runner.fail_start = False
    clock.now += supervisor.BACKOFF_MAX
    sup.tick()
    assert runner.started == [] and sup.waiting == {}


def test_a_container_that_cannot_restart_is_retried_too():
    sup, runner, api, clock = make()
    sup.observe("ADDED", pod())
    runner.exit_codes = {"vllm": 1}
    sup.tick()
    clock.now += supervisor.BACKOFF_FIRST
    runner.fail_start = True
    sup.tick()
    assert "uid-p" in sup.waiting and api.writes[-1][1] is False
    runner.fail_start, runner.exit_codes = False, {}
    clock.now += supervisor.BACKOFF_MAX
    sup.tick()
    assert runner.started == ["p", "p"] and "uid-p" in sup.tracked


def test_a_sidecar_is_ready_with_its_pod_and_a_run_once_init_container_keeps_its_flag():
    now = datetime.datetime(2026, 11, 25, 12, 0, tzinfo=datetime.UTC)
    current = {"spec": {"initContainers": [{"name": "proxy", "restartPolicy": "Always"},
                                           {"name": "setup"}]},
               "status": {"initContainerStatuses": [{"name": "proxy", "ready": False},
                                                    {"name": "setup", "ready": False}]}}
    out = supervisor.ready_status(current, True, "", now)
    assert out["initContainerStatuses"] == [{"name": "proxy", "ready": True},
                                            {"name": "setup", "ready": False}]


def test_ready_status_sets_both_conditions_and_every_container_and_stamps_only_changes():
    now = datetime.datetime(2026, 11, 25, 12, 0, tzinfo=datetime.UTC)
    current = {"status": {
        "conditions": [{"type": "PodScheduled", "status": "True"},
                       {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                        "lastTransitionTime": "2026-11-25T11:00:00Z"}],
        "containerStatuses": [{"name": "a", "ready": False}, {"name": "b", "ready": False}]}}
    out = supervisor.ready_status(current, True, "", now)
    conds = {c["type"]: c for c in out["conditions"]}
    assert conds["PodScheduled"] == {"type": "PodScheduled", "status": "True"}
    assert conds["Ready"] == {"type": "Ready", "status": "True",
                              "lastTransitionTime": "2026-11-25T12:00:00Z"}
    assert conds["ContainersReady"]["status"] == "True"
    assert [c["ready"] for c in out["containerStatuses"]] == [True, True]
    again = supervisor.ready_status({"status": out}, True, "", now + datetime.timedelta(hours=1))
    assert {c["type"]: c for c in again["conditions"]}["Ready"]["lastTransitionTime"] == \
        "2026-11-25T12:00:00Z"
    down = supervisor.ready_status({"status": out}, False, "a: exited with 1", now)
    assert {c["type"]: c for c in down["conditions"]}["Ready"]["message"] == "a: exited with 1"


def test_stale_namespaces_are_this_clusters_whose_pod_is_gone():
    live = netns.netns_name("eu", "uid-a")
    gone = netns.netns_name("eu", "uid-b")
    other = netns.netns_name("us", "uid-c")
    assert supervisor.stale_namespaces("eu", ["uid-a"], [live, gone, other, "unrelated"]) == [gone]


def kwok_pod(name="envoy-gateway", *, ready="False", containers_ready="True",
             node="eu-west-1-cpu-1") -> dict:
    """A pod kwok keeps (its image runs nothing here), as the node lifecycle controller
    leaves it when its node goes NotReady: Ready False, ContainersReady still True."""
    p = pod(name, image="docker.io/envoyproxy/gateway:v1.9.1")
    p["spec"]["nodeName"] = node
    p["status"]["conditions"] = [{"type": "Ready", "status": ready},
                                 {"type": "ContainersReady", "status": containers_ready}]
    return p


def test_kwoks_pod_marked_unready_with_its_node_is_ready_again_once_the_node_is():
    sup, runner, api, clock = make()
    sup.observe("MODIFIED", kwok_pod())
    assert runner.started == []  # never run here
    sup.tick()  # its node still NotReady: left as the node lifecycle controller said
    assert api.writes == [] and api.node_reads == 1
    api.ready_nodes.add("eu-west-1-cpu-1")
    sup.tick()  # not looked at again before NODE_RECHECK
    assert api.writes == [] and api.node_reads == 1
    clock.now += supervisor.NODE_RECHECK
    sup.tick()
    assert api.writes == [("envoy-gateway", True, "")]
    clock.now += supervisor.NODE_RECHECK
    sup.tick()  # written once
    assert len(api.writes) == 1 and api.node_reads == 2


def test_only_kwoks_running_pods_left_unready_by_their_node_are_looked_after():
    sup, _, api, clock = make()
    api.ready_nodes.add("eu-west-1-cpu-1")
    others = [kwok_pod("ready", ready="True"),
              kwok_pod("not-started", containers_ready="False"),
              {**kwok_pod("pending"), "status": {**kwok_pod()["status"], "phase": "Pending"}}]
    for p in others:
        sup.observe("MODIFIED", p)
    gone = kwok_pod("gone")
    sup.observe("MODIFIED", gone)
    sup.observe("DELETED", gone)
    marked = kwok_pod("back")
    sup.observe("MODIFIED", marked)
    sup.observe("MODIFIED", kwok_pod("back", ready="True"))  # something else made it Ready
    clock.now += supervisor.NODE_RECHECK
    sup.tick()
    assert api.writes == [] and api.node_reads == 0
    assert supervisor.unready_by_its_node(kwok_pod())
    assert not supervisor.unready_by_its_node(pod())  # the supervisor's own: its probes say
