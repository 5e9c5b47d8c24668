"""A replica that mounts a ModelCache: its engines wait for the weights on their
cluster, then every pod mounts them read-only; running engines are left alone."""

from __future__ import annotations

from builders import request
from composer_support import (
    FLEET,
    REMOTE,
    engine_container,
    gang,
    inner,
    owner,
    pod_templates,
    replica,
    standalone,
)
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.contract.api import REQUIRE_CLUSTER, REQUIRE_MODEL_CACHE, REQUIRE_OWNER
from function.contract.cacheview import claim_name
from function.kit import structs
from function.runtime.fn import run_function

CLAIM = claim_name("ml-team", "qwen")

def cached(mr: dict, mount_path: str | None = None) -> dict:
    mr["spec"]["modelCacheRef"] = {"name": "qwen", **({"mountPath": mount_path} if mount_path
                                                       else {})}
    return mr

def model_cache(**phases: str) -> dict:
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelCache",
            "metadata": {"name": "qwen", "namespace": "ml-team"},
            "spec": {"source": "HuggingFace", "huggingFace": {"repo": "Qwen/Qwen3-8B",
                                                             "sizeGiB": 40}},
            "status": {"clusters": [{"name": c.replace("_", "-"), "phase": p,
                                     "reason": "Downloading" if p == "Hydrating" else ""}
                                    for c, p in phases.items()]}}

def run(mr: dict, *caches: dict, observed=None, resolved: bool = True):
    required = {REQUIRE_CLUSTER: [FLEET[mr["spec"]["clusterName"]]], REQUIRE_OWNER: [owner(mr)]}
    if resolved:
        required[REQUIRE_MODEL_CACHE] = list(caches)
    rsp = run_function(request(mr, required=required, observed=observed))
    out = {k: structs.to_dict(v.resource) for k, v in rsp.desired.resources.items()}
    return rsp, out

def cond(rsp, typ: str) -> fnv1.Condition:
    return next(c for c in rsp.conditions if c.type == typ)

def status(rsp) -> dict:
    return structs.to_dict(rsp.desired.composite.resource).get("status") or {}

def workloads(out: dict) -> list[dict]:
    return [inner(o) for o in out.values()
            if inner(o)["kind"] in ("Deployment", "LeaderWorkerSet")]

def test_the_replica_requires_its_cache_by_name_in_its_namespace():
    rsp, _ = run(cached(replica()), model_cache(us_east_1="Ready"))
    sel = rsp.requirements.resources[REQUIRE_MODEL_CACHE]
    assert (sel.kind, sel.match_name, sel.namespace) == ("ModelCache", "qwen", "ml-team")

def test_engines_wait_while_the_cache_hydrates_on_their_cluster():
    rsp, out = run(cached(replica()), model_cache(us_east_1="Hydrating"))
    assert out == {}
    assert status(rsp)["phase"] == "Loading"
    c = cond(rsp, "CacheReady")
    assert (c.status, c.reason) == (fnv1.STATUS_CONDITION_FALSE, "CacheHydrating")
    assert "ModelCache qwen is Hydrating on us-east-1 (Downloading" in c.message

def test_a_cache_not_staged_there_yet_or_missing_says_so():
    rsp, _ = run(cached(replica()), model_cache(eu_west_1="Ready"))
    assert cond(rsp, "CacheReady").reason == "CacheHydrating"
    rsp, out = run(cached(replica()))
    assert out == {} and cond(rsp, "CacheReady").reason == "CacheMissing"

def test_a_ready_cache_is_mounted_read_only_in_every_pod_with_its_path_in_the_env():
    mr = cached(replica(standalone(), gang(name="big", nodes=2)))
    rsp, out = run(mr, model_cache(us_east_1="Ready"))
    pods = [p for w in workloads(out) for p in pod_templates(w)]
    assert len(pods) == 3  # the standalone pod, the gang's leader and its workers
    for pod in pods:
        assert {"name": "model-cache", "persistentVolumeClaim": {
            "claimName": CLAIM, "readOnly": True}} in pod["spec"]["volumes"]
        engine = engine_container(pod)
        assert {"name": "model-cache", "mountPath": "/mnt/models", "readOnly": True} in \
            engine["volumeMounts"]
        assert {"name": "MODELPLANE_MODEL_PATH", "value": "/mnt/models"} in engine["env"]
    assert cond(rsp, "CacheReady").status == fnv1.STATUS_CONDITION_TRUE

def test_mount_path_overrides_and_engine_args_are_never_touched():
    mr = cached(replica(), mount_path="/models/qwen")
    before = mr["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]
    _, out = run(mr, model_cache(us_east_1="Ready"))
    engine = engine_container(pod_templates(workloads(out)[0])[0])
    assert engine["volumeMounts"][-1]["mountPath"] == "/models/qwen"
    assert engine.get("args") == before.get("args")
    assert engine.get("command") == before.get("command")

def test_a_remote_replica_mounts_the_claim_of_the_same_name_on_its_cluster():
    mr = cached(replica(name="llama-eu-0", cluster=REMOTE))
    mr["spec"]["engines"][0]["members"][0]["nodePoolName"] = "l4-4x"
    _, out = run(mr, model_cache(eu_west_1="Ready"))
    [w] = workloads(out)
    assert pod_templates(w)[0]["spec"]["volumes"][-1]["persistentVolumeClaim"]["claimName"] \
        == CLAIM

def test_running_engines_are_left_alone_when_the_cache_re_hydrates():
    mr = cached(replica())
    _, composed = run(mr, model_cache(us_east_1="Ready"))
    rsp, out = run(mr, model_cache(us_east_1="Hydrating"), observed=composed)
    assert set(out) == set(composed)
    c = cond(rsp, "CacheReady")
    assert c.status == fnv1.STATUS_CONDITION_FALSE
    assert c.message.endswith("the running engines are left alone")

def test_until_the_cache_is_resolved_nothing_new_starts():
    rsp, out = run(cached(replica()), resolved=False)
    assert out == {} and cond(rsp, "CacheReady").reason == "Resolving"

def test_a_replica_without_a_cache_asks_for_none():
    rsp, out = run(replica())
    assert REQUIRE_MODEL_CACHE not in rsp.requirements.resources
    assert workloads(out) and not any(c.type == "CacheReady" for c in rsp.conditions)
