"""The cost score step: nodePools[].costPerNodeHour picks the cheapest of the
placements a strategy ranks equal, within one firstAvailable priority level."""

from __future__ import annotations

import pytest
import fleetgen
from fleetgen import (
    GPU,
    World,
    cluster,
    deployment,
    device,
    engine,
    placements,
    pool,
    product_is,
    req,
    standalone,
)

from function.contract import cost
from function.contract.records import Malformed, parse_pool

H100 = device("gpu", "H100", count=8)
L4 = device("gpu", "L4", count=4)


def priced(p: dict, price: str | None) -> dict:
    return p if price is None else {**p, "costPerNodeHour": price}


def one_node(replicas: int, strategy: str | None = None, product: str = "H100") -> dict:
    return fleetgen.one_node("small", replicas, strategy, product)


def fungible(replicas: int, strategy: str | None = None) -> dict:
    """One GPU: an L4 first, an H100 when no L4 fits anywhere."""
    request = {"name": "gpu", "firstAvailable": [
        {"name": "l4", "count": 1, "selectors": [{"cel": product_is("L4")}]},
        {"name": "h100", "count": 1, "selectors": [{"cel": product_is("H100")}]}]}
    md = deployment("fungible", engine("vllm", standalone(request)), replicas=replicas)
    if strategy:
        md["spec"]["template"]["spec"]["placement"] = {"strategy": strategy}
    return md


def three_h100_clusters() -> list[dict]:
    """a the dearest, b the cheapest, c between."""
    return [cluster(n, priced(pool("h100", 4, H100), p))
            for n, p in (("a", "98.32"), ("b", "12.5"), ("c", "40"))]


def where(rsp) -> list[tuple[str, str]]:
    """(cluster, pool) of each replica, by index."""
    placed = placements(rsp)
    return [(placed[i][0], placed[i][1]["vllm"]) for i in sorted(placed)]


# --- the field ------------------------------------------------------------------

@pytest.mark.parametrize("text,ten_thousandths", [
    ("0", 0), ("2", 20000), ("2.48", 24800), ("2.4800", 24800), ("0.0001", 1),
    ("999999.9999", 9999999999)])
def test_a_price_is_read_exactly_in_ten_thousandths(text, ten_thousandths):
    assert cost.parse(text) == ten_thousandths
    assert cost.parse(cost.text(ten_thousandths)) == ten_thousandths


@pytest.mark.parametrize("text", ["", "-1", "1e3", "01", "2.", ".5", "2.48001", "1000000",
                                  " 2", "NaN", "2,48"])
def test_a_price_that_is_not_a_bounded_decimal_makes_the_cluster_malformed(text):
    with pytest.raises(Malformed, match="costPerNodeHour"):
        parse_pool({"name": "h100", "nodes": 1, "costPerNodeHour": text})


def test_a_price_written_as_a_number_makes_the_cluster_malformed():
    with pytest.raises(Malformed, match="costPerNodeHour is float, not str"):
        parse_pool({"name": "h100", "nodes": 1, "costPerNodeHour": 2.48})


def test_an_unset_price_is_unknown():
    assert parse_pool({"name": "h100", "nodes": 1}).cost is None


# --- Spread -----------------------------------------------------------------------

def test_spread_puts_the_first_replica_on_the_cheapest_of_equally_spread_clusters():
    assert where(World(one_node(1), three_h100_clusters()).run()) == [("b", "h100")]


def test_spread_still_spreads_before_it_saves():
    placed = where(World(one_node(3), three_h100_clusters()).run())
    assert [c for c, _ in placed] == ["b", "c", "a"]


def test_within_a_cluster_the_cheaper_pool_wins_over_the_listed_order():
    fleet = [cluster("a", priced(pool("h100-ondemand", 4, H100), "98.32"),
                     priced(pool("h100-reserved", 4, H100), "60"))]
    assert where(World(one_node(1), fleet).run()) == [("a", "h100-reserved")]


def test_a_full_cheap_pool_is_passed_over_for_the_next_cheapest_with_room():
    fleet = [cluster("a", priced(pool("cheap", 1, H100), "1"), priced(pool("dear", 4, H100), "9")),
             cluster("b", priced(pool("mid", 4, H100), "5"))]
    md = deployment("pair", engine("vllm", standalone(req("gpu", 8, product_is("H100"))),
                                   copies=2))
    placed = placements(World(md, fleet).run())
    # Two nodes: the cheap pool has one, so a's replica would take the dear
    # pool (18) where b's takes the mid one (10).
    assert placed == {0: ("b", {"vllm": "mid"})}


def test_unpriced_pools_rank_after_every_priced_one():
    fleet = [cluster("a", pool("h100", 4, H100)),
             cluster("b", priced(pool("h100", 4, H100), "98.32"))]
    assert where(World(one_node(1), fleet).run()) == [("b", "h100")]


def test_a_zero_price_ranks_first():
    fleet = [cluster("a", priced(pool("h100", 4, H100), "0.0001")),
             cluster("b", priced(pool("h100", 4, H100), "0"))]
    assert where(World(one_node(1), fleet).run()) == [("b", "h100")]


def test_without_any_price_placement_is_what_it_was():
    fleet = [cluster("b", pool("h100", 4, H100)), cluster("a", pool("h100", 4, H100))]
    assert where(World(one_node(2), fleet).run()) == [("a", "h100"), ("b", "h100")]


def test_equal_prices_fall_back_to_the_name():
    fleet = [cluster("b", priced(pool("h100", 4, H100), "3")),
             cluster("a", priced(pool("h100", 4, H100), "3.0"))]
    assert where(World(one_node(1), fleet).run()) == [("a", "h100")]


def test_two_engines_take_the_cheapest_placement_together_not_one_at_a_time():
    # One GPU a node. Prefill (two H100 pods) fits the cheap and the mid pool,
    # decode (one pod on an NVLink GPU) the cheap and the dear one. Prefill first
    # on the cheap pool fills it and leaves decode the dear one: 2 x 1 + 10 = 12.
    # Prefill on the mid pool and decode on the cheap one: 2 x 3 + 1 = 7.
    nvlink, plain = (device("gpu", "H100", count=1, nvlink=v) for v in (True, False))
    fleet = [cluster("a", priced(pool("cheap", 2, nvlink), "1"),
                     priced(pool("mid", 2, plain), "3"),
                     priced(pool("dear", 1, device("gpu", "L4", count=1, nvlink=True)), "10"))]
    md = deployment("pd", engine("prefill", standalone(req("gpu", 1, product_is("H100"))),
                                 copies=2),
                    engine("decode", standalone(req("gpu", 1,
                                                    f'device.attributes["{GPU}"].nvlink'))))
    assert placements(World(md, fleet).run()) == {0: ("a", {"prefill": "mid", "decode": "cheap"})}


# --- firstAvailable ---------------------------------------------------------------

def test_the_first_alternative_beats_a_cheaper_pool_of_the_second():
    fleet = [cluster("a", priced(pool("l4", 2, L4), "50")),
             cluster("b", priced(pool("h100", 4, H100), "1"))]
    assert where(World(fungible(1), fleet).run()) == [("a", "l4")]


def test_within_the_fallback_level_the_cheapest_pool_wins():
    fleet = [cluster("a", priced(pool("l4", 1, device("gpu", "L4", count=1)), "0.5")),
             cluster("b", priced(pool("h100", 4, H100), "9")),
             cluster("c", priced(pool("h100", 4, H100), "4"))]
    # The one L4 GPU takes the first replica; then no L4 fits anywhere, and of
    # the H100 pools the cheaper takes the next.
    assert where(World(fungible(2, "Pack"), fleet).run()) == [("a", "l4"), ("c", "h100")]


# --- Pack -------------------------------------------------------------------------

def test_pack_packs_before_it_saves():
    fleet = [cluster("a", priced(pool("h100", 2, H100), "9")),
             cluster("b", priced(pool("h100", 4, H100), "1"))]
    # a has fewer free nodes: Pack fills it although b is cheaper.
    assert [c for c, _ in where(World(one_node(2, "Pack"), fleet).run())] == ["a", "a"]


def test_pack_picks_the_cheaper_of_equally_full_clusters():
    fleet = [cluster("a", priced(pool("h100", 4, H100), "9")),
             cluster("b", priced(pool("h100", 4, H100), "3"))]
    assert where(World(one_node(1, "Pack"), fleet).run()) == [("b", "h100")]


def test_pack_picks_the_cheaper_of_equally_full_pools():
    fleet = [cluster("a", priced(pool("x", 4, H100), "7"), priced(pool("y", 4, H100), "3"))]
    assert where(World(one_node(1, "Pack"), fleet).run()) == [("a", "y")]


# --- determinism ------------------------------------------------------------------

def test_the_same_priced_fleet_gives_byte_identical_responses():
    fleet = [cluster(n, priced(pool("h100", 4, H100), p), priced(pool("l4", 2, L4), q))
             for n, p, q in (("a", "3.5", "1"), ("b", "3.5", None), ("c", "2", "1"))]
    first = World(fungible(5), fleet).run().SerializeToString(deterministic=True)
    for _ in range(3):
        assert World(fungible(5), fleet).run().SerializeToString(deterministic=True) == first
