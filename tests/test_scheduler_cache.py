"""A deployment that mounts a ModelCache: placed only where the cache can live,
warm clusters first, and never moved because the cache's footprint narrowed."""

from __future__ import annotations

import pytest

from crossplane.function import resource
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
    status,
)

from function.contract.api import LABEL_MODEL_CACHE, REQUIRE_MODEL_CACHE
from function.runtime import fn
from builders import desired

H100 = device("gpu", "H100", count=1)  # one GPU a node: a one-GPU replica takes a node


def stored(name: str, *, labels=None, storage: bool = True, nodes: int = 4) -> dict:
    ic = cluster(name, pool("h100", nodes, H100), labels=labels)
    if storage:
        ic["spec"]["storage"] = {"storageClassName": "rwx"}
    return ic


def cached(md: dict, cache: str = "qwen") -> dict:
    md["spec"]["template"]["spec"]["modelCacheRef"] = {"name": cache}
    return md


def model_cache(name: str = "qwen", *, selector=None, ready=(), hydrating=()) -> dict:
    mc = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelCache",
          "metadata": {"name": name, "namespace": "ml-team"},
          "spec": {"source": "HuggingFace", "huggingFace": {"repo": "Qwen/Qwen3-8B",
                                                           "sizeGiB": 40}}}
    if selector:
        mc["spec"]["clusterSelector"] = {"matchLabels": selector}
    entries = [{"name": c, "phase": "Ready"} for c in ready] + \
        [{"name": c, "phase": "Hydrating"} for c in hydrating]
    if entries:
        mc["status"] = {"clusters": entries}
    return mc


def run(world: World, *caches: dict, resolved: bool = True):
    req = world.request()
    if resolved:
        items = req.required_resources[REQUIRE_MODEL_CACHE].items
        for mc in caches:
            items.add().resource.CopyFrom(resource.dict_to_struct(mc))
    return fn.run_function(req)


def test_the_scheduler_requires_the_cache_by_name_in_the_deployments_namespace():
    rsp = run(World(cached(deployment("llama")), [stored("a")]), model_cache())
    sel = rsp.requirements.resources[REQUIRE_MODEL_CACHE]
    assert (sel.kind, sel.match_name, sel.namespace) == ("ModelCache", "qwen", "ml-team")


def test_until_the_cache_is_resolved_nothing_is_decided():
    md = cached(deployment("llama"))
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))}
    rsp = run(World(md, [stored("a")], observed=observed), resolved=False)
    assert list(desired(rsp)) == [key("a", 0)]
    assert not status(rsp)


def test_new_replicas_go_only_inside_the_footprint_and_where_storage_exists():
    clusters = [stored("a", labels={"tier": "prod", "region": "eu"}, nodes=1),
                stored("b", labels={"tier": "prod", "region": "us"}),
                stored("c", labels={"tier": "prod", "region": "eu"}, storage=False)]
    rsp = run(World(cached(deployment("llama", replicas=2)), clusters),
              model_cache(selector={"region": "eu"}))
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}
    [entry] = status(rsp)["unscheduled"]
    assert {c["name"]: c["reason"] for c in entry["clusters"]} == {
        "a": 'has no node of pool "h100" with 1 gpu free (a pod needs them on one node; '
             "the most free on one is 0 gpu)",
        "b": "is outside ModelCache qwen's clusterSelector",
        "c": "has no storage for ModelCache qwen (spec.storage)",
    }


def test_a_missing_cache_places_nothing_new_and_says_so_per_cluster():
    rsp = run(World(cached(deployment("llama")), [stored("a"), stored("b")]))
    [entry] = status(rsp)["unscheduled"]
    assert "2 have no ModelCache qwen (it does not exist in namespace ml-team)" in entry["reason"]
    assert condition(rsp, "ReplicasScheduled")[:2] == ("False", "Unschedulable")


def test_a_warm_cluster_wins_among_equally_loaded_ones():
    clusters = [stored("a"), stored("b")]
    rsp = run(World(cached(deployment("llama")), clusters), model_cache(ready=["b"]))
    assert placements(rsp) == {0: ("b", {"vllm": "h100"})}


@pytest.mark.parametrize("strategy", ["Spread", "Pack"])
def test_a_warm_cluster_wins_over_a_cheaper_one(strategy):
    """Where the weights are staged the replica serves without downloading them,
    and no second copy is staged: warmth ranks before cost."""
    clusters = [stored("a"), stored("b")]
    clusters[0]["spec"]["nodePools"][0]["costPerNodeHour"] = "1"
    clusters[1]["spec"]["nodePools"][0]["costPerNodeHour"] = "50"
    md = cached(deployment("llama"))
    md["spec"]["template"]["spec"]["placement"] = {"strategy": strategy}
    rsp = run(World(md, clusters), model_cache(ready=["b"]))
    assert placements(rsp) == {0: ("b", {"vllm": "h100"})}
    # Without a warm cluster, the cheaper one.
    rsp = run(World(md, clusters), model_cache())
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}


def test_spread_still_comes_before_warmth():
    clusters = [stored("a"), stored("b")]
    rsp = run(World(cached(deployment("llama", replicas=2)), clusters),
              model_cache(ready=["b"], hydrating=["a"]))
    assert placements(rsp) == {0: ("b", {"vllm": "h100"}), 1: ("a", {"vllm": "h100"})}


def test_a_placed_replica_stays_when_the_footprint_narrows_away_from_its_cluster():
    md = cached(deployment("llama"))
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))}
    clusters = [stored("a", labels={"tier": "prod", "region": "us"}),
                stored("b", labels={"tier": "prod", "region": "eu"})]
    rsp = run(World(md, clusters, observed=observed), model_cache(selector={"region": "eu"}))
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}


def test_the_replica_carries_the_cache_reference_and_the_label_the_cache_finds_it_by():
    md = cached(deployment("llama"))
    md["spec"]["template"]["spec"]["modelCacheRef"]["mountPath"] = "/models/qwen"
    rsp = run(World(md, [stored("a")]), model_cache())
    mr = desired(rsp)[key("a", 0)]
    assert mr["spec"]["modelCacheRef"] == {"name": "qwen", "mountPath": "/models/qwen"}
    assert mr["metadata"]["labels"][LABEL_MODEL_CACHE] == "qwen"


def test_a_cache_of_the_wrong_shape_reads_leniently_never_raising():
    bad = model_cache(ready=["b"])
    bad["spec"]["hydration"] = ["OnDemand"]
    bad["status"]["clusters"].append({"name": "a", "phase": ["Ready"]})
    rsp = run(World(cached(deployment("llama")), [stored("a"), stored("b")]), bad)
    assert placements(rsp) == {0: ("b", {"vllm": "h100"})}
