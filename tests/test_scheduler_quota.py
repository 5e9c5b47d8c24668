"""InferenceQuotas cap the devices a namespace's replicas hold across the fleet:
a placement past a limit is refused with a reason, a fungible alternative the
limit does not count is taken instead, and where the namespace holds more than
a limit (placed from one snapshot, or a lowered limit) the youngest replicas
beyond it wait while the oldest stay."""

from __future__ import annotations

from crossplane.function import resource
from fleetgen import (
    World,
    cluster,
    condition,
    deployment,
    device,
    engine,
    key,
    own_replica,
    placements,
    pool,
    product_is,
    req,
    stamp,
    standalone,
    status,
)

from function.contract.api import REQUIRE_NAMESPACES, REQUIRE_QUOTA_CLUSTERS, REQUIRE_QUOTAS
from function.runtime import fn

H100 = device("gpu", "H100", count=8)
A100 = device("gpu", "A100", count=8)
IS_H100 = product_is("H100")


def quota(name: str = "team-a-gpus", devices: int = 8, *, namespaces=("ml-team",),
          selector=None, cel: str = IS_H100) -> dict:
    spec: dict = {"limits": [{"name": "h100", "devices": devices,
                              "selectors": [{"cel": cel}]}]}
    if namespaces:
        spec["namespaces"] = list(namespaces)
    if selector is not None:
        spec["namespaceSelector"] = {"matchLabels": selector}
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceQuota",
            "metadata": {"name": name}, "spec": spec}


def namespace(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def run(world: World, quotas=(), namespaces=(), resolved: bool = True):
    req = world.request()
    add = {REQUIRE_QUOTAS: list(quotas)}
    if resolved and quotas:
        add[REQUIRE_QUOTA_CLUSTERS] = world.clusters
        add[REQUIRE_NAMESPACES] = list(namespaces)
    for name, objs in add.items():
        items = req.required_resources[name].items
        for obj in objs:
            items.add().resource.CopyFrom(resource.dict_to_struct(obj))
    return fn.run_function(req)


def eight_gpu(name: str = "llama", replicas: int = 1, *alternatives: str) -> dict:
    if alternatives:
        request = {"name": "gpu", "firstAvailable": [
            {"name": p.lower(), "count": 8, "selectors": [{"cel": product_is(p)}]}
            for p in alternatives]}
        return deployment(name, engine("vllm", standalone(request)), replicas=replicas)
    return deployment(name, engine("vllm", standalone(req("gpu", 8, product_is("H100")))),
                      replicas=replicas)


def test_a_replica_past_the_limit_is_refused_on_every_cluster_with_the_quota_named():
    clusters = [cluster("a", pool("h100", 4, H100)), cluster("b", pool("h100", 4, H100))]
    rsp = run(World(eight_gpu(replicas=2), clusters), [quota(devices=8)])
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}
    [entry] = status(rsp)["unscheduled"]
    assert entry["reason"] == ("0/2 clusters fit replica 1: 2 have no room under quota "
                               "team-a-gpus/h100 (8 of 8 devices in use, needs 8)")
    assert condition(rsp, "ReplicasScheduled")[:2] == ("False", "Unschedulable")


def test_replicas_of_other_deployments_in_the_namespace_count_wherever_they_run():
    clusters = [cluster("a", pool("h100", 4, H100)), cluster("b", pool("h100", 4, H100))]
    other = eight_gpu("other")
    held = own_replica(other, "b", 0, {"vllm": "h100"}, created=stamp(1))
    rsp = run(World(eight_gpu(), clusters, others=[held]), [quota(devices=8)])
    assert placements(rsp) == {}
    assert "8 of 8 devices in use" in status(rsp)["unscheduled"][0]["reason"]


def test_another_namespace_is_not_capped():
    clusters = [cluster("a", pool("h100", 4, H100))]
    md = eight_gpu(replicas=2)
    md["metadata"]["namespace"] = "other-team"
    rsp = run(World(md, clusters), [quota(devices=8)])
    assert sorted(placements(rsp)) == [0, 1]


def test_a_namespace_selector_caps_every_namespace_it_selects_together():
    clusters = [cluster("a", pool("h100", 4, H100))]
    other = eight_gpu("other")
    other["metadata"]["namespace"] = "team-b"
    held = own_replica(other, "a", 0, {"vllm": "h100"}, created=stamp(1))
    q = quota(devices=8, namespaces=(), selector={"org": "research"})
    rsp = run(World(eight_gpu(), clusters, others=[held]), [q],
              [namespace("ml-team", org="research"), namespace("team-b", org="research")])
    assert placements(rsp) == {}
    rsp = run(World(eight_gpu(), clusters, others=[held]), [q],
              [namespace("ml-team", org="research"), namespace("team-b", org="other")])
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}


def test_a_fungible_alternative_the_limit_does_not_count_is_taken_before_giving_up():
    clusters = [cluster("a", pool("h100", 4, H100)), cluster("b", pool("a100", 4, A100))]
    rsp = run(World(eight_gpu("llama", 1, "H100", "A100"), clusters), [quota(devices=0)])
    assert placements(rsp) == {0: ("b", {"vllm": "a100"})}


def test_a_lowered_quota_makes_the_youngest_replica_wait_and_keeps_the_oldest():
    clusters = [cluster("a", pool("h100", 4, H100))]
    md = eight_gpu(replicas=2)
    observed = {key("a", i): own_replica(md, "a", i, {"vllm": "h100"}, created=stamp(i))
                for i in range(2)}
    rsp = run(World(md, clusters, observed=observed), [quota(devices=8)])
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}
    [entry] = status(rsp)["unscheduled"]
    assert entry["index"] == 1
    assert entry["reason"].startswith(
        "removed from a: quota team-a-gpus/h100 is over its limit (16 of 8 devices in use) "
        "and it is among the youngest; 0/1 clusters fit replica 1: 1 has no room under quota "
        "team-a-gpus/h100 (8 of 8 devices in use, needs 8)")
    assert condition(rsp, "ReplicasScheduled")[:2] == ("False", "Unschedulable")


def test_deployments_placed_from_one_snapshot_both_pass_and_the_next_reconcile_repairs_it():
    clusters = [cluster("a", pool("h100", 4, H100))]
    q = quota(devices=8)
    llama, mistral = World(eight_gpu("llama"), clusters), World(eight_gpu("mistral"), clusters)
    # Both reconciled from the same snapshot (nothing placed): each sees 0 of 8 in use.
    first = {w: run(w, [q]) for w in (llama, mistral)}
    for w, rsp in first.items():
        assert placements(rsp) == {0: ("a", {"vllm": "h100"})}
        w.apply(rsp)
    # llama's replica was created first.
    for mr in llama.observed.values():
        mr["metadata"]["creationTimestamp"] = stamp(1)
    for mr in mistral.observed.values():
        mr["metadata"]["creationTimestamp"] = stamp(2)
    llama.others, mistral.others = list(mistral.observed.values()), list(llama.observed.values())

    # 16 of 8 devices in use: the next reconcile of each repairs it, the oldest stays.
    kept = run(llama, [q])
    assert placements(kept) == {0: ("a", {"vllm": "h100"})}
    assert condition(kept, "ReplicasScheduled")[:2] == ("True", "AllScheduled")
    repaired = run(mistral, [q])
    assert placements(repaired) == {}
    [entry] = status(repaired)["unscheduled"]
    assert "quota team-a-gpus/h100 is over its limit (16 of 8 devices in use)" in entry["reason"]
    mistral.apply(repaired)
    llama.others = list(mistral.observed.values())

    # Within the limit again, and it stays so: mistral waits for room.
    assert placements(run(llama, [q])) == {0: ("a", {"vllm": "h100"})}
    waiting = run(mistral, [q])
    assert placements(waiting) == {}
    assert "no room under quota team-a-gpus/h100 (8 of 8 devices in use, needs 8)" in \
        status(waiting)["unscheduled"][0]["reason"]


def test_a_replica_being_deleted_is_no_reason_to_remove_ours():
    # The other deployment scaled down: its older replica is on its way out. It still
    # holds its devices (nothing new is placed for them) but nothing leaves for it.
    clusters = [cluster("a", pool("h100", 4, H100))]
    md = eight_gpu(replicas=2)
    leaving = own_replica(eight_gpu("other"), "a", 0, {"vllm": "h100"}, created=stamp(0))
    leaving["metadata"]["deletionTimestamp"] = stamp(50)
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))}
    rsp = run(World(md, clusters, others=[leaving], observed=observed), [quota(devices=8)])
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}
    assert "no room under quota team-a-gpus/h100 (16 of 8 devices in use, needs 8)" in \
        status(rsp)["unscheduled"][0]["reason"]


def test_a_namespace_within_its_quota_is_left_alone():
    clusters = [cluster("a", pool("h100", 4, H100))]
    md = eight_gpu(replicas=2)
    observed = {key("a", i): own_replica(md, "a", i, {"vllm": "h100"}, created=stamp(i))
                for i in range(2)}
    rsp = run(World(md, clusters, observed=observed), [quota(devices=16)])
    assert sorted(placements(rsp)) == [0, 1]
    assert condition(rsp, "ReplicasScheduled")[:2] == ("True", "AllScheduled")


def test_an_invalid_limit_closes_the_namespace_to_new_replicas_and_says_why():
    clusters = [cluster("a", pool("h100", 4, H100))]
    rsp = run(World(eight_gpu(), clusters), [quota(cel="device.attributes[")])
    [entry] = status(rsp)["unscheduled"]
    assert entry["reason"] == ("0/1 clusters fit replica 0: 1 is closed to namespace ml-team: "
                               "quota limit team-a-gpus/h100 has an invalid CEL selector")


def test_until_the_clusters_a_quota_needs_are_resolved_nothing_is_decided():
    md = eight_gpu()
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))}
    world = World(md, [cluster("a", pool("h100", 4, H100))], observed=observed)
    rsp = run(world, [quota()], resolved=False)
    assert rsp.requirements.resources[REQUIRE_QUOTA_CLUSTERS].kind == "InferenceCluster"
    assert not status(rsp)


def test_without_any_quota_nothing_more_is_required():
    rsp = run(World(eight_gpu(), [cluster("a", pool("h100", 4, H100))]))
    assert REQUIRE_QUOTA_CLUSTERS not in rsp.requirements.resources
    assert REQUIRE_NAMESPACES not in rsp.requirements.resources


# --- property: a placement never takes a namespace past a limit ----------------

from builders import desired  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_scheduler_properties import PROPERTY, worlds  # noqa: E402

from function.contract.quotas import claims, devices, parse_quota, usage  # noqa: E402
from function.contract.records import parse_cluster  # noqa: E402


def held_h100(replicas, fleet) -> int:
    clusters = {c["metadata"]["name"]: parse_cluster(c) for c in fleet}
    limit = parse_quota(quota()).limits[0]
    held = [d for mr in replicas if mr["metadata"].get("namespace") == "ml-team"
            and mr["spec"]["clusterName"] in clusters
            for d in devices(claims(mr["spec"]), clusters[mr["spec"]["clusterName"]])]
    return usage(limit, held)


@PROPERTY
@given(worlds(), st.integers(0, 24), st.integers(1, 3))
def test_placing_never_takes_a_namespace_past_a_limit(world, limit, scale):
    q = quota(devices=limit)
    for _ in range(2):
        before = held_h100(world.observed.values(), world.clusters)
        rsp = run(world, [q])
        after = held_h100([mr for mr in desired(rsp).values()], world.clusters)
        # New placements stay within the limit; what was there already may exceed
        # it (another deployment's replicas), but ours never add to an overrun.
        assert after <= max(limit, before), (after, limit, before)
        world.apply(rsp)
        world.md["spec"]["replicas"] = world.md["spec"]["replicas"] * scale


def test_a_quota_counts_devices_not_nodes_when_pods_share_a_node():
    # One 8-GPU node has room for eight one-GPU replicas; a quota of three H100s
    # lets three land on it, and the fourth is refused by the quota, not by capacity.
    one_gpu = deployment("small", engine("vllm", standalone(req("gpu", 1, IS_H100))),
                         replicas=5)
    rsp = run(World(one_gpu, [cluster("a", pool("h100", 1, H100))]), [quota(devices=3)])
    assert sorted(placements(rsp)) == [0, 1, 2]
    reasons = [u["reason"] for u in status(rsp)["unscheduled"]]
    assert len(reasons) == 2 and all(
        "no room under quota team-a-gpus/h100 (3 of 3 devices in use, needs 1)" in r
        for r in reasons), reasons
    # Another namespace shares the node: its replicas take the five GPUs left.
    others = deployment("other", engine("vllm", standalone(req("gpu", 1, IS_H100))),
                        replicas=6, namespace="team-b")
    world = World(others, [cluster("a", pool("h100", 1, H100))],
                  [own_replica(one_gpu, "a", i, {"vllm": "h100"}) for i in range(3)])
    rsp = run(world, [quota(devices=3)])
    assert sorted(placements(rsp)) == [0, 1, 2, 3, 4]
