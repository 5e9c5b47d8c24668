"""The local control plane's process handling (e2e/controlplane/procs.py, waits.py):
components run in their own process group, are stopped by recorded PID (group
SIGTERM, bounded wait, SIGKILL), restart with the same command line, and every
wait is bounded and says what it waited for with the log's tail."""

from __future__ import annotations

import os
import socket
import time

import pytest

from e2e.controlplane import procs, waits
from e2e.controlplane.procs import Spec, Supervisor


@pytest.fixture
def sup(tmp_path):
    s = Supervisor(tmp_path)
    yield s
    s.stop_all(timeout=2)


def test_start_records_pid_and_log_and_stop_ends_the_whole_group(sup):
    # A parent with a child: both are in the component's process group.
    spec = Spec("apiserver:c1", ("bash", "-c", "echo hello; sleep 300 & sleep 300; wait"))
    pid = sup.start(spec)
    assert sup.pid("apiserver:c1") == pid and sup.alive("apiserver:c1")
    assert os.getpgid(pid) == pid                          # its own session and group
    waits.wait_for("two members", lambda: len(procs.group_members(pid)) >= 2, 60)
    waits.wait_for("the echo", lambda: "hello" in sup.log_path("apiserver:c1").read_text(), 60)
    members = procs.group_members(pid)
    assert sup.stop("apiserver:c1", timeout=5)
    assert procs.group_members(pid) == []
    assert all(procs.start_time(m) is None or procs.proc_stat(m)[0] == "Z" for m in members)
    assert not sup.alive("apiserver:c1")
    assert "apiserver:c1" not in sup.recorded()
    assert not sup.stop("apiserver:c1")                    # stopping twice is fine


def test_a_process_ignoring_sigterm_is_killed_after_the_bounded_wait(sup):
    sup.start(Spec("stubborn", ("bash", "-c",
                                "trap '' TERM; echo trap\"\"ped; while :; do sleep 0.1; done")))
    waits.wait_for("the trap", lambda: "trapped" in sup.log_path("stubborn").read_text(), 60)
    t = time.monotonic()
    assert sup.stop("stubborn", timeout=1)
    assert 0.9 <= time.monotonic() - t < 10
    assert not sup.alive("stubborn")


def test_a_restart_appends_to_the_log_and_gets_a_new_pid(sup):
    spec = Spec("function", ("bash", "-c", "echo r\"\"un; exec sleep 300"))
    first = sup.start(spec)
    waits.wait_for("the first run", lambda: "run\n" in sup.log_path("function").read_text(), 60)
    with pytest.raises(RuntimeError, match="already running"):
        sup.start(spec)
    sup.stop("function", timeout=5)
    second = sup.start(spec)
    assert second != first
    waits.wait_for("two runs logged",
                   lambda: sup.log_path("function").read_text().count("run\n") == 2, 60)
    assert sup.log_path("function").read_text().count("=== ") == 2


def test_a_reused_pid_is_not_mistaken_for_the_component(sup, tmp_path):
    sup.start(Spec("x", ("sleep", "300")))
    pid_file = tmp_path / "pids" / "x.pid"
    pid, started = pid_file.read_text().split()
    pid_file.write_text(f"{pid} {int(started) + 1}\n")    # another process's start time
    assert not sup.alive("x")
    pid_file.write_text(f"{pid} {started}\n")
    assert sup.alive("x")


def test_rss_and_the_environment_and_working_directory(sup, tmp_path):
    spec = Spec("env", ("bash", "-c", "echo $FOO $PWD; exec sleep 300"), env={"FOO": "bar"},
                cwd=str(tmp_path))
    sup.start(spec)
    waits.wait_for("output", lambda: f"bar {tmp_path}" in sup.log_path("env").read_text(), 60)
    assert sup.rss_kib("env") > 0
    assert Spec.from_json(spec.to_json()) == spec


def test_wait_for_returns_the_value_and_times_out_with_what_and_the_log(tmp_path):
    assert waits.wait_for("x", lambda: 42, 1) == 42
    log = tmp_path / "c.log"
    log.write_text("line one\nthe reason it failed\n")

    def never():
        raise ValueError("connection refused")

    with pytest.raises(waits.WaitTimeout) as exc:
        waits.wait_for("the thing to be ready", never, 0.3, logs=[log])
    text = str(exc.value)
    assert "waiting for the thing to be ready" in text
    assert "ValueError: connection refused" in text and "the reason it failed" in text


def test_wait_for_stops_at_once_when_the_process_died(tmp_path):
    t = time.monotonic()
    with pytest.raises(waits.ComponentDied, match="etcd exited"):
        waits.wait_for("etcd", lambda: False, 60, died=lambda: "etcd exited")
    assert time.monotonic() - t < 5


def test_free_ports_are_distinct_and_probes_see_a_listener(sup):
    taken: set[int] = set()
    a, b = waits.free_port(taken), waits.free_port(taken)
    assert a != b and {a, b} <= taken
    assert not waits.port_listening(a)
    sup.start(Spec("http", ("python3", "-m", "http.server", str(a), "--bind", "127.0.0.1")))
    waits.wait_for("the server", lambda: waits.port_listening(a), 60)
    assert waits.probe({"type": "tcp", "port": a})
    assert waits.probe({"type": "http", "url": f"http://127.0.0.1:{a}/"})
    assert waits.probe({"type": "none"})


def test_log_names_keep_the_component_name():
    assert procs.log_file_name("apiserver:eu-west-1") == "apiserver:eu-west-1.log"
    with pytest.raises(ValueError):
        procs.log_file_name("../x")


def test_a_port_held_on_every_interface_is_not_bindable():
    # How `make cluster` sees, before starting anything, that another control
    # plane's provider-kubernetes holds its fixed ports.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        assert not waits.bindable(port)
    assert waits.bindable(port)
