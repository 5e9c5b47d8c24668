"""The arithmetic of `make bench-traffic` (tests/test_bench_traffic.py): percentiles,
what the gateway added pair by pair, the prefix-affinity rate and requests/s, and the
rows they fill. Pure: nothing here touches the network."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between the closest ranks (numpy's default)."""
    if not values:
        raise ValueError("no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def added(through: Sequence[float], direct: Sequence[float]) -> list[float]:
    """What the path added to each pair: through minus direct, pair by pair."""
    if len(through) != len(direct):
        raise ValueError(f"{len(through)} requests through but {len(direct)} direct")
    return [t - d for t, d in zip(through, direct)]


@dataclass
class Latency:
    """Milliseconds: each path's percentiles and those of the paired difference."""

    mode: str
    pairs: int
    direct_p50: float
    direct_p99: float
    through_p50: float
    through_p99: float
    added_p50: float
    added_p99: float


def latency_row(mode: str, through_s: Sequence[float], direct_s: Sequence[float]) -> Latency:
    """Seconds in (as measured), milliseconds out."""
    ms = 1000.0
    diff = added(through_s, direct_s)
    return Latency(mode, len(diff),
                   percentile(direct_s, 50) * ms, percentile(direct_s, 99) * ms,
                   percentile(through_s, 50) * ms, percentile(through_s, 99) * ms,
                   percentile(diff, 50) * ms, percentile(diff, 99) * ms)


@dataclass
class Affinity:
    groups: int
    followers: int          # requests after each group's first
    on_first: int           # of those, served by the copy that served the group's first
    copies: int

    @property
    def rate(self) -> float:
        return self.on_first / self.followers if self.followers else float("nan")

    @property
    def random(self) -> float:
        """What choosing a copy at random gives: 1/N."""
        return 1 / self.copies


def affinity(groups: Sequence[Sequence[str]], copies: int) -> Affinity:
    """Each group: the pods that served its requests, in the order they were sent."""
    followers = on_first = 0
    for served_by in groups:
        if not served_by:
            continue
        first, rest = served_by[0], served_by[1:]
        followers += len(rest)
        on_first += sum(1 for pod in rest if pod == first)
    return Affinity(sum(1 for g in groups if g), followers, on_first, copies)


@dataclass
class Throughput:
    mode: str
    concurrency: int
    direct_requests: int
    direct_seconds: float
    direct_errors: int
    through_requests: int
    through_seconds: float
    through_errors: int

    @property
    def direct_rps(self) -> float:
        return rate(self.direct_requests, self.direct_seconds)

    @property
    def through_rps(self) -> float:
        return rate(self.through_requests, self.through_seconds)


def rate(requests: int, seconds: float) -> float:
    return requests / seconds if seconds > 0 else float("nan")
