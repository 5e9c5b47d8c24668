"""Making room (function/scheduler/room.py): a settled Pack deployment moves the
fewest of its replicas off one cluster when that alone lets a waiting
deployment's replica, which fits on no cluster, fit there; never otherwise."""

from __future__ import annotations

import pytest
from fleetgen import (
    NS,
    World,
    cluster,
    deployment,
    device,
    engine,
    foreign_replica,
    key,
    leader,
    messages,
    one_node,
    own_replica,
    placements,
    pool,
    product_is,
    req,
    standalone,
    stamp,
    status,
    worker,
)

from function.contract.api import REQUIRE_DEPLOYMENTS
from function.runtime import fn
from function.scheduler import room

H100 = device("gpu", "H100", count=8)
ON_H100 = {"vllm": "h100"}


def small(replicas: int, strategy: str | None = "Pack") -> dict:
    return one_node("small", replicas, strategy)


def gang(nodes: int, *, scheduled: int | None = 0, name: str = "gang", **meta) -> dict:
    """A gang of `nodes` H100 nodes whose status says `scheduled` of its one replica
    found a cluster (None: no status yet)."""
    r = req("gpu", 8, product_is("H100"))
    md = deployment(name, engine("vllm", leader(r), worker(nodes - 1, r)), replicas=1)
    md["metadata"].update(meta)
    if scheduled is not None:
        md["status"] = {"replicas": {"desired": 1, "scheduled": scheduled, "ready": 0}}
    return md


def fleet(*sizes: int) -> list[dict]:
    return [cluster(n, pool("h100", size, H100)) for n, size in zip("abcd", sizes)]


def on(md: dict, *where: str) -> dict[str, dict]:
    """`md`'s replicas as they exist: index i on cluster where[i], on its H100 pool."""
    return {key(c, i): own_replica(md, c, i, ON_H100, created=stamp(i)) for i, c in enumerate(where)}


def test_a_settled_pack_deployment_moves_one_replica_to_free_a_block_for_a_waiting_gang():
    md = small(2)
    world = World(md, fleet(4, 4), observed=on(md, "a", "b"), deployments=[gang(4)])
    rsp = world.run()
    # Each cluster has 3 free nodes and the 4-node gang fits on neither; moving
    # either replica frees a whole cluster: one move, the first cluster by name.
    assert placements(rsp) == {0: ("b", ON_H100), 1: ("b", ON_H100)}
    assert (f"replica 0 moved from a to b: making room on a for ModelDeployment {NS}/gang, "
            "whose next replica fits on no cluster") in messages(rsp)
    world.apply(rsp)
    # The gang's own reconcile then finds the block.
    r = req("gpu", 8, product_is("H100"))
    placed = World(deployment("gang", engine("vllm", leader(r), worker(3, r))), fleet(4, 4),
                   others=world.observed.values()).run()
    assert [c for c, _ in placements(placed).values()] == ["a"]


def test_once_the_block_is_free_the_next_reconcile_moves_nothing():
    md = small(2)
    world = World(md, fleet(4, 4), observed=on(md, "a", "b"), deployments=[gang(4)])
    world.step()
    again = world.run()
    assert placements(again) == {0: ("b", ON_H100), 1: ("b", ON_H100)}
    assert not [m for m in messages(again) if "moved" in m]


def test_the_fewest_replicas_move_and_the_cluster_needing_fewest_is_cleared():
    md = small(3)
    # a holds two of ours, b one: clearing b takes one move, a would take two.
    world = World(md, fleet(4, 4, 4), observed=on(md, "a", "a", "b"),
                  others=[foreign_replica("x", "c", {"h100": 1}, created=stamp(9))],
                  deployments=[gang(4)])
    assert placements(world.run()) == {0: ("a", ON_H100), 1: ("a", ON_H100),
                                       2: ("a", ON_H100)}


def test_nothing_moves_when_the_waiting_deployment_already_fits_somewhere():
    md = small(2)
    world = World(md, fleet(4, 4, 4), observed=on(md, "a", "b"), deployments=[gang(4)])
    assert placements(world.run()) == {0: ("a", ON_H100), 1: ("b", ON_H100)}


def test_nothing_moves_when_a_moved_replica_would_have_no_place_elsewhere():
    md = small(2)
    # b's other three nodes are held: replica 0 has nowhere to go, and clearing
    # b would need replica 1 to go to a, which has no 4-node block either way.
    held = [foreign_replica("x", "b", {"h100": 3}, created=stamp(9))]
    world = World(md, fleet(4, 4), observed=on(md, "a", "b"), others=held,
                  deployments=[gang(4)])
    rsp = world.run()
    assert placements(rsp) == {0: ("a", ON_H100), 1: ("b", ON_H100)}
    assert not [m for m in messages(rsp) if "moved" in m]


def test_nothing_moves_when_no_clearing_of_ours_alone_makes_room():
    md = small(1)
    held = [foreign_replica("x", "a", {"h100": 1}, created=stamp(9)),
            foreign_replica("y", "b", {"h100": 1}, created=stamp(9))]
    world = World(md, fleet(4, 4), observed=on(md, "a"), others=held, deployments=[gang(4)])
    assert placements(world.run()) == {0: ("a", ON_H100)}


def test_spread_never_moves_a_replica_for_another_deployment():
    md = small(2, strategy=None)
    world = World(md, fleet(4, 4), observed=on(md, "a", "b"), deployments=[gang(4)])
    assert placements(world.run()) == {0: ("a", ON_H100), 1: ("b", ON_H100)}


def test_a_deployment_still_placing_its_own_replicas_moves_none():
    md = small(3)
    world = World(md, fleet(4, 4), observed=on(md, "a", "b"), deployments=[gang(4)])
    rsp = world.run()
    # The new replica joins a (both equally full: by name). Clearing b would now
    # make room, but a deployment that placed a replica this reconcile moves none.
    assert placements(rsp) == {0: ("a", ON_H100), 1: ("b", ON_H100), 2: ("a", ON_H100)}
    assert not [m for m in messages(rsp) if "moved" in m]


@pytest.mark.parametrize("waiting", [
    gang(4, scheduled=None),                                  # not reconciled yet
    gang(4, scheduled=1),                                     # not short
    {**gang(4), "spec": {"replicas": 1, "template": {"spec": {"engines": "bad"}}}},  # invalid
], ids=["no-status", "placed", "invalid"])
def test_only_a_valid_deployment_whose_status_says_it_is_short_is_made_room_for(waiting):
    md = small(2)
    world = World(md, fleet(4, 4), observed=on(md, "a", "b"), deployments=[waiting])
    assert placements(world.run()) == {0: ("a", ON_H100), 1: ("b", ON_H100)}


def test_a_waiting_deployment_that_mounts_a_model_cache_is_not_made_room_for():
    md = small(2)
    waiting = gang(4)
    waiting["spec"]["template"]["spec"]["modelCacheRef"] = {"name": "qwen3-8b"}
    world = World(md, fleet(4, 4), observed=on(md, "a", "b"), deployments=[waiting])
    assert placements(world.run()) == {0: ("a", ON_H100), 1: ("b", ON_H100)}


def test_the_oldest_waiting_deployment_is_made_room_for_first():
    md = small(2)
    young = gang(4, name="young", creationTimestamp=stamp(20))
    old = gang(4, name="old", creationTimestamp=stamp(10))
    rsp = World(md, fleet(4, 4), observed=on(md, "a", "b"), deployments=[young, old]).run()
    assert any(f"for ModelDeployment {NS}/old," in m for m in messages(rsp))


def test_a_waiting_deployment_the_cluster_selector_keeps_off_a_is_made_room_for_on_b():
    md = small(2)
    clusters = [cluster("a", pool("h100", 4, H100)),
                cluster("b", pool("h100", 4, H100), labels={"zone": "b"})]
    waiting = gang(4)
    waiting["spec"]["template"]["spec"]["clusterSelector"] = {"matchLabels": {"zone": "b"}}
    rsp = World(md, clusters, observed=on(md, "a", "b"), deployments=[waiting]).run()
    assert placements(rsp) == {0: ("a", ON_H100), 1: ("a", ON_H100)}


def test_the_same_inputs_give_the_same_bytes():
    md = small(3)
    world = World(md, fleet(4, 4, 4), observed=on(md, "a", "b", "c"),
                  deployments=[gang(4), gang(4, name="other")])
    assert len({world.run().SerializeToString(deterministic=True) for _ in range(3)}) == 1


def test_a_pack_deployment_waits_for_the_deployments_to_be_listed_and_keeps_its_replicas():
    md = small(2)
    request = World(md, fleet(4, 4), observed=on(md, "a", "b"), deployments=[gang(4)]).request()
    del request.required_resources[REQUIRE_DEPLOYMENTS]
    rsp = fn.run_function(request)
    assert placements(rsp) == {0: ("a", ON_H100), 1: ("b", ON_H100)}
    assert REQUIRE_DEPLOYMENTS in rsp.requirements.resources


def test_only_the_oldest_waiting_deployments_are_weighed():
    md = small(2)
    # Gangs of 5 nodes fit no 4-node cluster however it is cleared; the one a
    # clearing would help is younger than MAX_WAITING of them, so it waits.
    hopeless = [gang(5, name=f"big-{i}", creationTimestamp=stamp(10 + i))
                for i in range(room.MAX_WAITING)]
    late = gang(4, name="late", creationTimestamp=stamp(99))
    world = World(md, fleet(4, 4), observed=on(md, "a", "b"), deployments=[*hopeless, late])
    assert placements(world.run()) == {0: ("a", ON_H100), 1: ("b", ON_H100)}
    world = World(md, fleet(4, 4), observed=on(md, "a", "b"), deployments=[*hopeless[1:], late])
    assert placements(world.run()) == {0: ("b", ON_H100), 1: ("b", ON_H100)}


def test_a_move_under_a_quota_the_replicas_fill_exactly_still_happens():
    # The moved replica gives back its devices before it takes them again
    # elsewhere: a quota of exactly the deployment's two whole nodes (16 GPUs)
    # never refuses it. (The gang waits in a namespace no quota covers: under
    # this one it could never be placed, so no room would be made for it.)
    from test_scheduler_quota import quota, run
    md = small(2)
    world = World(md, fleet(4, 4), observed=on(md, "a", "b"), deployments=[_team_b_gang()])
    rsp = run(world, quotas=[quota(devices=16)])
    assert placements(rsp) == {0: ("b", ON_H100), 1: ("b", ON_H100)}
    # Already over: the youngest waits (quota repair) and nothing moves for the other.
    tighter = run(world, quotas=[quota(devices=8)])
    assert placements(tighter) == {0: ("a", ON_H100)}
    assert "quota team-a-gpus/h100 is over its limit (16 of 8 devices in use)" in \
        status(tighter)["unscheduled"][0]["reason"]


# --- the waiting deployment's own quota (#33 finding 11) ----------------------------

def _team_b_gang(**meta) -> dict:
    md = gang(4, **meta)
    md["metadata"]["namespace"] = "team-b"
    return md


def _team_b_quota(**spec) -> dict:
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceQuota",
            "metadata": {"name": "team-b"}, "spec": {"namespaces": ["team-b"], **spec}}


def _h100s(devices: int) -> dict:
    return {"limits": [{"name": "h100", "devices": devices,
                        "selectors": [{"cel": product_is("H100")}]}]}


@pytest.mark.parametrize("spec", [
    _h100s(16),              # the 4-node gang needs 32 GPUs
    {"maxPods": 3},          # ... and 4 pods
    {"maxReplicas": 1},      # team-b already runs one replica
], ids=["devices", "pods", "replicas"])
def test_no_replica_moves_for_a_waiting_deployment_its_own_quota_would_refuse(spec):
    from test_scheduler_quota import run
    md = small(2)
    # team-b's one replica sits on a third cluster and takes no node of a or b.
    clusters = fleet(4, 4, 1)
    held = [foreign_replica("b-old", "c", {"h100": 1}, namespace="team-b",
                            deployment_name="old", created=stamp(1))]
    world = World(md, clusters, observed=on(md, "a", "b"), others=held,
                  deployments=[_team_b_gang()])
    rsp = run(world, quotas=[_team_b_quota(**spec)])
    assert placements(rsp) == {0: ("a", ON_H100), 1: ("b", ON_H100)}
    assert not [m for m in messages(rsp) if "moved" in m]


def test_a_waiting_deployment_its_quota_admits_is_still_made_room_for():
    from test_scheduler_quota import run
    md = small(2)
    world = World(md, fleet(4, 4), observed=on(md, "a", "b"), deployments=[_team_b_gang()])
    rsp = run(world, quotas=[_team_b_quota(**_h100s(32), maxPods=4, maxReplicas=1)])
    assert placements(rsp) == {0: ("b", ON_H100), 1: ("b", ON_H100)}


def test_a_quota_of_another_namespace_does_not_stop_room_for_this_one():
    from test_scheduler_quota import run
    md = small(2)
    world = World(md, fleet(4, 4), observed=on(md, "a", "b"), deployments=[_team_b_gang()])
    other = {**_team_b_quota(maxReplicas=1), "metadata": {"name": "team-c"},
             "spec": {"namespaces": ["team-c"], "maxReplicas": 1}}
    assert placements(run(world, quotas=[other])) == {0: ("b", ON_H100), 1: ("b", ON_H100)}


def test_an_older_deployment_over_its_quota_does_not_keep_a_younger_one_waiting():
    from test_scheduler_quota import run
    md = small(2)
    # The old one in team-b is over team-b's quota; the young one in NS has none.
    over = _team_b_gang(name="old", creationTimestamp=stamp(10))
    young = gang(4, name="young", creationTimestamp=stamp(20))
    world = World(md, fleet(4, 4), observed=on(md, "a", "b"), deployments=[over, young])
    rsp = run(world, quotas=[_team_b_quota(maxPods=3)])
    assert placements(rsp) == {0: ("b", ON_H100), 1: ("b", ON_H100)}
    assert any(f"for ModelDeployment {NS}/young," in m for m in messages(rsp))


# --- another pool of the same cluster ------------------------------------------

A100 = device("gpu", "A100", count=8)


def flexible(replicas: int) -> dict:
    """Pack replicas of one 8-GPU pod that an H100 or an A100 node takes alike."""
    md = deployment("flex", engine("vllm", standalone(req("gpu", 8, product_is("H100", "A100")))),
                    replicas=replicas)
    md["spec"]["template"]["spec"]["placement"] = {"strategy": "Pack"}
    return md


def on_pools(md: dict, *pools: str) -> dict[str, dict]:
    """`md`'s replicas on cluster a, index i on pool pools[i]."""
    return {key("a", i): own_replica(md, "a", i, {"vllm": p}, created=stamp(i))
            for i, p in enumerate(pools)}


def test_with_no_other_cluster_a_replica_moves_to_another_pool_of_its_own():
    md = flexible(2)
    # Pack put both on the fuller H100 pool; the H100-only gang needs both nodes,
    # and the A100 pool beside them has room for both replicas.
    clusters = [cluster("a", pool("a100", 4, A100), pool("h100", 2, H100))]
    world = World(md, clusters, observed=on_pools(md, "h100", "h100"), deployments=[gang(2)])
    rsp = world.run()
    assert placements(rsp) == {0: ("a", {"vllm": "a100"}), 1: ("a", {"vllm": "a100"})}
    assert (f"replica 1 moved to pool a100 on a: making room on a for ModelDeployment "
            f"{NS}/gang, whose next replica fits on no cluster") in messages(rsp)
    world.apply(rsp)
    again = world.run()  # the block is free: nothing moves again
    assert placements(again) == placements(rsp)
    assert not [m for m in messages(again) if "moved" in m]


def test_a_replica_on_a_pool_the_waiting_one_cannot_use_is_not_moved():
    md = flexible(3)
    # Replica 2 (the first weighed) holds an A100 node, which frees nothing for
    # an H100 gang: only replica 1 moves, to the A100 node left free.
    clusters = [cluster("a", pool("a100", 2, A100), pool("h100", 3, H100))]
    world = World(md, clusters, observed=on_pools(md, "h100", "h100", "a100"),
                  deployments=[gang(2)])
    rsp = world.run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"}), 1: ("a", {"vllm": "a100"}),
                               2: ("a", {"vllm": "a100"})}
    assert len([m for m in messages(rsp) if "moved" in m]) == 1


def test_nothing_moves_when_the_other_pool_has_no_room_either():
    md = flexible(2)
    clusters = [cluster("a", pool("a100", 1, A100), pool("h100", 2, H100))]
    world = World(md, clusters, observed=on_pools(md, "h100", "h100"), deployments=[gang(2)])
    rsp = world.run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"}), 1: ("a", {"vllm": "h100"})}
    assert not [m for m in messages(rsp) if "moved" in m]


def test_a_replica_whose_devices_would_change_is_not_moved_to_another_pool_of_its_own():
    # firstAvailable H100, then A100: on the A100 pool the same ModelReplica would ask
    # for other devices, and its ResourceClaimTemplate's spec cannot change.
    fungible = {"name": "gpu", "firstAvailable": [
        {"name": "h100", "count": 8, "selectors": [{"cel": product_is("H100")}]},
        {"name": "a100", "count": 8, "selectors": [{"cel": product_is("A100")}]}]}
    md = deployment("flex", engine("vllm", standalone(fungible)), replicas=2)
    md["spec"]["template"]["spec"]["placement"] = {"strategy": "Pack"}
    world = World(md, [cluster("a", pool("a100", 4, A100), pool("h100", 2, H100))],
                  deployments=[gang(2)])
    world.apply(world.run())
    rsp = world.run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"}), 1: ("a", {"vllm": "h100"})}
    assert not [m for m in messages(rsp) if "moved" in m]


def test_the_note_names_a_waiting_deployment_of_another_namespace_only_as_another():
    md = small(2)
    rsp = World(md, fleet(4, 4), observed=on(md, "a", "b"), deployments=[_team_b_gang()]).run()
    assert ("replica 0 moved from a to b: making room on a for a deployment in another "
            "namespace, whose next replica fits on no cluster") in messages(rsp)
    assert not [m for m in messages(rsp) if "team-b" in m or "gang" in m]
