"""CPU seconds and peak RSS of the harness's processes, read from /proc.

Every component `make cluster` starts is a process group whose leader's PID the
harness records (e2e/controlplane/procs.py); its members are what it spawned (an
Envoy under Envoy Gateway, say). Per member: utime + stime from /proc/<pid>/stat
(fields 14 and 15, in clock ticks) and VmHWM, the kernel's own peak resident set
size, from /proc/<pid>/status. A component's figures are the sums over its live
members: CPU is exact for members alive at both readings, and the summed peaks
bound the group's peak from above (members rarely peak at once; most components
are one process). Parsing is pure; reading takes a `root` so tests use a fake /proc.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Usage:
    """One process or a group: CPU seconds so far, peak and current RSS (KiB)."""

    cpu_seconds: float = 0.0
    peak_rss_kib: int = 0
    rss_kib: int = 0
    processes: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cpu_seconds + other.cpu_seconds, self.peak_rss_kib + other.peak_rss_kib,
                     self.rss_kib + other.rss_kib, self.processes + other.processes)


def parse_stat(text: str, ticks: int = CLOCK_TICKS) -> float:
    """utime + stime, in seconds, from the text of /proc/<pid>/stat.

    The command name (field 2) is in parentheses and may hold spaces and
    parentheses itself: the fields after it start after the *last* ')'."""
    rest = text[text.rindex(")") + 2:].split()
    # rest[0] is field 3 (state); utime is field 14, stime field 15.
    return (int(rest[11]) + int(rest[12])) / ticks


def parse_status(text: str) -> tuple[int, int]:
    """(VmHWM, VmRSS) in KiB from the text of /proc/<pid>/status (0 when absent, as
    for a kernel thread or a zombie)."""
    found = {"VmHWM:": 0, "VmRSS:": 0}
    for line in text.splitlines():
        key = line.split(":", 1)[0] + ":"
        if key in found:
            found[key] = int(line.split()[1])
    return found["VmHWM:"], found["VmRSS:"]


def read_process(pid: int, root: Path = Path("/proc"), ticks: int = CLOCK_TICKS) -> Usage | None:
    """The process's usage, or None when it is gone (or went while being read)."""
    try:
        cpu = parse_stat((root / str(pid) / "stat").read_text(), ticks)
        peak, rss = parse_status((root / str(pid) / "status").read_text())
    except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError, IndexError):
        return None
    return Usage(cpu, peak, rss, 1)


def read_group(members: Iterable[int], root: Path = Path("/proc"),
               ticks: int = CLOCK_TICKS) -> Usage:
    total = Usage()
    for pid in members:
        u = read_process(pid, root, ticks)
        if u is not None:
            total += u
    return total


def snapshot(leaders: Mapping[str, int | None], members: Callable[[int], list[int]],
             root: Path = Path("/proc"), ticks: int = CLOCK_TICKS) -> dict[str, Usage]:
    """Component -> the usage of its process group, for every component that runs
    (`leaders`: component -> its group leader's PID, None when stopped;
    `members`: a group's live PIDs, procs.group_members on this machine)."""
    return {name: read_group(members(pid), root, ticks)
            for name, pid in leaders.items() if pid is not None}


def cpu_between(before: Mapping[str, Usage], after: Mapping[str, Usage]) -> dict[str, float]:
    """CPU seconds each component spent between two snapshots; a component that
    was not running at the first counts from zero (it started in between)."""
    out = {}
    for name, u in after.items():
        start = before.get(name)
        spent = u.cpu_seconds - (start.cpu_seconds if start is not None else 0.0)
        # A member that exited in between takes its ticks with it: never negative.
        out[name] = max(0.0, spent)
    return out


def kind(component: str) -> str:
    """`apiserver:live-1` -> `apiserver`; `function` -> `function`."""
    return component.split(":", 1)[0]
