"""The ledger's shared packed pools (scheduler/binscache.py) change nothing: the
same request places byte-identically whether each pool is packed afresh, packed
once and shared, or shared and then changed by the reconcile's own placements."""

from __future__ import annotations

import copy
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st
from test_scheduler_properties import PROPERTY, evolve, worlds

from function.contract.nodes import Bins
from function.contract.records import parse_cluster
from function.runtime import fn
from function.scheduler import binscache
from fleetgen import cluster, device, pool, product_is

_LOADED = binscache.loaded


def afresh(p, pods, cache=True):
    return _LOADED(p, pods, cache=False)


@PROPERTY
@given(worlds(), st.randoms(use_true_random=False))
def test_shared_packed_pools_place_exactly_as_packing_afresh(world, rnd):
    world.apply(world.run())
    world.clusters = evolve(world.clusters, rnd)
    req = world.request()
    binscache.clear()
    cold = fn.run_function(copy.deepcopy(req)).SerializeToString(deterministic=True)
    warm = fn.run_function(copy.deepcopy(req)).SerializeToString(deterministic=True)
    with mock.patch.object(binscache, "loaded", afresh):
        plain = fn.run_function(copy.deepcopy(req)).SerializeToString(deterministic=True)
    assert cold == plain
    assert warm == plain


def test_a_shared_pool_is_never_changed_by_the_ledger_that_read_it():
    from function.contract.capacity import shape
    from function.scheduler.ledger import Ledger

    c = parse_cluster(cluster("a", pool("h100", 2, device("gpu", "H100", count=8))))
    one = shape([(c.pools[0].devices[0].device_class, (product_is("H100"),), 1)])
    binscache.clear()
    ledger = Ledger({"a": c})
    ledger.load([("a", {"h100": {one: 3}})])
    shared = binscache.loaded(c.pools[0], {one: 3})
    before = dict(shared.states)
    ledger.reserve("a", {"h100": {one: 5}})   # the reconcile's own placements
    ledger.release("a", {"h100": {one: 2}})
    assert shared.states == before            # the next reconcile reads it as it was
    assert ledger.free("a", c.pools[0]) == 16 - 6
    assert isinstance(shared, Bins)


def test_a_pool_nothing_was_loaded_on_is_read_shared_and_changed_privately():
    from function.contract.capacity import shape
    from function.scheduler.ledger import Ledger

    c = parse_cluster(cluster("a", pool("h100", 2, device("gpu", "H100", count=8))))
    one = shape([(c.pools[0].devices[0].device_class, (product_is("H100"),), 1)])
    vector = ((1,),)
    binscache.clear()
    first = Ledger({"a": c})
    assert first.fits("a", c.pools[0], list(vector))  # read: the shared empty pool
    first.reserve("a", {"h100": {one: 9}})             # changed: its own copy
    assert first.free("a", c.pools[0]) == 16 - 9
    assert Ledger({"a": c}).free("a", c.pools[0]) == 16  # the next reconcile's is empty
