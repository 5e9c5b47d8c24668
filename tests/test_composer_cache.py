"""The composer remembers what it composed for a replica and its cluster
(function/composer/memo.py): a remembered answer must be the answer it
would compose afresh, and anything composing reads must make it compose again."""

from __future__ import annotations

import copy

import pytest
from builders import EXAMPLES, load_one, request
from composer_support import FLEET, compose, owner, replica, standalone
from test_composer_pd import pd
from test_composer_status import all_serving, observe
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.composer import memo
from function.contract.api import REQUIRE_CLUSTER, REQUIRE_OWNER
from function.runtime import fn

REPLICAS = {p.stem: load_one(p) for p in sorted((EXAMPLES / "replicas").glob("*.yaml"))}


def fresh(req: fnv1.RunFunctionRequest) -> bytes:
    memo.CLUSTERS.clear()
    memo.COMPOSED.clear()
    return fn.run_function(req).SerializeToString(deterministic=True)


def remembered(req: fnv1.RunFunctionRequest) -> bytes:
    fn.run_function(req)
    assert len(memo.COMPOSED) >= 1
    return fn.run_function(req).SerializeToString(deterministic=True)


def replica_request(mr, ic=None, observed=None) -> fnv1.RunFunctionRequest:
    ic = ic or FLEET[mr["spec"]["clusterName"]]
    return request(mr, required={REQUIRE_CLUSTER: [ic], REQUIRE_OWNER: [owner(mr)]},
                   observed=observed)


@pytest.mark.parametrize("name", sorted(REPLICAS))
def test_a_remembered_composition_is_the_one_composed_afresh(name):
    req = replica_request(REPLICAS[name])
    assert remembered(req) == fresh(req)


def test_observed_objects_still_decide_readiness_on_a_remembered_composition():
    mr = replica(standalone())
    first = compose(mr)
    # Created, nothing ready yet: the observed templates (what the cache key holds of
    # the observed objects) are the ones serving later.
    created = observe(first, {k: {} for k in first.desired})
    memo.COMPOSED.clear()
    waiting = compose(mr, observed=created)
    served = compose(mr, observed=all_serving(first))
    assert len(memo.COMPOSED) == 1  # the second call was answered from the cache
    assert (waiting.phase, served.phase) == ("Loading", "Serving")
    assert served.desired == waiting.desired == first.desired
    assert set(served.ready.values()) == {fnv1.READY_TRUE}


def test_a_changed_spec_label_or_cluster_is_composed_again():
    mr = REPLICAS["llama-3-1-8b-0"]
    base = compose(mr).desired
    relabelled = copy.deepcopy(mr)
    # Another deployment's replica (its controller and labels say so together).
    relabelled["metadata"]["labels"]["modelplane.ai/deployment"] = "another"
    relabelled["metadata"]["ownerReferences"][0]["name"] = "another"
    assert compose(relabelled).desired != base
    rescaled = copy.deepcopy(mr)
    rescaled["spec"]["engines"][0]["copies"] = 3
    assert compose(rescaled).desired != base
    ic = copy.deepcopy(FLEET[mr["spec"]["clusterName"]])
    ic["spec"]["gateway"]["name"] = "another-gateway"
    assert compose(mr, ic).desired != base
    assert compose(mr).desired == base


def test_a_changed_setting_is_composed_again(monkeypatch):
    mr = pd()
    before = compose(mr)
    assert not before.fatal
    monkeypatch.setenv("MODELPLANE_EPP_IMAGE", "registry.example.com/epp:v9")
    after = compose(mr)
    assert after.desired != before.desired
    assert "registry.example.com/epp:v9" in str(after.desired)


def test_an_unusable_cluster_is_remembered_as_unusable():
    mr = REPLICAS["llama-3-1-8b-0"]
    ic = copy.deepcopy(FLEET[mr["spec"]["clusterName"]])
    del ic["spec"]["gateway"]
    for _ in range(2):
        out = compose(mr, ic)
        assert out.condition("ClusterResolved")[1] == "NoGateway"


def test_a_cluster_whose_status_alone_changed_is_answered_from_the_cache():
    # The cluster function rewrites status.nodePools on every placement there;
    # composing does not read it.
    mr = REPLICAS["llama-3-1-8b-0"]
    ic = copy.deepcopy(FLEET[mr["spec"]["clusterName"]])
    first = compose(mr, ic)
    ic["status"] = {"nodePools": [{"name": "l4-4x", "nodes": 4, "usedNodes": 3, "freeNodes": 1}]}
    second = compose(mr, ic)
    assert len(memo.COMPOSED) == 1
    assert second.desired == first.desired
