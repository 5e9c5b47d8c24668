"""`make bench`: the scheduler and composer against their protobuf floor.

For each fleet size (benchmarks/fleetgen.py) it measures, in one run:
  - RunFunction in process (p50, p95 over repeated runs),
  - RunFunction over gRPC to a `serve` subprocess (p50, p95),
  - the floor: decoding the serialized request and encoding the response,
    nothing else,
  - the first run and peak RSS of a fresh process (caches empty),
  - RunFunction under churn: each reconcile's request with 1% of its required
    resources changed since the one before (benchmarks/churn.py),
  - the same deployment under placement.strategy Pack, which also reads every
    ModelDeployment of the fleet (function/scheduler/demand.py): 1,000 of them,
    10 waiting for capacity, each with a uid and resourceVersion as an API server
    gives them (warm p50 and a fresh process's first run),
and prints the ratios to the floor. Then the composer on each example replica
(in process) and the server's composer throughput with concurrent clients.
The numbers are measurements, not assertions: targets are checked by
reading the table (benchmarks/README.md records a run).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import tempfile
import sys
import time

import grpc
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from benchmarks import churn, corpus, fleetgen, load
from function.composer import memo as composer_cache
from function.contract.api import REQUIRE_CLUSTERS, REQUIRE_DEPLOYMENTS, REQUIRE_REPLICAS
from function.runtime import fn
from function.tools import localrender


def scheduler_request(size: str) -> fnv1.RunFunctionRequest:
    return build_request(*fleetgen.generate(size))


OTHER_DEPLOYMENTS, WAITING = 1000, 10


def pack_request(md: dict, clusters: list[dict], live: list[dict],
                 deployments: int = OTHER_DEPLOYMENTS, waiting: int = WAITING
                 ) -> fnv1.RunFunctionRequest:
    """`md` under Pack, with `deployments` other ModelDeployments required (copies
    of it in another namespace), the first `waiting` of them short of one replica."""
    req = build_request(corpus.with_strategy(md, "Pack"), clusters, live)
    items = req.required_resources[REQUIRE_DEPLOYMENTS].items
    want = int(md["spec"].get("replicas", 1))
    for i in range(deployments):
        other = {**md, "metadata": {"name": f"other-{i:04d}", "namespace": "bench-others",
                                    "uid": f"00000000-0000-0000-0000-{i:012d}",
                                    "resourceVersion": str(1000 + i),
                                    "creationTimestamp": "2026-01-01T00:00:00Z"},
                 "status": {"replicas": {"desired": want, "ready": want,
                                         "scheduled": want - (1 if i < waiting else 0)}}}
        items.add().resource.CopyFrom(resource.dict_to_struct(other))
    return req


def build_request(md: dict, clusters: list[dict], live: list[dict]) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.CopyFrom(resource.dict_to_struct(md))
    for name, objs in ((REQUIRE_CLUSTERS, clusters), (REQUIRE_REPLICAS, live)):
        items = req.required_resources[name].items
        for obj in objs:
            items.add().resource.CopyFrom(resource.dict_to_struct(obj))
    return req


def percentiles(samples: list[float]) -> tuple[float, float]:
    s = sorted(samples)
    return (statistics.median(s) * 1000, s[min(len(s) - 1, int(0.95 * len(s)))] * 1000)


def timed(fn_, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn_()
        out.append(time.perf_counter() - t)
    return out


def in_process(data: bytes, runs: int) -> tuple[list[float], list[float], bytes]:
    """(RunFunction samples, floor samples, one serialized response)."""
    def full() -> bytes:
        # What the server does with a request's bytes (function/runtime/server.py).
        return fn.run_serialized(data).SerializeToString()
    rsp = full()
    rsp_msg = fnv1.RunFunctionResponse.FromString(rsp)

    def floor() -> bytes:
        fnv1.RunFunctionRequest.FromString(data)
        return rsp_msg.SerializeToString()
    return timed(full, runs), timed(floor, runs), rsp


def churned(variants: list[bytes]) -> tuple[list[float], list[float]]:
    """(RunFunction samples, floor samples), one per request of `variants`, in
    order: each reconcile meets the fleet changed since the one before."""
    full, floor = [], []
    for data in variants:
        t = time.perf_counter()
        rsp = fn.run_serialized(data).SerializeToString()
        full.append(time.perf_counter() - t)
        msg = fnv1.RunFunctionResponse.FromString(rsp)
        t = time.perf_counter()
        fnv1.RunFunctionRequest.FromString(data)
        msg.SerializeToString()
        floor.append(time.perf_counter() - t)
    return full, floor


def over_grpc(address: str, req: fnv1.RunFunctionRequest, runs: int) -> list[float]:
    opts = [("grpc.max_send_message_length", 256 << 20),
            ("grpc.max_receive_message_length", 256 << 20)]
    with grpc.insecure_channel(address, options=opts) as ch:
        stub = grpcv1.FunctionRunnerServiceStub(ch)
        stub.RunFunction(req, timeout=120)
        return timed(lambda: stub.RunFunction(req, timeout=120), runs)


def fresh_process(data: bytes) -> tuple[float, float]:
    """(first-run ms, peak RSS MiB) of a fresh process that reads the serialized
    request and runs it once: the first reconcile after a restart, caches empty.

    The request is built here and handed over as bytes, so the numbers are the
    function's (decode, parse, plan, respond), not the fleet generator's. Peak
    RSS is the child's VmHWM (its own address space's high-water mark), not
    getrusage's ru_maxrss: Linux carries ru_maxrss across fork and exec, so a
    child of this (large) benchmark process would report the parent's size.
    """
    with tempfile.NamedTemporaryFile(suffix=".pb") as f:
        f.write(data)
        f.flush()
        code = ("import time; from function.runtime import fn; "
                f"data=open({f.name!r},'rb').read(); "
                "t=time.perf_counter(); fn.run_serialized(data); "
                "print((time.perf_counter()-t)*1000, next(l.split()[1] for l in "
                "open('/proc/self/status') if l.startswith('VmHWM:')))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)
    ms, kib = out.stdout.split()
    return float(ms), int(kib) / 1024


def composer_rows(runs: int) -> list[dict]:
    """The composer on each example replica: as Crossplane calls it on every
    reconcile (the composition remembered, function/composer/memo.py), and
    composing afresh each time (a changed spec or cluster, a new process)."""
    rows = []
    for name, req in sorted(load.realistic_requests().items()):
        if not name.startswith("compose/"):
            continue
        data = req.SerializeToString()
        full, floor, _ = in_process(data, runs)

        def afresh(data: bytes = data) -> bytes:
            composer_cache.CLUSTERS.clear()
            composer_cache.COMPOSED.clear()
            return fn.run_serialized(data).SerializeToString()
        p50, p95 = percentiles(full)
        f50, _ = percentiles(floor)
        a50, a95 = percentiles(timed(afresh, runs))
        rows.append({"what": name, "p50_ms": round(p50, 2), "p95_ms": round(p95, 2),
                     "afresh_p50_ms": round(a50, 2), "afresh_p95_ms": round(a95, 2),
                     "floor_p50_ms": round(f50, 3), "ratio": round(p50 / f50, 1)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="scheduler and composer benchmarks")
    ap.add_argument("--sizes", default="S,M,L")
    ap.add_argument("--runs", type=int, default=0, help="runs per measurement (0: by size)")
    ap.add_argument("--throughput-seconds", type=float, default=10)
    ap.add_argument("--churn", type=float, default=1.0,
                    help="percent of required resources new between churned reconciles")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    results = {"machine": f"{platform.machine()} {platform.processor() or ''} "
                          f"{len(__import__('os').sched_getaffinity(0))} cores, "
                          f"Python {platform.python_version()}", "scheduler": [], "composer": [],
               "churn_percent": args.churn}
    with localrender.local_server() as (address, _):
        for size in args.sizes.split(","):
            runs = args.runs or {"S": 50, "M": 20, "L": 7}[size]
            md, clusters, live = fleetgen.generate(size)
            req = build_request(md, clusters, live)
            data = req.SerializeToString()
            full, floor, rsp = in_process(data, runs)
            # Built before timing; the caches are warm from the runs above.
            c_full, c_floor = churned(churn.requests(req, clusters, live, runs,
                                                     args.churn / 100))
            remote = over_grpc(address, req, runs)
            p50, p95 = percentiles(full)
            f50, f95 = percentiles(floor)
            g50, g95 = percentiles(remote)
            first, rss = fresh_process(data)
            c50, c95 = percentiles(c_full)
            cf50, _ = percentiles(c_floor)
            packed = pack_request(md, clusters, live).SerializeToString()
            k50, _ = percentiles(in_process(packed, runs)[0])
            k_first, _ = fresh_process(packed)
            results["scheduler"].append({
                "size": size, "request_mb": round(len(data) / 1e6, 2),
                "response_kb": round(len(rsp) / 1e3, 1),
                "p50_ms": round(p50, 1), "p95_ms": round(p95, 1),
                "grpc_p50_ms": round(g50, 1), "grpc_p95_ms": round(g95, 1),
                "floor_p50_ms": round(f50, 2), "ratio_to_floor": round(p50 / f50, 1),
                "first_run_ms": round(first, 1), "peak_rss_mib": round(rss, 1),
                "churn_p50_ms": round(c50, 1), "churn_p95_ms": round(c95, 1),
                "churn_floor_p50_ms": round(cf50, 2), "churn_ratio": round(c50 / cf50, 1),
                "first_run_ratio": round(first / f50, 1),
                "pack_p50_ms": round(k50, 1), "pack_first_run_ms": round(k_first, 1)})
    results["composer"] = composer_rows(args.runs or 200)
    tp = load.run(seconds=args.throughput_seconds, clients=16, kinds="compose", warmup=2,
                  slack_kib=1 << 30)
    results["composer_throughput_rps"] = tp["throughput_rps"]
    results["composer_throughput_errors"] = tp["errors"]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(render(results))
    return 0


def render(r: dict) -> str:
    lines = [f"machine: {r['machine']}", "", "scheduler (ModelDeployment RunFunction)"]
    cols = ["size", "request_mb", "response_kb", "p50_ms", "p95_ms", "grpc_p50_ms",
            "grpc_p95_ms", "floor_p50_ms", "ratio_to_floor", "first_run_ms", "peak_rss_mib"]
    lines += _table(cols, r["scheduler"])
    lines += ["", f"scheduler under churn ({r.get('churn_percent', 1.0):g}% of required resources "
                  "new per reconcile) and a fresh process's first reconcile, against the floor"]
    lines += _table(["size", "churn_p50_ms", "churn_p95_ms", "churn_floor_p50_ms", "churn_ratio",
                     "first_run_ms", "floor_p50_ms", "first_run_ratio", "peak_rss_mib"],
                    r["scheduler"])
    lines += ["", f"the same deployment under Pack, which reads the fleet's ModelDeployments "
                  f"({OTHER_DEPLOYMENTS}, {WAITING} waiting), against Spread"]
    lines += _table(["size", "p50_ms", "pack_p50_ms", "first_run_ms", "pack_first_run_ms"],
                    r["scheduler"])
    lines += ["", "composer (ModelReplica RunFunction, in process)"]
    lines += _table(["what", "p50_ms", "p95_ms", "afresh_p50_ms", "afresh_p95_ms", "floor_p50_ms",
                     "ratio"], r["composer"])
    lines += ["", f"composer throughput over gRPC, 16 clients: {r['composer_throughput_rps']} "
                  f"RunFunction/s ({r['composer_throughput_errors']} errors)"]
    return "\n".join(lines)


def _table(cols: list[str], rows: list[dict]) -> list[str]:
    cells = [cols] + [[str(row[c]) for c in cols] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cols))]
    return ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in cells]


if __name__ == "__main__":
    sys.exit(main())
