"""Drive the gRPC server with concurrent clients; report throughput, errors, memory.

    python -m benchmarks.load --seconds 600 --clients 16      # `make load`

The server runs as its own process (`serve --insecure`), as in production;
clients are asyncio tasks on one channel in this process. Requests are the
realistic mix the control plane sends: the scheduler on the example fleet,
the composer on example replicas, and InferenceCluster status. Memory is the
server's resident set, read from /proc after a warm-up and at the end; the
run fails (exit 1) on any error or when memory grows by more than the
allowed slack, so `make load` is a check, not just a printout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import sys
import time

import grpc
import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from function.contract.api import REQUIRE_CLUSTER, REQUIRE_CLUSTERS, REQUIRE_OWNER, REQUIRE_REPLICAS
from function.tools import localrender

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _load(path: pathlib.Path) -> list[dict]:
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]


def _request(xr: dict, required: dict[str, list[dict]]) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.CopyFrom(resource.dict_to_struct(xr))
    for name, objs in required.items():
        items = req.required_resources[name].items
        for obj in objs:
            items.add().resource.CopyFrom(resource.dict_to_struct(obj))
    return req


def realistic_requests() -> dict[str, fnv1.RunFunctionRequest]:
    """One request per kind of work, built from the examples."""
    fleet = _load(EXAMPLES / "fleet")
    by_name = {c["metadata"]["name"]: c for c in fleet}
    replicas = _load(EXAMPLES / "replicas")
    reqs = {}
    for path in sorted((EXAMPLES / "deployments").glob("*.yaml")):
        reqs[f"schedule/{path.stem}"] = _request(
            _load(path)[0], {REQUIRE_CLUSTERS: fleet, REQUIRE_REPLICAS: replicas})
    for mr in replicas:
        ic = by_name[mr["spec"]["clusterName"]]
        reqs[f"compose/{mr['metadata']['name']}"] = _request(
            mr, {REQUIRE_CLUSTER: [ic], REQUIRE_OWNER: [localrender.placing_deployment(mr)]})
    for ic in fleet:
        reqs[f"cluster/{ic['metadata']['name']}"] = _request(ic, {REQUIRE_REPLICAS: replicas})
    return reqs


def rss_kib(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def drive(address: str, requests: list[fnv1.RunFunctionRequest], clients: int,
                seconds: float) -> dict:
    counts = {"ok": 0, "errors": 0, "fatal": 0}
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    async with grpc.aio.insecure_channel(address) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)

        async def client(offset: int) -> None:
            i = offset
            while time.monotonic() < deadline:
                req = requests[i % len(requests)]
                i += 1
                start = time.perf_counter()
                try:
                    rsp = await stub.RunFunction(req, timeout=30)
                except grpc.RpcError:
                    counts["errors"] += 1
                    continue
                latencies.append(time.perf_counter() - start)
                if any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
                    counts["fatal"] += 1
                counts["ok"] += 1

        await asyncio.gather(*(client(k) for k in range(clients)))
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else 0.0

    return {**counts, "p50_ms": round(pct(0.50), 2), "p95_ms": round(pct(0.95), 2)}


def run(seconds: float, clients: int, kinds: str, warmup: float, slack_kib: int) -> dict:
    reqs = realistic_requests()
    chosen = [r for name, r in sorted(reqs.items()) if kinds == "all" or name.startswith(kinds)]
    with localrender.local_server() as (address, proc):
        asyncio.run(drive(address, chosen, clients, warmup))
        start_rss = rss_kib(proc.pid)
        t0 = time.monotonic()
        result = asyncio.run(drive(address, chosen, clients, seconds))
        elapsed = time.monotonic() - t0
        end_rss = rss_kib(proc.pid)
    result.update({
        "kinds": kinds, "requests": len(chosen), "clients": clients,
        "seconds": round(elapsed, 1), "throughput_rps": round(result["ok"] / elapsed, 1),
        "rss_start_mib": round(start_rss / 1024, 1), "rss_end_mib": round(end_rss / 1024, 1),
        "rss_growth_kib": end_rss - start_rss, "rss_slack_kib": slack_kib,
    })
    result["pass"] = result["errors"] == 0 and result["fatal"] == 0 and \
        result["rss_growth_kib"] <= slack_kib and result["ok"] > 0
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--kinds", default="all", help="all, schedule, compose or cluster")
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--slack-mib", type=float, default=16,
                    help="allowed RSS growth between warm-up and end")
    args = ap.parse_args(argv)
    result = run(args.seconds, args.clients, args.kinds, args.warmup, int(args.slack_mib * 1024))
    print(json.dumps(result, indent=2))
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
