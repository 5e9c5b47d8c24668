"""Integer backendRef weights that give every entry exactly its share.

An entry of weight w selecting n endpoints gives each w/n of the traffic, so
its share holds whatever n is (a 95/5 canary stays 95/5 while either side
scales). With L the least common multiple of the entries' counts, w*L/n is
an integer for every endpoint and the ratios are exact. Gateway API caps a
backendRef weight at 1,000,000; when exact weights would exceed it (many
entries with coprime counts), the total is apportioned by the largest
remainder method over a budget of the cap: each endpoint gets the floor of
its exact share of the budget, and the units left go to the largest
remainders (ties by entry, then endpoint order), so no share is off by more
than one unit in a million.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

MAX_WEIGHT = 1_000_000  # Gateway API's bound on a backendRef weight


def split(entries: Sequence[tuple[int, int]], cap: int = MAX_WEIGHT) -> list[list[int]]:
    """Per entry (weight, endpoint count), the weight of each of its endpoints."""
    counts = [n for _, n in entries if n > 0]
    if not counts:
        return [[] for _ in entries]
    lcm = math.lcm(*counts)
    exact = [[w * lcm // n] * n if n else [] for w, n in entries]
    if max((x for ws in exact for x in ws), default=0) <= cap:
        return _reduced(exact)
    total = sum(w for w, n in entries if n)
    shares = [[Fraction(w, n * total) * cap] * n if n else [] for w, n in entries]
    out = [[int(s) for s in ws] for ws in shares]
    left = cap - sum(map(sum, out))
    order = sorted(((s - int(s), -i, -j) for i, ws in enumerate(shares)
                    for j, s in enumerate(ws)), reverse=True)
    for _, i, j in order[:left]:
        out[-i][-j] += 1
    return out


def _reduced(weights: list[list[int]]) -> list[list[int]]:
    """The same ratios with the smallest integers (readable routes)."""
    g = math.gcd(*(x for ws in weights for x in ws))
    return [[x // g for x in ws] for ws in weights] if g > 1 else weights
