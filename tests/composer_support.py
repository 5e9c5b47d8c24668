"""Replicas, clusters and a RunFunction driver for the replica composer's tests."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from builders import EXAMPLES, load, request
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.contract.api import REQUIRE_CLUSTER, REQUIRE_OWN_NAMESPACE, REQUIRE_OWNER
from function.kit import structs
from function.tools import localrender
from function.runtime.fn import run_function

FLEET = {ic["metadata"]["name"]: ic for ic in load(EXAMPLES / "fleet")}
LOCAL, REMOTE = "us-east-1", "eu-west-1"  # no providerConfigRef / a ClusterProviderConfig

GPU_SELECTOR = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA-L4"'


def container(**extra: Any) -> dict[str, Any]:
    c = {"name": "engine", "image": "vllm/vllm-openai:v0.10.1.1",
         "command": ["vllm", "serve"], "args": ["some/model", "--port", "8000"]}
    c.update(extra)
    return c


def device(name: str = "gpu", count: int = 1, device_class: str = "gpu.nvidia.com",
           claim: str = "DRA", selectors: tuple[str, ...] = (GPU_SELECTOR,)) -> dict[str, Any]:
    r: dict[str, Any] = {"name": name, "claim": claim, "count": count,
                         "selectors": [{"cel": s} for s in selectors]}
    if device_class:
        r["deviceClassName"] = device_class
    return r


def member(role: str = "Standalone", pool: str = "l4", devices: list | None = None,
           nodes: int | None = None, template: dict | None = None) -> dict[str, Any]:
    devices = [device()] if devices is None else devices
    m: dict[str, Any] = {"role": role, "nodePoolName": pool,
                         "template": template or {"spec": {"containers": [container()]}}}
    if devices:
        m["nodeSelector"] = {"devices": [{"name": d["name"], "count": d["count"],
                                          "selectors": d.get("selectors", [])} for d in devices]}
        m["deviceRequests"] = devices
    if nodes is not None:
        m["worker"] = {"nodes": nodes}
    return m


def replica(*engines: dict[str, Any], name: str = "llama-us-east-1-0", namespace: str = "ml-team",
            cluster: str = LOCAL, mode: str = "Unified", deployment: str = "llama",
            status: dict | None = None) -> dict[str, Any]:
    mr: dict[str, Any] = {
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
        # What Crossplane and the scheduler put on a replica a ModelDeployment
        # composes (composer/trust.py): the composer composes no other.
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"crossplane.io/composite": deployment,
                                "modelplane.ai/deployment": deployment,
                                "modelplane.ai/cluster": cluster,
                                "modelplane.ai/replica-index": "0"},
                     "ownerReferences": [{"apiVersion": "modelplane.ai/v1alpha1",
                                          "kind": "ModelDeployment", "name": deployment,
                                          "uid": "0988e834-fbfa-5f95-9542-fb20c3c6422d",
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"clusterName": cluster, "serving": {"mode": mode},
                 "engines": list(engines) or [standalone()]},
    }
    if status:
        mr["status"] = status
    return mr


def as_composed(mr: Mapping[str, Any]) -> dict[str, Any]:
    """A ModelReplica the scheduler emitted, as Crossplane creates it: controlled by its
    ModelDeployment and labelled with it as the root composite (composer/trust.py)."""
    mr = copy.deepcopy(dict(mr))
    meta = mr.setdefault("metadata", {})
    deployment = meta["labels"]["modelplane.ai/deployment"]
    meta["labels"].setdefault("crossplane.io/composite", deployment)
    meta.setdefault("ownerReferences", [{
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelDeployment", "name": deployment,
        "uid": "0988e834-fbfa-5f95-9542-fb20c3c6422d", "controller": True,
        "blockOwnerDeletion": True}])
    return mr


def standalone(name: str = "vllm", copies: int = 1, pool: str = "l4", **kw: Any) -> dict:
    return {"name": name, "copies": copies, "members": [member("Standalone", pool, **kw)]}


def gang(name: str = "vllm", copies: int = 1, pool: str = "h100-8x", nodes: int = 1,
         leader_devices: list | None = None, worker_devices: list | None = None,
         leader: dict | None = None, worker: dict | None = None) -> dict:
    h100 = [device(count=8, selectors=('device.attributes["gpu.nvidia.com"].productName'
                                       ' == "NVIDIA-H100-80GB"',))]
    return {"name": name, "copies": copies, "members": [
        member("Leader", pool, h100 if leader_devices is None else leader_devices,
               template=leader),
        member("Worker", pool, h100 if worker_devices is None else worker_devices, nodes=nodes,
               template=worker)]}


def template(*, labels: dict | None = None, annotations: dict | None = None,
             pull_secrets: list | None = None, **container_fields: Any) -> dict:
    t: dict[str, Any] = {"spec": {"containers": [container(**container_fields)]}}
    meta = {k: v for k, v in (("labels", labels), ("annotations", annotations)) if v}
    if meta:
        t["metadata"] = meta
    if pull_secrets:
        t["spec"]["imagePullSecrets"] = pull_secrets
    return t


@dataclass
class Composed:
    rsp: fnv1.RunFunctionResponse
    desired: dict[str, dict[str, Any]]   # key -> manifest, integers restored
    ready: dict[str, int]                 # key -> fnv1.Ready

    @property
    def status(self) -> dict[str, Any]:
        return structs.to_dict(self.rsp.desired.composite.resource).get("status") or {}

    @property
    def phase(self) -> str | None:
        return self.status.get("phase")

    @property
    def conditions(self) -> dict[str, fnv1.Condition]:
        return {c.type: c for c in self.rsp.conditions}

    def condition(self, typ: str) -> tuple[str, str, str]:
        """(status as "True"/"False"/"Unknown", reason, message) of a condition."""
        c = self.conditions[typ]
        status = {fnv1.STATUS_CONDITION_TRUE: "True", fnv1.STATUS_CONDITION_FALSE: "False"}
        return status.get(c.status, "Unknown"), c.reason, c.message

    @property
    def fatal(self) -> list[str]:
        return [r.message for r in self.rsp.results if r.severity == fnv1.SEVERITY_FATAL]

    @property
    def warnings(self) -> list[str]:
        return [r.message for r in self.rsp.results if r.severity == fnv1.SEVERITY_WARNING]

    def manifests(self) -> dict[str, dict[str, Any]]:
        """Every composed object as it lands on its cluster (Objects unwrapped)."""
        return {k: inner(v) for k, v in self.desired.items()}

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [m for _, m in sorted(self.manifests().items()) if m["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        (m,) = self.of_kind(kind)
        return m

    def path_route(self) -> dict[str, Any]:
        """The replica's path-prefix HTTPRoute (its other one is its fleet Host's)."""
        return self.manifests()["httproute"]

    def fleet_route(self) -> dict[str, Any]:
        return self.manifests()["httproute-fleet"]


def inner(obj: Mapping[str, Any]) -> dict[str, Any]:
    if obj.get("kind") == "Object" and obj.get("apiVersion", "").startswith("kubernetes.m."):
        return obj["spec"]["forProvider"]["manifest"]
    return dict(obj)


def cluster(name: str = LOCAL, **spec_changes: Any) -> dict[str, Any]:
    ic = copy.deepcopy(FLEET[name])
    for key, value in spec_changes.items():
        if value is None:
            ic["spec"].pop(key, None)
        else:
            ic["spec"][key] = value
    return ic


_UNSET = object()


owner = localrender.placing_deployment  # the deployment that placed a replica


def compose(mr: Mapping[str, Any], ic: Any = _UNSET, *,
            observed: Mapping[str, Mapping] | None = None,
            namespaces: list[Mapping[str, Any]] | None = None,
            owners: Any = _UNSET) -> Composed:
    """Run the function on one ModelReplica. `ic`: the cluster found (default: the
    replica's from the example fleet), None for resolved-but-absent, or "unresolved".
    `namespaces`: what its own-Namespace requirement resolved to (None: unresolved).
    `owners`: what its ModelDeployment requirement resolved to (default: the
    deployment that placed it, `owner(mr)`); resolved with the cluster."""
    if ic is _UNSET:
        ic = FLEET[mr["spec"]["clusterName"]]
    if owners is _UNSET:
        owners = [owner(mr)]
    required: dict[str, Any] | None = None if ic == "unresolved" else {
        REQUIRE_CLUSTER: [] if ic is None else [ic], REQUIRE_OWNER: owners}
    if namespaces is not None:
        required = {**(required or {}), REQUIRE_OWN_NAMESPACE: namespaces}
    rsp = run_function(request(mr, required=required, observed=observed))
    desired = {k: structs.to_dict(v.resource) for k, v in rsp.desired.resources.items()}
    ready = {k: v.ready for k, v in rsp.desired.resources.items()}
    return Composed(rsp, desired, ready)


def pod_templates(workload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pod templates of a Deployment or LeaderWorkerSet (leader first)."""
    spec = workload["spec"]
    if workload["kind"] == "Deployment":
        return [spec["template"]]
    lwt = spec["leaderWorkerTemplate"]
    return [lwt["leaderTemplate"], lwt["workerTemplate"]]


def engine_container(pod: Mapping[str, Any]) -> dict[str, Any]:
    (c,) = [c for c in pod["spec"]["containers"] if c["name"] == "engine"]
    return c
