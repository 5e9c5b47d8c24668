"""The cycle: runs the registered steps for one reconcile of one deployment.

The plan (plan.py) decides which replicas stay, leave or need a place; the
cycle finds each one its place and keeps the counts every step reads. It
knows step kinds, never a step by name:

- `place` walks the firstAvailable levels in priority order and, at each,
  the clusters best-ranked first (the scores of SCORES that apply); a
  cluster the filters refused (their verdicts are in the state) or a budget
  refuses gives its reason, and the first one every budget admits takes the
  replica. A replica that fits nowhere gets the reasons, counted.
- `land`, `leave`, `release` and `hold` change what the budgets count, this
  deployment's replicas per cluster, and re-rank the cluster they touch.
- `snapshot` and `restore` let a trial (making room, room.py) be undone.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from function.contract.records import Cluster
from function.scheduler import budgets, reasons, scores
from function.scheduler.filters import EnginePlacement, pool_pods
from function.scheduler.framework import Attempt, CycleState, Held, Score, Tally
from function.scheduler.matching import levels

Step = tuple[Callable[[Cluster, Any], int], Any]  # a score's rank and what it reads


class Ranking:
    """Cluster names best first, kept sorted as the cycle changes one cluster
    at a time (cheaper than re-sorting a 1000-cluster fleet per replica)."""

    def __init__(self, clusters: Mapping[str, Cluster], steps: tuple[Step, ...]) -> None:
        self._clusters, self._steps = clusters, steps
        self._keys = {name: self._key(c) for name, c in clusters.items()}
        self._order = sorted(clusters, key=self._keys.__getitem__)

    def _key(self, cluster: Cluster) -> tuple:
        return tuple(-rank(cluster, read) for rank, read in self._steps) + (cluster.name,)

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def changed(self, name: str) -> None:
        """Re-rank one cluster after a replica landed on it or left it."""
        cluster = self._clusters.get(name)
        if cluster is None:
            return  # gone or unreadable: never ranked
        keys = self._keys
        self._order.pop(bisect.bisect_left(self._order, keys[name], key=keys.__getitem__))
        keys[name] = self._key(cluster)
        bisect.insort(self._order, name, key=keys.__getitem__)


@dataclass(frozen=True)
class Found:
    """Where a replica goes: the cluster, and the pool each engine runs on."""

    cluster: str
    engines: Mapping[str, EnginePlacement]


@dataclass(frozen=True)
class Saved:
    """What `restore` puts back."""

    tallies: tuple[object, ...]
    hosted: dict[str, int]
    touched: int  # how many clusters the journal held


class Cycle:
    """One deployment's reconcile: its state, the budgets' counts (started
    here, from BUDGETS) and the rankings (from SCORES, prepared on first use:
    a cycle that places nothing prepares nothing)."""

    def __init__(self, state: CycleState) -> None:
        self.state = state
        self._levels = levels(state.deployment.engines)
        self._tallies: list[Tally] = [t for t in (b.start(state) for b in budgets.BUDGETS)
                                      if t is not None]
        self._scores: tuple[Score, ...] | None = None  # those that apply, once asked
        self._prepared: dict[int, Any] = {}            # score index -> its level-free preparation
        self._by_level = False
        self._rankings: dict[int, Ranking] = {}
        self._touched: list[str] = []  # clusters landed on or left, for `restore`

    def place(self, avoid: str = "") -> Found | reasons.Shortfall:
        """The best-ranked cluster every filter and budget admits (never `avoid`,
        being cleared for another deployment), where the replica now lands; or
        why none does. firstAvailable: the first alternative that fits anywhere
        in the fleet wins before any cluster falls back to the next."""
        st, tallies = self.state, self._tallies
        refused, clusters = st.refused, st.clusters
        # One record for the whole walk, refilled per cluster: Pack's walk tries
        # thousands of full clusters in an L fleet, and a new one each cost 3%.
        attempt: Attempt | None = None
        for level in range(self._levels):
            verdicts = []
            for name in self._ranking(level):
                if name == avoid:
                    continue
                reason = refused[name]
                if not reason:
                    if attempt is None:
                        attempt = Attempt(clusters[name], level)
                    else:
                        attempt.cluster, attempt.level = clusters[name], level
                        attempt.engines = None
                    for tally in tallies:  # the first reason is the verdict
                        reason = tally.admit(attempt)
                        if reason:
                            break
                if reason:
                    verdicts.append((name, reason))
                    continue
                assert attempt is not None  # filled for every cluster the filters admit
                engines = attempt.engines or {}
                # Re-ranks `name` while the walk iterates the ranking: fine, it is over.
                self.land(Held(name, pool_pods(engines), engines=engines))
                return Found(name, engines)
        verdicts += [(name, "{is} malformed") for name in st.malformed]
        return reasons.summarize(verdicts, len(st.clusters) + len(st.malformed))

    def land(self, held: Held) -> None:
        """A replica lands on (or stays on) `held.cluster`: counted everywhere."""
        for tally in self._tallies:
            tally.reserve(held)
        self.state.hosted[held.cluster] = self.state.hosted.get(held.cluster, 0) + 1
        self._changed(held.cluster)

    def leave(self, held: Held) -> None:
        """A replica counted on `held.cluster` leaves it."""
        for tally in self._tallies:
            tally.release(held)
        self.state.hosted[held.cluster] -= 1
        self._changed(held.cluster)

    def release(self, held: Held) -> None:
        """A replica not counted as hosted (it must move) frees what it holds
        while it looks for a new place; `land` counts it again if it stays.
        Also ends a `hold`."""
        for tally in self._tallies:
            tally.release(held)
        self._changed(held.cluster)

    def hold(self, held: Held) -> None:
        """Keep what `held` (another deployment's replica, `foreign`) would take
        counted, not hosted, until `release`: making room keeps the block it
        clears from the replicas it moves (room.py)."""
        for tally in self._tallies:
            tally.reserve(held)
        self._changed(held.cluster)

    def snapshot(self) -> Saved:
        return Saved(tuple(t.snapshot() for t in self._tallies), dict(self.state.hosted),
                     len(self._touched))

    def restore(self, saved: Saved) -> None:
        """Put back what `saved` held, and re-rank every cluster touched since."""
        for tally, count in zip(self._tallies, saved.tallies):
            tally.restore(count)
        self.state.hosted.clear()
        self.state.hosted.update(saved.hosted)
        touched = set(self._touched[saved.touched:])
        del self._touched[saved.touched:]
        for name in sorted(touched):
            self._changed(name)

    def _changed(self, name: str) -> None:
        self._touched.append(name)
        for ranking in self._rankings.values():
            ranking.changed(name)

    def _ranking(self, level: int) -> Ranking:
        """The ranking at `level`: one for all levels unless a score that
        applies prepares per level (cost, with prices)."""
        if self._scores is None:
            st = self.state
            self._scores = tuple(s for s in scores.SCORES
                                 if s.strategy in (None, st.deployment.strategy)
                                 and (s.applies is None or s.applies(st)))
            self._by_level = any(s.by_level for s in self._scores)
        key = level if self._by_level else 0
        ranking = self._rankings.get(key)
        if ranking is None:
            steps = tuple((s.rank, self._prepare(i, s, level)) for i, s in enumerate(self._scores))
            ranking = self._rankings[key] = Ranking(self.state.clusters, steps)
        return ranking

    def _prepare(self, index: int, score: Score, level: int) -> Any:
        if score.prepare is None:
            return self.state
        if score.by_level:
            return score.prepare(self.state, level)
        if index not in self._prepared:
            self._prepared[index] = score.prepare(self.state, 0)
        return self._prepared[index]
