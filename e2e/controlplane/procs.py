"""Processes the harness starts: one process group each, a log, a recorded PID.

Every component runs in its own session (so its process group is its PID and
outlives the `up` command that started it), with stdout and stderr appended to
`logs/<component>.log` and its PID (with the kernel's start time, so a reused
PID is never mistaken for it) in `pids/<component>.pid`. Stopping sends SIGTERM
to the group, waits a bounded time for every member to exit, then SIGKILLs the
group and waits again. Nothing is ever found or killed by name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Spec:
    """How to (re)start a component: argv, extra environment, working directory."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None

    def to_json(self) -> dict:
        return {"name": self.name, "argv": list(self.argv), "env": dict(self.env),
                "cwd": self.cwd}

    @classmethod
    def from_json(cls, data: Mapping) -> Spec:
        return cls(name=data["name"], argv=tuple(data["argv"]), env=dict(data.get("env") or {}),
                   cwd=data.get("cwd"))


def log_file_name(component: str) -> str:
    """`apiserver:eu-west-1` -> `apiserver:eu-west-1.log` (a colon is a legal file name character)."""
    if not component or "/" in component or component.startswith("."):
        raise ValueError(f"bad component name {component!r}")
    return f"{component}.log"


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, pgid, starttime) of a process from /proc, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name is in parentheses and may hold spaces or parentheses.
    rest = raw[raw.rindex(")") + 2:].split()
    # rest[0] is field 3 (state); pgrp is field 5, starttime field 22.
    return rest[0], int(rest[2]), int(rest[19])


def start_time(pid: int) -> int | None:
    st = proc_stat(pid)
    return None if st is None else st[2]


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        st = proc_stat(int(entry.name))
        if st is not None and st[1] == pgid and st[0] not in ("Z", "X"):
            out.append(int(entry.name))
    return out


def children(pid: int) -> list[int]:
    """Live (non-zombie) processes whose parent is `pid`: what a recorded component
    started itself (Envoy Gateway's Envoys, the pods supervisor's containers)."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry.name}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        rest = raw[raw.rindex(")") + 2:].split()
        # rest[0] is field 3 (state), rest[1] field 4 (ppid).
        if int(rest[1]) == pid and rest[0] not in ("Z", "X"):
            out.append(int(entry.name))
    return sorted(out)


@dataclass(frozen=True)
class Proc:
    """One process that no component records (a component's child), by PID and kernel
    start time, so a reused PID is never mistaken for it; `what` says what it is."""

    pid: int
    started: int
    what: str = ""

    @classmethod
    def of(cls, pid: int, what: str = "") -> Proc | None:
        st = proc_stat(pid)
        return None if st is None else cls(pid, st[2], what)

    def alive(self) -> bool:
        st = proc_stat(self.pid)
        return st is not None and st[0] not in ("Z", "X") and st[2] == self.started


def terminate(procs: Sequence[Proc], *, group: bool, timeout: float = 10.0) -> list[Proc]:
    """SIGTERM each process (its whole process group when `group` and it leads one), wait
    up to `timeout`, SIGKILL what is left and wait again; those that needed SIGKILL.
    RuntimeError when one outlives SIGKILL."""
    def send(sig: int) -> None:
        for p in procs:
            st = proc_stat(p.pid)
            if st is None or not p.alive():
                continue
            try:
                if group and st[1] == p.pid:  # it leads its own session (start_new_session)
                    os.killpg(p.pid, sig)
                else:
                    os.kill(p.pid, sig)
            except ProcessLookupError:
                pass

    def gone_within(seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while any(p.alive() for p in procs):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    send(signal.SIGTERM)
    if gone_within(timeout):
        return []
    killed = [p for p in procs if p.alive()]
    send(signal.SIGKILL)
    if not gone_within(10.0):
        raise RuntimeError("outlived SIGKILL: " + ", ".join(
            p.what or str(p.pid) for p in procs if p.alive()))
    return killed


class Supervisor:
    """Starts and stops components; the PID files are the only record."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.logs = self.state_dir / "logs"
        self.pids = self.state_dir / "pids"
        self._children: dict[int, subprocess.Popen] = {}

    def log_path(self, component: str) -> Path:
        return self.logs / log_file_name(component)

    def _pid_path(self, component: str) -> Path:
        return self.pids / f"{component}.pid"

    def start(self, spec: Spec) -> int:
        if self.alive(spec.name):
            raise RuntimeError(f"{spec.name} is already running (pid {self.pid(spec.name)})")
        self.logs.mkdir(parents=True, exist_ok=True)
        self.pids.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(spec.env)
        log = open(self.log_path(spec.name), "ab")
        try:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            log.write(f"\n=== {stamp} start {spec.name}: {' '.join(spec.argv)}\n".encode())
            log.flush()
            proc = subprocess.Popen(list(spec.argv), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, env=env, cwd=spec.cwd,
                                    start_new_session=True)
        finally:
            log.close()
        self._children[proc.pid] = proc
        st = start_time(proc.pid)
        self._pid_path(spec.name).write_text(f"{proc.pid} {st if st is not None else 0}\n")
        return proc.pid

    def pid(self, component: str) -> int | None:
        """The recorded PID if that very process (same start time) still runs."""
        path = self._pid_path(component)
        try:
            pid_s, start_s = path.read_text().split()
            pid, started = int(pid_s), int(start_s)
        except (FileNotFoundError, ValueError):
            return None
        self._reap(pid)
        st = proc_stat(pid)
        if st is None or st[0] in ("Z", "X") or (started and st[2] != started):
            return None
        return pid

    def alive(self, component: str) -> bool:
        return self.pid(component) is not None

    def recorded(self) -> list[str]:
        """Every component with a PID file (running or not)."""
        if not self.pids.is_dir():
            return []
        return sorted(p.name[:-4] for p in self.pids.glob("*.pid"))

    def exit_status(self, component: str) -> int | None:
        """The exit code of a component this process started and that has exited."""
        path = self._pid_path(component)
        try:
            pid = int(path.read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None
        proc = self._children.get(pid)
        return None if proc is None else proc.poll()

    def _reap(self, pid: int) -> None:
        proc = self._children.get(pid)
        if proc is not None:
            proc.poll()

    def _wait_group_gone(self, pgid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            self._reap(pgid)
            if not group_members(pgid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def stop(self, component: str, timeout: float = 20.0) -> bool:
        """SIGTERM the component's process group, wait up to `timeout`, then SIGKILL.

        Returns True when something was running. The PID file is removed once
        every member of the group is gone."""
        pid = self.pid(component)
        was_running = pid is not None
        if pid is not None:
            # start_new_session: the group id is the leader's PID.
            for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(pid, sig)
                except ProcessLookupError:
                    break
                if self._wait_group_gone(pid, wait):
                    break
            else:
                raise RuntimeError(f"{component} (process group {pid}) survived SIGKILL: "
                                   f"members {group_members(pid)}")
            self._reap(pid)
            self._children.pop(pid, None)
        self._pid_path(component).unlink(missing_ok=True)
        return was_running

    def stop_all(self, order: Sequence[str] = (), timeout: float = 20.0) -> list[str]:
        """Stop `order` first (in that order), then every other recorded component."""
        names = list(order) + [n for n in self.recorded() if n not in order]
        stopped = []
        for name in names:
            if self.stop(name, timeout=timeout):
                stopped.append(name)
        return stopped

    def rss_kib(self, component: str) -> int:
        """Sum of VmRSS over the live members of the component's process group."""
        pid = self.pid(component)
        if pid is None:
            return 0
        total = 0
        for member in group_members(pid):
            try:
                for line in Path(f"/proc/{member}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except (FileNotFoundError, ProcessLookupError):
                pass
        return total


def tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])
