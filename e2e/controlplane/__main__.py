"""`python -m e2e.controlplane up|down|status|stop|start|env|fault` (make cluster, cluster-down, fault)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from e2e.controlplane import faults
from e2e.controlplane.core import (DEFAULT_STATE_DIR, REPO, ControlPlane, ControlPlaneError,
                                   stop_everything)
from e2e.controlplane.fleet import FleetError
from e2e.controlplane.tools import ToolsError
from e2e.controlplane.waits import ComponentDied, WaitTimeout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.controlplane",
        description="A real local Crossplane control plane on loopback, without Docker: etcd, "
                    "one kube-apiserver per cluster (with controller-manager, scheduler, kwok "
                    "fake nodes, LeaderWorkerSet, Envoy Gateway with each cluster's Envoy on a "
                    "loopback address of its own) and our InferencePool extension server, "
                    "Crossplane core with the "
                    "packages installed from a local registry, the function and "
                    "provider-kubernetes as local processes.")
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                        help="where certificates, kubeconfigs, logs, PIDs and ports live "
                             "(default: %(default)s)")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start everything and leave it running")
    up.add_argument("--fleet", type=Path, default=REPO / "examples" / "fleet",
                    help="directory of InferenceCluster manifests (default: examples/fleet)")
    sub.add_parser("down", help="stop every recorded process (process groups; SIGTERM, then "
                                "SIGKILL after a bounded wait)")
    sub.add_parser("status", help="which components run, their ports and memory")
    sub.add_parser("env", help="print `export KUBECONFIG=...`")
    for name in ("stop", "start"):
        p = sub.add_parser(name, help=f"{name} one component (function, provider-kubernetes, "
                                      "crossplane, apiserver:<cluster>, ...)")
        p.add_argument("component")
    f = sub.add_parser("fault", help="stop or start part of one InferenceCluster to try "
                                     "failover (make fault; docs/local-control-plane.md)")
    f.add_argument("--cluster", required=True, help="an InferenceCluster of the fleet")
    f.add_argument("--part", required=True, choices=faults.PARTS,
                   help="engine: a ModelReplica's engine processes there; gateway: the "
                        "cluster's Envoy(s) alone; cluster: every process of its API server")
    f.add_argument("--action", required=True, choices=faults.ACTIONS)
    f.add_argument("--replica", help="the ModelReplica (--part engine)")
    f.add_argument("--namespace", help="the ModelReplica's namespace (default: wherever the "
                                       "one of that name is)")
    args = parser.parse_args(argv)

    try:
        if args.command == "up":
            cp = ControlPlane.up(args.fleet, args.state_dir)
            print(cp.hints())
        elif args.command == "down":
            stopped = stop_everything(args.state_dir)
            print(f"stopped {len(stopped)} component(s)" if stopped else "nothing was running")
        elif args.command == "env":
            cp = ControlPlane.load(args.state_dir)
            print(f"export KUBECONFIG={cp.kubeconfig}")
        elif args.command == "status":
            cp = ControlPlane.load(args.state_dir)
            total = 0
            rss = cp.rss_kib()
            for name in cp.components():
                up_ = cp.running(name)
                total += rss.get(name, 0)
                print(f"{name:<36} {'running' if up_ else 'stopped':<8} "
                      f"{rss.get(name, 0) / 1024:8.1f} MiB  {cp.log(name)}")
            print(f"{'total':<36} {'':<8} {total / 1024:8.1f} MiB")
        elif args.command == "stop":
            cp = ControlPlane.load(args.state_dir)
            t = time.monotonic()
            cp.stop(args.component)
            print(f"stopped {args.component} in {time.monotonic() - t:.1f}s")
        elif args.command == "start":
            cp = ControlPlane.load(args.state_dir)
            t = time.monotonic()
            cp.start(args.component)
            print(f"started {args.component}; ready in {time.monotonic() - t:.1f}s")
        elif args.command == "fault":
            cp = ControlPlane.load(args.state_dir)
            faults.run(cp, faults.Request(args.cluster, args.part, args.action,
                                          args.replica or None, args.namespace or None))
    except (ControlPlaneError, FleetError, ToolsError, WaitTimeout, ComponentDied,
            KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
