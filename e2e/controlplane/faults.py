"""Faults on the running local control plane: `make fault` (`python -m e2e.controlplane fault`).

Stops or starts part of one InferenceCluster, for people trying failover by hand
and for tests (docs/local-control-plane.md#faults-make-fault):

* gateway: the cluster's gateway data plane, i.e. the Envoys its API server's Envoy
  Gateway controller (`envoy-gateway:<cluster>`) runs as its children. Stop kills those
  Envoys alone: the controller and the API server keep running. Under Host
  infrastructure the controller does not start a killed Envoy again (it still counts
  it as running), so start restarts the controller the way `start` restarts any
  component, which starts its Envoys.
* cluster: every component the harness records for the cluster's API server, in the
  order `down` stops them (core.STOP_ORDER_PREFIXES: pods, Envoy Gateway and its Envoys,
  the InferencePool extension, LWS, kwok, scheduler, controller-manager, API server);
  start starts the stopped ones in reverse order, each ready before the next.
* engine: the simulated engines of one ModelReplica's pods there, processes the
  cluster's pods supervisor (`pods:<cluster>`) started in each pod's network namespace.
  Stop kills them; the supervisor restarts an exited container by itself after its
  back-off, as kubelet does, so start waits until it has and the pods are Ready.

`plan` decides (pure, over anything shaped like a ControlPlane); `run` acts and says
what it did. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from e2e.controlplane import dataplane, fleet
from e2e.controlplane.core import STOP_ORDER_PREFIXES, ControlPlane, ControlPlaneError
from e2e.controlplane.pods import harness as pods_harness
from e2e.controlplane.procs import Proc, children, terminate
from e2e.controlplane.waits import http_get, port_listening, wait_for
from function.contract.api import LABEL_REPLICA
from function.contract.names import dns_label

PARTS = ("engine", "gateway", "cluster")
ACTIONS = ("stop", "start")
# One cluster's components in the order `down` stops them; a cluster starts in reverse.
CLUSTER_KINDS: tuple[str, ...] = tuple(p.removesuffix(":") for p in STOP_ORDER_PREFIXES
                                       if p.endswith(":"))
# What e2e/tests/test_services.py's lose_a_cluster stops: the cluster gone as the control
# plane and the front door see it (its docstring says why these three).
LOST_CLUSTER = ("envoy-gateway", "controller-manager", "apiserver")
MR = "modelreplicas.modelplane.ai"
STOP_GRACE = 10.0   # seconds between SIGTERM and SIGKILL
GONE = 10.0         # seconds for a stopped Envoy's listener to go
ENGINES_BACK = 120.0  # the supervisor's back-off (at most 30 s), a start, a probe period


class FaultError(ControlPlaneError):
    pass


@dataclass(frozen=True)
class Request:
    cluster: str
    part: str
    action: str
    replica: str | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class Plan:
    request: Request
    api_server: str               # the cluster (API server) that backs request.cluster
    components: tuple[str, ...]   # recorded components acted on (or through), in order
    also: tuple[str, ...] = ()    # other InferenceClusters the same processes serve
    keeps: tuple[str, ...] = ()   # components left running, said so


class Handle(Protocol):
    name: str


class Plane(Protocol):
    """What `plan` reads of a ControlPlane."""

    @property
    def clusters(self) -> Mapping[str, Handle]: ...
    @property
    def gateways(self) -> Mapping[str, Mapping[str, Any]]: ...
    def components(self) -> list[str]: ...
    def running(self, component: str) -> bool: ...


def cluster_components(recorded: Iterable[str], api_server: str,
                       kinds: Sequence[str] = CLUSTER_KINDS) -> list[str]:
    """The recorded components of one cluster (API server) among `kinds`, in stop order."""
    have = set(recorded)
    return [f"{k}:{api_server}" for k in CLUSTER_KINDS
            if k in kinds and f"{k}:{api_server}" in have]


def plan(cp: Plane, req: Request) -> Plan:
    """Which components a fault acts on; FaultError on bad input or nothing to do."""
    if req.part not in PARTS:
        raise FaultError(f"unknown part {req.part!r}: PART is one of {', '.join(PARTS)}")
    if req.action not in ACTIONS:
        raise FaultError(f"unknown action {req.action!r}: ACTION is stop or start")
    known = ", ".join(sorted(cp.clusters)) or "none"
    handle = cp.clusters.get(req.cluster)
    if handle is None:
        raise FaultError(f"no InferenceCluster {req.cluster!r} on this control plane "
                         f"(CLUSTER is one of: {known})" if req.cluster else
                         f"CLUSTER=<InferenceCluster> is missing (one of: {known})")
    if req.part == "engine" and not req.replica:
        raise FaultError("PART=engine needs REPLICA=<ModelReplica> (and NAMESPACE=<namespace> "
                         "when ModelReplicas of that name are in several namespaces)")
    if req.part != "engine" and (req.replica or req.namespace):
        raise FaultError(f"REPLICA and NAMESPACE are for PART=engine, not PART={req.part}")
    api = handle.name
    if req.part == "gateway":
        return _plan_gateway(cp, req, api)
    if req.part == "cluster":
        return _plan_cluster(cp, req, api)
    return _plan_engine(cp, req, api)


def _plan_gateway(cp: Plane, req: Request, api: str) -> Plan:
    if req.cluster not in cp.gateways:
        raise FaultError(f"InferenceCluster {req.cluster} has no gateway on this machine "
                         "(its spec.gateway names no Gateway)")
    eg, apiserver = f"envoy-gateway:{api}", f"apiserver:{api}"
    if eg not in cp.components():
        raise FaultError(f"no {eg} recorded: nothing runs {req.cluster}'s gateway")
    also = tuple(sorted(ic for ic, g in cp.gateways.items()
                        if g.get("cluster") == api and ic != req.cluster))
    if req.action == "stop":
        if not cp.running(eg):
            raise FaultError(f"nothing running: {eg} is stopped, and its Envoys with it "
                             "(ACTION=start starts them)")
        return Plan(req, api, (eg,), also, keeps=(eg, apiserver))
    if not cp.running(apiserver):
        raise FaultError(f"{apiserver} is stopped: start the whole cluster "
                         f"(make fault CLUSTER={req.cluster} PART=cluster ACTION=start)")
    ext = f"inferencepool-extension:{api}"
    first = (ext,) if ext in cp.components() and not cp.running(ext) else ()
    return Plan(req, api, (*first, eg), also, keeps=(apiserver,))


def _plan_cluster(cp: Plane, req: Request, api: str) -> Plan:
    if api == fleet.CONTROL_PLANE:
        raise FaultError(f"InferenceCluster {req.cluster} runs on the control plane's own API "
                         f"server ({api}): stopping that cluster stops Crossplane's API server, "
                         "the control plane itself (`make cluster-down` does that). "
                         "PART=gateway stops its gateway alone")
    mine = cluster_components(cp.components(), api)
    also = tuple(sorted(ic for ic, h in cp.clusters.items()
                        if h.name == api and ic != req.cluster))
    if req.action == "stop":
        todo = [c for c in mine if cp.running(c)]
        if not todo:
            raise FaultError(f"nothing running on {api}: {', '.join(mine) or 'nothing'} "
                             "recorded, none running (ACTION=start starts them)")
    else:
        todo = [c for c in reversed(mine) if not cp.running(c)]
        if not todo:
            raise FaultError(f"nothing to start: every component of {api} runs "
                             f"({', '.join(mine)})")
    return Plan(req, api, tuple(todo), also)


def _plan_engine(cp: Plane, req: Request, api: str) -> Plan:
    pods, apiserver = f"pods:{api}", f"apiserver:{api}"
    if pods not in cp.components():
        raise FaultError(f"no {pods} recorded: no engines run on {req.cluster}")
    if not cp.running(apiserver):
        raise FaultError(f"{apiserver} is stopped: its pods cannot be read (make fault "
                         f"CLUSTER={req.cluster} PART=cluster ACTION=start starts it)")
    if not cp.running(pods):
        raise FaultError(
            f"nothing running: {pods} is stopped, and the engines it ran with it"
            if req.action == "stop" else
            f"{pods} is stopped: make fault CLUSTER={req.cluster} PART=cluster ACTION=start "
            "starts it, and it starts the engines")
    return Plan(req, api, (pods,), keeps=(pods, apiserver))


# ---- the running processes -------------------------------------------------------------

def _link(path: str) -> Path | None:
    try:
        return Path(os.readlink(path))
    except OSError:
        return None


def _terminate(procs: Sequence[Proc], *, group: bool) -> list[Proc]:
    try:
        return terminate(procs, group=group, timeout=STOP_GRACE)
    except RuntimeError as exc:
        raise FaultError(str(exc)) from exc


def _pid(cp: ControlPlane, component: str) -> int:
    pid = cp.sup.pid(component)
    if pid is None:
        raise FaultError(f"{component} is not running")
    return pid


def _spec(cp: ControlPlane, component: str) -> Mapping[str, Any]:
    return cp.state["components"][component]["spec"]


def _describe(cp: ControlPlane, component: str) -> str:
    pid = cp.sup.pid(component)
    probe = cp.state["components"][component].get("probe") or {}
    where = probe.get("url") or (f"127.0.0.1:{probe['port']}" if probe.get("port") else "")
    return (f"{component} (pid {pid if pid is not None else '-'}"
            + (f", {where}" if where else "") + ")")


# ---- gateway -----------------------------------------------------------------------------

def _gateways(cp: ControlPlane, api: str) -> list[dataplane.LocalGateway]:
    return dataplane.gateways_of({ic: dataplane.LocalGateway(
        g["cluster"], g["namespace"], g["name"], g["address"], g["port"])
        for ic, g in cp.gateways.items()}, api)


def envoys(cp: ControlPlane, eg: str) -> list[Proc]:
    """The Envoys Envoy Gateway's controller runs: its children whose binary is the one
    the harness placed in its Host data directory (its HOME is its run directory)."""
    binary = dataplane.HostPaths(Path(_spec(cp, eg)["env"]["HOME"])).envoy().resolve()
    out = []
    for pid in children(_pid(cp, eg)):
        exe = _link(f"/proc/{pid}/exe")
        p = Proc.of(pid, f"Envoy pid {pid}") if exe is not None and exe == binary else None
        if p is not None:
            out.append(p)
    return out


def _answers(url: str) -> bool:
    try:
        return http_get(url, timeout=2)[0] == 200
    except OSError:
        return False


def _stop_gateway(cp: ControlPlane, p: Plan, say: Callable[[str], None]) -> None:
    (eg,) = p.components
    found = envoys(cp, eg)
    if not found:
        raise FaultError(f"nothing running: {eg} (pid {_pid(cp, eg)}) runs no Envoy (an "
                         "earlier ACTION=stop? ACTION=start starts them again)")
    gws = _gateways(cp, p.api_server)
    killed = _terminate(found, group=False)
    wait_for("the gateway's Envoy to stop listening", lambda: not any(
        port_listening(g.port, g.address) for g in gws), GONE)
    for e in found:
        say(f"  stopped {e.what}" + (" (SIGKILL)" if e in killed else " (SIGTERM)")
            + f", child of {eg}")
    for g in gws:
        say(f"  Gateway {g.namespace}/{g.name}: {g.url} no longer answers")


def _start_gateway(cp: ControlPlane, p: Plan, say: Callable[[str], None]) -> None:
    eg = p.components[-1]
    gws = _gateways(cp, p.api_server)
    if cp.running(eg) and envoys(cp, eg) and all(_answers(g.ready_url) for g in gws):
        raise FaultError(f"nothing to start: {eg}'s Envoy runs and answers at "
                         + ", ".join(g.url for g in gws))
    for name in p.components:
        t = time.monotonic()
        if cp.running(name):  # the controller of a killed Envoy: it starts it again
            cp.restart(name)
            say(f"  restarted {_describe(cp, name)}; ready in {time.monotonic() - t:.1f}s")
        else:
            cp.start(name)
            say(f"  started {_describe(cp, name)}; ready in {time.monotonic() - t:.1f}s")
    wait_for("every Gateway's Envoy on the cluster to answer", lambda: all(
        _answers(g.ready_url) for g in gws), 60)
    for e in envoys(cp, eg):
        say(f"  {e.what}, child of {eg}")
    for g in gws:
        say(f"  Gateway {g.namespace}/{g.name}: {g.url} answers")


# ---- cluster -----------------------------------------------------------------------------

def _stop_cluster(cp: ControlPlane, p: Plan, say: Callable[[str], None]) -> None:
    for name in p.components:
        desc = _describe(cp, name)
        if name.startswith("envoy-gateway:"):
            desc += "".join(f", its {e.what}" for e in envoys(cp, name))
        t = time.monotonic()
        cp.stop(name)
        say(f"  stopped {desc} in {time.monotonic() - t:.1f}s")


def _start_cluster(cp: ControlPlane, p: Plan, say: Callable[[str], None]) -> None:
    for name in p.components:
        t = time.monotonic()
        cp.start(name)
        desc = _describe(cp, name)
        if name.startswith("envoy-gateway:"):
            desc += "".join(f", its {e.what}" for e in envoys(cp, name))
        say(f"  started {desc}; ready in {time.monotonic() - t:.1f}s")


# ---- engines -----------------------------------------------------------------------------

def choose_replica(items: Sequence[Mapping[str, Any]], name: str,
                   namespace: str | None) -> Mapping[str, Any]:
    """The ModelReplica `name` (in `namespace`, when given) among `items`."""
    found = [i for i in items if i["metadata"]["name"] == name
             and namespace in (None, i["metadata"].get("namespace"))]
    where = f"{namespace}/{name}" if namespace else name
    if not found:
        raise FaultError(f"no ModelReplica {where} (kubectl get mr -A lists them)")
    if len(found) > 1:
        raise FaultError(f"ModelReplicas named {name} are in namespaces "
                         + ", ".join(sorted(i["metadata"]["namespace"] for i in found))
                         + ": give NAMESPACE=<namespace>")
    return found[0]


def _replica(cp: ControlPlane, p: Plan) -> Mapping[str, Any]:
    req = p.request
    assert req.replica is not None
    args = ("-n", req.namespace) if req.namespace else ("-A",)
    items = json.loads(cp.kubectl("get", MR, *args, "-o", "json", timeout=30).stdout)["items"]
    mr = choose_replica(items, req.replica, req.namespace)
    on = (mr.get("spec") or {}).get("clusterName")
    if on != req.cluster:
        raise FaultError(f"ModelReplica {mr['metadata']['namespace']}/{req.replica} is on "
                         f"{on or 'no cluster yet'}, not {req.cluster}")
    return mr


def _engine_pods(cp: ControlPlane, p: Plan, mr: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    meta = mr["metadata"]
    got = cp.kubectl("get", "pods", "-n", meta["namespace"], "-l",
                     f"{LABEL_REPLICA}={dns_label(meta['name'])}", "-o", "json",
                     cluster=p.api_server, timeout=30).stdout
    return [pod for pod in json.loads(got)["items"] if pods_harness.engine_containers(pod)]


def _ports(c: Mapping[str, Any]) -> str:
    ports = [str(x["containerPort"]) for x in c.get("ports") or [] if x.get("containerPort")]
    return "/".join(ports) or "?"


def engines(cp: ControlPlane, p: Plan, pods: Sequence[Mapping[str, Any]]
            ) -> tuple[list[Proc], list[str]]:
    """The engine processes of `pods` (children of the pods supervisor working in each
    engine container's directory), and the containers that ran one and run none now."""
    sup = p.components[0]
    base = pods_harness.state_dir_of(_spec(cp, sup))
    cwd = {pid: _link(f"/proc/{pid}/cwd") for pid in children(_pid(cp, sup))}
    found, missing = [], []
    for pod in pods:
        meta, ip = pod["metadata"], (pod.get("status") or {}).get("podIP") or "?"
        for c in pods_harness.engine_containers(pod):
            d = pods_harness.container_dir(base, p.api_server, pod, c["name"])
            what = f"{meta['namespace']}/{meta['name']} container {c['name']} at {ip}:{_ports(c)}"
            procs = [x for pid, w in cwd.items() if w == d.resolve()
                     and (x := Proc.of(pid, f"engine pid {pid}, pod {what}")) is not None]
            found += procs
            if not procs and d.is_dir():  # a worker that serves nothing never gets one
                missing.append(what)
    return found, missing


def _stop_engines(cp: ControlPlane, p: Plan, say: Callable[[str], None]) -> None:
    pods = _engine_pods(cp, p, _replica(cp, p))
    if not pods:
        raise FaultError(f"ModelReplica {p.request.replica} has no engine pods on {p.api_server}")
    found, _ = engines(cp, p, pods)
    if not found:
        raise FaultError(f"nothing running: no engine process in the {len(pods)} engine pod(s) "
                         f"of {p.request.replica} (workers of a multi-node engine run none)")
    killed = _terminate(found, group=True)
    for e in found:
        say(f"  stopped {e.what}" + (" (SIGKILL)" if e in killed else " (SIGTERM)"))
    say(f"  {p.components[0]} (pid {_pid(cp, p.components[0])}) restarts them by itself after "
        "its back-off (1 s, doubling per restart of the same pod up to 30 s), as kubelet "
        "does; the pods are Ready=False meanwhile. ACTION=start waits until they are back")


def _start_engines(cp: ControlPlane, p: Plan, say: Callable[[str], None]) -> None:
    mr = _replica(cp, p)
    if not _engine_pods(cp, p, mr):
        raise FaultError(f"ModelReplica {p.request.replica} has no engine pods on {p.api_server}")
    sup = p.components[0]

    def back() -> list[str]:
        pods = _engine_pods(cp, p, mr)
        found, missing = engines(cp, p, pods)
        unready = [pod["metadata"]["name"] for pod in pods if not any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (pod.get("status") or {}).get("conditions") or [])]
        if missing or unready or not pods:
            raise FaultError(f"no engine in {', '.join(missing) or '-'}; "
                             f"not Ready: {', '.join(unready) or '-'}")
        return [e.what for e in found] or ["no engine process (its pods' engines are workers)"]

    t = time.monotonic()
    found = wait_for(f"{sup} to have restarted the engines of {p.request.replica} and its "
                     "pods to be Ready", back, ENGINES_BACK, interval=0.5, logs=[cp.log(sup)],
                     died=lambda: None if cp.running(sup) else f"{sup} exited")
    for line in found:
        say(f"  running: {line}")
    say(f"  back: {sup} runs every engine of {p.request.replica} again and its pods are Ready "
        f"({time.monotonic() - t:.1f}s waited)")


# ---- the command -------------------------------------------------------------------------

ACT: Mapping[tuple[str, str], Callable[[ControlPlane, Plan, Callable[[str], None]], None]] = {
    ("gateway", "stop"): _stop_gateway, ("gateway", "start"): _start_gateway,
    ("cluster", "stop"): _stop_cluster, ("cluster", "start"): _start_cluster,
    ("engine", "stop"): _stop_engines, ("engine", "start"): _start_engines,
}


def _say(line: str) -> None:
    print(line, flush=True)


def run(cp: ControlPlane, req: Request, say: Callable[[str], None] = _say) -> Plan:
    """Plan the fault, carry it out, and say what was done."""
    p = plan(cp, req)
    target = f"the engines of ModelReplica {req.replica}" if req.part == "engine" else \
        f"the {req.part}"
    say(f"{req.action} {target} of InferenceCluster {req.cluster} (API server {p.api_server})"
        + (f"; {', '.join(p.also)} share it" if p.also else ""))
    try:
        ACT[(req.part, req.action)](cp, p, say)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FaultError(f"{type(exc).__name__}: {exc}") from exc
    kept = [c for c in p.keeps if cp.running(c)]
    if kept:
        say("  still running: " + ", ".join(_describe(cp, c) for c in kept))
    if req.action == "stop":
        again = " ".join(f"{k.upper()}={v}" for k, v in (("replica", req.replica),
                                                          ("namespace", req.namespace)) if v)
        say(f"restore: make fault CLUSTER={req.cluster} PART={req.part} ACTION=start"
            + (f" {again}" if again else ""))
    return p


__all__ = ["PARTS", "ACTIONS", "CLUSTER_KINDS", "LOST_CLUSTER", "FaultError", "Request", "Plan",
           "plan", "run", "cluster_components", "choose_replica", "envoys", "engines"]
