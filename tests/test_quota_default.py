"""The default InferenceQuota (#48 finding 4): every namespace no other quota selects,
each on its own. Without it, a namespace nobody wrote a quota for placed 1,000 claimless
replicas per deployment."""

from __future__ import annotations

from builders import composite, conditions, request
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from fleetgen import World, condition, own_replica, placements, stamp, status
from test_quota_counts import CPU_FLEET, claimless
from test_quota_counts import quota as team_quota
from test_scheduler_quota import namespace
from test_scheduler_quota import run as schedule

from function.contract import rules
from function.contract.api import (
    REQUIRE_CLUSTERS,
    REQUIRE_NAMESPACES,
    REQUIRE_QUOTAS,
    REQUIRE_REPLICAS,
)
from function.runtime import fn


def default_quota(**caps: int) -> dict:
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceQuota",
            "metadata": {"name": "every-tenant"},
            "spec": {"default": True, "limits": [{"name": "gpus", "devices": 0}], **caps}}


def in_namespace(md: dict, ns: str) -> dict:
    md["metadata"]["namespace"] = ns
    return md


def test_a_namespace_no_quota_selects_is_capped_by_the_default():
    md = in_namespace(claimless(replicas=40), "new-team")
    rsp = schedule(World(md, CPU_FLEET), [default_quota(maxReplicas=3)],
                   [namespace("new-team")])
    assert len(placements(rsp)) == 3
    assert condition(rsp, "ReplicasScheduled")[:2] == ("False", "Unschedulable")
    assert any("no room under quota every-tenant/maxReplicas (3 of 3 replicas in use, "
               "needs 1)" in u["reason"] for u in status(rsp)["unscheduled"])


def test_each_namespace_has_the_default_to_itself():
    # Another namespace's replicas under the default do not count against this one.
    theirs = in_namespace(claimless("theirs"), "team-b")
    held = [own_replica(theirs, "a", i, {"vllm": "cpu"}, created=stamp(i),
                        classes={"fabric": "fabric.example.com"}) for i in range(3)]
    md = in_namespace(claimless(replicas=2), "team-c")
    rsp = schedule(World(md, CPU_FLEET, others=held), [default_quota(maxReplicas=2)],
                   [namespace("team-b"), namespace("team-c")])
    assert len(placements(rsp)) == 2


def test_a_namespace_another_quota_selects_is_not_capped_by_the_default():
    md = claimless(replicas=5)  # ml-team, which team_quota selects
    rsp = schedule(World(md, CPU_FLEET), [default_quota(maxReplicas=1),
                                          team_quota(maxReplicas=4)], [namespace("ml-team")])
    assert len(placements(rsp)) == 4


def test_an_invalid_default_closes_every_namespace_no_other_quota_selects():
    broken = default_quota(maxReplicas=3)
    broken["spec"]["limits"][0]["devices"] = -1
    rsp = schedule(World(in_namespace(claimless(), "new-team"), CPU_FLEET), [broken],
                   [namespace("new-team")])
    assert placements(rsp) == {}
    assert "InferenceQuota every-tenant is invalid" in status(rsp)["unscheduled"][0]["reason"]
    ok = schedule(World(claimless(), CPU_FLEET), [broken, team_quota(maxReplicas=4)],
                  [namespace("ml-team")])
    assert len(placements(ok)) == 1  # ml-team has a quota of its own


def test_the_default_reports_the_most_one_namespace_holds():
    held = []
    for ns, n in (("team-b", 3), ("team-c", 1), ("ml-team", 5)):
        md = in_namespace(claimless(f"m-{ns}"), ns)
        held += [own_replica(md, "a", i, {"vllm": "cpu"}, created=stamp(i),
                             classes={"fabric": "fabric.example.com"}) for i in range(n)]
    rsp = fn.run_function(request(default_quota(maxReplicas=2), required={
        REQUIRE_REPLICAS: held, REQUIRE_CLUSTERS: CPU_FLEET,
        REQUIRE_QUOTAS: [default_quota(maxReplicas=2), team_quota(maxReplicas=9)],
        REQUIRE_NAMESPACES: [namespace(n) for n in ("team-b", "team-c", "ml-team")]}))
    st = composite(rsp)["status"]
    assert st["replicas"] == 3  # team-b; ml-team's 5 are its own quota's
    within = conditions(rsp)["WithinLimits"]
    assert within.status == fnv1.STATUS_CONDITION_FALSE
    assert "maxReplicas: 3 of 2 replicas" in within.message


def test_a_default_selects_nothing_itself():
    both = default_quota(maxReplicas=1)
    both["spec"]["namespaces"] = ["ml-team"]
    assert rules.QUOTA_SELECTS in rules.quota_errors(both["spec"])
    assert rules.quota_errors(default_quota(maxReplicas=1)["spec"]) == []
