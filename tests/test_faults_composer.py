"""The fault matrix, composer side: under each fault nothing the spec still wants is
removed, a condition says why, and the next reconcile converges.

Each test composes a healthy replica first (the objects that exist), then
reconciles again under the fault with those objects observed, then once more
with the fault cleared.
"""

from __future__ import annotations

import copy

import pytest
from composer_support import FLEET, LOCAL, REMOTE, compose, replica, standalone, template

from function.composer import status
from function.contract.enums import ReplicaPhase


def existing(out) -> dict[str, dict]:
    """The composed objects as Crossplane would observe them (created, not yet ready)."""
    return copy.deepcopy(out.desired)


def healthy(cluster: str = REMOTE):
    mr = replica(standalone(pool="l4-4x" if cluster == REMOTE else "l4"), cluster=cluster)
    return mr, compose(mr)


def assert_kept(before, during):
    assert not during.fatal, during.fatal
    assert set(before.desired) <= set(during.desired), "an object the spec wants was dropped"
    for key in before.desired:
        assert during.desired[key]["metadata"]["name"] == before.desired[key]["metadata"]["name"]


@pytest.mark.parametrize("fault,ic,reason", [
    ("requirement unresolved on the first call", "unresolved", "Resolving"),
    ("cluster deleted", None, "ClusterNotFound"),
])
def test_an_unresolvable_cluster_keeps_every_object(fault, ic, reason):
    mr, before = healthy()
    during = compose(mr, ic, observed=existing(before))
    assert_kept(before, during)
    assert during.condition(status.CLUSTER_RESOLVED)[:2] == ("False", reason)
    after = compose(mr, observed=existing(before))
    assert after.desired == before.desired
    assert after.condition(status.CLUSTER_RESOLVED)[0] == "True"


def test_a_malformed_cluster_keeps_every_object():
    mr, before = healthy()
    broken = copy.deepcopy(FLEET[REMOTE])
    broken["spec"]["nodePools"] = "not a list"
    during = compose(mr, broken, observed=existing(before))
    assert_kept(before, during)
    assert during.condition(status.CLUSTER_RESOLVED)[0] == "False"


def test_a_not_ready_cluster_still_gets_its_objects():
    mr, before = healthy()
    ic = copy.deepcopy(FLEET[REMOTE])
    ic["status"] = {"conditions": [{"type": "Ready", "status": "False", "reason": "Unavailable"}]}
    during = compose(mr, ic, observed=existing(before))
    assert during.desired == before.desired


def test_an_invalid_cel_selector_keeps_every_object_and_says_which():
    mr, before = healthy()
    bad = copy.deepcopy(mr)
    bad["spec"]["engines"][0]["members"][0]["deviceRequests"][0]["selectors"] = [
        {"cel": "device.attributes[ oops"}]
    during = compose(bad, observed=existing(before))
    assert_kept(before, during)
    state, reason, message = during.condition("SelectorsValid")
    assert (state, reason) == ("False", "InvalidSelector")
    assert "device.attributes[ oops" in message
    assert compose(mr, observed=existing(before)).desired == before.desired


def test_a_pool_that_shrank_below_its_usage_changes_nothing_here():
    """Overcommit is the scheduler's to repair; the composer keeps composing."""
    mr, before = healthy()
    ic = copy.deepcopy(FLEET[REMOTE])
    for pool in ic["spec"]["nodePools"]:
        pool["nodes"] = 0
    assert compose(mr, ic, observed=existing(before)).desired == before.desired


def test_a_missing_provider_config_still_composes_the_wrapped_objects():
    """provider-kubernetes reports the missing config on each Object; we keep them."""
    mr, before = healthy()
    ic = copy.deepcopy(FLEET[REMOTE])
    ic["spec"]["providerConfigRef"]["name"] = "gone"
    during = compose(mr, ic, observed=existing(before))
    assert set(during.desired) == set(before.desired)
    assert all(o["spec"]["providerConfigRef"]["name"] == "gone"
               for o in during.desired.values() if o["kind"] == "Object")


def test_a_remote_object_reporting_failure_marks_the_replica_failed_and_keeps_it():
    mr, before = healthy()
    seen = existing(before)
    for obj in seen.values():
        if obj["kind"] == "Object" and obj["spec"]["forProvider"]["manifest"]["kind"] == \
                "Deployment":
            obj["status"] = {"conditions": [
                {"type": "Synced", "status": "False", "reason": "ReconcileError",
                 "message": "admission webhook denied the request"}]}
    during = compose(mr, observed=seen)
    assert_kept(before, during)
    assert during.phase == ReplicaPhase.FAILED
    assert during.condition(status.WORKLOADS_READY)[0] == "False"


def test_a_replica_edited_by_hand_into_an_invalid_shape_is_refused_without_deleting():
    """A Fatal result stops Crossplane from applying anything, so nothing is removed."""
    mr, before = healthy()
    bad = copy.deepcopy(mr)
    bad["spec"]["engines"][0]["members"][0]["role"] = "Worker"  # a Worker without a Leader
    during = compose(bad, observed=existing(before))
    assert during.fatal and "members must be exactly one Standalone" in during.fatal[0]
    assert compose(mr, observed=existing(before)).desired == before.desired


# --- kept objects mean what composed ones mean --------------------------------------------

ACCEPTED = {"parents": [{"parentRef": {"name": "gw"}, "controllerName": "x", "conditions": [
    {"type": "Accepted", "status": "True", "reason": "Accepted"}]}]}


def observed_as(out, lagging: str) -> dict[str, dict]:
    """Every composed object as observed, ready except `lagging` (created, not ready)."""
    observed = {}
    for key, obj in copy.deepcopy(out.desired).items():
        ready = key != lagging
        if obj["kind"] == "Object":
            obj["status"] = {"conditions": [
                {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
                {"type": "Ready", "status": "True" if ready else "False",
                 "reason": "Available" if ready else "Unavailable"}]}
        elif obj["kind"] == "Deployment":
            n = obj["spec"]["replicas"]
            obj["status"] = {"replicas": n, "updatedReplicas": n, "readyReplicas": n if ready
                             else 0, "conditions": [{"type": "Available",
                                                     "status": "True" if ready else "False"}]}
        elif obj["kind"] in ("HTTPRoute", "InferencePool"):
            obj["status"] = ACCEPTED if ready else {"parents": []}
        observed[key] = obj
    return observed


def pd_replica(cluster: str):
    pool = "l4-4x" if cluster == REMOTE else "l4"
    decode = standalone("decode", pool=pool, template=template(args=["m", "--port=8200"]))
    return replica(dict(standalone("prefill", pool=pool), phase="Prefill"),
                   dict(decode, phase="Decode"), mode="PrefillDecode", cluster=cluster)


def picked_replica(cluster: str):
    mr = replica(standalone(copies=2, pool="l4-4x" if cluster == REMOTE else "l4"),
                 cluster=cluster)
    mr["spec"]["serving"]["router"] = "EndpointPicker"
    return mr


@pytest.mark.parametrize("cluster", [LOCAL, REMOTE])
@pytest.mark.parametrize("build, lagging", [
    *((pd_replica, key) for key in ("epp", "inferencepool", "httproute", "decode-deployment",
                                    "prefill-deployment")),
    *((picked_replica, key) for key in ("epp", "inferencepool", "vllm-deployment")),
], ids=lambda v: getattr(v, "__name__", v))
def test_kept_objects_count_toward_the_same_conditions_as_composed_ones(cluster, build,
                                                                        lagging):
    """WorkloadsReady and Routed mean the same whether the replica is composed or its
    objects are kept because its cluster is unresolvable: the endpoint picker's
    Deployment and the InferencePool are routing in both, engines are workloads."""
    mr = build(cluster)
    observed = observed_as(compose(mr), lagging)
    composed = compose(mr, observed=observed)
    kept = compose(mr, None, observed=observed)
    assert kept.condition(status.CLUSTER_RESOLVED)[0] == "False"
    for typ in (status.WORKLOADS_READY, status.ROUTED):
        assert kept.condition(typ) == composed.condition(typ), typ
    assert kept.phase == composed.phase == "Loading"
