"""Extended resources in engine templates (#33 finding 4): devices outside every ledger.

`resources.limits: {nvidia.com/gpu: 8}` in a template claims devices through the
device plugin, which neither the node ledger nor an InferenceQuota sees: 40
replicas x 8 copies of it once landed on a 2-node pool from a namespace whose
quota was zero. Templates may name cpu, memory, ephemeral-storage and
hugepages-<size> only; devices go through DRA device requests.
"""

from __future__ import annotations

import copy

import pytest
from builders import EXAMPLES, load_one, request
from composer_support import compose, replica, standalone, template

from function.contract.api import REQUIRE_CLUSTERS, REQUIRE_REPLICAS
from function.runtime import fn

FLEET = [load_one(EXAMPLES / "fleet" / "us-east-1.yaml")]


def deployment_with(resources: dict) -> dict:
    md = load_one(EXAMPLES / "deployments" / "single-gpu.yaml")
    md = copy.deepcopy(md)
    md["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"][
        "containers"][0]["resources"] = resources
    return md


def run(md: dict):
    return fn.run_function(request(md, required={REQUIRE_CLUSTERS: FLEET,
                                                 REQUIRE_REPLICAS: []}))


@pytest.mark.parametrize("part", ["limits", "requests"])
def test_a_deployment_naming_a_gpu_as_a_resource_is_refused_and_places_nothing(part):
    rsp = run(deployment_with({part: {"cpu": "4", "nvidia.com/gpu": 8}}))
    fatal = [r.message for r in rsp.results if r.severity == 1]
    assert fatal and f"{part}.nvidia.com/gpu" in fatal[0], fatal
    assert "DRA device requests" in fatal[0]
    # A Fatal result: Crossplane applies nothing, so nothing placed before is dropped.
    assert not rsp.desired.resources


def test_compute_resources_and_hugepages_are_allowed():
    rsp = run(deployment_with({"requests": {"cpu": "4", "memory": "32Gi",
                                            "ephemeral-storage": "50Gi"},
                               "limits": {"memory": "64Gi", "hugepages-2Mi": "1Gi"}}))
    assert not [r.message for r in rsp.results if r.severity == 1]
    assert rsp.desired.resources


def test_a_replica_naming_an_extended_resource_keeps_what_runs_and_says_which():
    running = compose(replica(standalone()))
    assert not running.fatal
    bad = replica(standalone(template=template(resources={"limits": {"rdma/hca": 1}})))
    out = compose(bad, observed=running.desired)
    assert out.fatal and "limits.rdma/hca" in out.fatal[0], out.fatal
    assert "ModelReplica ml-team/" in out.fatal[0]
