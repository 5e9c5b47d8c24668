"""Reading the live control plane: objects, conditions, and bounded waits.

Every helper reads real objects through the pinned kubectl; every wait polls a
condition until a deadline (e2e.controlplane.waits.wait_for) and names what it
waited for when it times out.
"""

from __future__ import annotations

import copy
import json
import pathlib
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import yaml

from e2e.controlplane import envoy_gateway
from e2e.controlplane.core import ControlPlane, ControlPlaneError
from e2e.controlplane.waits import wait_for
from function.composer.naming import LABEL_ENGINE, LABEL_REPLICA
from function.contract.api import LABEL_DEPLOYMENT, LABEL_POOL

MR = "modelreplicas.modelplane.ai"
MD = "modeldeployments.modelplane.ai"
IC = "inferenceclusters.modelplane.ai"
OBJECT = "objects.kubernetes.m.crossplane.io"

# Deadlines, in seconds (E2E_TIMEOUT_SCALE multiplies them). A replica goes
# from apply to Serving through three compositions and, on a remote cluster,
# provider-kubernetes; Crossplane reacts to what it watches at once and looks at
# required resources again within the poll interval (a minute).
SERVING = 300
SETTLE = 240
GONE = 240


def condition(obj: Mapping[str, Any] | None, typ: str) -> Mapping[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == typ:
            return c
    return {}


def is_true(obj: Mapping[str, Any] | None, typ: str) -> bool:
    return condition(obj, typ).get("status") == "True"


def get(cp: ControlPlane, kind: str, name: str, ns: str | None = None,
        cluster=None) -> dict | None:
    """The object, or None when it does not exist."""
    args = ["get", kind, name, "-o", "json"] + (["-n", ns] if ns else [])
    proc = cp.kubectl(*args, cluster=cluster, check=False)
    if proc.returncode != 0:
        if "NotFound" in proc.stderr or "not found" in proc.stderr:
            return None
        raise ControlPlaneError(f"kubectl get {kind} {name}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def items(cp: ControlPlane, kind: str, ns: str | None = None, selector: str | None = None,
          cluster=None) -> list[dict]:
    args = [kind] + (["-n", ns] if ns else ["-A"]) + (["-l", selector] if selector else [])
    return cp.get_json(*args, cluster=cluster)["items"]


def apply_docs(cp: ControlPlane, docs: Iterable[Mapping[str, Any]], cluster=None,
               timeout: float = 120) -> None:
    """`kubectl apply` as a user would (client-side, so admission sees it whole)."""
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(list(docs)), cluster=cluster,
               timeout=timeout)


def ensure_namespace(cp: ControlPlane, ns: str, cluster=None) -> None:
    apply_docs(cp, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}],
               cluster=cluster)


SINGLE_GPU = pathlib.Path(__file__).resolve().parents[2] / "examples" / "deployments" / \
    "single-gpu.yaml"


def single_gpu(name: str, ns: str, replicas: int,
               cluster_labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The single-GPU example (one L4, one node per replica) as `ns`/`name`, on the
    clusters with `cluster_labels` (default: the example's, tier: prod), without its
    Hugging Face token (no Secret in a test's namespace: the engine needs none here)."""
    md = copy.deepcopy(_SINGLE_GPU)
    md["metadata"] = {"name": name, "namespace": ns}
    md["spec"]["replicas"] = replicas
    if cluster_labels is not None:
        md["spec"]["template"]["spec"]["clusterSelector"] = {"matchLabels": dict(cluster_labels)}
    return without_hf_token(md)


def without_hf_token(md: dict[str, Any]) -> dict[str, Any]:
    """`md` without the Hugging Face token its engines read from a Secret: a test's
    namespace has no such Secret (the example namespaces do), and the simulator
    downloads nothing. Other env stays."""
    for engine in md["spec"]["template"]["spec"]["engines"]:
        for member in engine["members"]:
            for c in member["template"]["spec"]["containers"]:
                env = [e for e in c.get("env") or [] if e.get("name") != "HF_TOKEN"]
                if env:
                    c["env"] = env
                else:
                    c.pop("env", None)
    return md


_SINGLE_GPU = yaml.safe_load(SINGLE_GPU.read_text())


def replicas_of(cp: ControlPlane, ns: str, deployment: str) -> list[dict]:
    return sorted(items(cp, MR, ns, f"{LABEL_DEPLOYMENT}={deployment}"),
                  key=lambda mr: mr["metadata"]["name"])


def placement(mr: Mapping[str, Any]) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """(cluster, replica index, ((engine, pool), ...)) of a ModelReplica."""
    spec = mr["spec"]
    pools = tuple(sorted((e["name"], e["members"][0]["nodePoolName"]) for e in spec["engines"]))
    return spec["clusterName"], mr["metadata"]["labels"]["modelplane.ai/replica-index"], pools


def wait(what: str, check: Callable[[], Any], timeout: float) -> Any:
    return wait_for(what, check, timeout, interval=1.0, max_interval=5.0)


def wait_scheduled(cp: ControlPlane, ns: str, name: str, want: int,
                   timeout: float = SETTLE) -> dict:
    """The ModelDeployment once exactly `want` of its replicas are placed (status and
    ModelReplicas agree); its unscheduled reasons name why, on timeout."""
    def check():
        md = get(cp, MD, name, ns) or {}
        status = md.get("status") or {}
        got = (status.get("replicas") or {}).get("scheduled")
        if got != want or len(replicas_of(cp, ns, name)) != want:
            raise AssertionError(f"scheduled {got}: {status.get('unscheduled')}")
        return md
    return wait(f"ModelDeployment {ns}/{name} to have {want} replicas scheduled", check,
                timeout)


def wait_condition(cp: ControlPlane, kind: str, name: str, ns: str | None, typ: str,
                   timeout: float, status: str = "True") -> dict:
    def check():
        obj = get(cp, kind, name, ns)
        c = condition(obj, typ)
        if c.get("status") != status:
            raise AssertionError(f"{typ}={c.get('status')} {c.get('reason', '')}: "
                                 f"{c.get('message', '')}"[:600])
        return obj
    return wait(f"{kind} {ns + '/' if ns else ''}{name} {typ}={status}", check, timeout)


def fleet_ready(cp: ControlPlane) -> None:
    """Wait until every InferenceCluster takes new replicas: Ready, and its serving
    stack ready (the scheduler places nothing on a cluster whose StackReady is not
    True, so a scenario would place elsewhere than on the whole fleet). A scenario
    before may have restarted a remote API server, after which the stack's
    controllers there lose their leader leases and restart for a while."""
    for name in sorted(ic["metadata"]["name"] for ic in items(cp, IC)):
        for typ in ("Ready", "StackReady"):
            wait_condition(cp, IC, name, None, typ, SETTLE)


def fleet_conditions(cp: ControlPlane) -> str:
    """Each InferenceCluster's Ready and StackReady and its pools' observed nodes and
    free devices, as they are now: what a placement other than the whole fleet's is
    explained by."""
    out = []
    for ic in sorted(items(cp, IC), key=lambda o: o["metadata"]["name"]):
        said = []
        for typ in ("Ready", "StackReady"):
            c = condition(ic, typ)
            said.append(f"{typ}={c.get('status')} {c.get('message', '')}")
        pools = [f"{p.get('name')} {p.get('nodes')} nodes " + ",".join(
                     f"{d.get('name')} {d.get('free')} free" for d in p.get("devices") or [])
                 for p in (ic.get("status") or {}).get("nodePools") or []]
        out.append(f"{ic['metadata']['name']}: " + "; ".join(s[:200] for s in said + pools))
    return "\n".join(out)


def uids(cp: ControlPlane, ns: str, kinds: Iterable[str]) -> dict[tuple[str, str, str], str]:
    """(cluster, kind, name) -> uid of every object of `kinds` in `ns` on every cluster."""
    out = {}
    for handle in {id(h): h for h in cp.clusters.values()}.values():
        for kind in kinds:
            for obj in items(cp, kind, ns, cluster=handle):
                out[(handle.name, kind, obj["metadata"]["name"])] = obj["metadata"]["uid"]
    return out


def serving_pods(cp: ControlPlane, mr: Mapping[str, Any]) -> list[dict]:
    handle = cp.cluster(mr["spec"]["clusterName"])
    return items(cp, "pods", mr["metadata"]["namespace"],
                 f"{LABEL_REPLICA}={mr['metadata']['name']}", cluster=handle)


def accepted_and_resolved(r: Mapping[str, Any]) -> list[str]:
    """What Envoy Gateway's controller says is wrong with the route; empty when nothing."""
    ours = [p for p in (r.get("status") or {}).get("parents") or []
            if p.get("controllerName") == envoy_gateway.CONTROLLER]
    if not ours:
        return ["no parent status from Envoy Gateway yet"]
    problems = []
    for p in ours:
        for typ in ("Accepted", "ResolvedRefs"):
            c = next((c for c in p.get("conditions") or [] if c.get("type") == typ), {})
            if c.get("status") != "True":
                problems.append(f"{typ}={c.get('status')} {c.get('reason')}: {c.get('message')}")
            elif c.get("observedGeneration") != r["metadata"].get("generation"):
                problems.append(f"{typ} is about generation {c.get('observedGeneration')}, "
                                f"not {r['metadata'].get('generation')}")
    return problems


def routes_accepted_by_envoy_gateway(cp: ControlPlane, mr: Mapping[str, Any]) -> list[str]:
    """Problems with the replica's HTTPRoutes on its cluster, as the Gateway controller
    reports them: each route has a status.parents[] entry written by Envoy Gateway
    (its controllerName) with Accepted=True and, since every backend kind resolves
    (InferencePools through the extension server), ResolvedRefs=True. Empty when
    all is well."""
    handle = cp.cluster(mr["spec"]["clusterName"])
    name = mr["metadata"]["name"]
    routes = items(cp, "httproutes.gateway.networking.k8s.io", mr["metadata"]["namespace"],
                   f"{LABEL_REPLICA}={name}", cluster=handle)
    if not routes:
        return [f"no HTTPRoute of {name} on {handle.name}"]
    problems = []
    for r in routes:
        parents = (r.get("status") or {}).get("parents") or []
        by = [p.get("controllerName") for p in parents]
        ours = [p for p in parents if p.get("controllerName") == envoy_gateway.CONTROLLER]
        if not ours:
            problems.append(f"HTTPRoute {r['metadata']['name']} on {handle.name}: no parent "
                            f"status from {envoy_gateway.CONTROLLER} (parents by {by})")
        for p in ours:
            for typ in ("Accepted", "ResolvedRefs"):
                c = next((c for c in p.get("conditions") or [] if c.get("type") == typ), {})
                if c.get("status") != "True":
                    problems.append(f"HTTPRoute {r['metadata']['name']} on {handle.name}: "
                                    f"{typ}={c.get('status')} {c.get('reason')}: "
                                    f"{c.get('message')}")
    return problems


def claims_on_their_pool(cp: ControlPlane, mr: Mapping[str, Any]) -> list[str]:
    """Problems with the replica's pods and claims, as the real cluster sees them:
    every pod runs on a node of its engine's pool, and every ResourceClaim it uses
    is allocated from devices of that very node. Empty when all is well."""
    handle = cp.cluster(mr["spec"]["clusterName"])
    ns = mr["metadata"]["namespace"]
    want = {e["name"]: e["members"][0]["nodePoolName"] for e in mr["spec"]["engines"]}
    nodes = {n["metadata"]["name"]: n for n in items(cp, "nodes", None, cluster=handle)}
    slices = {s["spec"]["pool"]["name"]: s["spec"].get("nodeName")
              for s in items(cp, "resourceslices", None, cluster=handle)}
    claims = {c["metadata"]["name"]: c for c in items(cp, "resourceclaims", ns, cluster=handle)}
    problems = []
    pods = serving_pods(cp, mr)
    if not pods:
        problems.append(f"no pods of {mr['metadata']['name']} on {handle.name}")
    for pod in pods:
        if LABEL_ENGINE not in pod["metadata"]["labels"]:
            continue  # not an engine's (an endpoint picker's): claims nothing, pinned nowhere
        name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
        pool = want.get(pod["metadata"]["labels"][LABEL_ENGINE])
        if not node:
            problems.append(f"pod {name} is not scheduled")
            continue
        node_pool = nodes.get(node, {}).get("metadata", {}).get("labels", {}).get(LABEL_POOL)
        if node_pool != pool:
            problems.append(f"pod {name} runs on {node} of pool {node_pool}, not {pool}")
        for st in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            claim = claims.get(st.get("resourceClaimName") or "")
            alloc = ((claim or {}).get("status") or {}).get("allocation")
            if not alloc:
                problems.append(f"claim {st.get('resourceClaimName')} of pod {name} "
                                f"is not allocated")
                continue
            for r in alloc["devices"]["results"]:
                if slices.get(r["pool"]) != node:
                    problems.append(f"claim of pod {name} got {r['device']} of "
                                    f"{r['pool']}, not of node {node}")
    return problems


def delete_and_wait(cp: ControlPlane, ns: str, name: str, timeout: float = GONE) -> None:
    """Delete a ModelDeployment and wait until its replicas, the provider-kubernetes
    Objects they composed, and their pods and claims on every cluster, are gone
    (so the next test has the whole fleet, and sees none of its objects go)."""
    cp.kubectl("delete", MD, name, "-n", ns, "--ignore-not-found", "--wait=false")

    def gone():
        left = [mr["metadata"]["name"] for mr in replicas_of(cp, ns, name)]
        left += [f"{OBJECT}/{o['metadata']['name']}"
                 for o in items(cp, OBJECT, ns, f"{LABEL_DEPLOYMENT}={name}")]
        for handle in {id(h): h for h in cp.clusters.values()}.values():
            for kind in ("pods", "resourceclaims"):
                left += [f"{handle.name}/{kind}/{o['metadata']['name']}"
                         for o in items(cp, kind, ns, cluster=handle)]
            for kind in ("deployments", "services", "resourceclaimtemplates"):
                left += [f"{handle.name}/{kind}/{o['metadata']['name']}"
                         for o in items(cp, kind, ns, f"{LABEL_DEPLOYMENT}={name}",
                                        cluster=handle)]
        if get(cp, MD, name, ns) is not None:
            left.append(f"{MD} {name}")
        if left:
            raise AssertionError("still there: " + ", ".join(left[:8]))
        return True
    wait(f"ModelDeployment {ns}/{name} and everything it composed to be gone", gone, timeout)


class Stopwatch:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def seconds(self) -> float:
        return round(time.monotonic() - self.t0, 1)
