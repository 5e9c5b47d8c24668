"""Readiness, phase, conditions and endpoint; never destructive; deterministic."""

from __future__ import annotations

import copy

import pytest
from cel_expr_python import cel
from composer_support import (
    REMOTE,
    cluster,
    compose,
    gang,
    replica,
    standalone,
)
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.composer.kinds import KINDS, judge
from function.kit import requeue

AVAILABLE = {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}
ACCEPTED = {"parents": [{"parentRef": {"name": "inference-gateway"}, "controllerName": "x",
                         "conditions": [{"type": "Accepted", "status": "True",
                                         "reason": "Accepted"}]}]}


def with_status(obj, status):
    out = copy.deepcopy(obj)
    out["status"] = status
    out["metadata"]["uid"] = "0000-uid"
    out["metadata"]["resourceVersion"] = "42"
    return out


def deployment_status(ready, want=1, available=True, **extra):
    conds = [AVAILABLE if available else {**AVAILABLE, "status": "False"}]
    status = {"replicas": want, "updatedReplicas": want, "conditions": conds}
    if ready:
        status["readyReplicas"] = ready
    status.update(extra)
    return status


def observe(out, statuses):
    """The desired objects of `out` as observed, each with the given status (key -> status)."""
    return {k: with_status(out.desired[k], s) for k, s in statuses.items()}


def all_serving(out):
    statuses = {}
    for key, obj in out.desired.items():
        kind = obj["kind"]
        if kind == "Deployment":
            statuses[key] = deployment_status(obj["spec"]["replicas"], obj["spec"]["replicas"])
        elif kind == "LeaderWorkerSet":
            statuses[key] = {"readyReplicas": obj["spec"]["replicas"], "conditions": [AVAILABLE]}
        elif kind == "HTTPRoute":
            statuses[key] = ACCEPTED
        else:
            statuses[key] = {}
    return observe(out, statuses)


# --- phase ---------------------------------------------------------------------------


def test_a_replica_with_nothing_created_yet_is_pending():
    out = compose(replica())
    assert out.phase == "Pending"
    assert set(out.ready.values()) == {fnv1.READY_FALSE}
    assert out.condition("WorkloadsReady")[:2] == ("False", "Pending")


def test_a_replica_is_loading_while_a_pod_is_not_ready():
    mr = replica(standalone(copies=2))
    first = compose(mr)
    observed = all_serving(first)
    observed["vllm-deployment"]["status"] = deployment_status(1, want=2)
    out = compose(mr, observed=observed)
    assert out.phase == "Loading"
    assert out.ready["vllm-deployment"] == fnv1.READY_FALSE
    status, reason, message = out.condition("WorkloadsReady")
    assert (status, reason) == ("False", "Loading") and "1/2 pods ready" in message


def test_a_replica_serves_once_every_workload_is_available_and_the_route_accepted():
    mr = replica(gang("g"), standalone("s"))
    out = compose(mr, observed=all_serving(compose(mr)))
    assert out.phase == "Serving"
    assert set(out.ready.values()) == {fnv1.READY_TRUE}
    assert out.condition("WorkloadsReady")[:2] == ("True", "Available")
    assert out.condition("Routed")[:2] == ("True", "Accepted")
    assert out.status["endpoint"] == "https://llm.us-east-1.example.com/ml-team/llama-us-east-1-0"


def test_a_replica_not_serving_yet_asks_to_be_looked_at_again_soon():
    # Its objects' events may be held back by Crossplane's watch circuit
    # breaker; a short TTL requeues it regardless.
    mr = replica(standalone(copies=2))
    first = compose(mr)
    assert first.phase == "Pending" and first.rsp.meta.ttl.ToTimedelta() == requeue.WAITING
    observed = all_serving(first)
    observed["vllm-deployment"]["status"] = deployment_status(1, want=2)
    assert compose(mr, observed=observed).rsp.meta.ttl.ToTimedelta() == requeue.WAITING
    serving = compose(mr, observed=all_serving(first))
    assert serving.phase == "Serving" and serving.rsp.meta.ttl.ToTimedelta() > requeue.WAITING


def test_a_gang_is_ready_as_a_whole_not_when_its_leader_is():
    mr = replica(gang(copies=2))
    observed = all_serving(compose(mr))
    # One group (leader and workers) ready of two: LWS is not Available yet.
    observed["vllm-leaderworkerset"]["status"] = {
        "readyReplicas": 1, "replicas": 2,
        "conditions": [{"type": "Available", "status": "False", "reason": "GroupsNotReady"}]}
    out = compose(mr, observed=observed)
    assert out.phase == "Loading"
    assert out.ready["vllm-leaderworkerset"] == fnv1.READY_FALSE
    assert "1/2 groups ready" in out.condition("WorkloadsReady")[2]


def test_an_available_deployment_still_missing_pods_is_not_ready():
    mr = replica(standalone(copies=4))
    observed = all_serving(compose(mr))
    observed["vllm-deployment"]["status"] = deployment_status(3, want=4)  # maxUnavailable 1
    assert compose(mr, observed=observed).phase == "Loading"


def test_a_route_the_gateway_has_not_accepted_keeps_the_replica_loading():
    mr = replica()
    observed = all_serving(compose(mr))
    observed["httproute"]["status"] = {"parents": [{"conditions": [{
        "type": "Accepted", "status": "False", "reason": "NotAllowedByListeners",
        "message": "namespace ml-team is not allowed"}]}]}
    out = compose(mr, observed=observed)
    assert out.phase == "Loading"
    status, reason, message = out.condition("Routed")
    assert (status, reason) == ("False", "NotReady")
    assert "NotAllowedByListeners: namespace ml-team is not allowed" in message


def test_a_deployment_past_its_progress_deadline_fails_the_replica():
    mr = replica()
    observed = all_serving(compose(mr))
    observed["vllm-deployment"]["status"] = deployment_status(0, available=False, conditions=[
        {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
         "message": 'ReplicaSet "x" has timed out progressing.'}])
    out = compose(mr, observed=observed)
    assert out.phase == "Failed"
    status, reason, message = out.condition("WorkloadsReady")
    assert (status, reason) == ("False", "Failed")
    assert "ProgressDeadlineExceeded" in message


def test_a_deployment_that_cannot_create_pods_fails_the_replica():
    mr = replica()
    observed = all_serving(compose(mr))
    observed["vllm-deployment"]["status"] = deployment_status(0, conditions=[
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
         "message": "exceeded quota"}])
    assert compose(mr, observed=observed).phase == "Failed"


def remote(**kw):
    return replica(standalone(pool="l4-4x"), cluster=REMOTE, name="llama-eu-west-1-0", **kw)


def object_status(ready, synced=True, inner=None, message=""):
    conds = [{"type": "Synced", "status": "True" if synced else "False",
              "reason": "ReconcileSuccess" if synced else "ReconcileError", "message": message},
             {"type": "Ready", "status": "True" if ready else "False",
              "reason": "Available" if ready else "Unavailable"}]
    status = {"conditions": conds}
    if inner is not None:
        status["atProvider"] = {"manifest": inner}
    return status


def test_a_remote_replica_serves_when_every_object_is_ready():
    mr = remote()
    first = compose(mr)
    out = compose(mr, observed=observe(first, {k: object_status(True) for k in first.desired}))
    assert out.phase == "Serving"
    assert set(out.ready.values()) == {fnv1.READY_TRUE}


def test_an_object_that_cannot_be_applied_fails_the_replica():
    mr = remote()
    first = compose(mr)
    statuses = {k: object_status(True) for k in first.desired}
    statuses["service"] = object_status(False, synced=False,
                                        message="cannot apply object: forbidden")
    out = compose(mr, observed=observe(first, statuses))
    assert out.phase == "Failed"
    status, reason, message = out.condition("Routed")
    assert (status, reason) == ("False", "Failed") and "forbidden" in message


def test_an_object_waiting_for_its_remote_namespace_is_loading_not_failed():
    # provider-kubernetes may apply the Deployment before the Namespace Object
    # has created the namespace; that resolves itself a moment later.
    mr = remote()
    first = compose(mr)
    statuses = {k: object_status(True) for k in first.desired}
    statuses["vllm-deployment"] = object_status(
        False, synced=False, message='create failed: cannot create object: namespaces '
                                     '"ml-team" not found')
    out = compose(mr, observed=observe(first, statuses))
    assert out.phase == "Loading"
    assert "waiting for its namespace" in out.condition("WorkloadsReady")[2]


def test_a_remote_deployment_past_its_deadline_fails_the_replica():
    mr = remote()
    first = compose(mr)
    statuses = {k: object_status(True) for k in first.desired}
    remote_dep = with_status(first.desired["vllm-deployment"]["spec"]["forProvider"]["manifest"],
                             {"conditions": [{"type": "Progressing", "status": "False",
                                              "reason": "ProgressDeadlineExceeded"}]})
    statuses["vllm-deployment"] = object_status(False, inner=remote_dep)
    out = compose(mr, observed=observe(first, statuses))
    assert out.phase == "Failed"
    assert "ProgressDeadlineExceeded" in out.condition("WorkloadsReady")[2]


def test_a_remote_object_not_ready_yet_reports_the_remote_progress():
    mr = remote()
    first = compose(mr)
    statuses = {k: object_status(True) for k in first.desired}
    remote_dep = with_status(first.desired["vllm-deployment"]["spec"]["forProvider"]["manifest"],
                             deployment_status(0, available=False))
    statuses["vllm-deployment"] = object_status(False, inner=remote_dep)
    out = compose(mr, observed=observe(first, statuses))
    assert out.phase == "Loading"
    assert "vllm-deployment: 0/1 pods ready" in out.condition("WorkloadsReady")[2]


def test_prefill_decode_never_claims_to_serve_without_routing():
    mr = replica(dict(standalone("prefill"), phase="Prefill"),
                 dict(standalone("decode"), phase="Decode"), mode="PrefillDecode")
    out = compose(mr, observed=all_serving(compose(mr)))
    assert out.phase == "Loading"
    assert out.condition("WorkloadsReady")[0] == "True"


def test_the_composer_never_sets_the_ready_condition():
    assert "Ready" not in compose(replica()).conditions


def test_the_cluster_condition_says_where_the_replica_runs():
    assert compose(replica()).condition("ClusterResolved") == (
        "True", "Resolved", "InferenceCluster us-east-1 (the control-plane cluster)")
    assert "through ClusterProviderConfig eu-west-1" in compose(remote()).condition(
        "ClusterResolved")[2]


# --- never destructive ------------------------------------------------------------------


@pytest.fixture
def serving_replica():
    mr = replica(gang("g"), standalone("s"),
                 status={"phase": "Serving", "endpoint": "https://old.example.com/p"})
    return mr, all_serving(compose(mr))


@pytest.mark.parametrize("ic, reason", [
    ("unresolved", "Resolving"),
    (None, "ClusterNotFound"),
    (cluster("us-east-1", nodePools=[{"name": "l4"}]), "ClusterMalformed"),  # nodes missing
    (cluster("us-east-1", gateway=None), "NoGateway"),
    (cluster("us-east-1", nodePools=[{"name": "other", "nodes": 1}]), "PoolNotFound"),
], ids=["unresolved", "not-found", "malformed", "no-gateway", "pool-gone"])
def test_an_unusable_cluster_keeps_every_existing_object_and_says_why(serving_replica, ic,
                                                                         reason):
    mr, observed = serving_replica
    out = compose(mr, ic, observed=observed)
    assert not out.fatal
    assert set(out.desired) == set(observed)
    for key, obj in out.desired.items():
        assert obj["spec"] == observed[key]["spec"], key
        assert "status" not in obj and "uid" not in obj["metadata"]
        assert obj["metadata"]["name"] == observed[key]["metadata"]["name"]
    status, why, message = out.condition("ClusterResolved")
    assert (status, why) == ("False", reason)
    assert f"{len(observed)} existing objects are kept" in message
    # Still observed as serving: readiness and phase follow what exists.
    assert set(out.ready.values()) == {fnv1.READY_TRUE}
    assert out.phase == "Serving"
    assert out.status["endpoint"] == "https://old.example.com/p"


def test_before_the_cluster_is_resolved_nothing_is_composed_from_scratch():
    out = compose(replica(), "unresolved")
    assert out.desired == {}
    assert out.phase == "Pending"
    assert out.condition("ClusterResolved")[:2] == ("False", "Resolving")
    assert out.rsp.requirements.resources["inference-cluster"].match_name == "us-east-1"


def test_kept_objects_drop_what_servers_and_controllers_wrote():
    mr = replica()
    observed = all_serving(compose(mr))
    dep = observed["vllm-deployment"]
    dep["metadata"].update({"managedFields": [{"manager": "x"}], "generation": 3,
                            "ownerReferences": [{"kind": "ModelReplica"}],
                            "annotations": {"deployment.kubernetes.io/revision": "2",
                                            "crossplane.io/composition-resource-name":
                                                "vllm-deployment"}})
    kept = compose(mr, None, observed=observed).desired["vllm-deployment"]
    assert set(kept["metadata"]) == {"name", "namespace", "labels", "annotations"}
    assert kept["metadata"]["annotations"] == {
        "crossplane.io/composition-resource-name": "vllm-deployment"}


def test_an_invalid_replica_is_a_fatal_result_never_an_exception():
    mr = replica()
    mr["spec"]["engines"][0]["members"] = []
    out = compose(mr)
    assert out.fatal and "is invalid" in out.fatal[0]
    assert out.desired == {}


def test_the_same_input_gives_byte_identical_output():
    mr = replica(gang("g"), standalone("s"))
    observed = all_serving(compose(mr))
    a = compose(mr, observed=observed).rsp.SerializeToString(deterministic=True)
    b = compose(mr, observed=observed).rsp.SerializeToString(deterministic=True)
    assert a == b


# --- the Object readiness queries say what the judges say -----------------------------

CEL_ENV = cel.NewEnv(variables={"object": cel.Type.DYN})

SAMPLES = {
    ("apps/v1", "Deployment"): [
        {}, {"status": {}}, {"spec": {"replicas": 2}, "status": deployment_status(2, 2)},
        {"spec": {"replicas": 2}, "status": deployment_status(1, 2)},
        {"spec": {"replicas": 2}, "status": deployment_status(2, 2, available=False)},
        {"spec": {"replicas": 2}, "status": {**deployment_status(2, 2), "updatedReplicas": 1}},
        {"spec": {"replicas": 1}, "status": {"readyReplicas": 1, "updatedReplicas": 1}},
        {"status": deployment_status(1, 1)},  # replicas defaulted to 1
        {"spec": {"replicas": 1}, "status": deployment_status(1.0, 1)},  # JSON numbers
    ],
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): [
        {}, {"spec": {"replicas": 2}, "status": {"readyReplicas": 2, "conditions": [AVAILABLE]}},
        {"spec": {"replicas": 2}, "status": {"readyReplicas": 1, "conditions": [AVAILABLE]}},
        {"spec": {"replicas": 1}, "status": {"readyReplicas": 1, "conditions": [
            {"type": "Available", "status": "False"}]}},
        {"spec": {"replicas": 1}, "status": {"conditions": [AVAILABLE]}},
    ],
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): [
        {}, {"status": ACCEPTED}, {"status": {"parents": []}},
        {"status": {"parents": [{"conditions": [{"type": "Accepted", "status": "False"}]},
                                {"conditions": [{"type": "Accepted", "status": "True"}]}]}},
        {"status": {"parents": [{"conditions": [{"type": "ResolvedRefs", "status": "True"}]}]}},
    ],
    ("batch/v1", "Job"): [
        {}, {"status": {}}, {"status": {"active": 1}},
        {"status": {"conditions": [{"type": "Complete", "status": "True"}]}},
        {"status": {"conditions": [{"type": "Complete", "status": "False"}]}},
        {"status": {"conditions": [{"type": "Failed", "status": "True"}]}},
    ],
    ("v1", "PersistentVolumeClaim"): [
        {}, {"status": {}}, {"status": {"phase": "Pending"}}, {"status": {"phase": "Bound"}},
        {"status": {"phase": "Lost"}},
    ],
}


@pytest.mark.parametrize("kind", sorted(SAMPLES), ids=lambda k: k[1])
def test_object_readiness_queries_agree_with_the_judges(kind):
    program = CEL_ENV.compile(KINDS[kind].cel_ready)
    for sample in SAMPLES[kind]:
        obj = {"apiVersion": kind[0], "kind": kind[1], "metadata": {"name": "x"}, **sample}
        result = program.eval(CEL_ENV.Activation({"object": obj}))
        assert result.value() is judge(obj).ready, sample
