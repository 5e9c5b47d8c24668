"""Named filter steps: each says why a cluster cannot host a replica.

The steps mirror kube-scheduler's framework. Static steps depend only on the
deployment and the cluster, so they run once per cluster per reconcile;
the capacity step depends on the live ledger, so it runs per replica.
Each returns None when the cluster passes, or a reason phrase.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from function.capacity import member_pods
from function.scheduler.matching import EngineFit, Matcher
from function.scheduler.model import Cluster, Pool, Taint

Ledger = dict[tuple[str, str], int]  # (cluster, pool) -> nodes in use


@dataclass(frozen=True)
class Deployment:
    """What the filters need from a ModelDeployment's template spec."""

    match_labels: Mapping[str, str]
    tolerations: Sequence[Mapping[str, Any]]
    engines: Sequence[Mapping[str, Any]]


def cluster_labels(dep: Deployment, cluster: Cluster, _: Matcher) -> str | None:
    if all(cluster.labels.get(k) == v for k, v in dep.match_labels.items()):
        return None
    return "{does} not match clusterSelector"


def tolerated(taint: Taint, tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """Kubernetes toleration semantics (key/operator/value/effect)."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.effect:
            continue
        op = t.get("operator") or "Equal"
        if op == "Exists" and (not t.get("key") or t["key"] == taint.key):
            return True
        if op == "Equal" and t.get("key") == taint.key and (t.get("value") or "") == taint.value:
            return True
    return False


def untolerated(cluster: Cluster, tolerations, effects: tuple[str, ...]) -> list[Taint]:
    return [t for t in cluster.taints if t.effect in effects and not tolerated(t, tolerations)]


def taints(dep: Deployment, cluster: Cluster, _: Matcher) -> str | None:
    bad = untolerated(cluster, dep.tolerations, ("NoSchedule", "NoExecute"))
    return f"{{is}} tainted ({bad[0]})" if bad else None


def readiness(_: Deployment, cluster: Cluster, __: Matcher) -> str | None:
    return None if cluster.ready else "{is} not ready"


def device_match(dep: Deployment, cluster: Cluster, matcher: Matcher) -> str | None:
    for engine in dep.engines:
        if not any(matcher.engine_fit(engine, p) for p in cluster.pools):
            return f'{{has}} no pool matching engine "{engine["name"]}"'
    return None


# The static steps, in the order reasons are reported.
STATIC_FILTERS: tuple[Callable[[Deployment, Cluster, Matcher], str | None], ...] = (
    cluster_labels, taints, readiness, device_match)


@dataclass(frozen=True)
class EnginePlacement:
    pool: Pool
    fit: EngineFit
    nodes: int  # nodes it takes on the pool


def engine_cost(engine: Mapping[str, Any], fit: EngineFit) -> int:
    copies = int(engine.get("copies") or 1)
    return sum(member_pods(m) * copies
               for m, f in zip(engine.get("members") or [], fit.members) if f.claims)


def capacity(dep: Deployment, cluster: Cluster, matcher: Matcher, ledger: Ledger,
             budget: int = 20000, level: int | None = None,
             ) -> tuple[dict[str, EnginePlacement] | None, str | None]:
    """Place every engine of one replica on a pool of the cluster, or say why not.

    A trial ledger keeps two engines of the replica from double-booking a
    pool; a backtracking search over pool choices finds a placement whenever
    one exists. Pools are tried in the order the platform team listed them.
    An engine is never split across pools.
    """
    options = []
    for engine in dep.engines:
        opts = []
        for pool in cluster.pools:
            fit = matcher.engine_fit(engine, pool, level)
            if fit is not None:
                opts.append(EnginePlacement(pool, fit, engine_cost(engine, fit)))
        options.append(opts)
    trial: dict[str, int] = {}
    chosen: dict[str, EnginePlacement] = {}
    steps = 0

    def free(pool: Pool) -> int:
        return pool.nodes - ledger.get((cluster.name, pool.name), 0) - trial.get(pool.name, 0)

    def search(i: int) -> bool:
        nonlocal steps
        if i == len(dep.engines):
            return True
        for opt in options[i]:
            steps += 1
            if steps > budget:
                return False
            if opt.nodes <= free(opt.pool):
                trial[opt.pool.name] = trial.get(opt.pool.name, 0) + opt.nodes
                chosen[dep.engines[i]["name"]] = opt
                if search(i + 1):
                    return True
                trial[opt.pool.name] -= opt.nodes
                del chosen[dep.engines[i]["name"]]
        return False

    if search(0):
        return dict(chosen), None
    return None, _capacity_reason(dep, cluster, options, ledger)


def _capacity_reason(dep: Deployment, cluster: Cluster, options, ledger: Ledger) -> str:
    for engine, opts in zip(dep.engines, options):
        if not opts:
            return f'{{has}} no pool matching engine "{engine["name"]}"'
        roomy = [o for o in opts if o.nodes <= o.pool.nodes - ledger.get((cluster.name, o.pool.name), 0)]
        if not roomy:
            best = max(opts, key=lambda o: (o.pool.nodes - ledger.get((cluster.name, o.pool.name), 0),
                                            -opts.index(o)))
            has = max(0, best.pool.nodes - ledger.get((cluster.name, best.pool.name), 0))
            return (f'{{has}} too few free nodes on pool "{best.pool.name}" '
                    f"(needs {best.nodes}, has {has})")
    names = ", ".join(f'"{e["name"]}"' for e in dep.engines)
    return f"{{has}} too few free nodes for engines {names} together"
