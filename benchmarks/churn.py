"""The fleet as it changes between reconciles: a fraction of the required
resources new each time, as production sends them.

Every status change of another deployment's ModelReplica or of an
InferenceCluster, and every resized pool, reaches the scheduler as new bytes
for that item; the rest of the request is byte-identical. `requests` builds a
sequence of serialized scheduler requests, each changing `fraction` of the
required items of the one before (cumulative, as a real fleet drifts), so a
run over them measures the parse caches' miss path and the plan on a fleet
that never stands still. Seeded: the same arguments give the same bytes.
"""

from __future__ import annotations

import copy
import random

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.contract.api import REQUIRE_CLUSTERS, REQUIRE_REPLICAS

# What changes, in proportion: replica status updates dominate; clusters
# report conditions; a few pools are resized by the platform team.
KINDS = (("replica-status", 0.6), ("cluster-status", 0.3), ("pool-resized", 0.1))


def requests(base: fnv1.RunFunctionRequest, clusters: list[dict], live: list[dict],
             count: int, fraction: float = 0.01, seed: int = 1) -> list[bytes]:
    """`count` serialized requests, each with `fraction` of the items of
    `base`'s required clusters and replicas changed from the one before."""
    rng = random.Random(seed)
    req = fnv1.RunFunctionRequest()
    req.CopyFrom(base)
    clusters, live = copy.deepcopy(clusters), copy.deepcopy(live)
    items = {REQUIRE_CLUSTERS: req.required_resources[REQUIRE_CLUSTERS].items,
             REQUIRE_REPLICAS: req.required_resources[REQUIRE_REPLICAS].items}
    changes = max(1, round(fraction * (len(clusters) + len(live))))
    out = []
    for step in range(count):
        for n in range(changes):
            kind = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
            if kind == "replica-status":
                i = rng.randrange(len(live))
                live[i]["status"] = {"phase": rng.choice(["Serving", "Creating"]),
                                     "endpoint": f"https://r{i}.example.com/{step}-{n}"}
                items[REQUIRE_REPLICAS][i].resource.CopyFrom(resource.dict_to_struct(live[i]))
                continue
            i = rng.randrange(len(clusters))
            c = clusters[i]
            if kind == "cluster-status":
                c["status"] = {"conditions": [{
                    "type": "Ready", "status": "True", "reason": "Available",
                    "lastTransitionTime": f"2026-11-22T{step % 24:02d}:{n % 60:02d}:00Z"}]}
            else:
                pool = rng.choice(c["spec"]["nodePools"])
                pool["nodes"] = max(1, pool["nodes"] + rng.choice([-1, 1]))
            items[REQUIRE_CLUSTERS][i].resource.CopyFrom(resource.dict_to_struct(c))
        out.append(req.SerializeToString())
    return out
