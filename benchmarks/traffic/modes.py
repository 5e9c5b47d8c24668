"""Each mode of `make bench-traffic`, live: one ModelDeployment at a time, in
namespace bench-traffic, applied, waited Ready, warmed up, measured and deleted.

- Unified: the single-GPU example, one replica, at its ModelReplica's
  status.endpoint (the cluster's Envoy -> the replica's HTTPRoute -> its Service).
- ModelService: a ModelService over that replica, at its status.address on the
  front door (us-east-1's Envoy -> a Backend, the replica's cluster gateway, ->
  the replica's route -> the pod).
- EndpointPicker: examples/deployments/throughput-epp.yaml (four copies) at its
  endpoint (Envoy -> ext_proc to the real llm-d EPP -> the copy it picked); direct
  requests go round robin over the four pods.
- PrefillDecode: examples/deployments/prefill-decode.yaml at its endpoint (Envoy ->
  EPP -> a decode pod's P/D sidecar -> the prefill engine, then the decode engine);
  direct requests go to the decode engines themselves (port 8200, behind the
  sidecar). A second row sends the same requests to the sidecar with the
  `x-prefiller-host-port` header the EPP would set, to split what Envoy and the EPP
  add from what the P/D hop adds.

Every 200 the client got is checked against the engines' own
`vllm:request_success_total`, and, per pod, against the `x-inference-pod` answers;
the checks are notes under the report's tables.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from benchmarks.traffic.client import Target
from benchmarks.traffic.deployments import MODEL, NS, PD_MODEL, example, with_pod_name
from benchmarks.traffic.measure import measure_affinity, measure_latency, measure_throughput, until_answering
from benchmarks.traffic.report import Results, machine

PREFILL_HEADER = "x-prefiller-host-port"      # what the EPP sets for the P/D sidecar


def _total(counts: Mapping[str, int]) -> int:
    return sum(counts.values())


def _check(what: str, counted: int, answered: int) -> str:
    verdict = "equal" if counted == answered else "DIFFERENT"
    return f"{what}: the engines counted {counted}, the client got {answered} 200s ({verdict})"


class Bench:
    """The live part: apply, wait until Ready, warm up, measure, delete."""

    def __init__(self, cp: Any, args: argparse.Namespace, say: Callable[[str], None]) -> None:
        self.cp = cp
        self.args = args
        self.say = say
        self.res = Results(machine=machine())

    def _serving(self, name: str, md: dict[str, Any]) -> tuple[dict, list[Mapping[str, Any]]]:
        from e2e.tests import live
        from e2e.tests.traffic import is_engine_pod
        t0 = time.monotonic()
        live.apply_docs(self.cp, [md])
        live.wait_condition(self.cp, live.MD, name, NS, "Ready", live.SERVING)
        (mr,) = live.replicas_of(self.cp, NS, name)
        pods: list[Mapping[str, Any]] = sorted(
            (p for p in live.serving_pods(self.cp, mr) if is_engine_pod(p)),
            key=lambda p: p["metadata"]["name"])
        self.say(f"{name}: Ready on {mr['spec']['clusterName']} after "
                 f"{time.monotonic() - t0:.0f}s, {len(pods)} engine pod(s)")
        return mr, pods

    def _delete(self, name: str) -> None:
        from e2e.tests import live
        self.say(f"{name}: deleting, waiting until it is gone")
        live.delete_and_wait(self.cp, NS, name)

    def _mode(self, mode: str, model: str, through: Target, direct: Target) -> None:
        a = self.args
        until_answering(through, model)
        until_answering(direct, model)
        self.say(f"{mode}: {a.warmup} warm-up requests each way, {a.pairs} latency pairs")
        self.res.latency.append(measure_latency(mode, model, through, direct, a.pairs, a.warmup))
        self.say(f"{mode}: {a.requests} requests each way at concurrency {a.concurrency}")
        self.res.throughput.append(measure_throughput(mode, model, through, direct, a.requests,
                                                      a.concurrency, a.cap_seconds))

    def _settled(self, pods: list[Mapping[str, Any]], done: Callable[[dict[str, Counter[str]]], bool],
                 seconds: float = 10.0) -> dict[str, Counter[str]]:
        """The engines' counters once `done` holds, or after `seconds` (the simulator
        updates them asynchronously, just after it answers)."""
        from e2e.tests.traffic import served
        deadline = time.monotonic() + seconds
        while True:
            now = served(pods)
            if done(now) or time.monotonic() > deadline:
                return now
            time.sleep(0.2)

    @staticmethod
    def _url(pod: Mapping[str, Any]) -> str:
        from e2e.tests.traffic import engine_port
        return f"http://{pod['status']['podIP']}:{engine_port(pod)}"

    def unified_and_service(self) -> None:
        from e2e.tests import live
        from e2e.tests.traffic import delta, served
        from function.contract.api import LABEL_DEPLOYMENT
        name, svc = "unified", "front"
        ms_kind, routes = "modelservices.modelplane.ai", "httproutes.gateway.networking.k8s.io"
        try:
            mr, (pod,) = self._serving(name, with_pod_name(live.single_gpu(name, NS, 1)))
            cluster = mr["spec"]["clusterName"]
            before = served([pod])
            direct, unified = Target([self._url(pod)]), Target([mr["status"]["endpoint"]])
            self._mode(f"Unified ({cluster})", MODEL, unified, direct)
            live.apply_docs(self.cp, [{
                "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService",
                "metadata": {"name": svc, "namespace": NS},
                "spec": {"endpoints": [{"selector": {"matchLabels": {LABEL_DEPLOYMENT: name}}}]}}])
            ms = live.wait_condition(self.cp, ms_kind, svc, NS, "Routed", live.SETTLE)
            service = Target([ms["status"]["address"]])
            self.say(f"ModelService {svc}: {ms['status']['address']} -> the replica on {cluster}")
            self._mode(f"ModelService (front door us-east-1 -> {cluster})", MODEL, service, direct)
            answered = unified.tally.ok + service.tally.ok + direct.tally.ok
            after = self._settled([pod], lambda now: _total(delta(now, before)) >= answered)
            self.res.notes.append(_check("Unified and ModelService", _total(delta(after, before)),
                                         answered))
        finally:
            self.cp.kubectl("delete", ms_kind, svc, "-n", NS, "--ignore-not-found", "--wait=true")
            live.wait(f"ModelService {svc}'s route to be gone", lambda: not live.items(
                self.cp, routes, NS, f"modelplane.ai/model-service={svc}"), live.SETTLE)
            self._delete(name)

    def endpoint_picker(self) -> None:
        from e2e.tests.traffic import delta, served
        name = "picked"
        a = self.args
        try:
            mr, pods = self._serving(name, example("throughput-epp.yaml", name))
            url = mr["status"]["endpoint"]
            before = served(pods)
            through, direct = Target([url]), Target([self._url(p) for p in pods])
            self._mode(f"EndpointPicker ({mr['spec']['clusterName']}, {len(pods)} copies)", MODEL,
                       through, direct)
            measured = through.tally.ok + direct.tally.ok
            middle = self._settled(pods, lambda now: _total(delta(now, before)) >= measured)
            self.say(f"EndpointPicker: affinity, {a.groups} groups of {a.per_group} each way")
            shared, control = Target([url]), Target([url])
            self.res.affinity, seen = measure_affinity(shared, a.groups, a.per_group, len(pods), True)
            self.res.control, seen_c = measure_affinity(control, a.groups, a.per_group, len(pods),
                                                        False)
            grouped = shared.tally.ok + control.tally.ok
            after = self._settled(pods, lambda now: _total(delta(now, middle)) >= grouped)
            counted = {_short(k): v for k, v in delta(after, middle).items() if v}
            named = {_short(k): v for k, v in (seen + seen_c).items()}
            self.res.notes.append(
                f"EndpointPicker, affinity runs: requests per pod by x-inference-pod {named}, by "
                f"the engines' vllm:request_success_total {counted} "
                f"({'equal' if named == counted else 'DIFFERENT'})")
            self.res.notes.append(_check("EndpointPicker", _total(delta(after, before)),
                                         measured + grouped))
        finally:
            self._delete(name)

    def prefill_decode(self) -> None:
        from e2e.tests.traffic import delta, engine_port, served
        from function.composer.naming import LABEL_ENGINE
        name = "disaggregated"
        try:
            mr, pods = self._serving(name, example("prefill-decode.yaml", name))
            engine = {p["metadata"]["name"]: p["metadata"]["labels"][LABEL_ENGINE] for p in pods}
            (pre,) = [p for p in pods if engine[p["metadata"]["name"]] == "prefill"]
            decode = [p for p in pods if engine[p["metadata"]["name"]] == "decode"]
            before = served(pods)
            gateway = Target([mr["status"]["endpoint"]])
            direct = Target([self._url(p) for p in decode])   # the decode engines, not the sidecar
            self._mode(f"PrefillDecode ({mr['spec']['clusterName']}, 1 prefill + "
                       f"{len(decode)} decode)", PD_MODEL, gateway, direct)
            # The sidecar straight, told the prefill engine as the EPP tells it.
            sidecar = Target([f"http://{p['status']['podIP']}:{_sidecar_port(p)}" for p in decode],
                             {PREFILL_HEADER: f"{pre['status']['podIP']}:{engine_port(pre)}"})
            self._mode("PrefillDecode: the sidecar and prefill hop alone, no gateway", PD_MODEL,
                       sidecar, direct)
            answered = gateway.tally.ok + sidecar.tally.ok + direct.tally.ok
            prefilled = gateway.tally.ok + sidecar.tally.ok
            names = [p["metadata"]["name"] for p in decode]
            pname = pre["metadata"]["name"]

            def done(now: dict[str, Counter[str]]) -> bool:
                d = delta({n: now[n] for n in names}, before)
                return _total(d) >= answered and \
                    (now[pname] - before[pname])["remote_decode"] >= prefilled

            after = self._settled(pods, done)
            self.res.notes.append(_check("PrefillDecode, decode engines", _total(
                delta({n: after[n] for n in names}, before)), answered))
            self.res.notes.append(
                f"PrefillDecode, prefill engine: finished {dict(after[pname] - before[pname])} "
                f"(by finish_reason) for {prefilled} requests through the gateway or the sidecar")
        finally:
            self._delete(name)


def _short(pod: str) -> str:
    """A pod's name by its random suffix (`...-deploy-8cffc564c-2ktd7` -> `…2ktd7`)."""
    return "…" + pod.rsplit("-", 1)[-1]


def _sidecar_port(pod: Mapping[str, Any]) -> int:
    """The P/D sidecar's port (its container's port, else its --port flag)."""
    from e2e.controlplane.pods import images
    spec = pod["spec"]
    for c in (spec.get("initContainers") or []) + spec["containers"]:
        if images.role(c.get("image", "")) is images.Role.SIDECAR:
            for p in c.get("ports") or []:
                return int(p["containerPort"])
            args = list(c.get("args") or [])
            for i, arg in enumerate(args):
                if arg.startswith("--port="):
                    return int(arg.split("=", 1)[1])
                if arg == "--port" and i + 1 < len(args):
                    return int(args[i + 1])
    raise RuntimeError(f"pod {pod['metadata']['name']} has no P/D sidecar")
