"""One InferenceCluster record for both stages (function/contract/records.py)."""

from __future__ import annotations

import dataclasses
import json

import fuzz
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from function.composer import model as composer_model
from function.contract import records
from function.scheduler import filters as scheduler_filters
from function.scheduler import parsecache as scheduler_parsecache

IC = {"metadata": {"name": "us-east-1", "labels": {"region": "us"}},
      "spec": {"providerConfigRef": {"name": "us-east-1"},
               "gateway": {"name": "gw", "namespace": "gateway-system"},
               "taints": [{"key": "maintenance", "effect": "NoSchedule"}],
               "nodePools": [{"name": "h100", "nodes": 2,
                              "taints": [{"key": "gpu", "value": "h100", "effect": "NoSchedule"}],
                              "devices": [{"name": "gpu", "driver": "gpu.nvidia.com",
                                           "deviceClassName": "gpu.nvidia.com", "count": 8}]}]}}


def test_the_stages_share_the_record_and_its_parser():
    assert scheduler_filters.Cluster is records.Cluster is composer_model.Cluster
    assert scheduler_parsecache.parse_cluster is records.parse_cluster


def test_a_cluster_carries_what_either_stage_reads():
    c = records.parse_cluster(IC)
    assert c.labels == {"region": "us"} and [str(t) for t in c.taints] == ["maintenance:NoSchedule"]
    assert c.provider_config == records.ProviderConfig("us-east-1", "ClusterProviderConfig")
    assert c.remote and c.gateway == records.Gateway("gw", "gateway-system", "")
    (pool,) = c.pools
    assert [str(t) for t in pool.taints] == ["gpu=h100:NoSchedule"]
    assert pool.devices[0].claim == "DRA" and pool.shape.startswith("[{")


def test_fields_only_the_composer_reads_are_read_leniently():
    spec = {**IC["spec"], "gateway": {"name": "gw"}, "providerConfigRef": {"kind": 3}}
    c = records.parse_cluster({**IC, "spec": spec})
    assert c.gateway is None and c.provider_config is None and not c.remote


def test_a_malformed_pool_taint_makes_the_cluster_malformed():
    pool = {**IC["spec"]["nodePools"][0], "taints": [{"key": "gpu"}]}
    with pytest.raises(records.Malformed, match="a taint's effect"):
        records.parse_cluster({**IC, "spec": {**IC["spec"], "nodePools": [pool]}})


def test_the_composer_says_a_cluster_the_schema_admits_but_the_parser_refuses_is_malformed():
    from function.composer.model import Unusable, parse_cluster
    replica = composer_model.Replica(namespace="ml", name="r", cluster="us-east-1", mode="Unified",
                                     router="Service", engines=(), labels={})
    with pytest.raises(Unusable, match="metadata.labels is list") as why:
        parse_cluster({**IC, "metadata": {"name": "us-east-1", "labels": ["x"]}}, replica)
    assert why.value.reason == "ClusterMalformed"


def test_derived_fields_are_plain_fields_worked_out_once():
    # Not functools.cached_property: on CPython 3.11 that slows every attribute
    # read of the record, and the scheduler reads pools in its hottest loops.
    (pool,) = records.parse_cluster(IC).pools
    assert {"shape"} <= {f.name for f in dataclasses.fields(records.Pool)}
    assert {"key"} <= {f.name for f in dataclasses.fields(records.Device)}
    assert pool.devices[0].key == json.dumps(IC["spec"]["nodePools"][0]["devices"][0],
                                             sort_keys=True)
    assert pool.shape == json.dumps(IC["spec"]["nodePools"][0]["devices"], sort_keys=True)
    assert "shape" not in repr(pool) and "key=" not in repr(pool.devices[0])
    # Built from the fields, so a copy with other devices has its own shape.
    other = dataclasses.replace(pool, devices=())
    assert other.shape == "[]" and other == dataclasses.replace(pool, devices=())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=3), fuzz.json_values, max_size=4), max_size=4))
def test_a_pools_shape_is_the_json_of_its_device_specs_however_it_is_built(specs):
    # Pool builds its shape from its devices' keys rather than dumping the specs again.
    devices = tuple(records.Device(name="d", claim="DRA", device_class="c", count=1, spec=s)
                    for s in specs)
    assert records.Pool(name="p", nodes=1, devices=devices).shape == \
        json.dumps(specs, sort_keys=True)
