"""A real local control plane on loopback, without Docker: `ControlPlane`.

    cp = ControlPlane.up("examples/fleet")          # or ControlPlane.load()
    cp.kubectl("get", "ic")                          # the control plane
    cp.kubectl("get", "nodes", cluster="eu-west-1")  # a remote workload cluster
    cp.stop("apiserver:eu-west-1"); cp.start("apiserver:eu-west-1")
    cp.down()

What runs (every process in its own process group, PIDs and ports recorded
in the state directory, default `.cluster/`):

* etcd (one, loopback), and per cluster a kube-apiserver (its own
  --etcd-prefix), kube-controller-manager, kube-scheduler and kwok, and on the
  control-plane cluster the LeaderWorkerSet controller. The control-plane cluster is also the workload
  cluster of every InferenceCluster without spec.providerConfigRef; every
  other InferenceCluster gets a cluster of its own.
* envoy-gateway:<cluster>: Envoy Gateway's controller, one per cluster that holds
  a Gateway (e2e/controlplane/envoy_gateway.py): it writes GatewayClass, Gateway
  and HTTPRoute status and runs each Gateway's Envoy as its child, the cluster's
  data plane on a loopback address of its own (e2e/controlplane/dataplane.py):
  http://127.0.0.N:8000 is each InferenceCluster's spec.gateway.address.
* inferencepool-extension:<cluster>: our Envoy Gateway extension server
  (tools/inferencepool-extension), started before its controller: routes each
  InferencePool through its endpoint picker and writes the pool's status.
* pods:<cluster>: the kubelet's part for runnable pods (e2e/controlplane/pods/):
  the engines, endpoint pickers and P/D sidecars of the replicas, the LeaderWorkerSet
  manager a remote cluster's stack installs, and its inventory reporter.
* registry: go-containerregistry's `crane registry serve` holding the
  packages, which Crossplane installs the way users do (an ImageConfig
  rewrites xpkg.crossplane.io/ to it).
* crossplane: core, out of cluster, with the External package runtime. The
  harness plays that runtime: `function` is this repository's
  `function-model-serving serve` (mTLS) and `provider-kubernetes` the
  provider's binary, both local processes.
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from e2e.controlplane import (addons, certs, dataplane, envoy_gateway, fleet, security, stack,
                              tools)
from e2e.controlplane.pods import harness as pods
from e2e.controlplane.procs import Spec, Supervisor, tail
from e2e.controlplane.waits import (ComponentDied, WaitTimeout, bindable, free_port, http_get,
                                    probe, scale, wait_for)
from function.cluster import stackenvoy
from function.contract.inventory_report import REPORT_NAME, REPORT_NAMESPACE

REPO = Path(__file__).resolve().parents[2]
DEFAULT_STATE_DIR = REPO / ".cluster"
STATE_FILE = "state.json"
CROSSPLANE_NS = "crossplane-system"
CA_SECRET = "crossplane-root-ca"
CLIENT_SECRET = "crossplane-tls-client"
FUNCTION_TLS_SECRET = "function-model-serving-tls-server"
PROVIDER_TLS_SECRET = "provider-kubernetes-tls-server"
IMAGE_CONFIG = "local-registry"
# provider-kubernetes v1.2.0 hard-codes its metrics (:8080) and webhook (:9443)
# listeners, on every interface: the one exception to loopback only.
PROVIDER_FIXED_PORTS = (8080, 9443)
# provider-kubernetes' --poll unless $PROVIDER_KUBERNETES_POLL says otherwise (below).
PROVIDER_POLL = "1m"
PUBLIC_REGISTRY = "xpkg.crossplane.io/"
SERVICE_CIDR = "10.96.0.0/16"
KWOK_NODE_SELECTOR = f"{fleet.KWOK_ANNOTATION}=fake"
FIELD_MANAGER = "modelplane-e2e"

# Stop order for `down`: consumers first, storage last.
STOP_ORDER_PREFIXES = ("pods:", "function", "provider-kubernetes", "crossplane",
                       "envoy-gateway:", "inferencepool-extension:", "lws:", "kwok:", "scheduler:",
                       "controller-manager:", "apiserver:",
                       "registry", "etcd")

# kube-controller-manager: everything but what needs a cloud or a CNI.
KCM_CONTROLLERS = "*,-node-ipam-controller,-cloud-node-lifecycle-controller," \
                  "-service-lb-controller,-node-route-controller"


class ControlPlaneError(RuntimeError):
    pass


def _version() -> str:
    text = (REPO / "function" / "__version__.py").read_text()
    m = re.search(r'^__version__ = "(.*)"$', text, re.M)
    if not m:
        raise ControlPlaneError("no __version__ in function/__version__.py")
    return m.group(1)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class ClusterHandle:
    """One API server: its kubeconfig and a kubectl bound to it."""

    def __init__(self, cp: ControlPlane, name: str, data: Mapping[str, Any]) -> None:
        self._cp = cp
        self.name: str = name
        self.kubeconfig: Path = Path(data["kubeconfig"])
        self.remote: bool = bool(data["remote"])
        self.provider_config: str | None = data.get("providerConfig")
        self.inference_clusters: tuple[str, ...] = tuple(data.get("inferenceClusters") or ())
        self.server: str = data["server"]

    @property
    def apiserver(self) -> str:
        return f"apiserver:{self.name}"

    def kubectl(self, *args: str, input: str | bytes | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess:
        return self._cp.kubectl(*args, cluster=self, input=input, check=check, timeout=timeout)

    def __repr__(self) -> str:
        return f"ClusterHandle({self.name!r}, kubeconfig={str(self.kubeconfig)!r})"


class ControlPlane:
    """A running local control plane, described by its state directory."""

    def __init__(self, state_dir: Path, state: Mapping[str, Any], *,
                 say: Callable[[str], None] = _say) -> None:
        self.state_dir = Path(state_dir)
        # Shared, not copied: `up` keeps adding to it while it builds.
        self.state = state if isinstance(state, dict) else dict(state)
        self.say = say
        self.sup = Supervisor(self.state_dir)
        self.tools: dict[str, str] = dict(state.get("tools") or {})
        self.kubeconfig: Path = Path(state["kubeconfig"])
        self._handles = {name: ClusterHandle(self, name, data)
                         for name, data in (state.get("clusters") or {}).items()}
        self.control_plane: ClusterHandle = self._handles[fleet.CONTROL_PLANE]
        # InferenceCluster name -> the cluster that backs it.
        self.clusters: dict[str, ClusterHandle] = {}
        for handle in self._handles.values():
            for ic in handle.inference_clusters:
                self.clusters[ic] = handle

    # ---- construction --------------------------------------------------------

    @classmethod
    def up(cls, fleet_dir: str | Path = REPO / "examples" / "fleet",
           state_dir: str | Path = DEFAULT_STATE_DIR, *,
           say: Callable[[str], None] = _say) -> ControlPlane:
        """Start everything for `fleet_dir` and return once every InferenceCluster
        reports its status. On failure, whatever was started is stopped again."""
        return _Builder(Path(fleet_dir), Path(state_dir), say).run()

    @classmethod
    def load(cls, state_dir: str | Path = DEFAULT_STATE_DIR, *,
             say: Callable[[str], None] = _say) -> ControlPlane:
        path = Path(state_dir) / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            raise ControlPlaneError(f"no control plane in {state_dir} (no {STATE_FILE}); "
                                    "run `make cluster`") from None
        if not state.get("complete"):
            raise ControlPlaneError(f"the control plane in {state_dir} never finished starting; "
                                    "run `make cluster-down` and `make cluster` again")
        return cls(Path(state_dir), state, say=say)

    # ---- kubectl -------------------------------------------------------------

    def cluster(self, cluster: str | ClusterHandle | None = None) -> ClusterHandle:
        if cluster is None:
            return self.control_plane
        if isinstance(cluster, ClusterHandle):
            return cluster
        if cluster in self._handles:
            return self._handles[cluster]
        if cluster in self.clusters:
            return self.clusters[cluster]
        raise KeyError(f"no cluster {cluster!r} (clusters: "
                       f"{', '.join(sorted({*self._handles, *self.clusters}))})")

    def kubectl(self, *args: str, cluster: str | ClusterHandle | None = None,
                input: str | bytes | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess:
        """Run the pinned kubectl against the control plane (or `cluster`, an
        InferenceCluster's name or a cluster handle). Text in, text out."""
        handle = self.cluster(cluster)
        argv = [self.tools["KUBECTL"], "--kubeconfig", str(handle.kubeconfig), *args]
        if isinstance(input, bytes):
            input = input.decode()
        proc = subprocess.run(argv, input=input, capture_output=True, text=True,
                              timeout=timeout * scale())
        if check and proc.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} on {handle.name} failed "
                                    f"({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def get_json(self, *args: str, cluster: str | ClusterHandle | None = None) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json", cluster=cluster).stdout)

    def apply(self, docs: Iterable[Mapping[str, Any]] | None = None, *,
              files: Sequence[Path] = (), cluster: str | ClusterHandle | None = None,
              timeout: float = 120) -> None:
        """Server-side apply manifests and/or files."""
        if docs is not None:
            docs = list(docs)
            if docs:
                self.kubectl("apply", "--server-side", "--force-conflicts",
                             f"--field-manager={FIELD_MANAGER}", "-f", "-",
                             input=addons.dump_all(docs), cluster=cluster, timeout=timeout)
        for chunk in range(0, len(files), 20):
            args = []
            for f in files[chunk:chunk + 20]:
                args += ["-f", str(f)]
            self.kubectl("apply", "--server-side", "--force-conflicts",
                         f"--field-manager={FIELD_MANAGER}", *args, cluster=cluster,
                         timeout=timeout)

    @property
    def gateways(self) -> dict[str, dict]:
        """InferenceCluster -> its gateway on this machine: url (its spec.gateway.address),
        address, port, cluster, and the Gateway's namespace and name."""
        return {ic: dict(g) for ic, g in (self.state.get("gateways") or {}).items()}

    # ---- components ----------------------------------------------------------

    def components(self) -> list[str]:
        return list(self.state.get("order") or [])

    def _record(self, component: str) -> Mapping[str, Any]:
        aliases = {f"apiserver:{ic}": f"apiserver:{h.name}" for ic, h in self.clusters.items()}
        for kind in ("controller-manager", "scheduler", "kwok", "lws", "envoy-gateway"):
            aliases.update({f"{kind}:{ic}": f"{kind}:{h.name}" for ic, h in self.clusters.items()})
        name = aliases.get(component, component)
        rec = (self.state.get("components") or {}).get(name)
        if rec is None:
            raise KeyError(f"no component {component!r} (components: "
                           f"{', '.join(self.components())})")
        return rec

    def component_name(self, component: str) -> str:
        return self._record(component)["spec"]["name"]

    def running(self, component: str) -> bool:
        return self.sup.alive(self.component_name(component))

    def log(self, component: str) -> Path:
        return self.sup.log_path(self.component_name(component))

    def stop(self, component: str, timeout: float = 20.0) -> None:
        """Stop one component (its whole process group): SIGTERM, a bounded wait,
        SIGKILL. Its data stays (an API server's lives in etcd)."""
        name = self.component_name(component)
        self.sup.stop(name, timeout=timeout)

    def start(self, component: str, timeout: float | None = None) -> None:
        """Start a stopped component with its recorded command line and ports, and
        wait until it is ready again."""
        rec = self._record(component)
        spec = Spec.from_json(rec["spec"])
        if self.sup.alive(spec.name):
            raise ControlPlaneError(f"{spec.name} is already running")
        self.sup.start(spec)
        self.wait_ready(spec.name, timeout=timeout)
        if spec.name in ("function", "crossplane", "provider-kubernetes"):
            self.ensure_package_runtime()
        if spec.name == "registry":
            self.push_packages()
        # Envoy Gateway v1.9.1's cache went stale across its API server's restart (it
        # kept writing a deleted HTTPRoute's status, "not found", and never the new
        # one's); restarted, it wrote it at once. Restart it with its API server.
        eg = "envoy-gateway:" + spec.name.removeprefix("apiserver:")
        if spec.name.startswith("apiserver:") and eg in self.components() \
                and self.sup.alive(eg):
            self.restart(eg, timeout=timeout)

    def restart(self, component: str, timeout: float | None = None) -> None:
        self.stop(component)
        self.start(component, timeout=timeout)

    def wait_ready(self, name: str, timeout: float | None = None) -> None:
        rec = self._record(name)
        desc = rec.get("probe") or {"type": "none"}
        wait_for(f"{name} to be ready ({desc.get('what') or desc['type']})",
                 lambda: probe(desc), timeout or rec.get("timeout") or 180,
                 logs=[self.sup.log_path(name)], died=lambda: self._died(name))
        if desc.get("nodes"):
            self._wait_nodes_ready(desc["cluster"], desc["nodes"], timeout or 180)

    def _died(self, name: str) -> str | None:
        if self.sup.alive(name):
            return None
        code = self.sup.exit_status(name)
        return f"{name} exited" + (f" with status {code}" if code is not None else "")

    def _wait_nodes_ready(self, cluster: str, nodes: Sequence[str], timeout: float) -> None:
        want = set(nodes)

        def ready() -> bool:
            items = self.get_json("nodes", "-l", "type=kwok", cluster=cluster)["items"]
            ok = {n["metadata"]["name"] for n in items
                  if any(c.get("type") == "Ready" and c.get("status") == "True"
                         for c in (n.get("status") or {}).get("conditions") or [])}
            missing = want - ok
            if missing:
                raise ControlPlaneError(f"not Ready yet: {', '.join(sorted(missing)[:5])}"
                                        + (" ..." if len(missing) > 5 else ""))
            return True

        wait_for(f"the {len(want)} kwok nodes of {cluster} to be Ready", ready, timeout,
                 logs=[self.sup.log_path(f"kwok:{cluster}"),
                       self.sup.log_path(f"controller-manager:{cluster}")])

    def rss_kib(self) -> dict[str, int]:
        """VmRSS per running component (summed over its process group), in KiB."""
        return {name: self.sup.rss_kib(name) for name in self.components()
                if self.sup.alive(name)}

    def down(self, timeout: float = 20.0) -> list[str]:
        return stop_everything(self.state_dir, timeout=timeout, order=self.components())

    # ---- the harness's package runtime -------------------------------------------

    def function_revisions(self) -> list[dict]:
        """Every active FunctionRevision of every Function (found by listing: the
        name Crossplane gives a dependency is its own business)."""
        return self._active_revisions("functionrevisions.pkg.crossplane.io")

    def provider_revisions(self) -> list[dict]:
        return self._active_revisions("providerrevisions.pkg.crossplane.io")

    def _active_revisions(self, resource: str) -> list[dict]:
        items = self.get_json(resource)["items"]
        return [r for r in items if (r.get("spec") or {}).get("desiredState") == "Active"]

    def ensure_package_runtime(self) -> list[str]:
        """Play the package runtime Crossplane's External runtime leaves to us: point
        every active FunctionRevision at the local function server, and give every
        active revision (Function and Provider) the TLS server Secret a Deployment
        runtime would have made (without it Crossplane does not establish the
        package's objects)."""
        patched = []
        fn = self.state.get("function") or {}
        prov = self.state.get("provider") or {}
        todo = []
        if fn.get("endpoint"):
            todo += [("functionrevisions.pkg.crossplane.io", r,
                      {"endpoint": fn["endpoint"], "tlsServerSecretName": fn["secret"]})
                     for r in self.function_revisions()]
        if prov.get("secret"):
            todo += [("providerrevisions.pkg.crossplane.io", r,
                      {"tlsServerSecretName": prov["secret"]})
                     for r in self.provider_revisions()]
        for resource, rev, want in todo:
            status = rev.get("status") or {}
            if all(status.get(k) == v for k, v in want.items()):
                continue
            self.kubectl("patch", resource, rev["metadata"]["name"], "--subresource=status",
                         "--type=merge", "-p", json.dumps({"status": want}))
            patched.append(rev["metadata"]["name"])
        return patched

    # ---- reading ----------------------------------------------------------------

    def push_packages(self) -> None:
        """Push the packages to the local registry (again: `crane registry serve`
        keeps manifests in memory, so a restarted registry starts empty)."""
        log = self.sup.logs / "push.log"
        with open(log, "a") as o:
            for path, ref in self.state.get("pushes") or []:
                proc = subprocess.run([self.tools["CRANE"], "push", path, ref], stdout=o,
                                      stderr=subprocess.STDOUT, timeout=600 * scale())
                if proc.returncode != 0:
                    raise ControlPlaneError(f"crane push {path} {ref} failed; {log}:\n{tail(log)}")

    def hints(self) -> str:
        kc = self.kubeconfig
        kubectl = self.tools.get("KUBECTL", "kubectl")
        lines = [
            "",
            f"Control plane is up (state in {self.state_dir}).",
            f"  export KUBECONFIG={kc}",
            f"  kubectl (v1.34, pinned): {kubectl}",
            "",
            "Try:",
            "  kubectl get ic                      # the fleet: nodes, free nodes and free devices per pool",
            "  kubectl apply -f examples/deployments/single-gpu.yaml",
            "  kubectl get md,mr -A                # deployments, and the replicas placed",
            "  kubectl -n ml-team get deploy,pods,resourceclaims   # us-east-1 runs here",
            "  kubectl apply -f examples/deployments/multinode-gang.yaml",
            "  kubectl get objects.kubernetes.m.crossplane.io -A  # what goes to remote clusters",
            "  kubectl get functions,providers,configurations",
            "",
            "Remote clusters (their own API servers):",
        ]
        for ic, h in sorted(self.clusters.items()):
            if h.remote:
                lines.append(f"  {ic:<22} KUBECONFIG={h.kubeconfig}   "
                             f"(ClusterProviderConfig {h.provider_config})")
            else:
                lines.append(f"  {ic:<22} is the control plane itself")
        if self.gateways:
            lines += ["", "Gateways (Envoy Gateway's Envoy on this machine; each "
                      "InferenceCluster's spec.gateway.address):"]
            lines += [f"  {ic:<22} {g['url']}   (Gateway {g['namespace']}/{g['name']} "
                      f"on {g['cluster']})" for ic, g in sorted(self.gateways.items())]
        lines += ["",
                  f"Logs: {self.sup.logs}/<component>.log   components: "
                  + ", ".join(self.components()),
                  "One component: python -m e2e.controlplane stop|start COMPONENT; "
                  "memory: python -m e2e.controlplane status",
                  "Stop everything: make cluster-down", ""]
        return "\n".join(lines)


def _state_order(name: str) -> int:
    for i, prefix in enumerate(STOP_ORDER_PREFIXES):
        if name == prefix or (prefix.endswith(":") and name.startswith(prefix)):
            return i
    return len(STOP_ORDER_PREFIXES)


def stop_everything(state_dir: str | Path = DEFAULT_STATE_DIR, timeout: float = 20.0,
                    order: Sequence[str] = (), say: Callable[[str], None] = _say) -> list[str]:
    """Stop every component with a PID file in the state directory, whether or not
    the control plane finished starting: consumers first, storage last, the
    components of one tier (all API servers, say) at the same time."""
    sup = Supervisor(Path(state_dir))
    tiers: dict[int, list[str]] = {}
    for name in sorted(set(sup.recorded()) | set(order)):
        tiers.setdefault(_state_order(name), []).append(name)
    stopped: list[str] = []
    for _, names in sorted(tiers.items()):
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
            results = list(pool.map(lambda n: (n, sup.stop(n, timeout=timeout)), names))
        for name, was_running in results:
            if was_running:
                stopped.append(name)
                say(f"stopped {name}")
    # The pods supervisors stop their pods; what a crash left (namespaces, bridges) goes here.
    left = pods.clean_up()
    if left:
        say(f"removed {len(left)} pod namespaces and bridges")
    state = Path(state_dir) / STATE_FILE
    if state.exists():
        try:
            data = json.loads(state.read_text())
            data["stopped"] = time.time()
            state.write_text(json.dumps(data, indent=2))
        except (OSError, ValueError):
            pass
    return stopped


class _Builder:
    """`up`, step by step. Every step waits on a condition with a deadline."""

    def __init__(self, fleet_dir: Path, state_dir: Path, say: Callable[[str], None]) -> None:
        self.fleet_dir = fleet_dir.resolve()
        self.dir = state_dir.resolve()
        self.say_ = say
        self.t0 = time.monotonic()
        self.sup = Supervisor(self.dir)
        self.ports: dict[str, int] = {}
        self.taken: set[int] = set()
        self.state: dict[str, Any] = {}
        self.cp: ControlPlane | None = None
        self.gateways: dict[str, dataplane.LocalGateway] = {}
        # Per cluster: the CRD files its serving stack installs, and the plan's
        # manifests that wait for them (stack.py).
        self.stack_crds: dict[str, list[Path]] = {}
        self.stack_manifests: dict[str, list[Mapping[str, Any]]] = {}

    def say(self, msg: str) -> None:
        self.say_(f"[{time.monotonic() - self.t0:6.1f}s] {msg}")

    def port(self, key: str) -> int:
        if key not in self.ports:
            self.ports[key] = free_port(self.taken)
        return self.ports[key]

    # ---- the whole run ----------------------------------------------------------

    def run(self) -> ControlPlane:
        running = [n for n in self.sup.recorded() if self.sup.alive(n)]
        if running:
            raise ControlPlaneError(f"a control plane is already running from {self.dir} "
                                    f"({', '.join(running)}); run `make cluster-down` first")
        busy = [port for port in PROVIDER_FIXED_PORTS if not bindable(port)]
        if busy:
            # Fail before starting anything rather than when the provider exits.
            raise ControlPlaneError(
                f"port {', '.join(map(str, busy))} is in use: provider-kubernetes v1.2 "
                f"listens on :8080 (metrics) and :9443 (webhooks) on every interface, with "
                f"no flag to move them, so one control plane runs per machine (another "
                f"`make cluster` or `make e2e` from a different checkout?)")
        try:
            return self._run()
        except BaseException:
            if os.environ.get("E2E_KEEP_ON_FAILURE") == "1":
                self.say(f"start-up failed; E2E_KEEP_ON_FAILURE=1 leaves it running "
                         f"(logs in {self.dir / 'logs'}; `make cluster-down` stops it)")
                raise
            self.say("start-up failed; stopping what was started "
                     "(E2E_KEEP_ON_FAILURE=1 leaves it running to inspect)")
            try:
                stop_everything(self.dir, say=self.say)
            except Exception as exc:  # noqa: BLE001 - report the original failure
                self.say(f"(stopping failed too: {exc})")
            raise

    def _run(self) -> ControlPlane:
        self._fresh_state_dir()
        ics = fleet.load_fleet(self.fleet_dir)
        # Each cluster's gateway gets a URL on this machine, which its InferenceCluster
        # says (so replica endpoints and ModelService addresses answer here).
        self.gateways = dataplane.plan_gateways(fleet.plan_fleet(ics))
        ics, changed = dataplane.localize(ics, self.gateways)
        ics, declared = stack.declare(ics)
        for line in changed + declared:
            self.say(line)
        plan = dataplane.with_data_plane(fleet.plan_fleet(ics))
        self.say(f"fleet {self.fleet_dir}: " + "; ".join(
            f"{c.name} <- {', '.join(c.inference_clusters) or '(no InferenceCluster)'}"
            for c in plan.clusters.values()))
        self.say("tools: bash hack/tools.sh --e2e --env")
        self.tools = tools.load(REPO, self.dir / "logs" / "tools.log")
        self.crossplane_crds = tools.crossplane_crds(REPO)
        self.version = _version()

        # The packages take longest the first time (a runtime image built with
        # debootstrap): build them while the clusters start.
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
        packages = pool.submit(self._build_packages)
        provider_pkg = pool.submit(self._build_provider_package)
        try:
            self._certs(plan)
            self._write_state(plan, complete=False)
            self._start_etcd()
            self._start_clusters(plan)
            # A cluster whose stack installs Gateway API or the InferencePool gets
            # its Envoy Gateway once their CRDs and its Gateways are there
            # (_finish_stack_clusters).
            self._start_gateways(plan, skip=[n for n in stack.stack_clusters(plan)
                                             if stack.waits_for_stack(
                                                 "envoy-gateway", stack.managed(plan, n))])
            self._start_registry()
            self._write_state(plan, complete=False)
            self._start_crossplane()
            self.say("waiting for the packages (make package; provider-kubernetes' package)")
            fn_xpkg, cfg_xpkg = packages.result()
            prov_xpkg = provider_pkg.result()
            self._push(fn_xpkg, cfg_xpkg, prov_xpkg)
            self._install(plan)
            self._write_state(plan, complete=False)
            self._apply_fleet(plan)
            self._finish_stack_clusters(plan)
            self._wait_inventory_reports(plan)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        self._write_state(plan, complete=True)
        cp = self.cp
        assert cp is not None
        self.say(f"up in {time.monotonic() - self.t0:.0f}s")
        self.say_(cp.kubectl("get", "inferenceclusters.modelplane.ai").stdout.rstrip())
        self.say_(cp.kubectl("get", "configurations,functions,providers").stdout.rstrip())
        return cp

    def _fresh_state_dir(self) -> None:
        """Wipe the previous run's data; keep caches (xpkg cache, built packages)."""
        keep = {"cache"}
        self.dir.mkdir(parents=True, exist_ok=True)
        for entry in self.dir.iterdir():
            if entry.name in keep:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        for sub in ("logs", "pids", "pki", "clusters", "cache"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)

    # ---- state ------------------------------------------------------------------

    def _write_state(self, plan: fleet.FleetPlan, complete: bool) -> None:
        clusters = {}
        for name, c in plan.clusters.items():
            clusters[name] = {
                "kubeconfig": str(self._kubeconfig_path(name)),
                "remote": c.remote, "providerConfig": c.provider_config,
                "inferenceClusters": list(c.inference_clusters),
                "server": f"https://127.0.0.1:{self.port(f'apiserver:{name}')}",
            }
        self.state.update({
            "version": 1, "repo": str(REPO), "fleet": str(self.fleet_dir),
            "kubeconfig": str(self._kubeconfig_path(fleet.CONTROL_PLANE)),
            "tools": self.tools, "ports": self.ports, "clusters": clusters,
            "gateways": {ic: {"url": g.url, "address": g.address, "port": g.port,
                              "cluster": g.cluster, "namespace": g.namespace, "name": g.name}
                         for ic, g in self.gateways.items()},
            "complete": complete, "started": time.time(),
        })
        self.state.setdefault("components", {})
        self.state.setdefault("order", [])
        path = self.dir / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=2))
        tmp.replace(path)
        self.cp = ControlPlane(self.dir, self.state, say=self.say_)

    def _kubeconfig_path(self, cluster: str) -> Path:
        if cluster == fleet.CONTROL_PLANE:
            return self.dir / "kubeconfig"
        return self.dir / "clusters" / cluster / "kubeconfig"

    def _launch(self, spec: Spec, probe_desc: Mapping[str, Any], timeout: float) -> None:
        self.state.setdefault("components", {})[spec.name] = {
            "spec": spec.to_json(), "probe": dict(probe_desc), "timeout": timeout}
        if spec.name not in self.state.setdefault("order", []):
            self.state["order"].append(spec.name)
        self.sup.start(spec)

    def _wait(self, names: Iterable[str]) -> None:
        assert self.cp is not None
        self.cp.state = self.state
        for name in names:
            self.cp.wait_ready(name)

    # ---- certificates -------------------------------------------------------------

    def _certs(self, plan: fleet.FleetPlan) -> None:
        self.say("certificates (openssl): CA, API servers, admin, service accounts, webhooks")
        pki = self.dir / "pki"
        self.ca = certs.make_ca(pki)
        self.apiserver_cert = certs.issue(
            self.ca, pki, "apiserver", "kube-apiserver", server=True,
            dns=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local"],
            ips=["127.0.0.1", "10.96.0.1"])
        self.admin = certs.issue(self.ca, pki, "admin", security.ADMIN_USER,
                                 orgs=["system:masters"], client=True)
        self.sa_key, self.sa_pub = certs.make_rsa_keypair(pki, "sa")
        self.webhook_cert = certs.issue(self.ca, pki, "webhook", "webhook", server=True,
                                        dns=["localhost"], ips=["127.0.0.1"])
        for _name, dest in (("lws", "lws-certs"), ("provider-kubernetes", "provider-certs"),
                            ("envoy-gateway", "envoy-gateway-certs")):
            d = self.dir / dest
            d.mkdir(parents=True, exist_ok=True)
            shutil.copy(self.webhook_cert.crt, d / "tls.crt")
            shutil.copy(self.webhook_cert.key, d / "tls.key")
            shutil.copy(self.ca.crt, d / "ca.crt")
        ca_pem = self.ca.crt.read_bytes()
        cert_pem, key_pem = self.admin.pem()
        for name in plan.clusters:
            path = self._kubeconfig_path(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            server = f"https://127.0.0.1:{self.port(f'apiserver:{name}')}"
            kc = addons.kubeconfig(name, server, ca_pem, cert_pem, key_pem)
            path.write_text(yaml.safe_dump(kc, sort_keys=False))
            path.chmod(0o600)

    # ---- etcd and the clusters --------------------------------------------------------

    def _start_etcd(self) -> None:
        client, peer = self.port("etcd"), self.port("etcd-peer")
        self.say(f"etcd on 127.0.0.1:{client}")
        spec = Spec("etcd", (
            self.tools["ETCD"], "--name", "e2e", "--data-dir", str(self.dir / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client}",
            "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"e2e=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync", "--log-level", "warn", "--quota-backend-bytes", "4294967296"))
        self._launch(spec, {"type": "http", "url": f"http://127.0.0.1:{client}/health",
                            "what": "GET /health"}, 120)
        self._wait(["etcd"])

    def _apiserver_spec(self, name: str) -> Spec:
        port = self.port(f"apiserver:{name}")
        etcd = self.port("etcd")
        return Spec(f"apiserver:{name}", (
            self.tools["KUBE_APISERVER"],
            f"--etcd-servers=http://127.0.0.1:{etcd}", f"--etcd-prefix=/clusters/{name}",
            "--bind-address=127.0.0.1", f"--secure-port={port}",
            "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
            f"--tls-cert-file={self.apiserver_cert.crt}",
            f"--tls-private-key-file={self.apiserver_cert.key}",
            f"--client-ca-file={self.ca.crt}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.sa_pub}",
            f"--service-account-signing-key-file={self.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC", "--allow-privileged=true", "--profiling=false",
            # A webhook (or APIService) named by its Service is called at one of the
            # Service's ready endpoints, a pod IP this machine reaches on the cluster's
            # bridge, not at its ClusterIP: there is no kube-proxy (the stack's LWS chart).
            "--enable-aggregator-routing=true",
            # Close watches when asked to stop: otherwise the graceful shutdown waits
            # for every watching client until --request-timeout (1m).
            "--shutdown-watch-termination-grace-period=5s",
            f"--cert-dir={self.dir / 'clusters' / name / 'apiserver-certs'}"))

    def _start_clusters(self, plan: fleet.FleetPlan) -> None:
        names = list(plan.clusters)
        self.say(f"kube-apiserver x{len(names)}: " + ", ".join(
            f"{n} on :{self.port(f'apiserver:{n}')}" for n in names))
        for name in names:
            port = self.port(f"apiserver:{name}")
            self._launch(self._apiserver_spec(name), {
                "type": "http", "url": f"https://127.0.0.1:{port}/readyz", "expect": "ok",
                "ca": str(self.ca.crt), "cert": str(self.admin.crt), "key": str(self.admin.key),
                "what": "GET /readyz"}, 300)
        self._wait(f"apiserver:{n}" for n in names)
        self.say("API servers ready; CRDs, add-ons and controllers per cluster")
        crds = addons.cluster_crds(REPO)
        keda = addons.vendored_crds(REPO, addons.CONTROL_PLANE_CRDS)
        stages = addons.kwok_stage_files(Path(self.tools["KWOK_SRC"]))
        hand: dict[str, list[Path]] = {}
        for i, (name, cplan) in enumerate(plan.clusters.items()):
            # What the cluster's InferenceCluster declares Managed in spec.stack, the
            # stack installs (stack.py): the harness leaves it out.
            by_stack = stack.installed_by_stack(crds, REPO / "crds", stack.managed(plan, name))
            self.stack_crds[name] = by_stack
            hand[name] = [f for f in crds if f not in by_stack] + (
                keda if name == fleet.CONTROL_PLANE else [])
            namespaces = [CROSSPLANE_NS] if name == fleet.CONTROL_PLANE else []
            if not stack.stack_runs("lws", stack.managed(plan, name)):
                namespaces.append(addons.LWS_NAMESPACE)  # else the stack's, with its manager
            base = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                    for ns in namespaces]
            self.cp.apply(base, cluster=name)
            self.cp.apply(files=hand[name], cluster=name)
            self._start_cluster_controllers(name, i, stages, cplan)
            if not stack.waits_for_stack("lws", stack.managed(plan, name)):
                self._launch_lws(name)
        for name in names:
            self._wait_crds(name, addons.crd_names(hand[name]))
            now, later = stack.split_manifests(plan.clusters[name].manifests,
                                               stack.served_groups(self.stack_crds[name]))
            self.stack_manifests[name] = later
            self.cp.apply(now, cluster=name)
        self._wait(f"{kind}:{n}" for n in names
                   for kind in ("controller-manager", "scheduler", "kwok"))
        self._wait(f"lws:{n}" for n in names
                   if not stack.waits_for_stack("lws", stack.managed(plan, n)))
        self.say("clusters ready: " + ", ".join(
            f"{n} ({len(fleet.expected_nodes(c))} nodes)" for n, c in plan.clusters.items()))

    def _launch_lws(self, name: str) -> None:
        """LeaderWorkerSet's manager for one cluster, and its webhooks pointed at it."""
        cdir = self.dir / "clusters" / name
        lws_port, lws_health = self.port(f"lws-webhook:{name}"), self.port(f"lws-health:{name}")
        cfg = cdir / "lws-config.yaml"
        cfg.write_text(yaml.safe_dump(addons.lws_config(
            webhook_port=lws_port, cert_dir=self.dir / "lws-certs", health_port=lws_health)))
        self._launch(Spec(f"lws:{name}", (self.tools["LWS_MANAGER"], f"--config={cfg}"),
                          env={"KUBECONFIG": str(self._kubeconfig_path(name))}),
                     {"type": "http", "url": f"http://127.0.0.1:{lws_health}/readyz",
                      "what": "GET /readyz"}, 180)
        webhooks_yaml = (Path(self.tools["LWS_SRC"]) / addons.LWS_WEBHOOKS).read_text()
        self.cp.apply(addons.lws_webhooks(webhooks_yaml, port=lws_port,
                                          ca_pem=self.ca.crt.read_bytes()), cluster=name)

    def _finish_stack_clusters(self, plan: fleet.FleetPlan) -> None:
        """Once each stack cluster's CRDs are installed (provider-kubernetes Objects the
        function composed): the manifests of the groups they serve, the local
        controllers that watch them, and Envoy Gateway once the Gateways are there (the
        stack composes a remote cluster's last, and is ready only once Envoy Gateway
        has Accepted it); then every stack ready."""
        cp = self.cp
        assert cp is not None
        clusters = stack.stack_clusters(plan)
        if not clusters:
            return
        ics = [ic for n in clusters for ic in plan.clusters[n].inference_clusters]
        self.say("the serving stack installs " + "; ".join(
            f"{n}: {', '.join(sorted(stack.managed(plan, n)))}"
            + (", its Gateway" if stack.composes_gateways(plan, n) else "") for n in clusters))
        stack_logs = [self.sup.log_path("provider-kubernetes"), self.sup.log_path("function")]
        for name in clusters:
            self._wait_crds(name, addons.crd_names(self.stack_crds[name]), timeout=300,
                            logs=stack_logs)
            if self.stack_manifests[name]:
                cp.apply(self.stack_manifests[name], cluster=name)
            if stack.starts_after_stack("lws", stack.managed(plan, name)):
                self._launch_lws(name)
        gateways = [n for n in clusters
                    if stack.waits_for_stack("envoy-gateway", stack.managed(plan, n))]

        def composed() -> bool:
            missing = [f"{n}: {w}" for n in gateways for w in stack.not_composed(
                [(g.namespace, g.name) for g in dataplane.gateways_of(self.gateways, n)],
                cp.get_json("gateways.gateway.networking.k8s.io", "-A", cluster=n)["items"])]
            if missing:
                raise ControlPlaneError("; ".join(missing))
            return True

        wait_for("every Gateway to be there (a stack's, composed once its components are "
                 "Ready)", composed, 300, logs=stack_logs)
        self._start_gateways(plan, only=gateways)

        def ready() -> bool:
            waiting = stack.not_stack_ready(
                cp.get_json("inferenceclusters.modelplane.ai")["items"], ics)
            if waiting:
                raise ControlPlaneError("; ".join(waiting))
            return True

        wait_for("every serving stack to be ready (StackReady on " + ", ".join(ics) + ")",
                 ready, 300, logs=stack_logs)
        self._wait(f"lws:{n}" for n in clusters
                   if stack.starts_after_stack("lws", stack.managed(plan, n)))
        self._wait_stack_lws([n for n in clusters
                              if stack.stack_runs("lws", stack.managed(plan, n))])

    def _wait_stack_lws(self, clusters: Sequence[str], timeout: float = 240) -> None:
        """Until the LeaderWorkerSet manager each cluster's stack installed (its pod run
        by the cluster's pods supervisor) serves its webhooks: a LeaderWorkerSet is
        refused until then (failurePolicy Fail)."""
        cp = self.cp
        assert cp is not None
        if not clusters:
            return
        ns, name = stack.LWS_DEPLOYMENT

        def serving() -> bool:
            waiting = []
            for cluster in clusters:
                got = cp.kubectl("get", "deployment", "-n", ns, name, "-o", "json",
                                 "--ignore-not-found", cluster=cluster).stdout
                configs = cp.get_json("mutatingwebhookconfigurations,"
                                      "validatingwebhookconfigurations", cluster=cluster)
                why = stack.lws_not_serving(json.loads(got) if got.strip() else None,
                                            configs["items"])
                waiting += [f"{cluster}: {w}" for w in why]
            if waiting:
                raise ControlPlaneError("; ".join(waiting))
            return True

        wait_for("LeaderWorkerSet's manager (the stack's) to serve on " + ", ".join(clusters),
                 serving, timeout, logs=[self.sup.log_path(f"pods:{c}") for c in clusters])

    def _start_cluster_controllers(self, name: str, index: int, stages: Sequence[Path],
                                   cplan: fleet.ClusterPlan) -> None:
        kc = str(self._kubeconfig_path(name))
        cdir = self.dir / "clusters" / name
        cdir.mkdir(parents=True, exist_ok=True)
        kcm_port, sched_port = self.port(f"controller-manager:{name}"), self.port(f"scheduler:{name}")
        self._launch(Spec(f"controller-manager:{name}", (
            self.tools["KUBE_CONTROLLER_MANAGER"], f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1", f"--secure-port={kcm_port}",
            f"--cert-dir={cdir / 'controller-manager-certs'}", "--leader-elect=false",
            f"--controllers={KCM_CONTROLLERS}",
            f"--service-account-private-key-file={self.sa_key}", f"--root-ca-file={self.ca.crt}",
            "--use-service-account-credentials=false", "--profiling=false")),
            {"type": "http", "url": f"https://127.0.0.1:{kcm_port}/healthz", "insecure": True,
             "expect": "ok", "what": "GET /healthz"}, 180)
        self._launch(Spec(f"scheduler:{name}", (
            self.tools["KUBE_SCHEDULER"], f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1", f"--secure-port={sched_port}",
            f"--cert-dir={cdir / 'scheduler-certs'}", "--leader-elect=false",
            "--profiling=false")),
            {"type": "http", "url": f"https://127.0.0.1:{sched_port}/healthz", "insecure": True,
             "expect": "ok", "what": "GET /healthz"}, 180)
        kwok_argv = [self.tools["KWOK"], f"--kubeconfig={kc}", "--manage-all-nodes=false",
                     f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
                     "--node-lease-duration-seconds=40", f"--cidr={pods.pod_cidr(index)}",
                     "--node-ip=127.0.0.1"]
        for stage in stages:
            kwok_argv += ["--config", str(stage)]
        self._launch(Spec(f"kwok:{name}", tuple(kwok_argv)),
                     {"type": "none", "what": "its nodes Ready", "cluster": name,
                      "nodes": fleet.expected_nodes(cplan)}, 240)
        # The kubelet's part for the pods kwok hands over (e2e/controlplane/pods/).
        self._launch(pods.supervisor_spec(name, kubeconfig=Path(kc), cidr=pods.pod_cidr(index),
                                          state_dir=cdir / "pods", tools=self.tools, repo=REPO),
                     {"type": "none", "what": "started"}, 30)

    def _wait_crds(self, cluster: str, names: Sequence[str], timeout: float = 180,
                   logs: Sequence[Path] = ()) -> None:
        assert self.cp is not None
        want = set(names)

        def established() -> bool:
            items = self.cp.get_json("customresourcedefinitions", cluster=cluster)["items"]
            ok = {c["metadata"]["name"] for c in items
                  if any(x.get("type") == "Established" and x.get("status") == "True"
                         for x in (c.get("status") or {}).get("conditions") or [])}
            missing = want - ok
            if missing:
                raise ControlPlaneError("not Established: " + ", ".join(sorted(missing)))
            return True

        wait_for(f"CRDs on {cluster} to be Established", established, timeout,
                 logs=[self.sup.log_path(f"apiserver:{cluster}"), *logs])

    # ---- Envoy Gateway with its InferencePool extension, registry ----------------------

    def _start_gateways(self, plan: fleet.FleetPlan, only: Sequence[str] | None = None,
                        skip: Sequence[str] = ()) -> None:
        """Envoy Gateway's controller per cluster that holds a Gateway (after its
        InferencePool extension server), each starting its Gateways' Envoys on the
        cluster's loopback address (dataplane.py). Ready when every Gateway is Accepted,
        its Envoy answers on its readiness listener, and it is Programmed (through
        the stand-in Envoy Service and Deployment Envoy Gateway's status code asks
        for; see envoy_gateway.not_accepted on the GatewayClass)."""
        egs = [n for n in envoy_gateway.clusters_with_gateways(plan)
               if (only is None or n in only) and n not in skip]
        if not egs:
            return
        binary = dataplane.envoy_binary()
        version = dataplane.binary_version(binary)
        if version != dataplane.ENVOY_VERSION:
            raise ControlPlaneError(f"{binary} is Envoy {version}, not {dataplane.ENVOY_VERSION}")
        for name in egs:
            self._launch_envoy_gateway(name, binary, self._composed_eg_config(plan, name))
        self._wait(f"envoy-gateway:{n}" for n in egs)
        logs = [self.sup.log_path(f"envoy-gateway:{n}") for n in egs]

        def died() -> str | None:
            return next(filter(None, (self.cp._died(f"envoy-gateway:{n}") for n in egs)), None)

        def accepted() -> bool:
            waiting = []
            for name in egs:
                gc = self.cp.kubectl("get", "gatewayclasses.gateway.networking.k8s.io",
                                     envoy_gateway.GATEWAY_CLASS, "-o", "json", "--ignore-not-found",
                                     cluster=name).stdout
                gws = self.cp.get_json("gateways.gateway.networking.k8s.io", "-A",
                                       cluster=name)["items"]
                waiting += [f"{name}: {w}" for w in envoy_gateway.not_accepted(
                    json.loads(gc) if gc.strip() else None, gws)]
            if waiting:
                raise ControlPlaneError("; ".join(waiting))
            return True

        wait_for("Envoy Gateway to accept every Gateway", accepted, 180, logs=logs, died=died)

        # Each Gateway's Envoy, then what makes Envoy Gateway call it Programmed.
        local = {n: dataplane.gateways_of(self.gateways, n) for n in egs}
        for name in egs:
            for gw in local[name]:
                wait_for(f"the Envoy of Gateway {gw.namespace}/{gw.name} on {name} to be ready "
                         f"(GET {gw.ready_url})",
                         lambda gw=gw: http_get(gw.ready_url, timeout=2)[0] == 200, 120,
                         logs=logs, died=died)
                self.cp.apply(dataplane.stand_ins(gw), cluster=name)
                self.cp.kubectl("patch", "service", dataplane.stand_in_name(gw), "-n",
                                dataplane.NAMESPACE, "--subresource=status", "--type=merge",
                                "-p", json.dumps(dataplane.load_balancer_status(gw)),
                                cluster=name)

        def programmed() -> bool:
            waiting = []
            for name in egs:
                gws = self.cp.get_json("gateways.gateway.networking.k8s.io", "-A",
                                       cluster=name)["items"]
                waiting += [f"{name}: {w}" for w in dataplane.not_programmed(gws, local[name])]
            if waiting:
                raise ControlPlaneError("; ".join(waiting))
            return True

        wait_for("every Gateway to be Programmed", programmed, 180, logs=logs, died=died)
        self.say("gateways: " + ", ".join(f"{ic} {g.url}" for ic, g in self.gateways.items()))


    def _composed_eg_config(self, plan: fleet.FleetPlan, name: str) -> dict | None:
        """The EnvoyGateway configuration a cluster's stack installed with Envoy Gateway
        (its chart's ConfigMap), which the local controller standing in for the
        stack's pod reads; None where the stack does not install it."""
        if not stack.stack_installs("envoy-gateway", stack.managed(plan, name)):
            return None
        got = self.cp.kubectl("get", "configmaps", stackenvoy.CONFIG_MAP, "-n",
                              envoy_gateway.NAMESPACE, "-o", "json", "--ignore-not-found",
                              cluster=name).stdout
        composed = stackenvoy.config_of(json.loads(got) if got.strip() else None)
        if composed is None:
            raise ControlPlaneError(f"{name}: the stack installs Envoy Gateway but ConfigMap "
                                    f"{envoy_gateway.NAMESPACE}/{stackenvoy.CONFIG_MAP} holds no "
                                    f"{stackenvoy.CONFIG_KEY}")
        return composed

    def _launch_envoy_gateway(self, name: str, envoy: Path,
                              composed: dict | None = None) -> None:
        """One cluster's controller: certgen --local for its xDS certificates (the
        server's and its Envoys' share a CA), the Secrets its translator reads, the
        Envoy binary where func-e looks, then the process, ready when its first
        Gateway's Envoy answers on the readiness listener. `composed`: the
        configuration the cluster's stack installed, which it runs under the harness's
        provider settings (envoy_gateway.config)."""
        run = self.dir / "envoy-gateway" / name
        paths = dataplane.HostPaths(run)
        for d in (paths.config_home, paths.data_home, paths.state_home, paths.runtime_dir):
            d.mkdir(parents=True, exist_ok=True)
        log = self.dir / "logs" / f"envoy-gateway-certgen:{name}.log"
        with open(log, "w") as o:
            proc = subprocess.run([self.tools["ENVOY_GATEWAY"], "certgen", "--local",
                                   "--config-home", str(paths.config_home)],
                                  stdout=o, stderr=subprocess.STDOUT, timeout=120 * scale(),
                                  env=dict(os.environ) | {"HOME": str(run)})
        if proc.returncode != 0:
            raise ControlPlaneError(f"envoy-gateway certgen --local failed; {log}:\n{tail(log)}")
        self.cp.apply(dataplane.certgen_secrets(paths), cluster=name)
        dataplane.install_envoy(paths, envoy)
        # The InferencePool extension server first: EG calls its hooks on its first
        # translation (tools/inferencepool-extension/README.md).
        extension = self.port(f"inferencepool-extension:{name}")
        self._launch(Spec(f"inferencepool-extension:{name}", envoy_gateway.extension_argv(
            self.tools["INFERENCEPOOL_EXTENSION"], port=extension,
            kubeconfig=self._kubeconfig_path(name))),
            {"type": "tcp", "port": extension, "what": f"listening on 127.0.0.1:{extension}"},
            60)
        self._wait([f"inferencepool-extension:{name}"])
        cfg = run / "config.yaml"
        cfg.write_text(yaml.safe_dump(envoy_gateway.config(
            admin_port=self.port(f"envoy-gateway-admin:{name}"),
            infrastructure=paths.provider(), extension_port=extension, composed=composed),
            sort_keys=False))
        health = self.port(f"envoy-gateway-health:{name}")
        first = dataplane.gateways_of(self.gateways, name)[0]
        self.say(f"envoy-gateway:{name} (Envoy Gateway's controller; health :{health}), "
                 f"its Envoy on {first.address} ({first.url})")
        self._launch(Spec(f"envoy-gateway:{name}", (
            self.tools["ENVOY_GATEWAY"], "server", f"--config-path={cfg}"),
            env=envoy_gateway.environment(
                kubeconfig=self._kubeconfig_path(name),
                cert_dir=self.dir / "envoy-gateway-certs", home=run, health_port=health,
                webhook_port=self.port(f"envoy-gateway-webhook:{name}"),
                xds_port=self.port(f"envoy-gateway-xds:{name}"),
                xds_cert_dir=paths.certs("envoy-gateway"), proxy_address=first.address,
                wasm_port=self.port(f"envoy-gateway-wasm:{name}"))),
            {"type": "http", "url": first.ready_url,
             "what": f"its Envoy's GET {first.ready_url}"}, 180)

    def _start_registry(self) -> None:
        port = self.port("registry")
        self.say(f"package registry (crane registry serve) on 127.0.0.1:{port}")
        (self.dir / "registry").mkdir(parents=True, exist_ok=True)
        self._launch(Spec("registry", (self.tools["CRANE"], "registry", "serve",
                                       "--address", f"127.0.0.1:{port}",
                                       "--disk", str(self.dir / "registry"))),
                     {"type": "http", "url": f"http://127.0.0.1:{port}/v2/", "what": "GET /v2/"},
                     60)
        self._wait(["registry"])

    # ---- packages ----------------------------------------------------------------------

    def _build_packages(self) -> tuple[Path, Path]:
        log = self.dir / "logs" / "package.log"
        with open(log, "w") as out:
            proc = subprocess.run(["make", "package"], cwd=REPO, stdout=out,
                                  stderr=subprocess.STDOUT, timeout=3600 * scale())
        if proc.returncode != 0:
            raise ControlPlaneError(f"make package failed ({proc.returncode}); {log}:\n"
                                    f"{tail(log, 60)}")
        fn = REPO / "dist" / f"function-model-serving-v{self.version}.xpkg"
        cfg = REPO / "dist" / f"configuration-model-serving-v{self.version}.xpkg"
        for p in (fn, cfg):
            if not p.is_file():
                raise ControlPlaneError(f"make package did not write {p}; {log}")
        return fn, cfg

    def _build_provider_package(self) -> Path:
        src = Path(self.tools["PROVIDER_KUBERNETES_SRC"])
        self.provider_version = tools.version_of_src(src)
        # The legacy cluster-scoped objects.kubernetes.crossplane.io CRD converts
        # through the provider's webhook, which the API server cannot reach here
        # (no Service); it is kept unless E2E_PROVIDER_DROP_LEGACY_CRD=1.
        drop = os.environ.get("E2E_PROVIDER_DROP_LEGACY_CRD") == "1"
        out = self.dir / "cache" / f"provider-kubernetes-{self.provider_version}" \
            f"{'-nolegacy' if drop else ''}.xpkg"
        if out.is_file():
            return out
        stage = self.dir / "cache" / "provider-kubernetes-package"
        if stage.exists():
            shutil.rmtree(stage)
        (stage / "crds").mkdir(parents=True)
        files = addons.provider_package_files(src / "package", drop_legacy=drop)
        shutil.copy(files[0], stage / "crossplane.yaml")
        for f in files[1:]:
            shutil.copy(f, stage / "crds" / f.name)
        for f in stage.rglob("*"):
            f.chmod(0o755 if f.is_dir() else 0o644)
        examples = self.dir / "cache" / "provider-kubernetes-examples"
        examples.mkdir(exist_ok=True)
        log = self.dir / "logs" / "provider-package.log"
        with open(log, "w") as o:
            proc = subprocess.run([self.tools["CROSSPLANE_CLI"], "xpkg", "build",
                                   "--package-root", str(stage), "--examples-root", str(examples),
                                   "-o", str(out)], stdout=o, stderr=subprocess.STDOUT,
                                  timeout=600 * scale())
        if proc.returncode != 0:
            raise ControlPlaneError(f"crossplane xpkg build (provider-kubernetes) failed; "
                                    f"{log}:\n{tail(log)}")
        return out

    def _push(self, fn: Path, cfg: Path, prov: Path) -> None:
        reg = f"127.0.0.1:{self.port('registry')}"
        pushes = [(fn, f"{reg}/modelplane/function-model-serving:v{self.version}"),
                  (cfg, f"{reg}/modelplane/configuration-model-serving:v{self.version}"),
                  (prov, f"{reg}/crossplane-contrib/provider-kubernetes:{self.provider_version}")]
        self.state["pushes"] = [[str(path), ref] for path, ref in pushes]
        for path, ref in pushes:
            self.say(f"crane push {path.name} {ref}")
        assert self.cp is not None
        self.cp.push_packages()

    # ---- Crossplane ---------------------------------------------------------------------

    def _crossplane_env(self) -> dict[str, str]:
        return {"KUBECONFIG": str(self._kubeconfig_path(fleet.CONTROL_PLANE)),
                "POD_NAMESPACE": CROSSPLANE_NS, "POD_SERVICE_ACCOUNT": "crossplane",
                "CRDS_PATH": str(self.crossplane_crds), "TLS_CA_SECRET_NAME": CA_SECRET,
                "TLS_CLIENT_SECRET_NAME": CLIENT_SECRET, "ENABLE_WEBHOOKS": "false"}

    def _start_crossplane(self) -> None:
        cp = self.cp
        assert cp is not None
        # The package fetcher reads the pull secrets of Crossplane's service account.
        cp.apply([{"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "crossplane", "namespace": CROSSPLANE_NS}}])
        self.say("crossplane core init")
        log = self.dir / "logs" / "crossplane-init.log"
        argv = [self.tools["CROSSPLANE_CORE"], "core", "init", "--activation", "*"]
        env = dict(os.environ) | self._crossplane_env()
        attempts = []

        def init() -> bool:
            with open(log, "a") as o:
                o.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(argv)}\n")
                o.flush()
                proc = subprocess.run(argv, env=env, stdout=o, stderr=subprocess.STDOUT,
                                      timeout=300 * scale())
            attempts.append(proc.returncode)
            if proc.returncode == 0:
                return True
            text = tail(log, 30)
            if 'no matches for kind "Lock"' in text or "no matches for kind" in text:
                raise ControlPlaneError('core init: no matches for kind "Lock" (retrying)')
            raise _Fatal(f"crossplane core init failed ({proc.returncode}); {log}:\n{text}")

        _wait_unless_fatal("crossplane core init to succeed", init, 300, [log])

        secret = cp.get_json("secret", "-n", CROSSPLANE_NS, CLIENT_SECRET)
        client_dir = self.dir / "crossplane" / "tls-client"
        client_dir.mkdir(parents=True, exist_ok=True)
        for key in ("ca.crt", "tls.crt", "tls.key"):
            (client_dir / key).write_bytes(base64.b64decode(secret["data"][key]))
        (client_dir / "tls.key").chmod(0o600)
        server_dir = self.dir / "crossplane" / "tls-server"
        server_dir.mkdir(parents=True, exist_ok=True)
        health = self.port("crossplane-health")
        self.say(f"crossplane core start (External package runtime); health :{health}")
        spec = Spec("crossplane", (
            self.tools["CROSSPLANE_CORE"], "core", "start", "--package-runtime", "External",
            "--enable-webhooks=false", f"--xpkg-cache-dir={self.dir / 'cache' / 'xpkg'}",
            f"--webhook-port={self.port('crossplane-webhook')}",
            f"--metrics-port={self.port('crossplane-metrics')}", f"--health-probe-port={health}",
            f"--tls-client-certs-dir={client_dir}", f"--tls-server-certs-dir={server_dir}",
            f"--tls-client-secret-name={CLIENT_SECRET}"), env=self._crossplane_env())
        (self.dir / "cache" / "xpkg").mkdir(parents=True, exist_ok=True)
        self._launch(spec, {"type": "http", "url": f"http://127.0.0.1:{health}/readyz",
                            "what": "GET /readyz"}, 300)
        self._wait(["crossplane"])
        self._wait_crds(fleet.CONTROL_PLANE, ["imageconfigs.pkg.crossplane.io",
                                              "configurations.pkg.crossplane.io",
                                              "functions.pkg.crossplane.io",
                                              "providers.pkg.crossplane.io"])

    def _install(self, plan: fleet.FleetPlan) -> None:
        cp = self.cp
        assert cp is not None
        reg = f"127.0.0.1:{self.port('registry')}/"
        self.say(f"ImageConfig {IMAGE_CONFIG}: {PUBLIC_REGISTRY} -> {reg}")
        cp.apply([{"apiVersion": "pkg.crossplane.io/v1beta1", "kind": "ImageConfig",
                   "metadata": {"name": IMAGE_CONFIG},
                   "spec": {"matchImages": [{"type": "Prefix", "prefix": PUBLIC_REGISTRY}],
                            "rewriteImage": {"prefix": reg}}}])
        cp.apply([docs_cluster_role(REPO / "docs" / "install.md")])
        ref = f"{PUBLIC_REGISTRY}modelplane/configuration-model-serving:v{self.version}"
        self.say(f"crossplane xpkg install configuration {ref}")
        log = self.dir / "logs" / "xpkg-install.log"
        with open(log, "w") as o:
            proc = subprocess.run([self.tools["CROSSPLANE_CLI"], "xpkg", "install",
                                   "configuration", ref], stdout=o, stderr=subprocess.STDOUT,
                                  env=dict(os.environ) | {"KUBECONFIG": str(cp.kubeconfig)},
                                  timeout=300 * scale())
        if proc.returncode != 0:
            raise ControlPlaneError(f"crossplane xpkg install configuration {ref} failed; "
                                    f"{log}:\n{tail(log)}")

        pkg_logs = [self.sup.log_path("crossplane")]

        def packages_listed() -> dict:
            out = {}
            for kind in ("configurations", "functions", "providers"):
                out[kind] = cp.get_json(f"{kind}.pkg.crossplane.io")["items"]
            if not out["functions"] or not out["providers"]:
                raise ControlPlaneError("the package manager has not created the dependencies "
                                        "yet:\n" + _package_conditions(out))
            return out

        pk = wait_for("the Configuration's dependencies (a Function and a Provider) to be "
                      "created from the local registry", packages_listed, 600, logs=pkg_logs)
        self.say("dependencies resolved: " + ", ".join(
            f"{k[:-1]} {i['metadata']['name']}" for k, items in pk.items() for i in items))

        # The harness is the package runtime: serve the function, run the provider.
        self._start_function()
        self._start_provider()

        def installed() -> dict:
            out = {kind: cp.get_json(f"{kind}.pkg.crossplane.io")["items"]
                   for kind in ("configurations", "functions", "providers")}
            bad = []
            for kind, items in out.items():
                for item in items:
                    conds = {c["type"]: c for c in (item.get("status") or {}).get("conditions") or []}
                    if (conds.get("Installed") or {}).get("status") != "True":
                        bad.append(f"{kind[:-1]} {item['metadata']['name']} not Installed")
                    # Under the External runtime a Function reports Healthy=False
                    # ("runtime health Unknown"); Compositions still run.
                    if kind == "configurations" and (conds.get("Healthy") or {}).get("status") != "True":
                        bad.append(f"configuration {item['metadata']['name']} not Healthy")
            if bad:
                raise ControlPlaneError("; ".join(bad) + "\n" + _package_conditions(out))
            return out

        wait_for("the Configuration and its dependencies to be installed", installed, 600,
                 logs=pkg_logs)
        self._wait_crds(fleet.CONTROL_PLANE, ["inferenceclusters.modelplane.ai",
                                              "modeldeployments.modelplane.ai",
                                              "modelreplicas.modelplane.ai"], timeout=300)

    def _start_function(self) -> None:
        cp = self.cp
        assert cp is not None
        revs = wait_for("an active FunctionRevision", lambda: cp.function_revisions(), 300,
                        logs=[self.sup.log_path("crossplane")])
        ca = cp.get_json("secret", "-n", CROSSPLANE_NS, CA_SECRET)
        pki = self.dir / "pki"
        xp_ca = certs.write_ca(pki, "crossplane-ca", base64.b64decode(ca["data"]["tls.crt"]),
                               base64.b64decode(ca["data"]["tls.key"]))
        server = certs.issue(xp_ca, pki, "function", "function-model-serving", server=True,
                             dns=["localhost"], ips=["127.0.0.1"])
        tls_dir = self.dir / "function-tls"
        tls_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(server.crt, tls_dir / "tls.crt")
        shutil.copy(server.key, tls_dir / "tls.key")
        shutil.copy(xp_ca.crt, tls_dir / "ca.crt")
        cp.apply([{"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                   "metadata": {"name": FUNCTION_TLS_SECRET, "namespace": CROSSPLANE_NS},
                   "data": {k: base64.b64encode((tls_dir / k).read_bytes()).decode()
                            for k in ("tls.crt", "tls.key", "ca.crt")}}])
        port = self.port("function")
        binary = REPO / ".venv" / "bin" / "function-model-serving"
        if not binary.exists():
            raise ControlPlaneError(f"{binary} is missing; run `make venv`")
        self.say(f"function-model-serving serve (mTLS) on 127.0.0.1:{port} for "
                 + ", ".join(r["metadata"]["name"] for r in revs))
        client = self.dir / "crossplane" / "tls-client"
        self._launch(Spec("function", (str(binary), "serve", "--tls-certs-dir", str(tls_dir),
                                       "--address", f"127.0.0.1:{port}"), cwd=str(REPO)),
                     {"type": "tls", "port": port, "ca": str(xp_ca.crt),
                      "cert": str(client / "tls.crt"), "key": str(client / "tls.key"),
                      "what": "an mTLS handshake with Crossplane's client certificate"}, 240)
        self.state["function"] = {"endpoint": f"dns:///127.0.0.1:{port}",
                                  "secret": FUNCTION_TLS_SECRET}
        cp.state = self.state
        self._wait(["function"])
        patched = cp.ensure_package_runtime()
        self.say("FunctionRevision status endpoint set: " + (", ".join(patched) or "(already)"))

    def _start_provider(self) -> None:
        cp = self.cp
        assert cp is not None
        revs = wait_for("an active ProviderRevision", lambda: cp.provider_revisions(), 300,
                        logs=[self.sup.log_path("crossplane")])
        # The webhook server certificate a Deployment runtime would have made: the
        # provider serves it (TLS_SERVER_CERTS_DIR), and Crossplane puts it in the
        # caBundle of the package's conversion webhook (the legacy Object CRD).
        certs_dir = self.dir / "provider-certs"
        cp.apply([{"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                   "metadata": {"name": PROVIDER_TLS_SECRET, "namespace": CROSSPLANE_NS},
                   "data": {k: base64.b64encode((certs_dir / k).read_bytes()).decode()
                            for k in ("tls.crt", "tls.key", "ca.crt")}}])
        self.state["provider"] = {"secret": PROVIDER_TLS_SECRET}
        cp.state = self.state
        patched = cp.ensure_package_runtime()
        self.say(f"ProviderRevision {', '.join(r['metadata']['name'] for r in revs)}: "
                 f"status.tlsServerSecretName set ({', '.join(patched) or 'already'})")
        self._wait_crds(fleet.CONTROL_PLANE, ["clusterproviderconfigs.kubernetes.m.crossplane.io",
                                              "providerconfigs.kubernetes.m.crossplane.io",
                                              "objects.kubernetes.m.crossplane.io"], timeout=300)
        health = self.port("provider-kubernetes-health")
        self.say(f"provider-kubernetes (local process); health :{health}")
        self._launch(Spec("provider-kubernetes", (
            self.tools["PROVIDER_KUBERNETES"], f"--health-probe-bind-addr=127.0.0.1:{health}",
            # --sanitize-secrets: an Object of a Secret (a ModelCache's auth Secret, observed
            # on a remote cluster) shows no data in status.atProvider (docs/security.md).
            # --poll: how often a Ready Object is observed again (one not Ready: every
            # 30 s whatever this says); a lost cluster is noticed at the next poll
            # (e2e/tests/test_services.py CONVERGE). PROVIDER_KUBERNETES_POLL overrides
            # it (make bench-live --provider-poll).
            f"--poll={os.environ.get('PROVIDER_KUBERNETES_POLL') or PROVIDER_POLL}",
            "--enable-watches", "--sanitize-secrets"),
            env={"KUBECONFIG": str(cp.kubeconfig),
                 "TLS_SERVER_CERTS_DIR": str(self.dir / "provider-certs"),
                 # Upstream waits 30 s after creating an Object before it trusts that the
                 # remote object is gone, even when the Object is being deleted: a
                 # deployment deleted soon after it was applied took 30-45 s to go. An
                 # API server reads its own writes (hack/tools/provider-kubernetes/patch.sh).
                 "PROVIDER_KUBERNETES_CREATION_GRACE_PERIOD": "1s"}),
            {"type": "http", "url": f"http://127.0.0.1:{health}/readyz", "what": "GET /readyz"},
            240)
        self._wait(["provider-kubernetes"])

    # ---- the fleet ---------------------------------------------------------------------

    def _apply_fleet(self, plan: fleet.FleetPlan) -> None:
        cp = self.cp
        assert cp is not None
        self.say("admission policies and tenant roles (security/): only "
                 f"{security.ADMIN_USER} writes ModelReplicas, status and cluster-wide Objects; "
                 f"remote clusters reached as {security.REMOTE_IDENTITY} "
                 "(security/remote-identity.yaml)")
        cp.apply(security.manifests())
        for name, c in plan.clusters.items():
            if not c.remote:
                continue
            # The provider acts there as the identity docs/install.md asks for
            # (security/remote-identity.yaml), not as the cluster's admin.
            cp.apply(security.remote_identity(), cluster=name)
            token = cp.kubectl(*security.remote_token_args(), cluster=name).stdout.strip()
            kc = security.token_kubeconfig(self._kubeconfig_path(name), token,
                                           user=security.REMOTE_IDENTITY)
            cp.apply(fleet.provider_config_objects(c.provider_config, kc, CROSSPLANE_NS))
        namespaces = sorted(example_namespaces(REPO / "examples" / "deployments"))
        for name in plan.clusters:  # every cluster: pods read the Secret where they run
            cp.apply(pods.example_secrets(namespaces), cluster=name)
        self.say("applying the fleet's InferenceClusters: " + ", ".join(
            ic["metadata"]["name"] for ic in plan.inference_clusters))
        cp.apply(plan.inference_clusters)

        def reported() -> bool:
            items = cp.get_json("inferenceclusters.modelplane.ai")["items"]
            have = {i["metadata"]["name"]: i for i in items}
            waiting = []
            for ic in plan.inference_clusters:
                name = ic["metadata"]["name"]
                got = have.get(name) or {}
                status = got.get("status") or {}
                pools = len((ic.get("spec") or {}).get("nodePools") or [])
                if "nodes" not in status or len(status.get("nodePools") or []) != pools:
                    conds = ", ".join(f"{c['type']}={c['status']}"
                                      + (f" ({c.get('message')})" if c.get("message") else "")
                                      for c in status.get("conditions") or [])
                    waiting.append(f"{name}: {conds or 'no status yet'}")
            if waiting:
                raise ControlPlaneError("; ".join(waiting))
            return True

        wait_for("every InferenceCluster to report its status (composed by the function)",
                 reported, 600, logs=[self.sup.log_path("crossplane"),
                                      self.sup.log_path("function")])


    def _wait_inventory_reports(self, plan: fleet.FleetPlan) -> None:
        """Each remote cluster's first inventory report: the reporter the
        InferenceCluster composed there runs as its Deployment's pod, through the
        cluster's pods supervisor (e2e/controlplane/pods: its image is this
        repository's entry point), with its ServiceAccount's token."""
        cp = self.cp
        assert cp is not None
        for name in (n for n, c in plan.clusters.items() if c.remote):
            wait_for(f"the first inventory report on {name} (the composed reporter's pod)",
                     lambda name=name: json.loads(cp.kubectl(
                         "get", "configmaps", REPORT_NAME, "-n", REPORT_NAMESPACE, "-o", "json",
                         cluster=name).stdout),
                     300, logs=[self.sup.log_path(f"pods:{name}"),
                                self.sup.log_path("provider-kubernetes")])


class _Fatal(Exception):
    pass


def _wait_unless_fatal(what: str, check: Callable[[], Any], timeout: float,
                       logs: Sequence[Path]) -> Any:
    """wait_for, but a _Fatal from `check` ends the wait at once."""
    fatal: list[_Fatal] = []

    def guarded() -> Any:
        try:
            return check()
        except _Fatal as exc:
            fatal.append(exc)
            return True

    result = wait_for(what, guarded, timeout, interval=2.0, logs=logs)
    if fatal:
        raise ControlPlaneError(str(fatal[0]))
    return result


def _package_conditions(packages: Mapping[str, list[dict]]) -> str:
    lines = []
    for kind, items in packages.items():
        for item in items:
            st = item.get("status") or {}
            conds = "; ".join(f"{c['type']}={c['status']} {c.get('reason', '')}"
                              + (f": {c['message']}" if c.get("message") else "")
                              for c in st.get("conditions") or [])
            lines.append(f"  {kind[:-1]} {item['metadata']['name']} "
                         f"({(item.get('spec') or {}).get('package')}): {conds or 'no conditions'}")
    return "\n".join(lines) or "  (no packages)"


def docs_cluster_role(install_md: Path) -> dict:
    """The aggregated ClusterRole docs/install.md tells users to apply."""
    text = install_md.read_text()
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        block = "\n".join(line[3:] if line.startswith("   ") else line
                          for line in block.splitlines())
        try:
            docs = list(yaml.safe_load_all(block))
        except yaml.YAMLError:
            continue
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == "ClusterRole" and \
                    ((doc.get("metadata") or {}).get("labels") or {}).get(
                        "rbac.crossplane.io/aggregate-to-crossplane") == "true":
                return doc
    raise ControlPlaneError(f"{install_md} has no aggregated ClusterRole "
                            "(rbac.crossplane.io/aggregate-to-crossplane) to apply")


def example_namespaces(directory: Path) -> set[str]:
    out = set()
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            ns = ((doc or {}).get("metadata") or {}).get("namespace") if isinstance(doc, dict) else None
            if ns:
                out.add(ns)
    return out


__all__ = ["ControlPlane", "ClusterHandle", "ControlPlaneError", "ComponentDied", "WaitTimeout",
           "DEFAULT_STATE_DIR", "stop_everything"]
