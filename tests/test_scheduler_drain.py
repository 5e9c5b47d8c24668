"""A replica on its way out drains (function/scheduler/drain.py): it is kept, without
its ModelEndpoint, while a ModelService of its namespace still routes to it, so the
requests that route sends meanwhile are answered; it goes once none does."""

from __future__ import annotations

from builders import desired
from fleetgen import status as fleet_status
from fleetgen import (
    World,
    cluster,
    condition,
    deployment,
    device,
    key,
    own_replica,
    placements,
    pool,
    stamp,
)

from function.kit import requeue
from function.scheduler import drain, endpoints

H100 = device("gpu", "H100", count=8)
CLUSTERS = [cluster("a", pool("h100", 4, H100)), cluster("b", pool("h100", 4, H100))]


def serving(mr: dict) -> dict:
    meta = mr["metadata"]
    mr["status"] = {"phase": "Serving", "endpoint": f"https://gw.{mr['spec']['clusterName']}"
                                                    f".example.com/{meta['namespace']}/{meta['name']}"}
    return mr


def service(name: str, *routed: str, rule: str | None = None, deleting: bool = False) -> dict:
    """A ModelService whose status says its route sends to `routed` (in its own
    entries, or in one rule's)."""
    entries = [{"role": "Primary", "index": 0, "weight": 1, "endpoints": list(routed)}]
    status: dict = {"entries": [], "active": "Primary"}
    if rule is None:
        status["entries"] = entries
    else:
        status["rules"] = [{"name": rule, "active": "Primary", "entries": entries}]
    meta: dict = {"name": name, "namespace": "default"}
    if deleting:
        meta["deletionTimestamp"] = stamp(99)
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService",
            "metadata": meta, "spec": {}, "status": status}


def scaled_down_to_one():
    """llama scaled 2 -> 1: its replica 1 on b leaves the plan; both serve."""
    md = deployment("llama", replicas=1)
    observed = {key("a", 0): serving(own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))),
                key("b", 1): serving(own_replica(md, "b", 1, {"vllm": "h100"}, created=stamp(2)))}
    return md, observed, observed[key("b", 1)]["metadata"]["name"]


def test_a_leaving_replica_a_service_routes_to_is_kept_without_its_endpoint():
    md, observed, leaving = scaled_down_to_one()
    world = World(md, CLUSTERS, observed=observed,
                  services=[service("chat", observed[key("a", 0)]["metadata"]["name"], leaving)])
    rsp = world.run()
    assert {i: c for i, (c, _) in placements(rsp).items()} == {0: "a", 1: "b"}
    got = desired(rsp)
    # Kept exactly as it is, and no longer offered to any route.
    assert got[key("b", 1)]["spec"] == observed[key("b", 1)]["spec"]
    assert endpoints.key(key("b", 1)) not in got and endpoints.key(key("a", 0)) in got
    # Not scheduled: the deployment counts only what it places.
    status, reason, message = condition(rsp, "ReplicasScheduled")
    assert (status, reason) == ("True", "AllScheduled")
    assert f"replica {leaving} drains: ModelService chat still routes to it" in message
    assert rsp.meta.ttl.ToTimedelta() == requeue.WAITING  # services are not watched
    # Its status names it, so that the replica's own composition still owns it
    # (composer/trust.py) while it drains.
    assert fleet_status(rsp)["draining"] == [leaving]
    assert leaving not in [p["name"] for p in fleet_status(rsp)["placements"]]


def test_it_goes_once_no_service_routes_to_it():
    md, observed, leaving = scaled_down_to_one()
    kept = observed[key("a", 0)]["metadata"]["name"]
    for services in ([], [service("chat", kept)], [service("other", "elsewhere")]):
        rsp = World(md, CLUSTERS, observed=observed, services=services).run()
        assert set(desired(rsp)) == {key("a", 0), endpoints.key(key("a", 0))}, services
        assert "drains" not in condition(rsp, "ReplicasScheduled")[2]
        assert "draining" not in fleet_status(rsp)


def test_a_rule_that_routes_to_it_holds_it_too():
    md, observed, leaving = scaled_down_to_one()
    rsp = World(md, CLUSTERS, observed=observed,
                services=[service("chat", leaving, rule="canary-testers")]).run()
    assert key("b", 1) in desired(rsp)


def test_a_replica_that_does_not_serve_goes_at_once_and_a_service_being_deleted_holds_nothing():
    md, observed, leaving = scaled_down_to_one()
    observed[key("b", 1)]["status"] = {"phase": "Failed"}
    rsp = World(md, CLUSTERS, observed=observed, services=[service("chat", leaving)]).run()
    assert key("b", 1) not in desired(rsp)

    md, observed, leaving = scaled_down_to_one()
    rsp = World(md, CLUSTERS, observed=observed,
                services=[service("chat", leaving, deleting=True)]).run()
    assert key("b", 1) not in desired(rsp)


def test_a_status_of_any_shape_routes_to_what_it_names_and_nothing_else():
    assert drain.routed({}) == frozenset()
    assert drain.routed({"status": "broken"}) == frozenset()
    assert drain.routed({"status": {"entries": "x", "rules": [None, {"entries": [
        {"endpoints": ["r1", 7, None]}, "junk"]}]}}) == frozenset({"r1"})
    assert drain.routed({"metadata": {"deletionTimestamp": "t"},
                         "status": {"entries": [{"endpoints": ["r1"]}]}}) == frozenset()
