"""Run a Pod's mapped containers as processes inside the pod's own network namespace.

`PodRunner.start(pod, pod_ip)` does what a kubelet would for the containers
images.py maps: it creates the pod's namespace (netns.py) holding the IP kwok
assigned, writes its ConfigMap/Secret/downward-API volumes to files
(podspec.py), and starts each mapped container as a process inside the
namespace with the container's command/args (engines translated to the
simulator's flags, translate.py), env (downward API and ConfigMap/Secret keys
included) and paths under its mounts rewritten to those files. All containers of
a pod share its namespace, as in Kubernetes: the routing sidecar dials the decode
engine at localhost. Sidecars (init containers with restartPolicy Always) start
first; plain init containers and unmapped images are not run (kwok-only).

`probe()` runs the containers' readiness probes (probes.py) inside the
namespace; `stop()` sends SIGTERM to every process group, SIGKILL after a
bounded grace, and removes the namespace. A process that exits is reported by
`exited()`; restarting it is the caller's choice, as is writing Ready.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from e2e.controlplane.pods import images, lws, netns, podspec, probes
from e2e.controlplane.pods.images import Role
from e2e.controlplane.pods.translate import Settings, translate

STOP_GRACE = 5.0  # seconds between SIGTERM and SIGKILL (the pod's own grace, capped)
KILL_WAIT = 5.0   # seconds to wait for the kernel after SIGKILL


class RunnerError(RuntimeError):
    pass


@dataclass(frozen=True)
class Binaries:
    """The binaries that stand in for the mapped images (hack/tools.sh --dataplane --env)."""

    # Each field is the binary of the variable images.BINARY_VARIABLE names, lower-cased.
    inference_sim: str
    epp: str
    pd_sidecar: str
    lws_manager: str
    # The reporter is this repository's entry point, in the environment the harness runs in.
    inventory_reporter: str = str(Path(sys.executable).parent / "function-model-serving")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Binaries:
        """The tools' binaries from hack/tools.sh's variables (the reporter's is ours)."""
        names = [f.name.upper() for f in dataclasses.fields(cls)
                 if f.default is dataclasses.MISSING]
        missing = [v for v in names if not env.get(v)]
        if missing:
            raise RunnerError(f"no {', '.join(missing)}: run "
                              f"`hack/tools.sh --e2e --dataplane --env`")
        return cls(*(env[v] for v in names))

    def path(self, role: Role) -> str:
        return str(getattr(self, images.BINARY_VARIABLE[role].lower()))


@dataclass(frozen=True)
class ContainerPlan:
    """One container: what runs (argv empty: nothing), with which env, and its probe."""

    name: str
    role: Role | None
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: Path
    spec: Mapping[str, Any]
    probe: Mapping[str, Any] | None
    sidecar: bool = False
    note: str = ""
    dropped: tuple[str, ...] = ()


def _ordered(pod_spec: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], bool]]:
    """(container, is_sidecar) in kubelet's start order: sidecars, then containers."""
    out = [(c, True) for c in pod_spec.get("initContainers") or ()
           if c.get("restartPolicy") == "Always"]
    return out + [(c, False) for c in pod_spec.get("containers") or ()]


def plan(pod: Mapping[str, Any], pod_ip: str, binaries: Binaries, lookup: podspec.Lookup,
         pod_dir: Path, settings: Settings | None = None,
         extra_env: Mapping[Role, Mapping[str, str]] | None = None,
         api_env: Mapping[str, str] | None = None) -> list[ContainerPlan]:
    """Decide how each container runs; writes the pod's volumes under pod_dir.
    `api_env` (apiaccess.PodAccess) gives every run container the pod's API access;
    a container's own env wins over it."""
    volumes = podspec.materialise_volumes(pod, pod_ip, pod_dir, lookup)
    frozen = podspec.following(pod)
    plans = []
    for c, sidecar in _ordered(pod.get("spec") or {}):
        name, role = c["name"], images.role(c.get("image", ""))
        cwd = pod_dir / "containers" / name
        probe = c.get("readinessProbe")
        if role is None:
            plans.append(ContainerPlan(name, None, (), {}, cwd, c, None, sidecar,
                                       f"image {c.get('image')} is not mapped: kwok-only"))
            continue
        env = podspec.container_env(pod, c, pod_ip, lookup)
        command = [podspec.expand(s, env) for s in c.get("command") or ()]
        args = [podspec.expand(s, env) for s in c.get("args") or ()]
        mounts = podspec.container_mounts(c, volumes, pod_dir / "volume-subpaths" / name,
                                          frozen)
        binary = binaries.path(role)
        dropped: tuple[str, ...] = ()
        note = ""
        if role.is_engine:
            t = translate(role, command, args, env, settings or Settings())
            if not t.serving:
                plans.append(ContainerPlan(name, role, (), env, cwd, c, probe, sidecar, t.reason))
                continue
            argv = [binary, *t.argv]
            dropped = t.dropped
        else:
            # The image's entrypoint is the binary: a command replaces only its path.
            argv = [binary, *command[1:], *args]
        argv = podspec.rewrite_paths(argv, mounts)
        if role is Role.LWS:
            argv, note = lws.translate(argv, mounts, cwd)
        env = dict(zip(env, podspec.rewrite_paths(list(env.values()), mounts)))
        env = {**(api_env or {}), **env, **(extra_env or {}).get(role, {})}
        plans.append(ContainerPlan(name, role, tuple(argv), env, cwd, c, probe, sidecar, note,
                                   dropped))
    return plans


@dataclass
class RunningPod:
    key: str
    pod_ip: str
    netns: str | None
    pod_dir: Path
    plans: list[ContainerPlan]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: list[IO[bytes]] = field(default_factory=list)
    stopped: bool = False


Spawn = Callable[..., "subprocess.Popen[bytes]"]
# (pod, pod_dir) -> env giving its containers API access (apiaccess.PodAccess).
ApiAccess = Callable[[Mapping[str, Any], Path], Mapping[str, str]]


class PodRunner:
    """Runs pods of one cluster. network=None runs processes in this namespace
    (unit tests); otherwise each pod gets a namespace on the cluster's bridge."""

    def __init__(self, cluster: str, binaries: Binaries, state_dir: Path,
                 lookup: podspec.Lookup, *, network: netns.Network | None = None,
                 bridge: netns.Bridge | None = None, settings: Settings | None = None,
                 extra_env: Mapping[Role, Mapping[str, str]] | None = None,
                 api_access: ApiAccess | None = None,
                 spawn: Spawn = subprocess.Popen) -> None:
        if (network is None) != (bridge is None):
            raise RunnerError("network and bridge go together")
        self.cluster, self.binaries, self.state_dir = cluster, binaries, Path(state_dir)
        self.lookup, self.network, self.bridge = lookup, network, bridge
        self.settings = settings or Settings()
        self.extra_env, self._spawn = extra_env or {}, spawn
        self.api_access = api_access

    @staticmethod
    def pod_key(pod: Mapping[str, Any]) -> str:
        meta = pod.get("metadata") or {}
        return meta.get("uid") or f"{meta.get('namespace', 'default')}/{meta['name']}"

    def start(self, pod: Mapping[str, Any], pod_ip: str) -> RunningPod:
        """Namespace, volumes, processes; on any failure everything is undone."""
        key = self.pod_key(pod)
        ns = netns.netns_name(self.cluster, key)
        pod_dir = self.state_dir / ns
        running = RunningPod(key, pod_ip, ns if self.network else None, pod_dir, [])
        try:
            if self.network is not None and self.bridge is not None:
                self.network.add_pod(self.bridge, ns, pod_ip)
            api_env = self.api_access(pod, pod_dir) if self.api_access is not None else {}
            running.plans = plan(pod, pod_ip, self.binaries, self.lookup, pod_dir,
                                 self.settings, self.extra_env, api_env)
            prefix = self.network.exec_prefix(ns) if self.network is not None else []
            for p in running.plans:
                if p.argv:
                    running.procs[p.name] = self._launch(running, p, prefix)
        except BaseException:
            self.stop(running)
            raise
        return running

    def _launch(self, running: RunningPod, p: ContainerPlan,
                prefix: Sequence[str]) -> subprocess.Popen[bytes]:
        p.cwd.mkdir(parents=True, exist_ok=True)
        # Kept open for the process's life; stop() closes it.
        log = open(running.pod_dir / f"{p.name}.log", "ab")  # noqa: SIM115
        running.logs.append(log)
        # Kubelet gives a container the image's env plus the pod's; the images'
        # env is not here, so PATH and HOME come from the harness. A container's
        # /tmp is its own: TMPDIR keeps what a program puts under os.TempDir apart.
        tmp = p.cwd / "tmp"
        tmp.mkdir(exist_ok=True)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(p.cwd),
               "TMPDIR": str(tmp), "HOSTNAME": running.key.rsplit("/", 1)[-1], **p.env}
        # Own session: its process group is its PID, so stop() reaches its children.
        return self._spawn([*prefix, *p.argv], env=env, cwd=p.cwd, stdin=subprocess.DEVNULL,
                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def sync_volumes(self, pod: Mapping[str, Any], running: RunningPod) -> list[str]:
        """Bring the pod's ConfigMap/Secret volumes in step with their sources
        (podspec.refresh_volumes); what changed."""
        return podspec.refresh_volumes(pod, running.pod_ip, running.pod_dir, self.lookup)

    def exited(self, running: RunningPod) -> dict[str, int]:
        """Containers whose process has exited, with exit codes."""
        return {n: code for n, proc in running.procs.items()
                if (code := proc.poll()) is not None}

    def probe(self, running: RunningPod) -> dict[str, probes.Result]:
        """Each container's readiness: its probe passes; without one, its process runs."""
        out: dict[str, probes.Result] = {}
        for p in running.plans:
            proc = running.procs.get(p.name)
            if proc is not None and proc.poll() is not None:
                out[p.name] = probes.Result(False, f"exited with {proc.returncode}")
            elif p.probe is not None and p.argv:
                try:
                    out[p.name] = probes.run(p.probe, p.spec, running.pod_ip, running.netns)
                except probes.ProbeError as e:
                    out[p.name] = probes.Result(False, str(e))
            else:
                # Nothing runs for a container that serves nothing even in the real
                # engine (a headless worker) or is kwok-only: it cannot hold the pod back.
                out[p.name] = probes.Result(True, "running" if proc else p.note or "not run")
        return out

    def ready(self, running: RunningPod) -> bool:
        return all(r.ok for r in self.probe(running).values())

    def wait_ready(self, running: RunningPod, timeout: float, period: float = 0.5) -> dict[str, probes.Result]:
        """Probe until every container is ready, a process exits, or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            results = self.probe(running)
            if all(r.ok for r in results.values()):
                return results
            # Read after probing: a process that exits meanwhile is named as exited.
            gone = self.exited(running)
            if gone or time.monotonic() > deadline:
                why = {n: r.detail for n, r in results.items() if not r.ok}
                why |= {n: f"exited with {code}" for n, code in gone.items()}
                raise RunnerError(f"pod {running.key} not ready: " + "; ".join(
                    f"{n}: {d}" for n, d in why.items()) + f" (logs in {running.pod_dir})")
            time.sleep(period)

    def stop(self, running: RunningPod, grace: float = STOP_GRACE) -> None:
        """SIGTERM every process group, SIGKILL what outlives grace, remove the namespace.

        Idempotent; the namespace is removed even when signalling fails.
        """
        try:
            _signal_all(running.procs.values(), signal.SIGTERM)
            if not _wait_all(running.procs.values(), grace):
                _signal_all(running.procs.values(), signal.SIGKILL)
                if not _wait_all(running.procs.values(), KILL_WAIT):
                    raise RunnerError(f"pod {running.key}: processes outlived SIGKILL")
        finally:
            for log in running.logs:
                log.close()
            running.logs.clear()
            if self.network is not None and running.netns is not None:
                self.network.remove_pod(running.netns)
            running.stopped = True


def _signal_all(procs: Any, sig: int) -> None:
    for proc in procs:
        if proc.poll() is not None:
            continue  # reaped: its PID may belong to someone else by now
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass  # the group is gone already


def _wait_all(procs: Any, timeout: float) -> bool:
    """Wait until every process has exited (reaped), at most timeout s."""
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return False
    return True
