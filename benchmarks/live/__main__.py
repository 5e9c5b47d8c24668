"""`python -m benchmarks.live` (`make bench-live`): the arguments, the run, the table.

Starts its own control plane (one per machine: it refuses while another runs) in
E2E_STATE_DIR (default .cluster/) and always takes it down. The table goes to
stdout, progress to stderr; the exit status is 0 when every deployment converged
in every wave.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from benchmarks.live.report import Results, render
from benchmarks.live.run import WAVES, OutOfBudget, run, waves_possible
from benchmarks.traffic.report import load_average, machine


def main(argv: Sequence[str] | None = None) -> int:
    from e2e.controlplane.core import DEFAULT_STATE_DIR, PROVIDER_POLL
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.live",
        description="Time to Ready of D ModelDeployments applied at once on a real local "
                    "control plane with a generated fleet, then of scaling each by one, then "
                    "of losing a cluster; reconciles, CPU seconds and peak RSS per process (make bench-live).")
    p.add_argument("-d", "--deployments", type=int, default=10, help="D (%(default)s)")
    p.add_argument("-n", "--clusters", type=int, default=6,
                   help="clusters: the control plane's own and N-1 remote (%(default)s)")
    p.add_argument("--seed", type=int, default=36, help="replica counts (%(default)s)")
    p.add_argument("--wave-timeout", type=float, default=300.0,
                   help="seconds each wave may take to converge (%(default)s)")
    p.add_argument("--budget", type=float, default=900.0,
                   help="seconds for the whole run, start-up and teardown included "
                        "(%(default)s)")
    p.add_argument("--state-dir", type=Path,
                   default=Path(os.environ.get("E2E_STATE_DIR") or DEFAULT_STATE_DIR),
                   help="the control plane's state directory (%(default)s)")
    p.add_argument("--waves", type=int, choices=range(1, WAVES + 1), default=WAVES,
                   help="run the first N waves: apply, day 2, a cluster lost (%(default)s)")
    p.add_argument("--provider-poll", metavar="DURATION",
                   help="provider-kubernetes' --poll, how often a Ready Object is observed "
                        f"again (make cluster's: {PROVIDER_POLL})")
    p.add_argument("--top", type=int, default=0,
                   help="list only the N busiest processes (0: all)")
    p.add_argument("--json", type=Path, help="also write the results to this file")
    args = p.parse_args(argv)
    if args.deployments < 1 or args.clusters < 1:
        p.error("--deployments and --clusters must be at least 1")
    if args.budget < 300:
        p.error("--budget below 300 s cannot even start a control plane")

    def say(msg: str) -> None:
        print(f"[bench-live {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    if args.provider_poll:
        if not re.fullmatch(r"[0-9]+(s|m|h)", args.provider_poll):
            p.error("--provider-poll takes a duration such as 30s, 1m or 10m")
        # Read by the harness when it starts provider-kubernetes (e2e/controlplane/core.py).
        os.environ["PROVIDER_KUBERNETES_POLL"] = args.provider_poll
    res = Results(machine=machine())
    res.settings = {"provider-kubernetes --poll": args.provider_poll or PROVIDER_POLL}
    status = 0
    try:
        run(res, clusters=args.clusters, deployments=args.deployments, seed=args.seed,
            budget=args.budget, wave_timeout=args.wave_timeout, state_dir=args.state_dir,
            say=say, waves=args.waves)
    except (OutOfBudget, Exception) as exc:  # noqa: BLE001 - report what was measured
        say(f"the run failed: {type(exc).__name__}: {str(exc)[:2000]}")
        first = (str(exc).splitlines() or [""])[0]
        res.notes.append(f"the run failed: {type(exc).__name__}: {first[:300]}")
        status = 1
    except SystemExit as exc:   # SIGTERM (run.py): the control plane is down; say so
        res.notes.append(f"terminated (exit status {exc.code}) before the run finished")
        status = exc.code if isinstance(exc.code, int) else 1
    res.machine["load_after"] = load_average()
    if any(w.missing for w in res.waves) or len(res.waves) < waves_possible(args.waves, args.clusters):
        status = 1
    print(render(res, args.top))
    if args.json:
        args.json.write_text(json.dumps(asdict(res), indent=2, default=str) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
