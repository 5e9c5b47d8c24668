"""The scheduler's ModelEndpoints (issue #16): one per serving replica, named
for its cluster gateway and selected there by the replica header, withdrawn as
soon as the replica stops serving or leaves."""

from __future__ import annotations

from builders import desired
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from fleetgen import (
    World,
    cluster,
    deployment,
    device,
    key,
    own_replica,
    placements,
    pool,
    stamp,
    taint,
    to_plain,
)

from schemas import Schemas

from function.composer.modelservice.endpoint import check
from function.scheduler import endpoints

H100 = device("gpu", "H100", count=8)


def serving(mr: dict, endpoint: str | None = None) -> dict:
    meta = mr["metadata"]
    mr["status"] = {"phase": "Serving", "endpoint": endpoint or
                    f"https://gw.{mr['spec']['clusterName']}.example.com/"
                    f"{meta['namespace']}/{meta['name']}"}
    return mr


def endpoints_of(rsp) -> dict[str, dict]:
    return {k: to_plain(v) for k, v in desired(rsp).items() if k.startswith("endpoint-")}


def test_a_serving_replica_gets_an_endpoint_at_its_cluster_gateway_naming_the_replica():
    md = deployment("llama", replicas=1, labels={"app": "llama", "tier": "prod"})
    mr = own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))
    mr["metadata"]["labels"].update({"app": "llama", "tier": "prod"})
    rsp = World(md, [cluster("a", pool("h100", 4, H100))],
                observed={key("a", 0): serving(mr)}).run()
    got = endpoints_of(rsp)
    assert list(got) == [endpoints.key(key("a", 0))]
    ep = got[endpoints.key(key("a", 0))]
    ns, name = mr["metadata"]["namespace"], mr["metadata"]["name"]
    assert ep["kind"] == "ModelEndpoint"
    assert ep["metadata"] == {"name": name, "namespace": ns, "labels": {
        "app": "llama", "modelplane.ai/cluster": "a", "modelplane.ai/deployment": "llama",
        "modelplane.ai/replica-index": "0", "tier": "prod"}}
    # The replica, not its Host: the route sends `<name>.<ns>.replica.modelplane.internal`
    # from the endpoint's own namespace, so no endpoint can name another's; and the
    # engine's health path, which the front door checks through the gateway.
    assert ep["spec"] == {"url": "https://gw.a.example.com", "rewritePath": "/",
                          "replica": name, "healthPath": "/health"}
    # What a ModelService accepts: the ModelEndpoint XRD's schema and its function's check.
    assert Schemas().errors(ep) == [] and check(ep) is None
    # It exists only while the replica serves: it never holds readiness back.
    assert rsp.desired.resources[endpoints.key(key("a", 0))].ready == fnv1.READY_TRUE


def test_a_replica_that_is_not_serving_has_no_endpoint():
    md = deployment("llama", replicas=2)
    loading = own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))
    loading["status"] = {"phase": "Loading", "endpoint": "https://gw.a.example.com/x/y"}
    failed = serving(own_replica(md, "a", 1, {"vllm": "h100"}, created=stamp(2)))
    failed["status"]["phase"] = "Failed"
    rsp = World(md, [cluster("a", pool("h100", 4, H100))],
                observed={key("a", 0): loading, key("a", 1): failed}).run()
    assert endpoints_of(rsp) == {}
    assert {key("a", 0), key("a", 1)} <= set(desired(rsp))


def test_an_endpoint_that_does_not_end_with_the_replicas_prefix_is_not_guessed_at():
    md = deployment("llama")
    mr = serving(own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1)),
                 endpoint="https://a.example.com/llama")
    assert endpoints.manifest(mr) is None
    mr["status"]["endpoint"] = f"ftp://a/{mr['metadata']['namespace']}/{mr['metadata']['name']}"
    assert endpoints.manifest(mr) is None


def test_while_inputs_are_unresolved_serving_replicas_keep_their_endpoints():
    md = deployment("llama", replicas=2)
    mr = serving(own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1)))
    rsp = World(md, [cluster("a", pool("h100", 4, H100))],
                observed={key("a", 0): mr}).run(resolved=False)
    assert set(desired(rsp)) == {key("a", 0), endpoints.key(key("a", 0))}


def test_a_drained_replica_leaves_the_routes_before_its_successor_serves():
    md = deployment("llama", replicas=2)
    observed = {key("a", 0): serving(own_replica(md, "a", 0, {"vllm": "h100"},
                                                 created=stamp(1))),
                key("b", 1): serving(own_replica(md, "b", 1, {"vllm": "h100"},
                                                 created=stamp(2)))}
    clusters = [cluster("a", pool("h100", 4, H100), taints=[taint("evict", "NoExecute")]),
                cluster("b", pool("h100", 4, H100)),
                cluster("c", pool("h100", 4, H100))]
    rsp = World(md, clusters, observed=observed).run()
    assert placements(rsp) == {0: ("c", {"vllm": "h100"}), 1: ("b", {"vllm": "h100"})}
    # a's replica is gone and so is its endpoint; c's is not serving yet.
    assert list(endpoints_of(rsp)) == [endpoints.key(key("b", 1))]


def test_endpoints_are_emitted_in_the_same_order_every_time():
    md = deployment("llama", replicas=3)
    observed = {key(c, i): serving(own_replica(md, c, i, {"vllm": "h100"}, created=stamp(i)))
                for i, c in enumerate("cab")}
    clusters = [cluster(c, pool("h100", 4, H100)) for c in "abc"]
    one = World(md, clusters, observed=observed).run().SerializeToString(deterministic=True)
    two = World(md, clusters, observed=dict(reversed(observed.items()))).run() \
        .SerializeToString(deterministic=True)
    assert one == two
