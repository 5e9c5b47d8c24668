"""The server reads the scheduler's request with its required resources left
serialized (function/kit/wire.py), parses each item once per content
(parsecache.py) and builds its response Structs sharing converted parts
(structs.update). Each must give exactly what the plain path gives."""

from __future__ import annotations

import copy

import fleetgen as fg
import fuzz
import grpc
import pytest
from builders import EXAMPLES, load, load_one, request
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from crossplane.function.proto.v1beta1 import run_function_pb2_grpc as grpcv1beta1
from google.protobuf import struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from function.contract.api import REQUIRE_CLUSTER, REQUIRE_CLUSTERS, REQUIRE_OWNER, REQUIRE_REPLICAS
from function.tools.localrender import placing_deployment
from function.contract.records import Malformed, parse_cluster
from function.kit import structs, wire
from function.runtime import fn, server
from function.scheduler import parsecache
from function.tools import localrender

FLEET = [c for p in sorted((EXAMPLES / "fleet").glob("*.yaml")) for c in load(p)]


def deterministic(rsp: fnv1.RunFunctionResponse) -> bytes:
    return rsp.SerializeToString(deterministic=True)


def scheduler_requests() -> dict[str, fnv1.RunFunctionRequest]:
    """Every example deployment on the example fleet, and a busy generated fleet
    with our own, foreign and malformed replicas and a malformed cluster."""
    out = {}
    for path in sorted((EXAMPLES / "deployments").glob("*.yaml")):
        out[path.stem] = request(load_one(path), required={REQUIRE_CLUSTERS: FLEET,
                                                           REQUIRE_REPLICAS: []})
    md = fg.deployment("llama", fg.engine("vllm", fg.standalone(fg.req("gpu", 2))), replicas=5)
    clusters = [fg.cluster(f"c{i}", fg.pool("h100", 2, fg.device())) for i in range(4)]
    clusters.append({"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
                     "metadata": {"name": "broken"}, "spec": {"nodePools": "not a list"}})
    own = [fg.own_replica(md, "c0", 0, {"vllm": "h100"}), fg.own_replica(md, "c1", 1, {"vllm": "h100"})]
    foreign = [fg.foreign_replica("other-c2-0", "c2", {"h100": 2})]
    bad = copy.deepcopy(foreign[0])
    bad["metadata"]["name"], bad["spec"]["engines"] = "bad", "nope"
    out["busy"] = request(md, required={REQUIRE_CLUSTERS: clusters,
                                        REQUIRE_REPLICAS: own + foreign + [bad]},
                          observed={fg.key("c0", 0): own[0], fg.key("c1", 1): own[1]})
    out["unresolved"] = request(md, observed={fg.key("c0", 0): own[0]})
    return out


@pytest.mark.parametrize("name", sorted(scheduler_requests()))
def test_the_scheduler_answers_its_bytes_exactly_as_the_decoded_request(name):
    req = scheduler_requests()[name]
    from_bytes = fn.run_serialized(req.SerializeToString())
    assert deterministic(from_bytes) == deterministic(fn.run_function(req))
    assert not [r for r in from_bytes.results if r.severity == fnv1.SEVERITY_FATAL]
    # And again, now that the parse cache holds every item.
    assert deterministic(fn.run_serialized(req.SerializeToString())) == deterministic(from_bytes)


def test_the_composer_and_cluster_requests_are_decoded_in_full():
    mr = load_one(EXAMPLES / "replicas" / "llama-3-1-8b-0.yaml")
    ic = next(c for c in FLEET if c["metadata"]["name"] == mr["spec"]["clusterName"])
    for req in (request(mr, required={REQUIRE_CLUSTER: [ic], REQUIRE_OWNER: [placing_deployment(mr)]}), request(ic)):
        assert deterministic(fn.run_serialized(req.SerializeToString())) == \
            deterministic(fn.run_function(req))


def test_bytes_that_are_not_a_request_get_a_fatal_result_not_an_exception():
    rsp = fn.run_serialized(b"\x0a\xff\xff\xff")
    (result,) = rsp.results
    assert result.severity == fnv1.SEVERITY_FATAL
    assert "cannot decode the RunFunctionRequest" in result.message


def test_the_serialized_request_is_run_function_request_field_for_field():
    ours, theirs = wire.SerializedRequest.DESCRIPTOR, fnv1.RunFunctionRequest.DESCRIPTOR
    assert [(f.name, f.number, f.is_repeated, f.type) for f in ours.fields] == \
        [(f.name, f.number, f.is_repeated, f.type) for f in theirs.fields]
    for f in theirs.fields:
        if f.message_type is None:
            continue
        mine = ours.fields_by_name[f.name].message_type
        if f.message_type.GetOptions().map_entry:
            value, my_value = f.message_type.fields_by_name["value"], mine.fields_by_name["value"]
            if value.message_type is fnv1.Resources.DESCRIPTOR:
                # The one difference: each item stays the bytes of its Resource.
                items = my_value.message_type.fields_by_name["items"]
                assert (items.number, items.type) == (1, items.TYPE_BYTES)
            else:
                assert my_value.message_type is value.message_type
        else:
            assert mine is f.message_type  # the SDK's own types: its helpers work


def item(**fields) -> bytes:
    """A required item as it comes off the wire: a serialized Resource."""
    return fnv1.Resource(resource=resource.dict_to_struct(fields)).SerializeToString()


def test_a_changed_item_is_parsed_again_and_an_unchanged_one_is_not():
    parsed = []
    cache = parsecache.ParseCache(lambda s: parsed.append(s["n"]) or int(s["n"]), limit=2)

    cache.new_request()
    assert [cache.get(item(n=1)), cache.get(item(n=1)), cache.get(item(n=2))] == [1, 1, 2]
    assert parsed == [1, 2]
    cache.get(item(n=3))  # over the limit: the least recently used (1) goes
    assert len(cache) == 2
    cache.get(item(n=1))
    assert parsed == [1, 2, 3, 1]


def test_an_item_no_recent_request_used_is_forgotten():
    cache = parsecache.ParseCache(lambda s: int(s["n"]), limit=100, keep_requests=3)

    cache.new_request()
    cache.get(item(n=1))  # an old version of an object ...
    cache.get(item(n=2))
    for _ in range(3):  # ... replaced by a new one, used by every request since
        cache.new_request()
        cache.get(item(n=2))
        cache.get(item(n=3))
    assert len(cache) == 2  # item 1 went after 3 requests without it
    cache.new_request()
    assert len(cache) == 2


def test_a_malformed_item_is_remembered_as_malformed():
    calls = []

    def parse(obj):
        calls.append(obj)
        raise Malformed("no good")

    cache = parsecache.ParseCache(parse, limit=10)
    cache.new_request()
    bad = item(a=1)
    for _ in range(2):
        with pytest.raises(Malformed, match="no good"):
            cache.get(bad)
    assert len(calls) == 1


def test_a_cluster_that_shrinks_between_reconciles_is_seen_shrunk():
    md = fg.deployment("llama", fg.engine("vllm", fg.standalone(fg.req("gpu", 8))))
    big = fg.cluster("c0", fg.pool("h100", 1, fg.device()))
    small = copy.deepcopy(big)
    small["spec"]["nodePools"][0]["nodes"] = 0
    placed = fn.run_serialized(request(md, required={REQUIRE_CLUSTERS: [big],
                                                     REQUIRE_REPLICAS: []}).SerializeToString())
    assert len(placed.desired.resources) == 1
    shrunk = fn.run_serialized(request(md, required={REQUIRE_CLUSTERS: [small],
                                                     REQUIRE_REPLICAS: []}).SerializeToString())
    assert len(shrunk.desired.resources) == 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=3),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=3), json_values, max_size=4), min_size=1,
                max_size=4), st.data())
def test_structs_update_builds_what_the_sdk_builds_even_from_shared_parts(objs, data):
    # Share parts between the objects, as the scheduler's replicas share the
    # deployment's dicts: the same dict or list object under several keys.
    parts = [v for o in objs for v in o.values() if isinstance(v, (dict, list))]
    for o in objs:
        if parts:
            o[data.draw(st.text(max_size=3), "key")] = data.draw(st.sampled_from(parts), "part")
    memo: dict = {}
    for o in objs:
        ours, sdk = fnv1.Resource(), fnv1.Resource()
        structs.update(ours, o, memo)
        resource.update(sdk, o)
        assert ours.resource == sdk.resource


def test_structs_update_merges_into_what_is_there_like_the_sdk():
    ours, sdk = fnv1.Resource(), fnv1.Resource()
    for r in (ours, sdk):
        r.resource.update({"status": {"a": 1}, "keep": "me"})
    structs.update(ours, {"status": {"b": 2}})
    resource.update(sdk, {"status": {"b": 2}})
    assert ours.resource == sdk.resource
    assert ours.resource["keep"] == "me"
    with pytest.raises(ValueError, match="cannot put a set"):
        structs.update(fnv1.Resource(), {"x": {1}})
    assert isinstance(ours.resource, struct_pb2.Struct)


def test_the_server_serves_v1_from_bytes_and_v1beta1_as_before():
    req = scheduler_requests()["single-gpu"]
    with localrender.serve_locally() as address, grpc.insecure_channel(address) as ch:
        raw = ch.unary_unary(f"/{server.SERVICE}/RunFunction",
                             request_serializer=None,
                             response_deserializer=fnv1.RunFunctionResponse.FromString)
        assert deterministic(raw(req.SerializeToString(), timeout=30)) == \
            deterministic(fn.run_function(req))
        broken = raw(b"\x0a\xff\xff\xff", timeout=30)
        assert broken.results[0].severity == fnv1.SEVERITY_FATAL
        beta = grpcv1beta1.FunctionRunnerServiceStub(ch).RunFunction(
            fnv1beta1.RunFunctionRequest.FromString(req.SerializeToString()), timeout=30)
        assert len(beta.desired.resources) == len(fn.run_function(req).desired.resources)


def test_the_answer_depends_on_content_not_on_the_order_of_keys_on_the_wire():
    # Go's protobuf writes maps in random order, so the same cluster can arrive
    # ordered differently on every reconcile; a decoded and a built Struct
    # iterate their keys in different orders too (found by make fuzz).
    bad = {f"attribute{i}": {"string": i} for i in range(12)}
    answers = set()
    for attributes in (bad, dict(reversed(bad.items()))):
        ic = copy.deepcopy(FLEET[0])
        ic["spec"]["nodePools"][0]["devices"][0]["attributes"] = attributes
        req = request(ic)
        answers.add(deterministic(fn.run_function(req)))
        answers.add(deterministic(fn.run_serialized(req.SerializeToString())))
    (answer,) = answers
    assert b"attribute0" in answer and b"attribute11" in answer


def _outcome(parse, *args):
    try:
        return parse(*args)
    except Malformed as exc:
        return f"Malformed: {exc}"


@settings(max_examples=300, deadline=None)
@given(fuzz.stored(fuzz.FLEET))
def test_a_cluster_parsed_from_remembered_pools_is_the_cluster_parsed_whole(ic):
    # parsecache remembers each node pool by its bytes; a cluster built from
    # remembered pools (or the same Malformed) is what parsing it whole gives.
    s = resource.dict_to_struct(ic)
    whole = _outcome(parse_cluster, structs.to_dict(s))
    assert _outcome(parsecache._cluster, s) == whole
    assert _outcome(parsecache._cluster, s) == whole  # now from remembered pools


def test_a_pool_that_changes_is_parsed_again():
    ic = copy.deepcopy(FLEET[0])
    first = parsecache._cluster(resource.dict_to_struct(ic))
    ic["spec"]["nodePools"][0]["nodes"] += 5
    second = parsecache._cluster(resource.dict_to_struct(ic))
    assert second.pools[0].nodes == first.pools[0].nodes + 5
    assert second.pools[1:] == first.pools[1:]


def test_replicas_whose_status_churns_do_not_grow_the_parse_cache():
    md = fg.deployment("churn", fg.engine("vllm", fg.standalone(fg.req("gpu", 1))))
    clusters = [fg.cluster("c0", fg.pool("h100", 8, fg.device()))]
    live = [fg.foreign_replica(f"other-{i}", "c0", {"h100": 1}) for i in range(3)]
    sizes = []
    for n in range(3 * 32):
        for mr in live:
            mr["status"] = {"phase": "Serving", "observedGeneration": n}  # new bytes each time
        req = request(md, required={REQUIRE_CLUSTERS: clusters, REQUIRE_REPLICAS: live})
        fn.run_serialized(req.SerializeToString())
        sizes.append(len(parsecache.REPLICAS))
    assert max(sizes[-32:]) <= 3 * 33  # the live three, times the requests remembered
    assert sizes[-1] == sizes[-33]      # and no longer growing


def test_a_remembered_failure_keeps_nothing_of_the_request_alive():
    # A raised exception's traceback holds every frame it passed through, and
    # so the request: a cache must keep only the message (found by make fuzz:
    # the fuzzing process grew by 50 MB every 1500 cases).
    import gc
    import weakref

    class Request:
        pass

    seen = []

    def parse(_s):
        request = Request()  # a local of a frame the failure passes through
        seen.append(weakref.ref(request))
        raise Malformed("no good") from KeyError("spec")

    cache = parsecache.ParseCache(parse, limit=10)
    cache.new_request()
    bad = item(a=1)
    for _ in range(2):
        with pytest.raises(Malformed, match="no good"):
            cache.get(bad)
    gc.collect()
    assert seen and seen[0]() is None


def test_a_remembered_unusable_cluster_keeps_nothing_of_the_request_alive():
    import gc

    from composer_support import replica as a_replica

    mr = a_replica()
    ic = copy.deepcopy(FLEET[-1])
    ic["metadata"]["name"] = mr["spec"]["clusterName"]
    del ic["spec"]["gateway"]  # unusable: no gateway for the route
    for _ in range(2):
        fn.run_function(request(mr, required={REQUIRE_CLUSTER: [ic], REQUIRE_OWNER: [placing_deployment(mr)]}))
    gc.collect()
    from function.composer import memo as composer_cache
    remembered = [v for v in composer_cache.CLUSTERS._entries.values() if isinstance(v, Exception)]
    assert remembered
    assert all(e.__traceback__ is None and e.__context__ is None for e in remembered)


def test_an_observed_object_as_deep_as_a_crd_schema_decodes():
    # A serving-stack Object carries its CRD in status.atProvider.manifest; a
    # LeaderWorkerSet's schema nests about 40 JSON levels, past upb's default bound of
    # 100 messages (33 Struct levels): the whole request failed to decode on make cluster.
    deep: dict = {}
    cur = deep
    for _ in range(60):
        cur["properties"] = {}
        cur = cur["properties"]
    req = fnv1.RunFunctionRequest()
    req.observed.resources["stack-crd"].resource.update({"status": {"atProvider": deep}})
    data = req.SerializeToString()
    assert wire.SerializedRequest.FromString(data).observed.resources["stack-crd"] \
        .resource.fields["status"].struct_value.fields["atProvider"].struct_value.fields
    assert fnv1.RunFunctionRequest.FromString(data) == req
