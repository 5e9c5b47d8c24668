"""InferenceQuota's maxReplicas and maxPods (#33 finding 4): what no device limit sees.

A replica whose engines claim no DRA device (Synthetic devices only, or
none) costs nodes and pods but counts nothing against a device limit, so a
namespace with a zero device quota could still fill pools. `maxReplicas` and
`maxPods` cap the namespaces' replicas and engine pods whatever they claim.
"""

from __future__ import annotations

from builders import composite, conditions, request
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from fleetgen import (
    World,
    cluster,
    condition,
    deployment,
    engine,
    key,
    leader,
    own_replica,
    placements,
    pool,
    req,
    stamp,
    standalone,
    status,
    synthetic,
    worker,
)
from test_scheduler_quota import run as schedule

from function.contract.api import REQUIRE_CLUSTERS, REQUIRE_REPLICAS
from function.runtime import fn

FABRIC = synthetic("fabric")
CPU_FLEET = [cluster("a", pool("cpu", 50, FABRIC)), cluster("b", pool("cpu", 50, FABRIC))]


def quota(**caps: int) -> dict:
    """A quota on ml-team: a zero device limit, and the count caps given."""
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceQuota",
            "metadata": {"name": "team-a"},
            "spec": {"namespaces": ["ml-team"], "limits": [{"name": "gpus", "devices": 0}],
                     **caps}}


def claimless(name: str = "llama", replicas: int = 1) -> dict:
    """Replicas that claim no DRA device: a zero device limit never counts them."""
    return deployment(name, engine("vllm", standalone(req("fabric", 1))), replicas=replicas)


def gang(name: str = "big", replicas: int = 1, nodes: int = 3) -> dict:
    return deployment(name, engine("vllm", leader(req("fabric", 1)),
                                   worker(nodes, req("fabric", 1))), replicas=replicas)


def test_a_zero_device_quota_alone_lets_claimless_replicas_fill_the_pools():
    # What the finding saw: the device limit is zero, yet every replica lands.
    rsp = schedule(World(claimless(replicas=40), CPU_FLEET), [quota()])
    assert len(placements(rsp)) == 40


def test_max_replicas_caps_the_namespaces_replicas_whatever_they_claim():
    rsp = schedule(World(claimless(replicas=40), CPU_FLEET), [quota(maxReplicas=3)])
    assert len(placements(rsp)) == 3
    reasons = {e["reason"] for e in status(rsp)["unscheduled"]}
    assert any("no room under quota team-a/maxReplicas (3 of 3 replicas in use, needs 1)" in r
               for r in reasons), reasons


def test_max_pods_counts_every_pod_of_a_gang():
    # A gang replica is 1 leader + 3 workers: 4 pods. 10 pods fit two replicas.
    rsp = schedule(World(gang(replicas=5, nodes=3), CPU_FLEET), [quota(maxPods=10)])
    assert len(placements(rsp)) == 2
    reasons = {e["reason"] for e in status(rsp)["unscheduled"]}
    assert any("team-a/maxPods (8 of 10 pods in use, needs 4)" in r for r in reasons), reasons


def test_replicas_of_other_deployments_count_against_max_replicas():
    other = claimless("other")
    placed = [own_replica(other, "a", i, {"vllm": "cpu"}, created=stamp(i),
                          classes={"fabric": "fabric.example.com"}) for i in range(2)]
    world = World(claimless(replicas=3), CPU_FLEET, others=placed)
    rsp = schedule(world, [quota(maxReplicas=3)])
    assert len(placements(rsp)) == 1


def test_a_lowered_max_replicas_makes_the_youngest_replicas_wait_and_keeps_the_oldest():
    md = claimless(replicas=4)
    observed = {key("a", i): own_replica(md, "a", i, {"vllm": "cpu"}, created=stamp(i),
                                         classes={"fabric": "fabric.example.com"})
                for i in range(4)}
    rsp = schedule(World(md, CPU_FLEET, observed=observed), [quota(maxReplicas=2)])
    assert set(placements(rsp)) == {0, 1}
    waiting = {e["index"]: e["reason"] for e in status(rsp)["unscheduled"]}
    assert set(waiting) == {2, 3}
    assert waiting[2].startswith("removed from a: quota team-a/maxReplicas is over its limit "
                                 "(4 of 2 replicas in use) and it is among the youngest")
    assert condition(rsp, "ReplicasScheduled")[:2] == ("False", "Unschedulable")


def test_the_quota_reports_replicas_and_pods_held():
    md = gang(nodes=3)
    held = [own_replica(md, "a", i, {"vllm": "cpu"}, created=stamp(i),
                        classes={"fabric": "fabric.example.com"}) for i in range(3)]
    rsp = fn.run_function(request(quota(maxReplicas=2, maxPods=20), required={
        REQUIRE_REPLICAS: held, REQUIRE_CLUSTERS: CPU_FLEET}))
    st = composite(rsp)["status"]
    assert (st["replicas"], st["pods"]) == (3, 12)
    assert st["summary"] == "gpus: 0/0, replicas: 3/2, pods: 12/20"
    within = conditions(rsp)["WithinLimits"]
    assert within.status == fnv1.STATUS_CONDITION_FALSE
    assert "maxReplicas: 3 of 2 replicas" in within.message


def test_a_replica_whose_pool_name_is_not_a_string_is_counted_not_a_crash():
    """A stored ModelReplica may hold anything (fuzzing found a pool name that was a
    list): under a quota, its claims reached the pool lookup and the scheduler raised.
    It is read as an unreadable replica instead, and the deployment is placed."""
    other = claimless("other")
    broken = own_replica(other, "a", 0, {"vllm": "cpu"}, created=stamp(0),
                         classes={"fabric": "fabric.example.com"})
    broken["spec"]["engines"][0]["members"][0]["nodePoolName"] = [None]
    rsp = schedule(World(claimless(replicas=1), CPU_FLEET, others=[broken]),
                   [quota(maxReplicas=3)])
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert len(placements(rsp)) == 1


# --- Charged on the node ledger (#48 finding 4) ---------------------------------------


def test_a_replica_that_claims_no_dra_device_takes_a_node_of_its_pool():
    # The finding: 40 replicas of eight claimless pods on a two-node pool, quota or not.
    tiny = [cluster("a", pool("cpu", 2, FABRIC))]
    rsp = schedule(World(claimless(replicas=40), tiny), [quota()])
    assert len(placements(rsp)) == 2
    assert condition(rsp, "ReplicasScheduled")[:2] == ("False", "Unschedulable")
    gangs = schedule(World(gang(replicas=5, nodes=7), tiny), [quota()])
    assert placements(gangs) == {}  # a leader and seven workers: eight nodes, of two


def test_a_claimless_member_still_rides_on_its_engines_device_claiming_nodes():
    from function.contract.capacity import replica_usage
    engines = [{"name": "vllm", "members": [
        {"role": "Leader", "nodePoolName": "h100", "deviceRequests": []},
        {"role": "Worker", "worker": {"nodes": 2}, "nodePoolName": "h100",
         "deviceRequests": [{"name": "gpu", "claim": "DRA", "count": 8,
                             "deviceClassName": "gpu.nvidia.com"}]}]}]
    usage = replica_usage(engines)
    assert usage == {"h100": {(("gpu.nvidia.com", (), 8),): 2}}  # the leader rides
    alone = replica_usage([{"name": "cpu", "members": [
        {"role": "Standalone", "nodePoolName": "cpu", "deviceRequests": [
            {"name": "fabric", "claim": "Synthetic", "count": 1}]}]}])
    assert list(alone["cpu"].values()) == [1]  # a whole node
