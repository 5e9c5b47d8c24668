"""placement.strategy: Pack fills the fullest cluster and pool that fit and keeps
whole free blocks for gangs; Spread (the default) stays today's rule."""

from __future__ import annotations

from fleetgen import (
    World,
    cluster,
    deployment,
    device,
    engine,
    foreign_replica,
    key,
    leader,
    one_node,
    own_replica,
    placements,
    pool,
    product_is,
    req,
    stamp,
    worker,
)

H100 = device("gpu", "H100", count=8)
L4 = device("gpu", "L4", count=4)


def gang_of(nodes: int, replicas: int) -> dict:
    r = req("gpu", 8, product_is("H100"))
    return deployment("gang", engine("vllm", leader(r), worker(nodes - 1, r)), replicas=replicas)


def clusters_by_index(rsp) -> list[str]:
    placed = placements(rsp)
    return [placed[i][0] for i in sorted(placed)]


def four_clusters_of_four() -> list[dict]:
    return [cluster(n, pool("h100", 4, H100)) for n in ("a", "b", "c", "d")]


def test_pack_fills_one_cluster_before_it_opens_the_next():
    rsp = World(one_node("small", 5, "Pack"), four_clusters_of_four()).run()
    assert clusters_by_index(rsp) == ["a", "a", "a", "a", "b"]


def test_spread_stays_the_default_one_replica_per_cluster():
    rsp = World(one_node("small", 4), four_clusters_of_four()).run()
    assert clusters_by_index(rsp) == ["a", "b", "c", "d"]


def test_after_packed_small_replicas_whole_clusters_are_left_for_four_node_gangs():
    fleet = four_clusters_of_four()
    small = World(one_node("small", 4, "Pack"), fleet)
    small.apply(small.run())
    rsp = World(gang_of(4, 4), fleet, others=small.observed.values()).run()
    assert sorted(c for c, _ in placements(rsp).values()) == ["b", "c", "d"]


def test_after_spread_small_replicas_no_four_node_gang_fits():
    fleet = four_clusters_of_four()
    small = World(one_node("small", 4), fleet)
    small.apply(small.run())
    rsp = World(gang_of(4, 4), fleet, others=small.observed.values()).run()
    assert placements(rsp) == {}


def test_pack_prefers_the_cluster_with_fewest_free_nodes_that_still_fits():
    fleet = [cluster(n, pool("h100", 4, H100)) for n in ("a", "b", "c")]
    held = [foreign_replica("x", "a", {"h100": 4}, created=stamp(1)),   # full: cannot fit
            foreign_replica("y", "b", {"h100": 1}, created=stamp(2)),   # 3 free
            foreign_replica("z", "c", {"h100": 2}, created=stamp(3))]   # 2 free
    rsp = World(one_node("small", 1, "Pack"), fleet, others=held).run()
    assert placements(rsp) == {0: ("c", {"vllm": "h100"})}


def test_pack_counts_only_the_pools_the_deployment_can_use():
    # a: 2 free H100 nodes beside 8 free L4 nodes; b: 3 free H100 nodes. An H100
    # replica fills a's H100 hole and leaves b's larger block.
    fleet = [cluster("a", pool("h100", 2, H100), pool("l4", 8, L4)),
             cluster("b", pool("h100", 3, H100))]
    rsp = World(one_node("small", 1, "Pack"), fleet).run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}


def test_among_equally_free_clusters_pack_opens_the_one_already_in_use():
    fleet = [cluster("a", pool("h100", 4, H100), pool("l4", 4, L4)),
             cluster("b", pool("h100", 4, H100), pool("l4", 4, L4))]
    held = [foreign_replica("x", "b", {"l4": 1}, created=stamp(1))]
    rsp = World(one_node("small", 1, "Pack"), fleet, others=held).run()
    assert placements(rsp) == {0: ("b", {"vllm": "h100"})}


def test_within_a_cluster_pack_takes_the_fullest_pool_that_fits():
    fleet = [cluster("a", pool("big", 8, H100), pool("small", 2, H100))]
    held = [foreign_replica("x", "a", {"small": 1}, created=stamp(1))]
    spread = World(one_node("d", 1), fleet, others=held).run()
    pack = World(one_node("d", 1, "Pack"), fleet, others=held).run()
    assert placements(spread) == {0: ("a", {"vllm": "big"})}    # the order listed
    assert placements(pack) == {0: ("a", {"vllm": "small"})}    # 1 free beats 8 free


def test_switching_to_pack_moves_no_replica_already_placed():
    fleet = four_clusters_of_four()
    md = one_node("small", 2)
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1)),
                key("b", 1): own_replica(md, "b", 1, {"vllm": "h100"}, created=stamp(2))}
    md["spec"]["replicas"] = 3
    md["spec"]["template"]["spec"]["placement"] = {"strategy": "Pack"}
    rsp = World(md, fleet, observed=observed).run()
    # The two stay; the new one joins the fullest cluster, both equally full: by name.
    assert placements(rsp) == {0: ("a", {"vllm": "h100"}), 1: ("b", {"vllm": "h100"}),
                               2: ("a", {"vllm": "h100"})}
