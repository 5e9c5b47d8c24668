"""Engines -> workloads: a Deployment per Standalone engine, a LeaderWorkerSet per gang.

Each workload selects its own pods by `modelplane.ai/workload`, so the
engines of one replica never claim each other's pods.

Deployment (one pod per copy):
* `replicas: copies`.
* Rolling updates replace one pod at a time without surging: the scheduler
  counted exactly one node per copy on the pool, so a surge pod would wait
  for devices that the old pod holds, forever. An engine's `rollout`
  (maxSurge, maxUnavailable) overrides this when the user has room to surge.
* `progressDeadlineSeconds: 3600`: a large model loads for tens of minutes
  before its readiness probe passes; the 600 s default would report a
  healthy load as ProgressDeadlineExceeded, which we read as Failed.

LeaderWorkerSet (one group of 1 + worker.nodes pods per copy):
* `replicas: copies`, `size: 1 + worker.nodes`; the leader pod from the
  Leader member, the workers from the Worker member.
* `startupPolicy: LeaderCreated`: workers start as soon as the leader pod
  exists. LeaderReady would wait for the leader's readiness probe, but a
  leader serves (and turns ready) only once its workers have joined: the
  gang would wait for itself.
* `restartPolicy: RecreateGroupOnPodRestart`: a collective engine cannot
  survive losing a rank; restarting the whole group brings it back. The
  engine's `recoveryPolicy` overrides it (RecreateGroupAfterStart, None).
* An engine's `rollout` becomes `rolloutStrategy.rollingUpdateConfiguration`
  (maxSurge, maxUnavailable, partition: a staged rollout of the groups).

Both: an engine's `restartGracePeriodSeconds` becomes every pod's
`terminationGracePeriodSeconds`, the time an engine has to drain in-flight
token streams before it is killed on a restart or a rollout.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from function.composer import kinds, naming
from function.composer.claims import Shape, claim_template
from function.composer.composed import Backends, Composed, PodTemplate, Role, Workload
from function.composer.model import Engine, Member, Replica, cluster_pool
from function.composer.pods import pod_template
from function.contract.enums import MemberRole, RecoveryPolicy
from function.contract.records import Cluster

PROGRESS_DEADLINE_SECONDS = 3600


def compose_backends(replica: Replica, cluster: Cluster,
                     seen: Mapping[str, Shape | None] | None = None) -> Backends:
    """`seen`: the observed claim templates' requests by key (claims.template_key)."""
    out = Backends()
    for engine in replica.engines:
        claims = {}
        for member in engine.members:
            rct = claim_template(replica, engine, member, seen)
            if rct is not None:
                out.support.append(rct)
                claims[member.role] = rct.manifest["metadata"]["name"]
        build = _leaderworkerset if engine.is_gang else _deployment
        out.workloads.append(build(replica, cluster, engine, claims, out.notes))
    return out


def _pod(replica: Replica, cluster: Cluster, engine: Engine, member: Member, workload: str,
         claims: dict[str, str], notes: list[str]) -> PodTemplate:
    template = pod_template(replica, engine, member, workload=workload,
                            claim_template=claims.get(member.role),
                            taints=cluster_pool(cluster, member.pool).taints, notes=notes,
                            metadata_prefixes=cluster.pod_metadata_prefixes)
    if engine.grace_seconds is not None:
        template["spec"]["terminationGracePeriodSeconds"] = engine.grace_seconds
    return PodTemplate(engine=engine, member=member, template=template)


def _metadata(replica: Replica, engine: Engine, name: str) -> dict[str, Any]:
    labels = naming.object_labels(replica)
    labels[naming.LABEL_ENGINE] = engine.name
    return {"name": name, "namespace": replica.namespace, "labels": dict(sorted(labels.items()))}


def _deployment(replica: Replica, cluster: Cluster, engine: Engine, claims: dict[str, str],
                notes: list[str]) -> Workload:
    name = naming.deployment_name(replica, engine)
    pod = _pod(replica, cluster, engine, engine.member(MemberRole.STANDALONE), name, claims, notes)
    manifest = {
        **kinds.DEPLOYMENT.header(),
        "metadata": _metadata(replica, engine, name),
        "spec": {
            "replicas": engine.copies,
            "selector": {"matchLabels": {naming.LABEL_WORKLOAD: name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {
                "maxSurge": (engine.rollout or {}).get("maxSurge", 0),
                "maxUnavailable": (engine.rollout or {}).get("maxUnavailable", 1)}},
            "progressDeadlineSeconds": PROGRESS_DEADLINE_SECONDS,
            "template": pod.template,
        },
    }
    return Workload(engine, Composed(naming.workload_key(engine), manifest, Role.WORKLOAD), [pod])


def _leaderworkerset(replica: Replica, cluster: Cluster, engine: Engine,
                     claims: dict[str, str], notes: list[str]) -> Workload:
    name = naming.leaderworkerset_name(replica, engine)
    leader = _pod(replica, cluster, engine, engine.member(MemberRole.LEADER), name, claims, notes)
    worker = _pod(replica, cluster, engine, engine.member(MemberRole.WORKER), name, claims, notes)
    manifest: dict[str, Any] = {
        **kinds.LEADERWORKERSET.header(),
        "metadata": _metadata(replica, engine, name),
        "spec": {
            "replicas": engine.copies,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": 1 + worker.member.worker_nodes,
                "restartPolicy": (engine.recovery_policy
                                  or RecoveryPolicy.RECREATE_GROUP_ON_POD_RESTART.value),
                "leaderTemplate": leader.template,
                "workerTemplate": worker.template,
            },
        },
    }
    if engine.rollout:
        manifest["spec"]["rolloutStrategy"] = {
            "type": "RollingUpdate",
            "rollingUpdateConfiguration": {k: engine.rollout[k] for k in
                                           ("maxSurge", "maxUnavailable", "partition")
                                           if k in engine.rollout}}
    return Workload(engine, Composed(naming.workload_key(engine), manifest, Role.WORKLOAD),
                    [leader, worker])
