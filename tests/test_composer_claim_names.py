"""A ResourceClaimTemplate's spec is immutable (resource.k8s.io/v1): a member whose
device requests change gets a new template, under a new key and name, and its pods
the new name; one that matches what runs keeps its name (composer/claims.py)."""

from __future__ import annotations

import copy

import pytest
from composer_support import LOCAL, REMOTE, compose, device, inner, pod_templates, replica, standalone


def rct_keys(out) -> dict[str, dict]:
    return {k: inner(v) for k, v in out.desired.items()
            if inner(v)["kind"] == "ResourceClaimTemplate"}


def referenced(out) -> list[str]:
    (workload,) = [inner(v) for v in out.desired.values()
                   if inner(v)["kind"] in ("Deployment", "LeaderWorkerSet")]
    return [c["resourceClaimTemplateName"] for pod in pod_templates(workload)
            for c in pod["spec"].get("resourceClaims") or []]


def on(where: str, count: int = 1) -> dict:
    return replica(standalone(pool="l4" if where == LOCAL else "l4-4x",
                              devices=[device(count=count)]), cluster=where)


@pytest.mark.parametrize("where", [LOCAL, REMOTE])
def test_changed_requests_get_a_new_template_and_the_pods_follow(where):
    before = compose(on(where))
    ((old_key, old),) = rct_keys(before).items()
    after = compose(on(where, count=2), observed=before.desired)
    ((key, new),) = rct_keys(after).items()
    # A new key: Crossplane deletes the old template once nothing desires it.
    assert key != old_key and old_key not in after.desired
    assert new["metadata"]["name"] != old["metadata"]["name"]
    assert new["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2
    assert referenced(after) == [new["metadata"]["name"]]
    # Everything else keeps its key.
    assert set(after.desired) - {key} == set(before.desired) - {old_key}


@pytest.mark.parametrize("where", [LOCAL, REMOTE])
def test_a_template_that_matches_what_runs_keeps_its_name(where):
    before = compose(on(where))
    assert compose(on(where), observed=before.desired).desired == before.desired
    changed = compose(on(where, count=2), observed=before.desired)
    # Once the new one is what runs (the old one gone), it stays: no flapping.
    assert compose(on(where, count=2), observed=changed.desired).desired == changed.desired
    # And while the old one still exists beside it, the new one is still chosen.
    both = {**before.desired, **changed.desired}
    assert rct_keys(compose(on(where, count=2), observed=both)).keys() == \
        rct_keys(changed).keys()


def test_what_the_api_server_defaults_is_no_change():
    before = compose(on(LOCAL))
    observed = copy.deepcopy(before.desired)
    ((key, rct),) = rct_keys(before).items()
    exactly = observed[key]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    exactly["tolerations"] = []  # fields the composer does not write
    observed[key]["metadata"]["uid"] = "3f1c"
    after = compose(on(LOCAL), observed=observed)
    assert rct_keys(after).keys() == {key}
    assert referenced(after) == [rct["metadata"]["name"]]


def test_a_new_replica_gets_the_plain_name():
    out = compose(on(LOCAL, count=2))
    ((key, rct),) = rct_keys(out).items()
    assert key == "vllm-standalone-claims"
    assert compose(on(LOCAL)).desired[key]["metadata"]["name"] == rct["metadata"]["name"]
