"""`make fuzz`: run the RunFunction fuzz property for N cases (default 100,000).

Prints the count of cases, how many ended Fatal and how many produced a
desired state, and the first failure (with hypothesis' shrunk example) if
any; exits 1 on a failure. The property and strategies are tests/fuzz.py;
CI runs a bounded number of them through tests/test_fuzz.py.
"""

from __future__ import annotations

import collections
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))

from hypothesis import HealthCheck, given, settings  # noqa: E402

import fuzz  # noqa: E402


def main(total: int) -> int:
    counts: collections.Counter[str] = collections.Counter()
    start = time.monotonic()
    batch = 5000

    @settings(max_examples=batch, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(fuzz.requests())
    def run(req):
        counts[fuzz.check(req)] += 1

    while sum(counts.values()) < total:
        try:
            run()
        except Exception as exc:  # noqa: BLE001 - report the failure and stop
            print(f"FAILED after {sum(counts.values())} cases: {type(exc).__name__}: {exc}")
            return 1
        done = sum(counts.values())
        print(f"{done} cases ({counts['fatal']} fatal, {counts['desired']} desired) "
              f"in {time.monotonic() - start:.0f} s, RSS {_rss_mib():.0f} MiB", flush=True)
    print(f"fuzz: {sum(counts.values())} cases, 0 failures")
    return 0


def _rss_mib() -> float:
    """This process's resident set: a run's memory should level off (the
    function's caches are bounded), so a steady climb is a leak to chase."""
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000))
