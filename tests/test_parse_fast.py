"""The scheduler's fresh-process readers (parsecache.fast_cluster, fast_replica,
reading items one level at a time through function/kit/lazy.py) give
exactly what the plain readers give: the same records, every field compared
(the ones equality ignores too), the same Malformed message, and the same
RunFunction response bytes. Items are encoded as Python's protobuf writes them
and with every map in a shuffled order, as Go's protobuf (Crossplane) does.
"""

from __future__ import annotations

import copy
import dataclasses
import random
import struct

import fleetgen as fg
import fuzz
import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import bench
from benchmarks import fleetgen as bench_fleet
from function.contract.records import Malformed
from function.kit import lazy, structs, wire
from function.runtime import fn
from function.scheduler import parsecache


def everything(x):
    """A record as nested tuples of all its fields (compare=False ones too)."""
    if dataclasses.is_dataclass(x):
        return (type(x).__name__,) + tuple(
            (f.name, everything(getattr(x, f.name))) for f in dataclasses.fields(x))
    if isinstance(x, dict):
        return ("dict",) + tuple((k, everything(v)) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return (type(x).__name__,) + tuple(everything(v) for v in x)
    return (type(x).__name__, x)


def outcome(read, item: bytes):
    try:
        return everything(read(item))
    except Malformed as exc:
        return ("Malformed", str(exc))


# --- A protobuf encoder that writes maps in any order (Go's does: random) -----

def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _struct(d: dict, rng: random.Random) -> bytes:
    keys = list(d)
    rng.shuffle(keys)
    return b"".join(_field(1, _field(1, k.encode()) + _field(2, _value(d[k], rng)))
                    for k in keys)


def _value(v, rng: random.Random) -> bytes:
    if v is None:
        return _varint(1 << 3) + _varint(0)
    if isinstance(v, bool):
        return _varint(4 << 3) + _varint(int(v))
    if isinstance(v, (int, float)):
        return _varint(2 << 3 | 1) + struct.pack("<d", float(v))
    if isinstance(v, str):
        return _field(3, v.encode())
    if isinstance(v, dict):
        return _field(5, _struct(v, rng))
    return _field(6, b"".join(_field(1, _value(x, rng)) for x in v))


def shuffled(obj: dict, seed: int) -> bytes:
    """A serialized `Resource` holding `obj`, its maps in a seeded random order."""
    return _field(1, _struct(obj, random.Random(seed)))


def ordered(obj: dict) -> bytes:
    r = fnv1.Resource()
    r.resource.CopyFrom(resource.dict_to_struct(obj))
    return r.SerializeToString()


def test_the_shuffling_encoder_writes_what_protobuf_reads_as_the_same_object():
    obj = bench_fleet.generate("S")[1][0]
    a, b = shuffled(obj, 1), shuffled(obj, 2)
    assert a != b and len(a) == len(ordered(obj))
    assert structs.to_dict(wire.resource(a).resource) == structs.to_dict(
        wire.resource(ordered(obj)).resource)


def _clear_fast_caches() -> None:
    for cache in (parsecache.RAW_POOLS, parsecache.RAW_ENGINES, parsecache.ENGINES,
                  parsecache.POOLS):
        cache.clear()


def _check(obj: dict, seed: int = 0) -> None:
    for item in (ordered(obj), shuffled(obj, seed), shuffled(obj, seed + 1)):
        if obj.get("kind") == "InferenceCluster":
            assert outcome(parsecache.fast_cluster, item) == \
                outcome(parsecache.plain_cluster, item)
        else:
            assert outcome(parsecache.fast_replica, item) == \
                outcome(parsecache.plain_replica, item)


@pytest.mark.parametrize("size", ["S", "M"])
def test_generated_fleets_read_alike(size):
    _clear_fast_caches()
    _, clusters, live = bench_fleet.generate(size)
    assert {p.get("costPerNodeHour") is None for c in clusters
            for p in c["spec"]["nodePools"]} == {True, False}  # priced and unpriced pools
    for i, obj in enumerate(clusters[:200] + live[:400]):
        _check(obj, i)


def test_a_pools_price_is_carried_by_the_fast_reader():
    _clear_fast_caches()
    obj = copy.deepcopy(bench_fleet.generate("S")[1][0])
    pools = obj["spec"]["nodePools"]
    pools[0]["costPerNodeHour"], pools[1]["costPerNodeHour"] = "98.32", "0"
    pools[2].pop("costPerNodeHour", None)
    _check(obj)
    for item in (ordered(obj), shuffled(obj, 3)):
        got = [p.cost for p in parsecache.fast_cluster(item).pools[:3]]
        assert got == [983200, 0, None]
    pools[1]["costPerNodeHour"] = "0.00001"  # one decimal too many: malformed alike
    _check(obj)
    with pytest.raises(Malformed, match="costPerNodeHour"):
        parsecache.fast_cluster(ordered(obj))


def test_the_examples_and_the_test_fleets_read_alike():
    md = fg.deployment("llama", fg.engine("vllm", fg.standalone(fg.req("gpu", 8))))
    world = fg.World(md, [fg.cluster(f"c{i}", fg.pool("h100", 4, fg.device()),
                                     fg.pool("l4", 2, fg.device(product="L4")))
                          for i in range(3)])
    world.step()
    world.step()
    objs = [*fuzz.FLEET, *fuzz.REPLICAS, *world.clusters, *world.observed.values()]
    assert any(o["kind"] == "ModelReplica" for o in objs)
    for i, obj in enumerate(objs):
        _check(fg.to_plain(obj), i)


def test_a_pool_that_takes_its_clusters_published_devices_reads_alike():
    ic = fg.cluster("c", fg.pool("h100", 4), fg.pool("l4", 2, fg.device(product="L4")))
    del ic["spec"]["nodePools"][0]["devices"]  # undeclared: the published ones count
    ic["status"] = {"nodePools": [{"name": p, "publishedDevices": [fg.device()]}
                                  for p in ("h100", "l4")]}
    _check(ic)
    assert parsecache.plain_cluster(ordered(ic)).pools[0].devices[0].count == 8
    ic["status"]["nodePools"][0]["publishedDevices"][0]["count"] = "eight"
    _check(ic, 7)  # malformed alike


@settings(max_examples=400, deadline=None)
@given(fuzz.bent(fuzz.FLEET + fuzz.REPLICAS), st.integers(0, 1 << 30))
def test_bent_clusters_and_replicas_read_alike_or_are_malformed_alike(doc, seed):
    kind = doc.get("kind") if doc.get("kind") in ("InferenceCluster", "ModelReplica") \
        else random.Random(seed).choice(["InferenceCluster", "ModelReplica"])
    _check({**doc, "kind": kind}, seed)


@settings(max_examples=200, deadline=None)
@given(fuzz.stored(fuzz.REPLICAS), st.integers(0, 1 << 30))
def test_stored_replicas_with_any_spec_read_alike(doc, seed):
    _check(doc, seed)


def test_a_replica_wrong_in_several_places_reports_what_the_plain_reader_reports():
    base = fg.to_plain(fuzz.REPLICAS[0])
    bends = {
        "no name and a bad engine": lambda r: (r["metadata"].pop("name"),
                                               r["spec"]["engines"][0].update(name="Bad_")),
        "bad cluster and a bad engine": lambda r: (r["spec"].update(clusterName=3),
                                                   r["spec"]["engines"].append(7)),
        "bad copies": lambda r: r["spec"]["engines"][0].update(copies="x"),
        "null labels": lambda r: r["metadata"].update(labels=None),
        "labels a list": lambda r: r["metadata"].update(labels=["a"]),
        "index a number": lambda r: r["metadata"].setdefault("labels", {}).update(
            {"modelplane.ai/replica-index": 3}),
        "engines null": lambda r: r["spec"].update(engines=None),
        "spec a string": lambda r: r.update(spec="x"),
        # Empty values of each kind: the fast reader asks a Value its kind only
        # when what it holds reads empty.
        "empty name and cluster": lambda r: (r["metadata"].update(name=""),
                                             r["spec"].update(clusterName="")),
        "empty labels": lambda r: r["metadata"].update(labels={}),
        "empty label values": lambda r: r["metadata"].update(labels={
            "modelplane.ai/deployment": "", "modelplane.ai/replica-index": ""}),
        "empty engines": lambda r: r["spec"].update(engines=[]),
        "empty metadata": lambda r: r.update(metadata={}),
        "empty spec": lambda r: r.update(spec={}),
        "labels a string": lambda r: r["metadata"].update(labels="x"),
        "engines a struct": lambda r: r["spec"].update(engines={}),
        "name a struct": lambda r: r["metadata"].update(name={}),
        "a non-ASCII digit index": lambda r: r["metadata"].setdefault("labels", {}).update(
            {"modelplane.ai/replica-index": "\u0663"}),
    }
    for what, bend in bends.items():
        r = copy.deepcopy(base)
        bend(r)
        _check(r)
        assert outcome(parsecache.fast_replica, ordered(r)) == \
            outcome(parsecache.plain_replica, ordered(r)), what


def _run(data: bytes, fast: bool, monkeypatch) -> bytes:
    """RunFunction's response bytes in a process whose caches are empty."""
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(parsecache.CLUSTERS, "_read", parsecache.plain_cluster)
            m.setattr(parsecache.REPLICAS, "_read", parsecache.plain_replica)
            m.setattr(parsecache.DEPLOYMENTS, "_read", parsecache.plain_deployment)
        for cache in (parsecache.CLUSTERS, parsecache.REPLICAS, parsecache.DEPLOYMENTS):
            cache._entries.clear()
        _clear_fast_caches()
        return fn.run_serialized(data).SerializeToString(deterministic=True)


@pytest.mark.parametrize("size", ["S", "M", "L"])
def test_a_first_reconcile_answers_byte_for_byte_as_the_plain_readers_do(size, monkeypatch):
    data = bench.scheduler_request(size).SerializeToString()
    assert _run(data, True, monkeypatch) == _run(data, False, monkeypatch)


def test_a_world_reconciled_with_the_fast_readers_answers_as_with_the_plain(monkeypatch):
    md = fg.deployment("llama", fg.engine("vllm", fg.standalone(fg.req("gpu", 8))),
                       replicas=5)
    clusters = [fg.cluster(f"c{i}", fg.pool("h100", 2 + i % 3, fg.device()))
                for i in range(4)]
    others = [fg.foreign_replica(f"o{i}", f"c{i % 4}", {"h100": 1}) for i in range(3)]
    world = fg.World(md, clusters, others)
    for _ in range(3):
        data = world.request().SerializeToString()
        assert _run(data, True, monkeypatch) == _run(data, False, monkeypatch)
        world.step()


def test_a_pack_world_making_room_answers_alike_with_the_fast_readers(monkeypatch):
    md = fg.deployment("small", fg.engine("vllm", fg.standalone(fg.req("gpu", 1))), replicas=2)
    md["spec"]["template"]["spec"]["placement"] = {"strategy": "Pack"}
    r = fg.req("gpu", 8)
    gang = fg.deployment("gang", fg.engine("vllm", fg.leader(r), fg.worker(3, r)))
    gang["status"] = {"replicas": {"desired": 1, "scheduled": 0, "ready": 0}}
    settled = fg.deployment("settled", replicas=1)
    settled["status"] = {"replicas": {"desired": 1, "scheduled": 1, "ready": 1}}
    clusters = [fg.cluster(n, fg.pool("h100", 4, fg.device())) for n in ("a", "b")]
    observed = {fg.key(c, i): fg.own_replica(md, c, i, {"vllm": "h100"}, created=fg.stamp(i))
                for i, c in enumerate("ab")}
    world = fg.World(md, clusters, observed=observed, deployments=[gang, settled])
    data = world.request().SerializeToString()
    fast = _run(data, True, monkeypatch)
    assert fast == _run(data, False, monkeypatch)
    assert b"making room on a" in fast  # the path under test was taken


@settings(max_examples=300, deadline=None)
@given(fuzz.waiting(), st.integers(0, 1 << 30))
def test_bent_deployments_read_alike_as_a_pack_deployment_reads_them(doc, seed):
    for item in (ordered(doc), shuffled(doc, seed)):
        assert outcome(parsecache.fast_deployment, item) == \
            outcome(parsecache.plain_deployment, item)


def test_lazy_to_dict_is_structs_to_dict():
    for obj in [*fuzz.FLEET, *fuzz.REPLICAS, {"a": None, "b": [None, 1.5, 2.0, {"c": None}],
                                               "d": True, "e": {}}]:
        item = ordered(obj)
        assert lazy.to_dict(lazy.resource(item)) == \
            structs.to_dict(wire.resource(item).resource)


# --- The parse cache's key: an object's version, when it has one --------------


def versioned(obj: dict, uid: str, rv: str) -> dict:
    out = copy.deepcopy(obj)
    out["metadata"] = {**out["metadata"], "uid": uid, "resourceVersion": rv}
    return out


def test_an_api_objects_version_is_read_without_decoding_the_rest():
    def version(item):
        return lazy.version(lazy.resource(item))
    obj = versioned(bench_fleet.generate("S")[1][0], "u-1", "42")
    for item in (ordered(obj), shuffled(obj, 1), shuffled(obj, 2)):
        assert version(item) == ("u-1", "42")
    assert version(ordered(bench_fleet.generate("S")[1][0])) is None  # render's inputs
    for meta in ({"uid": "u"}, {"resourceVersion": "1"}, {"uid": "", "resourceVersion": "1"},
                 {"uid": 7, "resourceVersion": "1"}):
        assert version(ordered({"metadata": meta})) is None, meta
    assert version(ordered({"metadata": "nonsense"})) is None


def test_the_same_object_in_another_map_order_is_parsed_once():
    # What Crossplane sends: Go's protobuf writes every map in a new random
    # order on each request, so the bytes differ while the content does not.
    obj = versioned(bench_fleet.generate("S")[1][0], "u-1", "42")
    parsed = []
    cache = parsecache.ParseCache(lambda item, top: parsed.append(item) or
                                  parsecache.plain_cluster(item), 100, serialized=True)
    records = [cache.get(item) for item in (shuffled(obj, 1), shuffled(obj, 2), ordered(obj))]
    assert len(parsed) == 1
    assert records == [parsecache.plain_cluster(ordered(obj))] * 3


def test_a_new_version_of_an_object_is_parsed_again():
    base = bench_fleet.generate("S")[1][0]
    cache = parsecache.ParseCache(parsecache.plain_cluster, 100, serialized=True)
    first = cache.get(ordered(versioned(base, "u-1", "42")))
    changed = versioned(base, "u-1", "43")
    changed["spec"]["nodePools"] = changed["spec"]["nodePools"][:1]
    second = cache.get(shuffled(changed, 3))
    assert second == parsecache.plain_cluster(ordered(changed)) and second != first


def test_objects_without_a_version_are_keyed_by_their_bytes():
    obj = bench_fleet.generate("S")[1][0]
    parsed = []
    cache = parsecache.ParseCache(lambda item, top: parsed.append(item) or
                                  parsecache.plain_cluster(item), 100, serialized=True)
    for item in (ordered(obj), ordered(obj), shuffled(obj, 1)):
        cache.get(item)
    assert len(parsed) == 2  # equal bytes hit, other bytes parse
