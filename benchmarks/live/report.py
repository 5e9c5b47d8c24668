"""What a run of `make bench-live` reports, and the markdown tables it prints. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.live.procstat import Usage, kind
from benchmarks.traffic.stats import percentile

# The components issue #36 asks about, named as the harness names them.
OURS = "function"


@dataclass
class Wave:
    """One wave: what was asked, and when each deployment got there (seconds after
    the apply; None when it had not by the deadline)."""

    name: str
    replicas: int                          # replicas asked for, over all deployments
    seconds: dict[str, float | None]       # deployment -> time to converge
    deadline: float                        # how long it was given
    cpu: dict[str, float] = field(default_factory=dict)          # component -> CPU s
    reconciles: dict[str, float] = field(default_factory=dict)   # controller -> count
    function_calls: float | None = None                          # RunFunction calls
    function_seconds: float | None = None                        # waited for them
    composites: dict[str, int] = field(default_factory=dict)     # controller -> how many
    # Crossplane's watch circuit breaker: "<controller> opened" and "<controller> <result>".
    circuits: dict[str, float] = field(default_factory=dict)
    # A lost cluster's wave: the cluster, and seconds until its last ModelReplica was
    # gone (None: not by the deadline); its deployments converge once they serve elsewhere.
    lost_cluster: str = ""
    cleanup_seconds: float | None = None
    # The control plane's API server, per "verb resource [subresource]": requests, and
    # seconds answering them.
    api_requests: dict[str, float] = field(default_factory=dict)
    api_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def done(self) -> list[float]:
        return sorted(s for s in self.seconds.values() if s is not None)

    @property
    def missing(self) -> list[str]:
        return sorted(n for n, s in self.seconds.items() if s is None)

    @property
    def all_seconds(self) -> float | None:
        """Until the last deployment converged; None unless all did."""
        return max(self.done) if self.done and not self.missing else None


@dataclass
class Results:
    machine: dict[str, Any] = field(default_factory=dict)
    clusters: int = 0
    gpu_nodes: int = 0
    deployments: int = 0
    startup_seconds: float | None = None
    waves: list[Wave] = field(default_factory=list)
    peak: dict[str, Usage] = field(default_factory=dict)     # component -> at the end
    settings: dict[str, str] = field(default_factory=dict)   # what the run was told
    notes: list[str] = field(default_factory=list)


def _s(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}"


def wave_rows(waves: Sequence[Wave]) -> list[str]:
    out = ["| wave | deployments | replicas | converged | all (s) | p50 (s) | p95 (s) | max (s) |",
           "|---|---|---|---|---|---|---|---|"]
    for w in waves:
        done = w.done
        p50 = percentile(done, 50) if done else None
        p95 = percentile(done, 95) if done else None
        out.append(f"| {w.name} | {len(w.seconds)} | {w.replicas} | {len(done)}/{len(w.seconds)} "
                   f"| **{_s(w.all_seconds)}** | {_s(p50)} | {_s(p95)} | "
                   f"{_s(done[-1] if done else None)} |")
    return out


def reconcile_rows(waves: Sequence[Wave]) -> list[str]:
    names = sorted({c for w in waves for c, n in w.reconciles.items() if n})
    if not names and not any(w.circuits for w in waves):
        return []
    head = "| controller | " + " | ".join(f"{w.name}: reconciles (per composite)"
                                          for w in waves) + " |"
    out = [head, "|---|" + "---|" * len(waves)]
    for c in names:
        cells = []
        for w in waves:
            n = w.reconciles.get(c, 0.0)
            per = w.composites.get(c)
            cells.append(f"{n:.0f}" + (f" ({n / per:.1f})" if per else ""))
        out.append(f"| {c} | " + " | ".join(cells) + " |")
    for c in sorted({k.rsplit(" ", 1)[0] for w in waves for k in w.circuits}):
        out.append(f"| {c}: watch circuit opened; events dropped of all | "
                   + " | ".join(_circuit_cell(w, c) for w in waves) + " |")
    calls = [w.function_calls for w in waves]
    if any(c is not None for c in calls):
        out.append("| RunFunction calls (Crossplane's count) | "
                   + " | ".join("—" if c is None else f"{c:.0f}" for c in calls) + " |")
        out.append("| RunFunction mean latency (ms, Crossplane's clock) | " + " | ".join(
            f"{1000 * w.function_seconds / w.function_calls:.0f}"
            if w.function_calls and w.function_seconds is not None else "—" for w in waves)
            + " |")
    return out


def _circuit_cell(w: Wave, controller: str) -> str:
    """"<opened>; <dropped> of <events>" for one controller's breaker in wave `w`
    (its keys: "<controller> opened" and "<controller> <result>" per outcome)."""
    opened = f"{controller} opened"
    events = sum(n for k, n in w.circuits.items()
                 if k.startswith(controller + " ") and k != opened)
    return (f"{w.circuits.get(opened, 0):.0f}; "
            f"{w.circuits.get(f'{controller} Dropped', 0):.0f} of {events:.0f}")


API_TOP = 12


def api_rows(waves: Sequence[Wave], top: int = API_TOP) -> list[str]:
    """The control plane's API server: the requests it spent most time answering over
    the waves (busiest first), with their counts per wave."""
    spent: dict[str, float] = {}
    for w in waves:
        for k, s in w.api_seconds.items():
            spent[k] = spent.get(k, 0.0) + s
    if not spent:
        return []
    names = sorted(spent, key=lambda k: (-spent[k], k))[:top]
    out = ["| the control plane's API server: request | "
           + " | ".join(f"{w.name}: requests (s answering)" for w in waves) + " |",
           "|---|" + "---|" * len(waves)]
    for k in names:
        out.append(f"| {k} | " + " | ".join(
            f"{w.api_requests.get(k, 0.0):.0f} ({w.api_seconds.get(k, 0.0):.1f})"
            for w in waves) + " |")
    out.append("| **all requests** | " + " | ".join(
        f"{sum(w.api_requests.values()):.0f} ({sum(w.api_seconds.values()):.1f})"
        for w in waves) + " |")
    return out


def process_rows(waves: Sequence[Wave], peak: Mapping[str, Usage], top: int = 0) -> list[str]:
    """Per component: CPU seconds in each wave and peak RSS, busiest first; then per
    kind (every API server together, ...) and the total."""
    names = sorted(peak, key=lambda n: (-sum(w.cpu.get(n, 0.0) for w in waves), n))
    head = ("| process | " + " | ".join(f"CPU s, {w.name}" for w in waves)
            + " | peak RSS (MiB) |")
    sep = "|---|" + "---|" * len(waves) + "---|"
    out = [head, sep]
    shown = names[:top] if top else names
    for n in shown:
        out.append(f"| {n} | " + " | ".join(f"{w.cpu.get(n, 0.0):.1f}" for w in waves)
                   + f" | {peak[n].peak_rss_kib / 1024:.0f} |")
    if top and len(names) > top:
        rest = names[top:]
        out.append(f"| ({len(rest)} more) | "
                   + " | ".join(f"{sum(w.cpu.get(n, 0.0) for n in rest):.1f}" for w in waves)
                   + f" | {sum(peak[n].peak_rss_kib for n in rest) / 1024:.0f} |")
    out += ["", "| kind | processes | " + " | ".join(f"CPU s, {w.name}" for w in waves)
            + " | share of CPU | peak RSS (MiB) |",
            "|---|---|" + "---|" * len(waves) + "---|---|"]
    kinds: dict[str, list[str]] = {}
    for n in names:
        kinds.setdefault(kind(n), []).append(n)
    total_cpu = sum(sum(w.cpu.values()) for w in waves)
    for k in sorted(kinds, key=lambda k: (-sum(w.cpu.get(n, 0.0) for w in waves
                                              for n in kinds[k]), k)):
        members = kinds[k]
        spent = sum(w.cpu.get(n, 0.0) for w in waves for n in members)
        out.append(f"| {k} | {len(members)} | "
                   + " | ".join(f"{sum(w.cpu.get(n, 0.0) for n in members):.1f}" for w in waves)
                   + f" | {share(spent, total_cpu)} | "
                   + f"{sum(peak[n].peak_rss_kib for n in members) / 1024:.0f} |")
    out.append("| **total** | " + f"{len(names)} | "
               + " | ".join(f"{sum(w.cpu.values()):.1f}" for w in waves)
               + f" | 100% | {sum(u.peak_rss_kib for u in peak.values()) / 1024:.0f} |")
    return out


def share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "—"


def render(res: Results, top: int = 0) -> str:
    m = res.machine
    out = []
    if m:
        out += [f"Machine: {m.get('cpu')}, {m.get('nproc')} CPUs, {m.get('memory_gib')} GiB; "
                f"load {m.get('load_before')} before, {m.get('load_after')} after; "
                f"{m.get('date')}.", ""]
    out += [f"Fleet: {res.clusters} clusters (the control plane and {res.clusters - 1} remote), "
            f"each {res.gpu_nodes} nodes of 8 GPUs and a CPU node; {res.deployments} "
            f"ModelDeployments; control plane up in {_s(res.startup_seconds)} s"
            + "".join(f"; {k} {v}" for k, v in sorted(res.settings.items())) + ".", ""]
    if res.waves:
        out += wave_rows(res.waves)
        out += ["", "Seconds from the apply (or the InferenceCluster's deletion) until a "
                "deployment is Ready with every replica it asks for serving "
                "(status.replicas.ready = desired = spec.replicas), none placed on a lost "
                "cluster; p50/p95 over the deployments that converged. A lost cluster's "
                "wave counts the deployments that had a replica there."]
        out += [f"{w.name}: the last of its ModelReplicas was deleted "
                + (f"{w.cleanup_seconds:.1f} s after the InferenceCluster"
                   if w.cleanup_seconds is not None else "— some were still there at the deadline")
                + "." for w in res.waves if w.lost_cluster]
        out += [""]
        rec = reconcile_rows(res.waves)
        if rec:
            out += rec + [""]
        api = api_rows(res.waves)
        if api:
            out += api + ["", "Seconds answering: the sum of apiserver_request_duration_seconds "
                          "(latency, not CPU); watches and other long-running requests are left out.", ""]
        if res.peak:
            cpu_total = sum(sum(w.cpu.values()) for w in res.waves)
            ours = sum(w.cpu.get(OURS, 0.0) for w in res.waves)
            out += process_rows(res.waves, res.peak, top)
            out += ["", f"CPU seconds from the apply to convergence, per wave; peak RSS is "
                    f"VmHWM since the process started. The function's share of the "
                    f"control plane's CPU: **{share(ours, cpu_total)}**.", ""]
    out += [f"- {n}" for n in res.notes]
    return "\n".join(out).rstrip() + "\n"
