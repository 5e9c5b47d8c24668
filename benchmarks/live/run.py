"""The live part of `make bench-live`: a control plane for the generated fleet, the
three waves (apply; day 2, every deployment scaled by one; the remote cluster with
the most replicas lost, its InferenceCluster deleted), and what each cost. Needs a
machine that can run `make cluster`; nothing here runs in `make test`.

Bounded: the whole run (start-up included) gets `budget` seconds, enforced by
SIGALRM, and each wave stops waiting at its deadline; the control plane is taken
down in a `finally`, whatever happened (an error, Ctrl-C, SIGTERM, the alarm).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.live import metrics, plan, procstat
from benchmarks.live.report import Results, Wave
from function.contract.api import LABEL_CLUSTER, LABEL_DEPLOYMENT

MD = "modeldeployments.modelplane.ai"
MR = "modelreplicas.modelplane.ai"
IC = "inferenceclusters.modelplane.ai"
OBJECT = "objects.kubernetes.m.crossplane.io"
WAVES = 3                   # apply, day 2 (+1 replica each), a cluster lost
# provider-kubernetes v1.2 serves its metrics on :8080 with no flag to move them
# (e2e/controlplane/core.py PROVIDER_FIXED_PORTS).
PROVIDER_METRICS = "http://127.0.0.1:8080/metrics"
TEARDOWN_RESERVE = 90.0     # seconds of the budget kept for taking the control plane down
POLL = 1.0                  # seconds between reads of the deployments


APPLY_BASE, APPLY_PER_DOC = 120.0, 3.0   # seconds a wave's kubectl apply may take


def apply_timeout(docs: int) -> float:
    return APPLY_BASE + APPLY_PER_DOC * docs


class OutOfBudget(Exception):
    pass


def _alarm(signum, frame):  # noqa: ARG001 - a signal handler's signature
    raise OutOfBudget("the run's time budget is spent")


def _terminated(signum, frame):  # noqa: ARG001
    raise SystemExit(128 + signum)


class Live:
    """One run against a started control plane `cp` (e2e.controlplane.ControlPlane)."""

    def __init__(self, cp: Any, say: Callable[[str], None]) -> None:
        self.cp = cp
        self.say = say

    # ---- what the processes and controllers spent --------------------------------

    def usage(self) -> dict[str, procstat.Usage]:
        from e2e.controlplane.procs import group_members
        leaders = {name: self.cp.sup.pid(name) for name in self.cp.components()}
        return procstat.snapshot(leaders, group_members)

    def counters(self) -> tuple[dict[str, float], tuple[float, float] | None, dict[str, float]]:
        """Reconciles per controller (ours in Crossplane, Objects in
        provider-kubernetes), Crossplane's count of RunFunction calls with the
        seconds it waited for them, and its watch circuit breaker's counts for ours."""
        port = (self.cp.state.get("ports") or {}).get("crossplane-metrics")
        xp = metrics.scrape(f"http://127.0.0.1:{port}/metrics") if port else ""
        prov = metrics.scrape(PROVIDER_METRICS)
        out = {c: n for c, n in metrics.counter_by(xp, metrics.RECONCILES, "controller").items()
               if "modelplane.ai" in c}
        out |= {f"provider-kubernetes {c}": n
                for c, n in metrics.counter_by(prov, metrics.RECONCILES, "controller").items()
                if "object" in c.lower()}
        calls = metrics.counter_by(xp, metrics.FUNCTION_CALLS, "function_name")
        waited = metrics.counter_by(xp, metrics.FUNCTION_SECONDS, "function_name")
        return (out, (sum(calls.values()), sum(waited.values())) if calls else None,
                metrics.circuits(xp))

    def api_requests(self) -> tuple[dict[str, float], dict[str, float]]:
        """The control plane's API server: requests and seconds answering them, per
        verb and resource (empty when its metrics cannot be read)."""
        try:
            text = self.cp.kubectl("get", "--raw", "/metrics", timeout=30).stdout
        except Exception as exc:  # noqa: BLE001 - the breakdown is optional
            self.say(f"reading the API server's metrics: {exc}")
            text = ""
        return (metrics.counter_by_labels(text, metrics.API_REQUESTS, metrics.API_LABELS),
                metrics.counter_by_labels(text, metrics.API_SECONDS, metrics.API_LABELS))

    def composites(self, controllers: Sequence[str], deployments: int) -> dict[str, int]:
        """How many composites each controller looks after: Crossplane's
        `composite/<plural>.<group>` and provider-kubernetes' Objects, counted in the
        benchmark's namespace (all of them for a cluster-scoped kind)."""
        def count(resource: str) -> int:
            try:
                return len(self.cp.get_json(resource, "-n", plan.NS)["items"])
            except Exception as exc:  # noqa: BLE001 - a count is optional
                self.say(f"counting {resource}: {exc}")
                return 0
        out = {}
        for c in controllers:
            if c.startswith("composite/"):
                out[c] = deployments if "modeldeployments" in c else count(c.split("/", 1)[1])
            elif c.startswith("provider-kubernetes"):
                out[c] = count(OBJECT)
        return {c: n for c, n in out.items() if n}

    # ---- a wave --------------------------------------------------------------------

    def apply(self, docs: Sequence[Mapping[str, Any]]) -> None:
        """One `kubectl apply` of every deployment, as a user would. It is given longer
        than kubectl's usual two minutes: at D = 100 it applies while Crossplane is
        already at work on the first deployments, and once took more than two minutes."""
        from e2e.tests.live import apply_docs
        apply_docs(self.cp, docs, timeout=apply_timeout(len(docs)))

    def replicas(self, *selector: str) -> list[tuple[str, str]]:
        """The benchmark's ModelReplicas (those `selector` selects: `-l`, a label
        selector) as (cluster, deployment), by the scheduler's labels."""
        items = self.cp.get_json(MR, "-n", plan.NS, *selector)["items"]
        labels = [mr["metadata"].get("labels") or {} for mr in items]
        return [(ls.get(LABEL_CLUSTER, ""), ls.get(LABEL_DEPLOYMENT, "")) for ls in labels]

    def still_on(self, cluster: str) -> set[str]:
        """Deployments with a ModelReplica still on `cluster`: read by label, so only
        those replicas travel."""
        return {d for _, d in self.replicas("-l", f"{LABEL_CLUSTER}={cluster}")}

    def watch(self, want: Mapping[str, int], t0: float, deadline: float,
              off: str | None = None) -> dict[str, float | None]:
        """Read the deployments every POLL seconds until each has converged
        (plan.converged, and with no placement left on the cluster `off`: it serves
        elsewhere) or the deadline; seconds from t0 to the read that first saw each
        converged."""
        seconds: dict[str, float | None] = {n: None for n in want}
        said = time.monotonic()
        while True:
            start = time.monotonic()
            try:
                items = self.cp.get_json(MD, "-n", plan.NS)["items"]
            except Exception as exc:  # noqa: BLE001 - a failed read is "not yet"
                self.say(f"reading the deployments: {exc}")
                items = []
            now = time.monotonic()
            by_name = {md["metadata"]["name"]: md for md in items}
            for name, replicas in want.items():
                md = by_name.get(name)
                if seconds[name] is None and plan.converged(md, replicas) \
                        and not (off and off in plan.placed_on(md)):
                    seconds[name] = now - t0
            done = sum(1 for s in seconds.values() if s is not None)
            if done == len(want) or now >= deadline:
                return seconds
            if now - said >= 15:
                self.say(f"{done}/{len(want)} converged after {now - t0:.0f}s")
                said = now
            time.sleep(max(0.0, min(POLL - (now - start), deadline - now)))

    def gone_from(self, cluster: str, t0: float, deadline: float) -> float | None:
        """Seconds from t0 until no ModelReplica is left on `cluster` (each is deleted
        once its deployment serves elsewhere, its Objects first), None if some are
        still there at the deadline; read every 5 POLLs (the wave has converged)."""
        while True:
            try:
                left = self.still_on(cluster)
            except Exception as exc:  # noqa: BLE001 - a failed read is "not yet"
                self.say(f"reading the replicas on {cluster}: {exc}")
                left = {"?"}
            now = time.monotonic()
            if not left:
                return now - t0
            if now >= deadline:
                self.say(f"replicas of {len(left)} deployments still on {cluster}")
                return None
            time.sleep(max(0.0, min(5 * POLL, deadline - now)))

    def wave(self, name: str, docs: Sequence[Mapping[str, Any]], timeout: float, *,
             lose: str | None = None) -> Wave:
        """Apply `docs` (the deployments as they should be) or, with `lose`, delete that
        InferenceCluster instead, and measure until every deployment converges again."""
        want = {md["metadata"]["name"]: int(md["spec"]["replicas"]) for md in docs}
        cpu0, (rec0, calls0, cb0), api0 = self.usage(), self.counters(), self.api_requests()
        self.say(f"{name}: " + (f"deleting InferenceCluster {lose}" if lose else
                                f"applying {len(docs)} ModelDeployments")
                 + f" ({sum(want.values())} replicas); waiting up to {timeout:.0f}s")
        t0 = time.monotonic()
        if lose:
            # As a platform team takes a cluster out of the fleet; the Objects on it go
            # with their replicas, once each has a new place.
            self.cp.kubectl("delete", IC, lose, "--wait=false")
        else:
            self.apply(docs)
        seconds = self.watch(want, t0, t0 + timeout, off=lose)
        gone = self.gone_from(lose, t0, t0 + timeout) if lose else None
        cpu1, (rec1, calls1, cb1), api1 = self.usage(), self.counters(), self.api_requests()
        rec = {c: n for c, n in metrics.delta(rec0, rec1).items() if n}
        w = Wave(name, sum(want.values()), seconds, timeout, cpu=procstat.cpu_between(cpu0, cpu1),
                 reconciles=rec, circuits={k: n for k, n in metrics.delta(cb0, cb1).items() if n},
                 lost_cluster=lose or "", cleanup_seconds=gone)
        if calls1 is not None:
            start = calls0 or (0.0, 0.0)
            w.function_calls, w.function_seconds = calls1[0] - start[0], calls1[1] - start[1]
        w.composites = self.composites(list(rec), len(docs))
        w.api_requests = metrics.short_requests(metrics.delta(api0[0], api1[0]))
        w.api_seconds = metrics.short_requests(metrics.delta(api0[1], api1[1]))
        self.say(f"{name}: {len(w.done)}/{len(docs)} converged"
                 + (f" in {w.all_seconds:.1f}s" if w.all_seconds is not None else
                    f"; not by the deadline: {', '.join(w.missing)}"))
        return w


def waves_possible(waves: int, clusters: int) -> int:
    """Of the first `waves` waves, how many a fleet of `clusters` can run: a fleet
    with no remote cluster has none to lose."""
    return waves if clusters > 1 else min(waves, 2)


def _go_on(res: Results, before: Wave, name: str, left: float) -> bool:
    """Whether the next wave runs: only after one that converged, with time left."""
    if before.missing:
        res.notes.append(f"the {name} wave was skipped: not every deployment converged "
                         f"in the {before.name} wave")
    elif left < 30:
        res.notes.append(f"the {name} wave was skipped: the time budget is spent")
    return not before.missing and left >= 30


def run(res: Results, *, clusters: int, deployments: int, seed: int, budget: float,
        wave_timeout: float, state_dir: Path, say: Callable[[str], None],
        waves: int = WAVES) -> Results:
    """Start, measure and stop; `res` is filled as far as the run got (so a failure
    still reports what was measured)."""
    from e2e.controlplane.core import ControlPlane

    t_start = time.monotonic()
    mds = plan.deployments(deployments, seed)
    nodes = plan.gpu_nodes_per_cluster(mds, clusters)
    res.clusters, res.gpu_nodes, res.deployments = clusters, nodes, deployments
    # The endpoint picker and routing sidecar the function adds stay kwok-only too:
    # every component started from here inherits this environment.
    os.environ.update(plan.FUNCTION_ENV)
    old_alarm = signal.signal(signal.SIGALRM, _alarm)
    old_term = signal.signal(signal.SIGTERM, _terminated)
    signal.alarm(max(1, int(budget - TEARDOWN_RESERVE)))
    cp = None
    # The fleet's files live as long as the control plane (its state names them).
    fleet_dir = Path(tempfile.mkdtemp(prefix="bench-live-fleet-"))
    try:
        plan.write_fleet(plan.fleet(clusters, nodes), fleet_dir)
        say(f"starting a control plane for {clusters} clusters of {nodes} 8-GPU nodes "
            f"in {state_dir}")
        cp = ControlPlane.up(fleet_dir, state_dir, say=say)
        res.startup_seconds = time.monotonic() - t_start
        live = Live(cp, say)
        from e2e.tests.live import ensure_namespace
        ensure_namespace(cp, plan.NS)

        def left() -> float:
            return budget - TEARDOWN_RESERVE - (time.monotonic() - t_start)

        first = live.wave("apply", mds, min(wave_timeout, left()))
        res.waves.append(first)
        day2 = plan.scaled(mds)
        if waves >= 2 and _go_on(res, first, "day-2", left()):
            second = live.wave("day-2 (+1 replica each)", day2, min(wave_timeout, left()))
            res.waves.append(second)
            if waves > waves_possible(waves, clusters):
                res.notes.append("the lost-cluster wave was skipped: no remote cluster")
            elif waves >= 3 and _go_on(res, second, "lost-cluster", left()):
                placed = live.replicas()
                lost = plan.cluster_to_lose(Counter(c for c, _ in placed),
                                            plan.cluster_names(clusters))
                # Measured: the deployments with a replica there (the others have
                # nothing to do, and would only pull the percentiles down).
                moved = {d for c, d in placed if c == lost}
                res.waves.append(live.wave(
                    f"{lost} lost", [md for md in day2 if md["metadata"]["name"] in moved],
                    min(wave_timeout, left()), lose=lost))
        res.peak = live.usage()
    except OutOfBudget:
        res.notes.append(f"stopped by the time budget ({budget:.0f}s, with "
                         f"{TEARDOWN_RESERVE:.0f}s kept to take it down)")
        raise
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old_alarm)
        if cp is not None:
            if not res.peak:
                res.peak = Live(cp, say).usage()
            say("taking the control plane down")
            cp.down()
        shutil.rmtree(fleet_dir, ignore_errors=True)
        signal.signal(signal.SIGTERM, old_term)
    return res
