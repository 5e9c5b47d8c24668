"""A seeded corpus of placement problems with fragmentation traps.

Each case is a small fleet (InferenceClusters), the ModelReplicas other
deployments already hold on it, and ModelDeployments in arrival order, as an
ML team would apply them. `make placement-quality` replays the deployments
through the real scheduler and compares the replicas it placed with an exact
solver's optimum for the same set (benchmarks/quality.py).

The traps are the shapes where placing one replica at a time goes wrong:

- small-before-gang: many one-node replicas arrive before multi-node gangs;
  spread one per cluster, they leave no cluster a block the gang fits in.
- alternatives: one-node replicas with firstAvailable alternatives (L4, then
  H100) outnumber the L4 nodes, so the overflow lands on the H100 pools a
  later H100 gang needs.
- multi-engine: replicas of two engines (an H100 prefill gang and L4 decode
  copies) after small L4 and H100 deployments.
- nearly-full: a fleet already 70-90% held by other deployments, scattered,
  then a random mix of deployments asking for more than is left.
- mixed: random fleets and random mixes of every engine kind, moderately full.

Capacity is counted per node and device (issue #34; benchmarks/packing.py), and
these traps are where that matters:

- mixed-gpus: 1-, 2-, 4- and 8-GPU engines (and the odd gang of 8-GPU pods)
  on 8-GPU nodes, asking for 90-100% of the fleet's GPUs, all of which fit
  (the demand is cut from a packing of every node): a packer that leaves
  nodes with remainders the later replicas cannot use strands devices and
  places fewer.
- fragmentation: many 1-GPU replicas first (more than the nodes), then 2-,
  4- and 8-GPU ones: scattered one or two per node, the small ones leave no
  node with 4 or 8 GPUs free.
- whole-node-waste: 1- and 2-GPU engines that take any of the fleet's GPUs
  (or firstAvailable between two kinds) on 8-GPU H100/A100 and 4-GPU L4
  nodes, asking for 60-100% of its GPUs: charged a whole node each, they
  place one replica per node and strand most GPUs.
- over-demand: mixed-gpus as it was until 2026-11-26, asking for 100-140%
  of the fleet's GPUs: the count optimum leaves early large replicas out to
  place more later small ones, which no scheduler serving deployments in
  arrival order can. It measures the arrival order, not the packing: scored
  apart, against the in-order optimum (`IN_ORDER`).

Other deployments' replicas (`held`) hold whole nodes' GPUs, so a "nearly
full" fleet is as full counted by devices as by nodes. Everything comes from
`random.Random(f"{seed}-{stream}-{i}")`, the stream named by the trap
(`STREAMS`): the same seed gives the same corpus, and a trap added later has
streams of its own, leaving the earlier ones' cases as they were.

Pools have a costPerNodeHour: a list price per kind, each cluster's within
40% of it either way. In the `mixed` trap about one pool in five has none
(unknown, which the scheduler ranks after any price); elsewhere every pool
is priced, so a strategy's cost compares with the least as one number.
Prices come from a second generator, `random.Random(f"{seed}-{stream}-{i}-cost")`,
so adding them left every fleet and deployment of a seed as it was.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

from function.contract.api import API_VERSION, LABEL_CLUSTER, LABEL_DEPLOYMENT, LABEL_REPLICA_INDEX

GPU = "gpu.nvidia.com"
NAMESPACE = "ml-team"
PRODUCTS = {"h100": "NVIDIA-H100-80GB", "a100": "NVIDIA-A100-80GB", "l4": "NVIDIA-L4"}
TRAPS = ("small-before-gang", "alternatives", "multi-engine", "nearly-full", "mixed",
         "mixed-gpus", "fragmentation", "whole-node-waste", "over-demand")
# Traps whose demand exceeds the fleet by design: scored against the in-order
# optimum (what a first-come-first-served scheduler can place), apart from the rest.
IN_ORDER = frozenset({"over-demand"})
# The RNG stream each trap draws from, where it is not the trap's name: the
# over-demand cases are the mixed-gpus cases before 2026-11-26, as they were.
STREAMS = {"mixed-gpus": "mixed-gpus-fits", "over-demand": "mixed-gpus"}
GPUS_PER_NODE = {"h100": 8, "a100": 8, "l4": 4}


@dataclass
class Case:
    name: str
    trap: str
    clusters: list[dict]
    held: list[dict]                   # other deployments' ModelReplicas, there before
    deployments: list[dict] = field(default_factory=list)  # in arrival order


# --- the fleet ---------------------------------------------------------------

def pool(kind: str, nodes: int) -> dict:
    """A pool of `kind` nodes: H100 and A100 nodes have 8 GPUs and 8 RDMA NICs, L4 nodes 4 GPUs."""
    gpus = GPUS_PER_NODE[kind]
    devices = [{"name": "gpu", "claim": "DRA", "driver": GPU, "deviceClassName": GPU,
                "count": gpus, "attributes": {"productName": {"string": PRODUCTS[kind]}}}]
    if kind != "l4":
        devices.append({"name": "nic", "claim": "DRA", "driver": "dra.net",
                        "deviceClassName": "dranet", "count": 8,
                        "attributes": {"rdma": {"bool": True}}})
    return {"name": kind, "nodes": nodes, "devices": devices}


def cluster(name: str, *pools: dict) -> dict:
    return {"apiVersion": API_VERSION, "kind": "InferenceCluster",
            "metadata": {"name": name, "labels": {"tier": "prod"}},
            "spec": {"gateway": {"name": "gw", "namespace": "gateway-system",
                                 "address": f"https://{name}.example.com"},
                     "nodePools": [p for p in pools if p["nodes"] > 0]}}


def held_replica(n: int, cluster_name: str, pool_name: str, nodes: int,
                 gpus_each: int | None = None) -> dict:
    """Another deployment's ModelReplica holding `nodes` nodes of a pool (one
    Standalone engine with `nodes` copies, each taking every GPU of a node of
    the pool's kind, named by the pool: it costs exactly that, counted by
    nodes or by devices); `gpus_each`: each copy takes that many GPUs instead."""
    dep = f"other-{n:03d}"
    count = GPUS_PER_NODE.get(pool_name, 1) if gpus_each is None else gpus_each
    return {"apiVersion": API_VERSION, "kind": "ModelReplica",
            "metadata": {"name": f"{dep}-{cluster_name}-0", "namespace": "other-team",
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {LABEL_DEPLOYMENT: dep, LABEL_CLUSTER: cluster_name,
                                    LABEL_REPLICA_INDEX: "0"}},
            "spec": {"clusterName": cluster_name, "engines": [{
                "name": "vllm", "copies": nodes, "members": [{
                    "role": "Standalone", "nodePoolName": pool_name,
                    "nodeSelector": {"devices": [{"name": "gpu", "count": count}]},
                    "deviceRequests": [{"name": "gpu", "claim": "DRA", "count": count,
                                        "deviceClassName": GPU}],
                    "template": {"spec": {"containers": [{"name": "engine",
                                                          "image": "vllm/vllm-openai:v0.11.0"}]}}}]}]}}


# Per node-hour list prices (eight H100s or A100s, four L4s), in cents.
LIST_CENTS = {"h100": 9832, "a100": 4096, "l4": 340}


def price(rng: random.Random, clusters: list[dict], unpriced: float = 0.0) -> None:
    """Give the fleet's pools a costPerNodeHour, leaving about `unpriced` of them
    without one (module docstring)."""
    for c in clusters:
        factor = rng.randint(60, 140)  # the cluster's region: percent of the list price
        for p in c["spec"]["nodePools"]:
            if rng.random() >= unpriced:
                cents = LIST_CENTS[p["name"]] * factor // 100 + rng.randint(0, 99)
                p["costPerNodeHour"] = f"{cents // 100}.{cents % 100:02d}"


# --- the deployments ---------------------------------------------------------

def product_in(*kinds: str) -> dict:
    names = ", ".join(f'"{PRODUCTS[k]}"' for k in kinds)
    return {"cel": f'device.attributes["{GPU}"].productName in [{names}]'}


RDMA = {"name": "rdma", "count": 8, "selectors": [{"cel": 'device.attributes["dra.net"].rdma == true'}]}


def gpus(count: int, *kinds: str) -> dict:
    return {"name": "gpu", "count": count, "selectors": [product_in(*kinds)]}


def alternatives(*options: tuple[str, int]) -> dict:
    """A request with firstAvailable alternatives, (kind, count) in priority order."""
    return {"name": "gpu", "firstAvailable": [
        {"name": kind, "count": count, "selectors": [product_in(kind)]} for kind, count in options]}


def _template(role: str) -> dict:
    return {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0",
                                     "args": ["serve", role.lower()]}]}}


def standalone(name: str, request: dict, copies: int = 1) -> dict:
    return {"name": name, "copies": copies, "members": [
        {"role": "Standalone", "nodeSelector": {"devices": [request]},
         "template": _template("Standalone")}]}


def gang(name: str, workers: int, *kinds: str) -> dict:
    """A Leader and `workers` Worker nodes, each pod on a node of 8 GPUs and 8 RDMA NICs."""
    devices = [gpus(8, *kinds), RDMA]
    return {"name": name, "copies": 1, "members": [
        {"role": "Leader", "nodeSelector": {"devices": devices}, "template": _template("Leader")},
        {"role": "Worker", "worker": {"nodes": workers}, "nodeSelector": {"devices": devices},
         "template": _template("Worker")}]}


def deployment(name: str, replicas: int, *engines: dict) -> dict:
    return {"apiVersion": API_VERSION, "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"replicas": replicas, "template": {"spec": {"engines": list(engines)}}}}


def _name(i: int, what: str) -> str:
    return f"d{i:02d}-{what}"


# --- the traps ---------------------------------------------------------------

def small_before_gang(rng: random.Random) -> tuple[list[dict], list[dict], list[dict]]:
    n = rng.randint(4, 10)
    size = rng.choice([4, 8])
    clusters = [cluster(f"c{i:02d}", pool("h100", size)) for i in range(n)]
    deps = []
    smalls = rng.randint(1, 3)
    for i in range(smalls):
        deps.append(deployment(_name(i, "small"), rng.randint(n // 2, n),
                               standalone("vllm", gpus(rng.choice([1, 2, 8]), "h100"))))
    # Larger than half a pool: two never share one, and one small replica on a
    # pool can be enough to keep it out.
    workers = rng.randint(size // 2, size - 1)
    deps.append(deployment(_name(smalls, "gang"), n, gang("vllm", workers, "h100")))
    return clusters, [], deps


def alternatives_trap(rng: random.Random) -> tuple[list[dict], list[dict], list[dict]]:
    n = rng.randint(3, 8)
    size = rng.choice([4, 8])
    clusters = [cluster(f"c{i:02d}", pool("l4", rng.randint(1, 3)), pool("h100", size))
                for i in range(n)]
    l4_nodes = sum(c["spec"]["nodePools"][0]["nodes"] for c in clusters)
    deps = [deployment(_name(0, "fungible"), l4_nodes + rng.randint(n // 2, n),
                       standalone("vllm", alternatives(("l4", 1), ("h100", 1)))),
            deployment(_name(1, "gang"), n, gang("vllm", rng.randint(size // 2, size - 1), "h100"))]
    return clusters, [], deps


def multi_engine(rng: random.Random) -> tuple[list[dict], list[dict], list[dict]]:
    n = rng.randint(3, 6)
    clusters = [cluster(f"c{i:02d}", pool("h100", rng.choice([4, 6])),
                        pool("l4", rng.choice([2, 4]))) for i in range(n)]
    deps = [deployment(_name(0, "l4"), rng.randint(n // 2, n), standalone("vllm", gpus(1, "l4"))),
            deployment(_name(1, "h100"), rng.randint(n // 2, n), standalone("vllm", gpus(8, "h100"))),
            deployment(_name(2, "pd"), n, gang("prefill", rng.randint(1, 2), "h100"),
                       standalone("decode", gpus(1, "l4"), copies=2))]
    return clusters, [], deps


def _random_engines(rng: random.Random, kinds: list[str]) -> list[dict]:
    shape = rng.choice(["small", "small", "fungible", "gang", "gang", "pd"])
    if shape == "small":
        return [standalone("vllm", gpus(rng.choice([1, 4]), rng.choice(kinds)),
                           copies=rng.choice([1, 1, 2]))]
    if shape == "fungible":
        a, b = rng.sample(kinds, 2) if len(kinds) > 1 else (kinds[0], kinds[0])
        return [standalone("vllm", alternatives((a, 1), (b, 1)))]
    big = [k for k in kinds if k != "l4"] or ["h100"]
    if shape == "gang":
        return [gang("vllm", rng.randint(1, 3), *rng.sample(big, rng.randint(1, len(big))))]
    return [gang("prefill", 1, rng.choice(big)), standalone("decode", gpus(1, rng.choice(kinds)))]


def _random_fleet(rng: random.Random, n: int) -> list[dict]:
    return [cluster(f"c{i:02d}", *[pool(k, rng.randint(2, 8))
                                   for k in sorted(rng.sample(list(PRODUCTS), rng.randint(1, 3)))])
            for i in range(n)]


def _hold(rng: random.Random, clusters: list[dict], fraction: float) -> list[dict]:
    """Other deployments' replicas scattered over the fleet, holding about
    `fraction` of every pool in chunks of one to three nodes."""
    held = []
    for c in clusters:
        for p in c["spec"]["nodePools"]:
            left = round(p["nodes"] * fraction)
            while left > 0:
                take = min(left, rng.randint(1, 3))
                held.append(held_replica(len(held), c["metadata"]["name"], p["name"], take))
                left -= take
    return held


def _random_deployments(rng: random.Random, clusters: list[dict], count: int,
                        budget: int) -> list[dict]:
    kinds = sorted({p["name"] for c in clusters for p in c["spec"]["nodePools"]})
    deps = []
    for i in range(count):
        engines = _random_engines(rng, kinds)
        deps.append(deployment(_name(i, "mix"), max(1, rng.randint(1, max(1, budget // count))),
                               *engines))
    return deps


def nearly_full(rng: random.Random) -> tuple[list[dict], list[dict], list[dict]]:
    clusters = _random_fleet(rng, rng.randint(8, 16))
    held = _hold(rng, clusters, rng.uniform(0.7, 0.9))
    free = sum(p["nodes"] for c in clusters for p in c["spec"]["nodePools"]) - sum(
        e["copies"] for r in held for e in r["spec"]["engines"])
    return clusters, held, _random_deployments(rng, clusters, rng.randint(3, 6), free)


def mixed(rng: random.Random) -> tuple[list[dict], list[dict], list[dict]]:
    clusters = _random_fleet(rng, rng.randint(4, 8))
    held = _hold(rng, clusters, rng.uniform(0.0, 0.5))
    total = sum(p["nodes"] for c in clusters for p in c["spec"]["nodePools"])
    return clusters, held, _random_deployments(rng, clusters, rng.randint(4, 8), total // 2)


def _kinds(clusters: list[dict]) -> list[str]:
    return sorted({p["name"] for c in clusters for p in c["spec"]["nodePools"]})


def _fleet_gpus(clusters: list[dict]) -> int:
    return sum(p["nodes"] * GPUS_PER_NODE[p["name"]] for c in clusters
               for p in c["spec"]["nodePools"])


def _gpu_fleet(rng: random.Random) -> list[dict]:
    """Two to five clusters of one to four 8-GPU nodes of A100, H100 or both."""
    return [cluster(f"c{i:02d}", *[pool(k, rng.randint(1, 4)) for k in
                                   sorted(rng.sample(["a100", "h100"], rng.randint(1, 2)))])
            for i in range(rng.randint(2, 5))]


@dataclass(frozen=True)
class _Shape:
    """A mixed-gpus deployment's replica: `copies` pods of `size` GPUs, or a
    gang of 1 + `workers` pods of 8 GPUs and 8 NICs, on nodes of `kinds`."""

    kinds: tuple[str, ...]
    size: int = 8
    copies: int = 1
    workers: int = 0  # a gang's (0: a Standalone engine)

    @property
    def gpus(self) -> int:
        return 8 * (1 + self.workers) if self.workers else self.size * self.copies

    @property
    def block(self) -> int:
        """GPUs the witness gives a replica on one node (its copies together),
        0 when it takes whole nodes."""
        return 0 if self.workers or self.gpus > 8 else self.gpus

    @property
    def nodes(self) -> int:
        """Whole nodes of one pool the witness gives a replica (0: a block)."""
        return 0 if self.block else self.gpus // 8

    def deployment(self, i: int, replicas: int) -> dict:
        if self.workers:
            return deployment(_name(i, "gang"), replicas, gang("vllm", self.workers, *self.kinds))
        return deployment(_name(i, f"g{self.size}"), replicas,
                          standalone("vllm", gpus(self.size, *self.kinds), copies=self.copies))


def _gpu_shape(rng: random.Random, kinds: list[str]) -> _Shape:
    want = tuple(rng.sample(kinds, rng.randint(1, len(kinds))))
    if rng.random() < 0.15:
        return _Shape(want, workers=rng.randint(1, 2))
    return _Shape(want, size=rng.choice([1, 1, 2, 2, 4, 8]), copies=rng.choice([1, 1, 2]))


def over_demand(rng: random.Random) -> tuple[list[dict], list[dict], list[dict]]:
    """The mixed-gpus shapes asking for 100-140% of the fleet's GPUs, each
    deployment about as many GPUs: the `mixed-gpus` trap until 2026-11-26 (its
    cases as they were, from the "mixed-gpus" streams). The count optimum
    leaves early large replicas out to place more later small ones, which no
    first-come-first-served scheduler does: scored against the in-order
    optimum (`IN_ORDER`)."""
    clusters = _gpu_fleet(rng)
    kinds, count = _kinds(clusters), rng.randint(4, 7)
    budget = _fleet_gpus(clusters) * rng.uniform(1.0, 1.4) / count  # GPUs per deployment
    shapes = [_gpu_shape(rng, kinds) for _ in range(count)]
    return clusters, [], [s.deployment(i, max(1, round(budget / s.gpus)))
                          for i, s in enumerate(shapes)]


def mixed_gpus(rng: random.Random) -> tuple[list[dict], list[dict], list[dict]]:
    """1/2/4/8-GPU engines and gangs on 8-GPU nodes, asking for 90-100% of the
    fleet's GPUs, all of which fit: the demand is cut from a witness packing
    (every node tiled with random replicas of the case's shapes, then random
    replicas taken out until the demand is the drawn share of the fleet). The
    count optimum is then everything asked, as is the in-order optimum, so a
    replica short is a packing's stranded devices, never the arrival order."""
    clusters = _gpu_fleet(rng)
    kinds = _kinds(clusters)
    shapes = [_gpu_shape(rng, kinds) for _ in range(rng.randint(4, 7))]
    for kind in kinds:  # every pool has some shape to tile it with
        if not any(kind in s.kinds for s in shapes):
            i = rng.randrange(len(shapes))
            shapes[i] = dataclasses.replace(shapes[i], kinds=(*shapes[i].kinds, kind))
    witness: list[tuple[int, int]] = []  # (shape, GPUs) per replica, as tiled
    for c in clusters:
        for p in c["spec"]["nodePools"]:
            usable = [i for i, s in enumerate(shapes) if p["name"] in s.kinds]
            node = 0
            while node < p["nodes"]:
                room, empty = 8, p["nodes"] - node
                while room:
                    fit = [i for i in usable if 0 < shapes[i].block <= room
                           or (room == 8 and 0 < shapes[i].nodes <= empty)]
                    if not fit:
                        break
                    i = rng.choice(fit)
                    if shapes[i].nodes:
                        witness.append((i, 8 * shapes[i].nodes))
                        node += shapes[i].nodes - 1
                        room = 0
                    else:
                        witness.append((i, shapes[i].block))
                        room -= shapes[i].block
                node += 1
    target = _fleet_gpus(clusters) * rng.uniform(0.9, 1.0)
    while sum(g for _, g in witness) > target:
        witness.pop(rng.randrange(len(witness)))
    counts = [sum(1 for i, _ in witness if i == k) for k in range(len(shapes))]
    return clusters, [], [s.deployment(i, n) for i, (s, n) in enumerate(zip(shapes, counts)) if n]


def fragmentation(rng: random.Random) -> tuple[list[dict], list[dict], list[dict]]:
    clusters = [cluster(f"c{i:02d}", pool("h100", rng.randint(2, 4)))
                for i in range(rng.randint(2, 4))]
    nodes = sum(p["nodes"] for c in clusters for p in c["spec"]["nodePools"])
    deps = [deployment(_name(0, "g1"), rng.randint(nodes, 3 * nodes),
                       standalone("vllm", gpus(1, "h100")))]
    if rng.random() < 0.5:
        deps.append(deployment(_name(1, "g2"), rng.randint(nodes // 2, nodes),
                               standalone("vllm", gpus(2, "h100"))))
    deps.append(deployment(_name(2, "g4"), rng.randint(nodes // 2, nodes),
                           standalone("vllm", gpus(4, "h100"))))
    big = (gang("vllm", 1, "h100") if rng.random() < 0.3
           else standalone("vllm", gpus(8, "h100")))
    deps.append(deployment(_name(3, "g8"), rng.randint(1, nodes // 2 + 1), big))
    return clusters, [], deps


def whole_node_waste(rng: random.Random) -> tuple[list[dict], list[dict], list[dict]]:
    clusters = [cluster(f"c{i:02d}", *[pool(k, rng.randint(1, 3)) for k in
                                       sorted(rng.sample(list(PRODUCTS), rng.randint(1, 2)))])
                for i in range(rng.randint(2, 5))]
    kinds, count = _kinds(clusters), rng.randint(2, 4)
    budget = _fleet_gpus(clusters) * rng.uniform(0.6, 1.0) / count
    deps = []
    for i in range(count):
        size = rng.choice([1, 1, 2])
        if len(kinds) > 1 and rng.random() < 0.3:
            a, b = rng.sample(kinds, 2)
            request = alternatives((a, size), (b, size))
        else:
            request = gpus(size, *kinds)  # any GPU of the fleet: the demand can fill it
        deps.append(deployment(_name(i, f"g{size}"), max(1, round(budget / size)),
                               standalone("vllm", request)))
    return clusters, [], deps


GENERATORS = {"small-before-gang": small_before_gang, "alternatives": alternatives_trap,
              "multi-engine": multi_engine, "nearly-full": nearly_full, "mixed": mixed,
              "mixed-gpus": mixed_gpus, "fragmentation": fragmentation,
              "whole-node-waste": whole_node_waste, "over-demand": over_demand}


def stream(trap: str) -> str:
    """The name of the trap's RNG streams (`STREAMS`)."""
    return STREAMS.get(trap, trap)


def generate(seed: int = 19, per_trap: int = 12) -> list[Case]:
    """`per_trap` cases of every trap, the same for the same seed."""
    cases = []
    for trap in TRAPS:
        for i in range(per_trap):
            rng = random.Random(f"{seed}-{stream(trap)}-{i}")
            clusters, held, deps = GENERATORS[trap](rng)
            price(random.Random(f"{seed}-{stream(trap)}-{i}-cost"), clusters,
                  unpriced=0.2 if trap == "mixed" else 0.0)
            cases.append(Case(f"{trap}-{i}", trap, clusters, held, deps))
    return cases


def with_strategy(md: dict, strategy: str | None) -> dict:
    """The deployment asking for `strategy` (None: as written, the default)."""
    if strategy is None:
        return md
    spec = dict(md["spec"]["template"]["spec"], placement={"strategy": strategy})
    return {**md, "spec": {**md["spec"], "template": {**md["spec"]["template"], "spec": spec}}}
