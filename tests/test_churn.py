"""benchmarks/churn.py: each churned request changes about the asked fraction of
the required items of the one before, and nothing else; the same seed, the same bytes."""

from __future__ import annotations

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from benchmarks import bench, churn, fleetgen
from function.contract.api import REQUIRE_CLUSTERS, REQUIRE_REPLICAS


def items(data: bytes) -> list[bytes]:
    req = fnv1.RunFunctionRequest.FromString(data)
    return [i.resource.SerializeToString(deterministic=True)
            for name in (REQUIRE_CLUSTERS, REQUIRE_REPLICAS)
            for i in req.required_resources[name].items]


def test_each_request_changes_at_most_the_fraction_of_items_and_the_rest_is_identical():
    md, clusters, live = fleetgen.generate("M")  # 100 clusters + 500 replicas
    base = bench.build_request(md, clusters, live)
    variants = churn.requests(base, clusters, live, count=3, fraction=0.01)
    before = items(base.SerializeToString())
    for data in variants:
        after = items(data)
        changed = sum(a != b for a, b in zip(before, after))
        assert len(after) == len(before) and 1 <= changed <= 6  # 1% of 600, repeats allowed
        before = after
    assert fnv1.RunFunctionRequest.FromString(variants[0]).observed == base.observed


def test_the_same_seed_gives_the_same_requests():
    md, clusters, live = fleetgen.generate("S")
    base = bench.build_request(md, clusters, live)
    assert churn.requests(base, clusters, live, 2, seed=5) == churn.requests(base, clusters, live, 2, seed=5)
    assert churn.requests(base, clusters, live, 2, seed=5) != churn.requests(base, clusters, live, 2, seed=6)
