"""A kubelet's part for the pods kwok hands over: run them, probe them, write Ready.

One supervisor per cluster (`python -m e2e.controlplane.pods`). kwok assigns
every pod its IP and, through our stages (stages/), leaves a runnable pod
Running with `Ready=False`. The supervisor watches the cluster's pods and:

- starts a runnable, Running pod that has an IP and is not being deleted
  (runner.py: its own network namespace on the cluster's bridge);
- re-reads a running pod's ConfigMap/Secret volumes at its probes' period, at
  most every VOLUME_SYNC seconds, and rewrites the files whose source changed
  (kubelet does: the LWS manager's cert rotator fills its Secret after start);
- probes each running pod at its probes' period and writes `Ready`,
  `ContainersReady` and `containerStatuses[].ready` when they change, so
  EndpointSlices follow real readiness;
- restarts a container whose process exited (the pod is not ready meanwhile),
  with a growing back-off, as kubelet does under `restartPolicy: Always`;
- retries a pod that cannot start yet (a ConfigMap or Secret it mounts is not
  there yet: provider-kubernetes creates a replica's objects in no set order)
  with the same back-off, as kubelet retries a volume mount;
- stops a pod's processes and removes its namespace once the pod is being
  deleted or is gone, and at start-up removes namespaces left by pods that
  no longer exist;
- marks Ready again a pod kwok keeps (nothing runs it here) that the node
  lifecycle controller marked unready while its node was NotReady (a remote API
  server down for a while stops kwok's heartbeats), once its node is Ready again,
  as a kubelet re-reports its pods when it is back: kwok's own stage marks only a
  Pending pod Ready, so a Deployment of kwok's pods (Envoy Gateway's controller,
  which a cluster's stack installs) would stay unavailable for good.

The decisions are here, free of I/O (`Supervisor` over an `Api`); `kube.py`
is the Api on a real API server.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from e2e.controlplane.pods import images, netns, probes
from e2e.controlplane.pods.runner import PodRunner, RunningPod
from function.contract.validation import condition_of

log = logging.getLogger("pods")

DEFAULT_PERIOD = 10.0   # seconds: a probe's periodSeconds when it names none (Kubernetes')
NOT_PROBED_PERIOD = 2.0  # seconds between checks of a pod whose containers have no probe
BACKOFF_FIRST, BACKOFF_MAX = 1.0, 30.0  # seconds before restarting an exited container
# Seconds between re-reads of a running pod's ConfigMap/Secret volumes (a GET per
# source each time; kubelet's own resync is a minute): shorter probe periods (2 s
# for some engines) would multiply the reads by pods, not make anything sooner
# that waits on them.
VOLUME_SYNC = 10.0
NODE_RECHECK = 5.0  # seconds between looks at the nodes of kwok's pods marked unready


class Runner(Protocol):
    """What the supervisor asks of runner.PodRunner."""

    def start(self, pod: Mapping[str, Any], pod_ip: str) -> RunningPod: ...
    def stop(self, running: RunningPod) -> None: ...
    def exited(self, running: RunningPod) -> dict[str, int]: ...
    def probe(self, running: RunningPod) -> dict[str, probes.Result]: ...
    def sync_volumes(self, pod: Mapping[str, Any], running: RunningPod) -> list[str]: ...


class Api(Protocol):
    def set_ready(self, pod: Mapping[str, Any], ready: bool, message: str) -> None: ...
    def node_ready(self, name: str) -> bool: ...


@dataclass
class Tracked:
    pod: Mapping[str, Any]
    running: RunningPod
    period: float
    ready: bool | None = None  # what was last written; None: nothing yet
    next_probe: float = 0.0
    next_sync: float = 0.0  # when its volumes are next compared with their sources
    restarts: int = 0
    restart_at: float | None = None


@dataclass
class Waiting:
    """A pod that could not start (or restart): retried at `retry_at`."""

    pod: Mapping[str, Any]
    attempts: int
    retry_at: float
    said: str = ""  # the reason last written, so a retry writes only a new one


def backoff(attempts: int) -> float:
    """Seconds before the next try after `attempts` failures (kubelet's doubling)."""
    return min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** max(attempts - 1, 0))


def wanted(pod: Mapping[str, Any]) -> bool:
    """A pod the supervisor should be running now."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    return (images.runnable(pod) and not meta.get("deletionTimestamp")
            and status.get("phase") == "Running" and bool(status.get("podIP")))


def unready_by_its_node(pod: Mapping[str, Any]) -> bool:
    """A pod kwok keeps (nothing runs it here), Running, whose containers kwok said
    ready, yet not Ready: what the node lifecycle controller leaves when it marks the
    pods of a NotReady node."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    return (not images.runnable(pod) and not meta.get("deletionTimestamp")
            and status.get("phase") == "Running" and bool((pod.get("spec") or {}).get("nodeName"))
            and (condition_of(pod, "ContainersReady") or {}).get("status") == "True"
            and (condition_of(pod, "Ready") or {}).get("status") == "False")


def probe_period(pod: Mapping[str, Any]) -> float:
    """The shortest readiness probe period of the pod's containers."""
    spec = pod.get("spec") or {}
    periods = [float((c.get("readinessProbe") or {}).get("periodSeconds") or DEFAULT_PERIOD)
               for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
               if c.get("readinessProbe")]
    return min(periods) if periods else NOT_PROBED_PERIOD


def ready_status(pod: Mapping[str, Any], ready: bool, message: str,
                 now: datetime.datetime) -> dict[str, Any]:
    """The pod's status with Ready and ContainersReady set and every container's
    `ready` flag; whole lists, so a merge patch of any kind writes them right."""
    status = pod.get("status") or {}
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    value = "True" if ready else "False"
    conditions = []
    seen = set()
    for c in status.get("conditions") or []:
        c = dict(c)
        if c.get("type") in ("Ready", "ContainersReady"):
            seen.add(c["type"])
            if c.get("status") != value:
                c["lastTransitionTime"] = stamp
            c["status"] = value
            if ready:
                c.pop("reason", None)
                c.pop("message", None)
            else:
                c.update(reason="ContainersNotReady", message=message[:1000])
        conditions.append(c)
    for typ in ("Ready", "ContainersReady"):
        if typ not in seen:
            c = {"type": typ, "status": value, "lastTransitionTime": stamp}
            if not ready:
                c.update(reason="ContainersNotReady", message=message[:1000])
            conditions.append(c)
    containers = [{**c, "ready": ready} for c in status.get("containerStatuses") or []]
    # Sidecars (restartable init containers) are ready with the pod; run-once init
    # containers keep what they say.
    sidecars = {c.get("name") for c in (pod.get("spec") or {}).get("initContainers") or []
                if c.get("restartPolicy") == "Always"}
    inits = [{**c, "ready": ready} if c.get("name") in sidecars else dict(c)
             for c in status.get("initContainerStatuses") or []]
    out: dict[str, Any] = {"conditions": conditions}
    if containers:
        out["containerStatuses"] = containers
    if sidecars and inits:
        out["initContainerStatuses"] = inits
    return out


class Supervisor:
    def __init__(self, runner: Runner, api: Api, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.runner, self.api, self.clock = runner, api, clock
        self.tracked: dict[str, Tracked] = {}
        self.waiting: dict[str, Waiting] = {}
        # kwok's pods marked unready with their node, by key: Ready again once it is.
        self.unready: dict[str, Mapping[str, Any]] = {}
        self.next_node_check = 0.0

    def observe(self, kind: str, pod: Mapping[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) for a pod of the cluster."""
        key = PodRunner.pod_key(pod)
        t = self.tracked.get(key)
        if kind != "DELETED" and unready_by_its_node(pod):
            self.unready[key] = pod
        else:
            self.unready.pop(key, None)
        if kind == "DELETED" or not wanted(pod):
            self.waiting.pop(key, None)
            if t is not None:
                self._stop(key, t)
            return
        if t is not None:
            t.pod = pod
            # Someone else wrote Ready (the node lifecycle controller marks pods of a
            # NotReady node unready): probe now and write what the probes say, as a
            # kubelet's status manager does, instead of only on a change of our own.
            said = (condition_of(pod, "Ready") or {}).get("status")
            if t.ready is not None and said != ("True" if t.ready else "False"):
                t.ready, t.next_probe = None, 0.0
            return
        if key in self.waiting:  # tick retries it on its schedule
            self.waiting[key].pod = pod
            return
        self._start(key, pod, Waiting(pod, 0, 0.0))

    def _start(self, key: str, pod: Mapping[str, Any], w: Waiting) -> None:
        ip = pod["status"]["podIP"]
        try:
            running = self.runner.start(pod, ip)
        except Exception as exc:  # noqa: BLE001 - one pod's failure must not stop the rest
            w.attempts += 1
            w.retry_at = self.clock() + backoff(w.attempts)
            why = f"does not start: {exc}"
            log.warning("pod %s %s (try %d)", key, why, w.attempts)
            if why != w.said:
                self._write(pod, False, why)
                w.said = why
            self.waiting[key] = w
            return
        self.waiting.pop(key, None)
        log.info("pod %s started at %s", key, ip)
        period = probe_period(pod)
        # Its volumes were just written: compared again a period from now.
        self.tracked[key] = Tracked(pod, running, period,
                                    next_sync=self.clock() + max(period, VOLUME_SYNC))

    def tick(self) -> None:
        """Retry what could not start, probe what is due, restart what exited, write
        readiness that changed."""
        now = self.clock()
        if self.unready and now >= self.next_node_check:
            self.next_node_check = now + NODE_RECHECK
            self._ready_again()
        for key, w in list(self.waiting.items()):
            if now >= w.retry_at:
                self._start(key, w.pod, w)
        for key, t in list(self.tracked.items()):
            gone = self.runner.exited(t.running)
            if gone:
                self._restart(key, t, gone, now)
                continue
            if now < t.next_probe:
                continue
            t.next_probe = now + t.period
            if now >= t.next_sync:
                t.next_sync = now + max(t.period, VOLUME_SYNC)
                self._sync_volumes(key, t)
            results = self.runner.probe(t.running)
            ready = all(r.ok for r in results.values())
            why = "; ".join(f"{n}: {r.detail}" for n, r in sorted(results.items()) if not r.ok)
            if ready != t.ready:
                self._write(t.pod, ready, why)
                t.ready = ready

    def _ready_again(self) -> None:
        """kwok's pods whose node is Ready again: Ready, as kwok's stage made them."""
        nodes: dict[str, bool] = {}
        for key, pod in list(self.unready.items()):
            node = pod["spec"]["nodeName"]
            if node not in nodes:
                try:
                    nodes[node] = self.api.node_ready(node)
                except Exception as exc:  # noqa: BLE001 - looked at again next time
                    log.warning("node %s: cannot read its status: %s", node, exc)
                    nodes[node] = False
            if nodes[node]:
                log.info("pod %s: its node %s is Ready again", key, node)
                self._write(pod, True, "")
                del self.unready[key]

    def _sync_volumes(self, key: str, t: Tracked) -> None:
        try:
            changed = self.runner.sync_volumes(t.pod, t.running)
        except Exception as exc:  # noqa: BLE001 - the files stay; the next period tries again
            log.warning("pod %s: cannot re-read its volumes: %s", key, exc)
            return
        if changed:
            log.info("pod %s: volume files updated: %s", key, ", ".join(changed))

    def _restart(self, key: str, t: Tracked, gone: Mapping[str, int], now: float) -> None:
        if t.ready is not False:
            self._write(t.pod, False, "; ".join(f"{n}: exited with {c}"
                                                for n, c in sorted(gone.items())))
            t.ready = False
        if t.restart_at is None:
            t.restart_at = now + backoff(t.restarts + 1)
            return
        if now < t.restart_at:
            return
        log.info("pod %s: restarting after %s", key, dict(gone))
        self.runner.stop(t.running)
        try:
            t.running = self.runner.start(t.pod, t.running.pod_ip)
        except Exception as exc:  # noqa: BLE001 - retried at the next back-off
            log.warning("pod %s does not restart: %s", key, exc)
            t.running.stopped = True
            del self.tracked[key]
            why = f"does not start: {exc}"
            self._write(t.pod, False, why)
            self.waiting[key] = Waiting(t.pod, 1, now + backoff(t.restarts + 1), why)
            return
        t.restarts += 1
        t.restart_at, t.next_probe = None, now

    def _stop(self, key: str, t: Tracked) -> None:
        log.info("pod %s stopped", key)
        self.runner.stop(t.running)
        del self.tracked[key]

    def _write(self, pod: Mapping[str, Any], ready: bool, message: str) -> None:
        try:
            self.api.set_ready(pod, ready, message)
        except Exception as exc:  # noqa: BLE001 - the next change or probe writes again
            log.warning("pod %s: cannot write Ready=%s: %s", PodRunner.pod_key(pod), ready, exc)

    def stop_all(self) -> None:
        for key, t in list(self.tracked.items()):
            self._stop(key, t)


def stale_namespaces(cluster: str, live_keys: Iterable[str],
                     existing: Iterable[str]) -> list[str]:
    """This cluster's pod namespaces whose pod no longer exists."""
    live = {netns.netns_name(cluster, k) for k in live_keys}
    prefix = netns.cluster_netns_prefix(cluster)
    return sorted(n for n in existing if n.startswith(prefix) and n not in live)
