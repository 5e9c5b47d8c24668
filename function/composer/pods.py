"""One member's curated pod template -> the pod template its workload runs.

What passes through untouched: the engine container's image, pull policy,
command, args, env (values and secret/configMap/field refs), resources, the
pod's imagePullSecrets, and the labels and annotations the cluster allows
(`podsecurity.allowed`; the others dropped with a warning). Engine flags are the
user's: nothing is ever added to, removed from or rewritten in `command` or
`args`. The pod's security settings are the cluster's level, written once
every layer has added its containers (`podsecurity.harden`, from the composer).

What the composer adds, and why:

* `nodeSelector {modelplane.ai/pool: <pool>}` and tolerations of the pool's
  node taints: the scheduler placed the member on that pool and counted its
  nodes there.
* the member's ResourceClaimTemplate in `spec.resourceClaims`, claimed by the
  engine container: that is how the pod gets the DRA devices it was placed for.
* gang pods: `MODELPLANE_LEADER_ADDRESS` and `MODELPLANE_RANK`, first in the
  environment so the user's own variables can refer to them as `$(NAME)`.
* serving pods (Standalone, gang leader): port 8000 named `http` and a
  readiness probe on `/health` (vLLM and SGLang answer there), so a pod
  receives traffic only once its model is loaded.
* labels: the replica, its deployment, engine, member role and workload;
  the serving label on serving pods only (the replica's Service selects by
  it, so workers never receive requests).
* `enableServiceLinks: false`: Kubernetes would otherwise put `<SERVICE>_PORT`
  variables of every Service in the namespace into the engine's environment;
  a Service named `vllm` sets `VLLM_PORT=tcp://...`, which vLLM reads as its
  own setting and fails on.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from function.composer import naming, podsecurity
from function.composer.model import Engine, Member, Replica
from function.contract.api import (
    ENGINE_HEALTH_PATH,
    LABEL_POOL,
    LABEL_SERVING,
    POD_CLAIM,
    SERVING_PORT_NAME,
)
from function.contract.enums import EngineContainerName, TolerationOperator
from function.contract.records import Taint

SERVING_PORT = 8000
HEALTH_PATH = ENGINE_HEALTH_PATH
# The pod's own name for its ResourceClaim; the engine container claims it.
CLAIM = POD_CLAIM

# LeaderWorkerSet labels every pod of a group with its index (0 = leader) and
# its webhook puts LWS_LEADER_ADDRESS first in every container's environment
# (sigs.k8s.io/lws pkg/utils/pod AddLWSVariables), so `$(LWS_LEADER_ADDRESS)`
# expands in variables listed after it.
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
ENV_LEADER_ADDRESS = "MODELPLANE_LEADER_ADDRESS"
ENV_RANK = "MODELPLANE_RANK"

# The curated container fields, copied as written and nothing else.
CONTAINER_FIELDS = ("image", "imagePullPolicy", "command", "args")


def gang_env() -> list[dict[str, Any]]:
    """The leader's address and this pod's rank (0 leader, 1..n workers), from LWS."""
    return [
        {"name": ENV_LEADER_ADDRESS, "value": f"$({LWS_LEADER_ADDRESS})"},
        {"name": ENV_RANK, "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.labels['{LWS_WORKER_INDEX_LABEL}']"}}},
    ]


def tolerations(taints: Sequence[Taint]) -> list[dict[str, str]]:
    out = []
    for t in taints:
        tol = {"key": t.key, "operator": TolerationOperator.EQUAL.value, "value": t.value,
               "effect": t.effect} if t.value else \
            {"key": t.key, "operator": TolerationOperator.EXISTS.value, "effect": t.effect}
        out.append(tol)
    return out


def pod_template(replica: Replica, engine: Engine, member: Member, *, workload: str,
                 claim_template: str | None, taints: Sequence[Taint],
                 notes: list[str], metadata_prefixes: Sequence[str] = ()) -> dict[str, Any]:
    """The pod template of one member; `notes` collects warnings for the user."""
    tmeta = member.template.get("metadata") or {}
    tspec = member.template.get("spec") or {}
    user = next(c for c in tspec.get("containers") or []
                if c.get("name") == EngineContainerName.ENGINE)

    container: dict[str, Any] = {"name": EngineContainerName.ENGINE.value}
    for key in CONTAINER_FIELDS:
        if key in user:
            container[key] = copy.deepcopy(user[key])
    env = [copy.deepcopy(e) for e in user.get("env") or []]
    if engine.is_gang:
        ours = gang_env()
        reserved = {e["name"] for e in ours}
        shadowed = sorted(e["name"] for e in env if e.get("name") in reserved)
        if shadowed:
            notes.append(f"engine {engine.name!r} {member.role.lower()}: env "
                         f"{', '.join(shadowed)} is set by modelplane in gang pods; "
                         "the template's value is ignored")
        env = ours + [e for e in env if e.get("name") not in reserved]
    if env:
        container["env"] = env
    resources = copy.deepcopy(user.get("resources") or {})
    if claim_template:
        resources["claims"] = [{"name": CLAIM}]
    if resources:
        container["resources"] = resources
    if member.serves:
        container["ports"] = [{"name": SERVING_PORT_NAME, "containerPort": SERVING_PORT,
                               "protocol": "TCP"}]
        container["readinessProbe"] = {
            "httpGet": {"path": HEALTH_PATH, "port": SERVING_PORT},
            "timeoutSeconds": 5,
        }

    who = f"engine {engine.name!r} {member.role.lower()}: pod"
    labels = dict(sorted(podsecurity.allowed_keys(tmeta.get("labels") or {}, f"{who} labels",
                                                  notes, metadata_prefixes).items()))
    labels.update(naming.object_labels(replica))
    labels.update({
        naming.LABEL_ENGINE: engine.name,
        naming.LABEL_ROLE: member.role,
        naming.LABEL_WORKLOAD: workload,
    })
    if member.serves:
        labels[LABEL_SERVING] = naming.replica_label(replica)
    metadata: dict[str, Any] = {"labels": dict(sorted(labels.items()))}
    annotations = podsecurity.allowed_keys(tmeta.get("annotations") or {},
                                           f"{who} annotations", notes, metadata_prefixes)
    if annotations:
        metadata["annotations"] = dict(sorted(annotations.items()))

    spec: dict[str, Any] = {
        "containers": [container],
        "enableServiceLinks": False,
        "nodeSelector": {LABEL_POOL: member.pool},
    }
    if tspec.get("imagePullSecrets"):
        spec["imagePullSecrets"] = copy.deepcopy(tspec["imagePullSecrets"])
    if taints:
        spec["tolerations"] = tolerations(taints)
    if claim_template:
        spec["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": claim_template}]
    return {"metadata": metadata, "spec": spec}
