"""What a run of `make bench-traffic` reports: its results, the machine it ran on
(a measurement on a shared, 2-CPU machine means little without its load), and the
markdown tables benchmarks/README.md records."""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.traffic.stats import Affinity, Latency, Throughput


@dataclass
class Results:
    machine: dict[str, Any] = field(default_factory=dict)
    latency: list[Latency] = field(default_factory=list)
    throughput: list[Throughput] = field(default_factory=list)
    affinity: Affinity | None = None
    control: Affinity | None = None
    notes: list[str] = field(default_factory=list)


def _f(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


def render(res: Results) -> str:
    """The markdown tables."""
    out = []
    m = res.machine
    if m:
        out.append(f"Machine: {m.get('cpu')}, {m.get('nproc')} CPUs, {m.get('memory_gib')} GiB; "
                   f"load {m.get('load_before')} before, {m.get('load_after')} after; "
                   f"{m.get('date')}.")
        out.append("")
    if res.latency:
        out += ["| mode | pairs | direct p50 | direct p99 | through p50 | through p99 "
                "| added p50 | added p99 |",
                "|---|---|---|---|---|---|---|---|"]
        for r in res.latency:
            out.append(f"| {r.mode} | {r.pairs} | {_f(r.direct_p50)} | {_f(r.direct_p99)} | "
                       f"{_f(r.through_p50)} | {_f(r.through_p99)} | **{_f(r.added_p50)}** | "
                       f"**{_f(r.added_p99)}** |")
        out += ["", "Milliseconds; added = the percentile of (through − direct) over the pairs.", ""]
    if res.throughput:
        out += ["| mode | concurrency | direct requests | direct req/s | through requests "
                "| through req/s | through / direct | errors |",
                "|---|---|---|---|---|---|---|---|"]
        for t in res.throughput:
            out.append(f"| {t.mode} | {t.concurrency} | {t.direct_requests} | {_f(t.direct_rps, 0)} | "
                       f"{t.through_requests} | {_f(t.through_rps, 0)} | "
                       f"{_f(t.through_rps / t.direct_rps)} | "
                       f"{t.direct_errors + t.through_errors} |")
        out.append("")
    if res.affinity is not None:
        out += ["| EPP, groups sent one by one | groups | requests after the first | "
                "on the first's copy | rate | random (1/N) |",
                "|---|---|---|---|---|---|"]
        for name, a in (("shared long prefix", res.affinity), ("nothing shared (control)", res.control)):
            if a is not None:
                out.append(f"| {name} | {a.groups} | {a.followers} | {a.on_first} | "
                           f"**{_f(a.rate)}** | {_f(a.random)} |")
        out.append("")
    out += [f"- {n}" for n in res.notes]
    return "\n".join(out).rstrip() + "\n"


def machine() -> dict[str, Any]:
    """nproc, the CPU model and the memory of this machine, from /proc."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {"cpu": cpu or platform.processor(), "nproc": len(os.sched_getaffinity(0)),
            "memory_gib": round(mem_kib / 1024 / 1024, 1),
            "date": time.strftime("%Y-%m-%d"), "load_before": load_average()}


def load_average() -> str:
    """The 1- and 5-minute load averages, as `1.0/0.5`."""
    one, five, _ = os.getloadavg()
    return f"{one:.1f}/{five:.1f}"
