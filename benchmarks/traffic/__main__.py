"""`python -m benchmarks.traffic` (`make bench-traffic`): the arguments, the control
plane the modes run on, the modes in order, and the report.

With E2E_REUSE=1 it uses the control plane `make cluster` left running
(E2E_STATE_DIR, default .cluster/) and leaves it running; otherwise it starts one
from examples/fleet, as `make e2e` does, and stops it after. What it applied is
deleted, and waited for, either way. The tables go to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.traffic.deployments import NS, REPO
from benchmarks.traffic.modes import Bench
from benchmarks.traffic.report import load_average, render


@contextlib.contextmanager
def control_plane(say: Callable[[str], None]) -> Iterator[Any]:
    """The running one under E2E_REUSE=1 (left running), else a fresh one from
    examples/fleet, stopped after (as e2e/tests/conftest.py's cp fixture)."""
    from e2e.controlplane.core import DEFAULT_STATE_DIR, ControlPlane
    state = Path(os.environ.get("E2E_STATE_DIR") or DEFAULT_STATE_DIR)
    if os.environ.get("E2E_REUSE") == "1":
        say(f"using the control plane in {state}")
        yield ControlPlane.load(state)
        return
    say(f"starting a control plane from examples/fleet in {state}")
    plane = ControlPlane.up(REPO / "examples" / "fleet", state)
    try:
        yield plane
    finally:
        say("stopping the control plane")
        plane.down()


def remove_namespace(cp: Any, say: Callable[[str], None]) -> None:
    """bench-traffic on every cluster: the control plane's, and the ones the function
    created on remote clusters (it never deletes those: they may be shared)."""
    for handle in {id(h): h for h in cp.clusters.values()}.values():
        proc = cp.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=true",
                          "--timeout=240s", cluster=handle, check=False, timeout=300)
        if proc.returncode != 0:
            say(f"namespace {NS} on {handle.name}: {proc.stderr.strip()}")


MODES = ("unified", "epp", "pd")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.traffic",
                                description="What the gateway adds to a request, against "
                                            "straight to the engine pod (make bench-traffic).")
    p.add_argument("--pairs", type=int, default=2000, help="latency pairs per mode (%(default)s)")
    p.add_argument("--warmup", type=int, default=100,
                   help="warm-up requests each way per mode (%(default)s)")
    p.add_argument("--requests", type=int, default=4000,
                   help="requests each way for requests/s (%(default)s)")
    p.add_argument("--concurrency", type=int, default=4, help="(%(default)s)")
    p.add_argument("--cap-seconds", type=float, default=60.0,
                   help="at most this long per requests/s run (%(default)s)")
    p.add_argument("--groups", type=int, default=32, help="affinity groups (%(default)s)")
    p.add_argument("--per-group", type=int, default=8, help="requests per group (%(default)s)")
    p.add_argument("--modes", default=",".join(MODES), help="some of %(default)s")
    p.add_argument("--json", type=Path, help="also write the results to this file")
    args = p.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if set(modes) - set(MODES):
        p.error(f"unknown modes {sorted(set(modes) - set(MODES))}")
    for name in ("pairs", "requests", "concurrency", "groups", "per_group"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")

    def say(msg: str) -> None:
        print(f"[bench-traffic {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    from e2e.tests import live
    with control_plane(say) as cp:
        bench = Bench(cp, args, say)
        try:
            live.ensure_namespace(cp, NS)
            if "unified" in modes:
                bench.unified_and_service()
            if "epp" in modes:
                bench.endpoint_picker()
            if "pd" in modes:
                bench.prefill_decode()
        finally:
            remove_namespace(cp, say)
    bench.res.machine["load_after"] = load_average()
    print(render(bench.res))
    if args.json:
        out = asdict(bench.res)
        for key in ("affinity", "control"):
            a = getattr(bench.res, key)
            if a is not None:
                out[key] |= {"rate": a.rate, "random": a.random}
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
