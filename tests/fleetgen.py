"""Synthetic fleets for the scheduler tests: InferenceClusters, ModelDeployments
and ModelReplicas as plain dicts, shaped as the API server would store them.

Builders are deliberately independent of the scheduler's own code (a
ModelReplica of "another deployment" is written out by hand here, not by
`function.scheduler.output`), so a test compares the scheduler against the
contract, not against itself. `World` keeps the state of one control plane
across reconciles: it feeds the desired ModelReplicas back as observed composed
resources *and* as required ModelReplicas, stamping a creationTimestamp on each
new one the way the API server does.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from builders import composite, conditions, desired, request
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.contract.api import (
    API_VERSION,
    LABEL_CLUSTER,
    LABEL_DEPLOYMENT,
    LABEL_REPLICA_INDEX,
    REQUIRE_CLUSTERS,
    REQUIRE_DEPLOYMENTS,
    REQUIRE_OWN_NAMESPACE,
    REQUIRE_PROMETHEUS_SERVERS,
    REQUIRE_REPLICAS,
    REQUIRE_SERVICES,
)
from function.runtime import fn

GPU = "gpu.example.com"
NS = "ml-team"


# --- InferenceClusters -------------------------------------------------------

def device(name: str = "gpu", product: str = "H100", *, count: int = 8, memory: str = "80Gi",
           claim: str = "DRA", driver: str = GPU, device_class: str | None = None,
           **attributes: Any) -> dict:
    """A device kind every node of a pool offers (a DRA ResourceSlice device's shape)."""
    attrs = {"productName": {"string": product}}
    for k, v in attributes.items():
        kind = "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "string"
        attrs[k] = {kind: v}
    d: dict[str, Any] = {"name": name, "driver": driver, "count": count, "attributes": attrs,
                         "capacity": {"memory": {"value": memory}}}
    if claim == "Synthetic":
        d["claim"] = "Synthetic"
    else:
        d["claim"] = "DRA"
        d["deviceClassName"] = device_class or driver
    return d


def synthetic(name: str = "fabric", driver: str = "fabric.example.com", *, count: int = 1,
              **attributes: Any) -> dict:
    """A Synthetic device: constrains placement, never claimed."""
    attrs = {}
    for k, v in attributes.items():
        kind = "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "string"
        attrs[k] = {kind: v}
    return {"name": name, "claim": "Synthetic", "driver": driver, "count": count,
            "attributes": attrs}


def pool(name: str, nodes: int, *devices: Mapping[str, Any]) -> dict:
    return {"name": name, "nodes": nodes, "devices": [dict(d) for d in devices]}


def taint(key: str, effect: str, value: str = "") -> dict:
    t = {"key": key, "effect": effect}
    if value:
        t["value"] = value
    return t


def cluster(name: str, *pools: Mapping[str, Any], labels: Mapping[str, str] | None = None,
            taints: Iterable[Mapping[str, str]] = (), ready: bool | None = None) -> dict:
    ic: dict[str, Any] = {
        "apiVersion": API_VERSION, "kind": "InferenceCluster",
        "metadata": {"name": name, "labels": dict(labels or {"tier": "prod"})},
        "spec": {"gateway": {"name": "gw", "namespace": "gateway-system",
                             "address": f"https://{name}.example.com"},
                 "nodePools": [dict(p) for p in pools]},
    }
    if taints:
        ic["spec"]["taints"] = [dict(t) for t in taints]
    if ready is not None:
        ic["status"] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                        "reason": "Available" if ready else "Unavailable"}]}
    return ic


# --- ModelDeployments --------------------------------------------------------

def product_is(*products: str) -> str:
    if len(products) == 1:
        return f'device.attributes["{GPU}"].productName == "{products[0]}"'
    return f'device.attributes["{GPU}"].productName in {list(products)!r}'.replace("'", '"')


def memory_at_least(q: str) -> str:
    return f'device.capacity["{GPU}"].memory.compareTo(quantity("{q}")) >= 0'


def req(name: str = "gpu", count: int = 1, *cel: str) -> dict:
    """One device request: `count` devices of one kind matching every selector."""
    r: dict[str, Any] = {"name": name, "count": count}
    if cel:
        r["selectors"] = [{"cel": c} for c in cel]
    return r


def _container(name: str) -> dict:
    return {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.10.1.1",
                                     "args": ["serve", name]}]}}


def standalone(*requests: Mapping[str, Any]) -> dict:
    m: dict[str, Any] = {"role": "Standalone", "template": _container("standalone")}
    if requests:
        m["nodeSelector"] = {"devices": [dict(r) for r in requests]}
    return m


def leader(*requests: Mapping[str, Any]) -> dict:
    m: dict[str, Any] = {"role": "Leader", "template": _container("leader")}
    if requests:
        m["nodeSelector"] = {"devices": [dict(r) for r in requests]}
    return m


def worker(nodes: int, *requests: Mapping[str, Any]) -> dict:
    m: dict[str, Any] = {"role": "Worker", "worker": {"nodes": nodes},
                         "template": _container("worker")}
    if requests:
        m["nodeSelector"] = {"devices": [dict(r) for r in requests]}
    return m


def engine(name: str, *members: Mapping[str, Any], copies: int | None = None,
           phase: str | None = None) -> dict:
    e: dict[str, Any] = {"name": name, "members": [dict(m) for m in members]}
    if copies is not None:
        e["copies"] = copies
    if phase:
        e["phase"] = phase
    return e


def deployment(name: str, *engines: Mapping[str, Any], replicas: int = 1, namespace: str = NS,
               selector: Mapping[str, str] | None = None,
               tolerations: Iterable[Mapping[str, Any]] = (), mode: str | None = None,
               labels: Mapping[str, str] | None = None,
               annotations: Mapping[str, str] | None = None) -> dict:
    if not engines:
        engines = (engine("vllm", standalone(req("gpu", 1, product_is("H100")))),)
    tspec: dict[str, Any] = {"engines": [dict(e) for e in engines]}
    if selector:
        tspec["clusterSelector"] = {"matchLabels": dict(selector)}
    if tolerations:
        tspec["tolerations"] = [dict(t) for t in tolerations]
    if mode:
        tspec["serving"] = {"mode": mode}
    template: dict[str, Any] = {"spec": tspec}
    if labels or annotations:
        template["metadata"] = {}
        if labels:
            template["metadata"]["labels"] = dict(labels)
        if annotations:
            template["metadata"]["annotations"] = dict(annotations)
    return {"apiVersion": API_VERSION, "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "template": template}}



# GPUs one node offers, per product, in these fleets (device()'s default is 8).
PER_NODE = {"H100": 8, "L4": 4}


def one_node(name: str, replicas: int, strategy: str | None = None,
             product: str = "H100") -> dict:
    """A deployment of Standalone replicas taking a whole node of `product` each
    (every GPU one node offers, PER_NODE), under placement.strategy `strategy`
    (None: the default, Spread)."""
    md = deployment(name, engine("vllm", standalone(req("gpu", PER_NODE[product],
                                                        product_is(product)))),
                    replicas=replicas)
    if strategy:
        md["spec"]["template"]["spec"]["placement"] = {"strategy": strategy}
    return md


# --- ModelReplicas -----------------------------------------------------------

def stamp(n: int) -> str:
    """The n-th creationTimestamp (RFC 3339, sorts as it counts)."""
    return f"2025-01-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z"


def foreign_replica(name: str, cluster_name: str, usage: Mapping[str, int], *,
                    deployment_name: str = "other", namespace: str = "other-team",
                    index: int = 0, created: str | None = None,
                    claim: str = "DRA", gpus: int = 8, device_class: str = GPU) -> dict:
    """Another deployment's ModelReplica running `usage` pods per pool, each
    claiming `gpus` GPUs on one node.

    Each pool gets one Standalone engine with `copies` = pods. With the default
    8 every pod takes a whole node of the fleets' 8-GPU pools, so `usage` is the
    nodes it holds there; on a 4-GPU (L4) pool pass gpus=4 for the same. The
    requests resolved to DeviceClass `device_class`.
    """
    engines = []
    for i, (pool_name, nodes) in enumerate(sorted(usage.items())):
        member = {"role": "Standalone", "nodePoolName": pool_name,
                  "nodeSelector": {"devices": [{"name": "gpu", "count": gpus}]},
                  "deviceRequests": [{"name": "gpu", "claim": claim, "count": gpus,
                                      **({"deviceClassName": device_class}
                                         if claim == "DRA" else {})}],
                  "template": _container("foreign")}
        engines.append({"name": f"e{i}", "copies": nodes, "members": [member]})
    meta: dict[str, Any] = {"name": name, "namespace": namespace,
                            "labels": {LABEL_DEPLOYMENT: deployment_name,
                                       LABEL_CLUSTER: cluster_name,
                                       LABEL_REPLICA_INDEX: str(index)}}
    if created:
        meta["creationTimestamp"] = created
    return {"apiVersion": API_VERSION, "kind": "ModelReplica", "metadata": meta,
            "spec": {"clusterName": cluster_name, "engines": engines}}


def own_replica(md: Mapping[str, Any], cluster_name: str, index: int,
                pools: Mapping[str, str], *, created: str | None = None,
                classes: Mapping[str, str] | None = None, name: str | None = None) -> dict:
    """One of `md`'s ModelReplicas as it exists in the control plane, written by hand.

    `pools` maps engine name -> pool; every member of the engine is on it and
    every device request resolved to a DRA device of class `classes[request]`
    (default GPU).
    """
    meta_md = md["metadata"]
    engines = []
    for e in md["spec"]["template"]["spec"]["engines"]:
        e = copy.deepcopy(e)
        for m in e["members"]:
            m["nodePoolName"] = pools[e["name"]]
            m["deviceRequests"] = [
                {"name": r["name"], "claim": "DRA", "count": r.get("count", 1),
                 "deviceClassName": (classes or {}).get(r["name"], GPU),
                 **({"selectors": r["selectors"]} if r.get("selectors") else {})}
                for r in (m.get("nodeSelector") or {}).get("devices") or []]
        engines.append(e)
    meta: dict[str, Any] = {
        "name": name or f"{meta_md['name']}-{cluster_name}-{index}",
        "namespace": meta_md.get("namespace", NS),
        "labels": {LABEL_DEPLOYMENT: meta_md["name"], LABEL_CLUSTER: cluster_name,
                   LABEL_REPLICA_INDEX: str(index)}}
    if created:
        meta["creationTimestamp"] = created
    spec: dict[str, Any] = {"clusterName": cluster_name, "engines": engines}
    return {"apiVersion": API_VERSION, "kind": "ModelReplica", "metadata": meta, "spec": spec}


def key(cluster_name: str, index: int) -> str:
    """The composed-resource key the scheduler uses for a replica."""
    return f"replica-{index}-{cluster_name}"


def usage_of(mr: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """(cluster, pool) -> device-claiming pods a ModelReplica runs there, read from its
    spec (every member's pods x copies, where some DRA request is resolved): with
    requests that take a whole node each, the nodes it holds."""
    spec = mr.get("spec") or {}
    out: dict[tuple[str, str], int] = {}
    for engine in spec.get("engines") or []:
        copies = int(engine.get("copies") or 1)
        for m in engine.get("members") or []:
            claims = [r for r in m.get("deviceRequests") or [] if r.get("claim", "DRA") == "DRA"]
            if not claims:
                continue
            pods = int((m.get("worker") or {}).get("nodes") or 0) if m.get("role") == "Worker" \
                else 1
            key = (spec["clusterName"], m["nodePoolName"])
            out[key] = out.get(key, 0) + pods * copies
    return out


def total_usage(mrs: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for mr in mrs:
        for k, n in usage_of(mr).items():
            out[k] = out.get(k, 0) + n
    return out


def pool_nodes(clusters: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], int]:
    return {(c["metadata"]["name"], p["name"]): int(p.get("nodes") or 0)
            for c in clusters for p in c["spec"].get("nodePools") or []}


# --- A control plane across reconciles --------------------------------------

def to_plain(obj: Any) -> Any:
    """Struct numbers come back as floats; whole numbers become ints again."""
    if isinstance(obj, float) and obj.is_integer():
        return int(obj)
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_plain(v) for v in obj]
    return obj


class World:
    """One deployment, a fleet, other deployments' replicas, and what exists now."""

    def __init__(self, md: Mapping[str, Any], clusters: Sequence[Mapping[str, Any]],
                 others: Sequence[Mapping[str, Any]] = (),
                 observed: Mapping[str, Mapping[str, Any]] | None = None,
                 deployments: Sequence[Mapping[str, Any]] = (),
                 services: Sequence[Mapping[str, Any]] = (),
                 namespaces: Sequence[Mapping[str, Any]] = (),
                 platform: Sequence[Mapping[str, Any]] = ()) -> None:
        self.md = copy.deepcopy(dict(md))
        # Namespaces that exist; the deployment's own is required by name.
        self.namespaces = [copy.deepcopy(dict(n)) for n in namespaces]
        # The platform's EnvironmentConfig of Prometheus servers (autoscaling), if any.
        self.platform = [copy.deepcopy(dict(p)) for p in platform]
        # The ModelServices of its namespace (what a leaving replica drains from).
        self.services = [copy.deepcopy(dict(s)) for s in services]
        # Every other ModelDeployment (a Pack deployment requires them all).
        self.deployments = [copy.deepcopy(dict(d)) for d in deployments]
        self.clusters = [copy.deepcopy(dict(c)) for c in clusters]
        self.others = [copy.deepcopy(dict(o)) for o in others]
        self.observed: dict[str, dict] = {k: copy.deepcopy(dict(v))
                                          for k, v in (observed or {}).items()}
        self._clock = itertools.count(10_000)

    def __repr__(self) -> str:
        """Enough to rebuild the world by hand when a property fails."""
        import json
        return "World(" + json.dumps({"md": self.md, "clusters": self.clusters,
                                      "others": self.others, "observed": self.observed,
                                      "deployments": self.deployments},
                                     sort_keys=True) + ")"

    def request(self, resolved: bool = True) -> fnv1.RunFunctionRequest:
        required = None
        if resolved:
            # Crossplane lists only the clusters matching clusterSelector.
            selector = ((self.md["spec"]["template"]["spec"].get("clusterSelector") or {})
                        .get("matchLabels") or {})
            def labels(c):
                meta = c.get("metadata")
                got = meta.get("labels") if isinstance(meta, dict) else None
                return got if isinstance(got, dict) else {}
            selected = [c for c in self.clusters
                        if all(labels(c).get(k) == v for k, v in selector.items())]
            required = {REQUIRE_CLUSTERS: selected,
                        REQUIRE_REPLICAS: [*self.others, *self.observed.values()],
                        REQUIRE_DEPLOYMENTS: [self.md, *self.deployments],
                        REQUIRE_SERVICES: self.services,
                        REQUIRE_OWN_NAMESPACE: [
                            n for n in self.namespaces
                            if n["metadata"]["name"] == self.md["metadata"].get("namespace")],
                        REQUIRE_PROMETHEUS_SERVERS: self.platform}
        return request(self.md, required=required, observed=self.observed)

    def run(self, resolved: bool = True) -> fnv1.RunFunctionResponse:
        return fn.run_function(self.request(resolved))

    def apply(self, rsp: fnv1.RunFunctionResponse) -> None:
        """Crossplane applies the desired composed resources: new ones get a
        creationTimestamp, existing ones keep theirs and their status."""
        new: dict[str, dict] = {}
        for k, mr in desired(rsp).items():
            mr = to_plain(mr)
            old = self.observed.get(k)
            meta = mr.setdefault("metadata", {})
            if old is not None and (old.get("metadata") or {}).get("name") == meta.get("name"):
                if (old.get("metadata") or {}).get("creationTimestamp"):
                    meta["creationTimestamp"] = old["metadata"]["creationTimestamp"]
                if old.get("status"):
                    mr["status"] = copy.deepcopy(old["status"])
            else:
                meta["creationTimestamp"] = stamp(next(self._clock))
            new[k] = mr
        self.observed = new

    def step(self) -> fnv1.RunFunctionResponse:
        rsp = self.run()
        self.apply(rsp)
        return rsp


def placements(rsp: fnv1.RunFunctionResponse) -> dict[int, tuple[str, dict[str, str]]]:
    """index -> (cluster, {engine: pool}) of every desired ModelReplica."""
    out = {}
    for mr in desired(rsp).values():
        idx = (mr["metadata"].get("labels") or {}).get(LABEL_REPLICA_INDEX)
        if idx is None or mr.get("kind") != "ModelReplica":  # its ModelEndpoint has the label too
            continue
        idx = int(idx)
        pools = {e["name"]: e["members"][0].get("nodePoolName") for e in mr["spec"]["engines"]}
        out[idx] = (mr["spec"]["clusterName"], pools)
    return out


def status(rsp: fnv1.RunFunctionResponse) -> dict:
    return to_plain(composite(rsp).get("status") or {})


def condition(rsp: fnv1.RunFunctionResponse, typ: str) -> tuple[str, str, str]:
    c = conditions(rsp)[typ]
    return ({fnv1.STATUS_CONDITION_TRUE: "True", fnv1.STATUS_CONDITION_FALSE: "False"}
            .get(c.status, "Unknown"), c.reason, c.message)


def messages(rsp: fnv1.RunFunctionResponse, severity: int | None = None) -> list[str]:
    return [r.message for r in rsp.results if severity is None or r.severity == severity]


def fatal(rsp: fnv1.RunFunctionResponse) -> list[str]:
    return messages(rsp, fnv1.SEVERITY_FATAL)
