"""Properties of the scheduler over generated fleets (hypothesis).

A fleet is a few InferenceClusters of a few pools, each node offering up to two
GPU kinds (and sometimes a Synthetic fabric), with taints, readiness and
labels; other deployments' ModelReplicas already hold some devices, their pods
sharing nodes. A
deployment has one engine (Unified) or two (PrefillDecode), each a Standalone
or a Leader/Worker gang, with device requests over the GPU kinds.

Every property runs the real RunFunction, and `fleetgen.World` feeds its
desired ModelReplicas back the way Crossplane and the API server would: as
observed composed resources and as required ModelReplicas, each new one with a
creationTimestamp.
"""

from __future__ import annotations

import copy
import os
import random
import re

from builders import desired
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from fleetgen import (
    World,
    cluster,
    deployment,
    device,
    engine,
    fatal,
    foreign_replica,
    leader,
    memory_at_least,
    messages,
    placements,
    pool,
    product_is,
    req,
    stamp,
    standalone,
    status,
    synthetic,
    taint,
    to_plain,
    total_usage,
    worker,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packing import dra_kinds, packs, pod_vectors

from function.contract.api import LABEL_REPLICA_INDEX
from function.contract.models.modelreplica import ModelReplica
from function.contract.rules import engine_errors
from function.contract.validation import model_errors
from function.runtime import fn

# CI runs a fixed, moderate sample (derandomized: the same cases every run);
# SCHEDULER_EXAMPLES=5000 explores fresh random cases locally.
EXAMPLES = int(os.environ.get("SCHEDULER_EXAMPLES", "120"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    derandomize="SCHEDULER_EXAMPLES" not in os.environ,
                    suppress_health_check=[HealthCheck.too_slow])

PRODUCTS = {"H100": "80Gi", "A100": "40Gi", "L4": "24Gi"}
TAINTS = [taint("dedicated", "NoSchedule", "batch"), taint("evict", "NoExecute"),
          taint("soft", "PreferNoSchedule")]
FABRIC = 'device.attributes["fabric.example.com"].type == "infiniband"'
PRICES = ["0", "1.5", "2", "31.5", "98.32"]


# --- Strategies ----------------------------------------------------------------

def sometimes(draw, one_in: int) -> bool:
    """True about once in `one_in` draws (and False when shrinking)."""
    return draw(st.sampled_from([False] * (one_in - 1) + [True]))


@st.composite
def pools(draw, prefix: str = "p") -> list[dict]:
    out = []
    for i in range(draw(st.integers(1, 3))):
        kinds = draw(st.lists(st.sampled_from(sorted(PRODUCTS)), min_size=1, max_size=2,
                              unique=True))
        if sometimes(draw, 8):
            kinds = []  # a CPU-only pool
        devices = [device(f"d{j}", p, count=draw(st.sampled_from([1, 4, 8, 8])),
                          memory=PRODUCTS[p], device_class=f"{p.lower()}.example.com")
                   for j, p in enumerate(kinds)]
        if sometimes(draw, 2):
            devices.append(synthetic("fabric", type="infiniband"))
        out.append(pool(f"{prefix}{i}", draw(st.integers(0, 8)), *devices))
        if not sometimes(draw, 3):  # most pools priced, some not (unknown): the cost step
            out[-1]["costPerNodeHour"] = draw(st.sampled_from(PRICES))
    return out


@st.composite
def clusters(draw, names=st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4,
                                  unique=True)) -> list[dict]:
    out = []
    for name in draw(names):
        out.append(cluster(
            name, *draw(pools()),
            labels={"tier": draw(st.sampled_from(["prod", "prod", "batch"]))},
            taints=[draw(st.sampled_from(TAINTS))] if sometimes(draw, 4) else [],
            ready=None if not sometimes(draw, 6) else draw(st.booleans())))
        if sometimes(draw, 3):  # the cluster observed its nodes: fewer, or more, than declared
            status = out[-1].setdefault("status", {})
            status.setdefault("conditions", []).append(
                {"type": "CapacityObserved", "status": draw(st.sampled_from(["True", "False"]))})
            status["nodePools"] = [{"name": p["name"],
                                    "schedulableNodes": draw(st.integers(0, p["nodes"] + 2))}
                                   for p in out[-1]["spec"]["nodePools"]]
    return out


def counted_nodes(ic: dict) -> dict[str, int]:
    """Per pool, the nodes the scheduler may fill: the observed schedulable nodes
    while the cluster's observation counts, never more than declared."""
    status = ic.get("status") or {}
    observed = any(c.get("type") == "CapacityObserved" and c.get("status") == "True"
                   for c in status.get("conditions") or [])
    seen = {p["name"]: p["schedulableNodes"] for p in status.get("nodePools") or []} \
        if observed else {}
    return {p["name"]: min(p["nodes"], seen.get(p["name"], p["nodes"]))
            for p in ic["spec"]["nodePools"]}


@st.composite
def requests(draw) -> list[dict]:
    products = draw(st.lists(st.sampled_from(sorted(PRODUCTS)), min_size=1, max_size=3,
                             unique=True))
    sel = [product_is(*products)]
    if sometimes(draw, 4):
        sel.append(memory_at_least(draw(st.sampled_from(["20Gi", "40Gi", "64Gi"]))))
    out = [req("gpu", draw(st.sampled_from([1, 1, 2, 4, 8])), *sel)]
    if sometimes(draw, 5):
        out.append(req("ib", 1, FABRIC))
    if sometimes(draw, 5):  # a second GPU request competing for the same kinds
        out.append(req("extra", draw(st.sampled_from([1, 2])), product_is(*products)))
    return out


@st.composite
def engines(draw, name: str, phase: str | None = None) -> dict:
    copies = draw(st.sampled_from([None, None, 1, 2]))
    if not sometimes(draw, 3):
        return engine(name, standalone(*draw(requests())), copies=copies, phase=phase)
    lead = draw(st.sampled_from(["same", "none", "fabric-only"]))
    work = draw(requests())
    lead_req = {"same": work, "none": [], "fabric-only": [req("ib", 1, FABRIC)]}[lead]
    return engine(name, leader(*lead_req), worker(draw(st.integers(1, 2)), *work),
                  copies=copies, phase=phase)


@st.composite
def deployments(draw, name: str = "llama") -> dict:
    if not sometimes(draw, 3):
        engs = [draw(engines("vllm"))]
        mode = None
    else:
        engs = [draw(engines("prefill", "Prefill")), draw(engines("decode", "Decode"))]
        mode = "PrefillDecode"
    md = deployment(
        name, *engs, replicas=0 if sometimes(draw, 12) else draw(st.integers(1, 6)), mode=mode,
        selector={"tier": "prod"} if sometimes(draw, 4) else None,
        tolerations=draw(st.sampled_from([
            [], [], [{"key": "dedicated", "operator": "Exists"}],
            [{"operator": "Exists", "effect": "NoExecute"}]])))
    strategy = draw(st.sampled_from([None, "Spread", "Pack"]))  # every property, both strategies
    if strategy:
        md["spec"]["template"]["spec"]["placement"] = {"strategy": strategy}
    return md


@st.composite
def foreign(draw, fleet: list[dict]) -> list[dict]:
    """Other deployments' replicas, of any age: pods of one GPU kind of a pool, as
    many as fill at most half its nodes (so they fit, several to a node)."""
    out = []
    for c in fleet:
        for p in c["spec"]["nodePools"]:
            kinds = dra_kinds(p)
            if not kinds:
                continue
            cls, per_node = draw(st.sampled_from(kinds))
            gpus = draw(st.integers(1, per_node))
            held = draw(st.integers(0, p["nodes"] // 2 * (per_node // gpus)))
            if held:
                n = len(out)
                out.append(foreign_replica(
                    f"other-{n}", c["metadata"]["name"], {p["name"]: held}, index=n,
                    deployment_name=f"other-{n % 2}", gpus=gpus, device_class=cls,
                    created=stamp(draw(st.integers(0, 20_000)))))
    return out


@st.composite
def worlds(draw) -> World:
    fleet = draw(clusters())
    return World(draw(deployments()), fleet, draw(foreign(fleet)))


def shrink_pools(fleet: list[dict], rnd: random.Random) -> list[dict]:
    fleet = copy.deepcopy(fleet)
    for c in fleet:
        for p in c["spec"]["nodePools"]:
            if rnd.random() < 0.5:
                p["nodes"] = rnd.randint(0, p["nodes"])
    return fleet


def evolve(fleet: list[dict], rnd: random.Random) -> list[dict]:
    """The fleet changes under the scheduler: pools shrink, a cluster goes or
    gets tainted or unready, a pool's devices change, its observed nodes drop."""
    fleet = copy.deepcopy(fleet)
    for c in fleet:
        roll = rnd.random()
        if roll < 0.15 and len(fleet) > 1:
            fleet.remove(c)
            break
        if roll < 0.3:
            c["spec"]["taints"] = [rnd.choice(TAINTS)]
        elif roll < 0.4:
            c["status"] = {"conditions": [{"type": "Ready", "status": "False"}]}
        elif roll < 0.5 and c["spec"]["nodePools"]:
            p = rnd.choice(c["spec"]["nodePools"])
            p["devices"] = [device("d0", rnd.choice(sorted(PRODUCTS)), count=8)]
        elif roll < 0.6:  # nodes cordoned or NotReady under the running replicas
            c["status"] = {"conditions": [{"type": "CapacityObserved", "status": "True"}],
                           "nodePools": [{"name": p["name"],
                                          "schedulableNodes": rnd.randint(0, p["nodes"])}
                                         for p in c["spec"]["nodePools"]]}
    return shrink_pools(fleet, rnd)


# --- Checks ---------------------------------------------------------------------

def mrs(rsp: fnv1.RunFunctionResponse) -> dict[str, dict]:
    return {k: to_plain(v) for k, v in desired(rsp).items()}


def usage_by_pool(replicas) -> dict[tuple[str, str], int]:
    return total_usage(replicas)


def check_no_split(rsp: fnv1.RunFunctionResponse, fleet: list[dict]) -> None:
    """Every member of an engine is on one pool; a replica the scheduler
    decided (not one it kept as it was) names a pool of its cluster."""
    pools_of = {c["metadata"]["name"]: {p["name"] for p in c["spec"]["nodePools"]}
                for c in fleet}
    for k, mr in mrs(rsp).items():
        for e in mr["spec"]["engines"]:
            on = {m.get("nodePoolName") for m in e["members"]}
            assert len(on) == 1 and None not in on, (k, e["name"], on)
            if not _kept(rsp, mr):
                assert on <= pools_of.get(mr["spec"]["clusterName"], set()), (k, on)


def _kept(rsp: fnv1.RunFunctionResponse, mr: dict) -> bool:
    """Whether the scheduler kept this ModelReplica exactly as it was."""
    index = (mr["metadata"].get("labels") or {}).get(LABEL_REPLICA_INDEX)
    msg = next((c.message for c in rsp.conditions if c.type == "ReplicasScheduled"), "")
    return f"replica {index} on {mr['spec']['clusterName']}:" in msg or \
        "is malformed and kept as is" in msg or \
        any(m.startswith(f"replica {index} stays on {mr['spec']['clusterName']} ")
            for m in messages(rsp))


def check_no_overcommit(rsp: fnv1.RunFunctionResponse, world: World,
                        before: dict[tuple[str, str], int]) -> None:
    """Our output never puts more on a pool than its nodes hold, device by device:
    on its observed schedulable nodes when they count, else its declared ones.

    Where our pods on a pool grew, other deployments' pods plus ours can be
    packed onto its nodes, each pod's devices on one node (packing.py: exact,
    and blind to the scheduler's own ledger). (Where they did not grow, an
    overcommit is someone else's to repair: a younger replica of another
    deployment, or one of ours that had nowhere to go and was kept as it was.)
    """
    ours = mrs(rsp).values()
    grew = usage_by_pool(ours)
    for c in world.clusters:
        name = c["metadata"]["name"]
        nodes = counted_nodes(c)
        for p in c["spec"]["nodePools"]:
            where = (name, p["name"])
            if grew.get(where, 0) <= before.get(where, 0):
                continue
            pods = [v for mr in [*world.others, *ours] if mr["spec"]["clusterName"] == name
                    for v in pod_vectors(mr, p)]
            per_node = [n for _, n in dra_kinds(p)]
            assert packs(pods, per_node, nodes[p["name"]]), (where, sorted(pods), per_node,
                                                             nodes[p["name"]])


def check_replicas_valid(rsp: fnv1.RunFunctionResponse) -> None:
    for k, mr in mrs(rsp).items():
        assert model_errors(ModelReplica, mr) == [], (k, model_errors(ModelReplica, mr))
        assert engine_errors(mr["spec"]) == [], k
        assert len(mr["metadata"]["name"]) <= 63
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", mr["metadata"]["name"])


def check_status_consistent(rsp: fnv1.RunFunctionResponse, world: World) -> None:
    st = status(rsp)
    want = world.md["spec"]["replicas"]
    placed = placements(rsp)
    assert st["replicas"]["desired"] == want
    assert st["replicas"]["scheduled"] == len(st["placements"]) == len(placed)
    assert {p["index"] for p in st["placements"]} == set(placed)
    assert not set(placed) & {u["index"] for u in st["unscheduled"]}
    assert len(placed) + len(st["unscheduled"]) >= min(want, len(placed) + len(st["unscheduled"]))
    shortfall = len(placed) < want or st["unscheduled"]
    scheduled = next(c for c in rsp.conditions if c.type == "ReplicasScheduled")
    if shortfall:
        assert scheduled.status == fnv1.STATUS_CONDITION_FALSE
    for u in st["unscheduled"]:
        assert re.search(r"0/\d+ clusters fit replica \d+: ", u["reason"]), u


# --- Properties -----------------------------------------------------------------

@PROPERTY
@given(worlds(), st.randoms(use_true_random=False))
def test_the_output_never_overcommits_a_pool_or_splits_an_engine(world, rnd):
    rsp = world.run()
    assert not fatal(rsp), fatal(rsp)
    check_no_overcommit(rsp, world, {})
    check_no_split(rsp, world.clusters)
    check_replicas_valid(rsp)
    check_status_consistent(rsp, world)
    world.apply(rsp)

    # The fleet changes under the existing replicas.
    world.clusters = evolve(world.clusters, rnd)
    before = usage_by_pool(world.observed.values())
    rsp = world.run()
    assert not fatal(rsp), fatal(rsp)
    check_no_overcommit(rsp, world, before)
    check_no_split(rsp, world.clusters)
    check_replicas_valid(rsp)
    check_status_consistent(rsp, world)


def published_instead(ic: dict) -> dict:
    """The cluster with every pool's devices published by its nodes (status)
    instead of declared (spec), as an InferenceCluster whose pools leave
    `devices` out reports them."""
    ic = copy.deepcopy(ic)
    status = ic.setdefault("status", {})
    by_name = {p["name"]: p for p in status.get("nodePools") or []}
    for p in ic["spec"]["nodePools"]:
        by_name.setdefault(p["name"], {"name": p["name"]})["publishedDevices"] = \
            p.pop("devices")
    status["nodePools"] = list(by_name.values())
    return ic


@PROPERTY
@given(worlds(), st.randoms(use_true_random=False))
def test_devices_published_instead_of_declared_place_exactly_alike(world, rnd):
    declared = world.run()
    world.clusters = [published_instead(c) for c in world.clusters]
    published = world.run()
    assert published.SerializeToString(deterministic=True) == \
        declared.SerializeToString(deterministic=True)


@PROPERTY
@given(worlds(), st.randoms(use_true_random=False))
def test_identical_input_gives_byte_identical_output(world, rnd):
    world.apply(world.run())
    world.clusters = evolve(world.clusters, rnd)
    req = world.request()
    first = fn.run_function(req).SerializeToString(deterministic=True)
    second = fn.run_function(copy.deepcopy(req)).SerializeToString(deterministic=True)
    assert first == second


@PROPERTY
@given(worlds(), st.randoms(use_true_random=False))
def test_the_order_of_required_resources_does_not_change_the_placement(world, rnd):
    world.apply(world.run())
    world.clusters = evolve(world.clusters, rnd)
    rsp = world.run()
    shuffled = World(world.md, rnd.sample(world.clusters, len(world.clusters)),
                     rnd.sample(world.others, len(world.others)),
                     observed=dict(rnd.sample(sorted(world.observed.items()),
                                              len(world.observed))))
    again = shuffled.run()
    assert mrs(again) == mrs(rsp)
    assert status(again) == status(rsp)
    assert [(c.type, c.status, c.reason, c.message) for c in again.conditions] == \
        [(c.type, c.status, c.reason, c.message) for c in rsp.conditions]


def one_price(fleet: list[dict], price: str | None) -> list[dict]:
    out = copy.deepcopy(fleet)
    for c in out:
        for p in c["spec"]["nodePools"]:
            p.pop("costPerNodeHour", None)
            if price is not None:
                p["costPerNodeHour"] = price
    return out


@PROPERTY
@given(worlds(), st.sampled_from(["0", "2.5"]), st.randoms(use_true_random=False))
def test_one_price_on_every_pool_places_as_no_price_at_all(world, price, rnd):
    # Cost only chooses among placements that differ in price: where none do,
    # the cost step changes nothing, however the fleet evolves.
    world.apply(world.run())
    world.clusters = evolve(world.clusters, rnd)
    unpriced = World(world.md, one_price(world.clusters, None), world.others,
                     observed=world.observed).run()
    priced = World(world.md, one_price(world.clusters, price), world.others,
                   observed=world.observed).run()
    assert mrs(priced) == mrs(unpriced)
    assert status(priced) == status(unpriced)


@PROPERTY
@given(worlds(), st.randoms(use_true_random=False))
def test_the_output_fed_back_as_observed_gives_the_same_output(world, rnd):
    for evolve_first in (False, True):
        if evolve_first:
            world.clusters = evolve(world.clusters, rnd)
        first = world.step()
        second = world.step()
        assert mrs(second) == mrs(first)
        st1, st2 = status(first), status(second)
        assert st2["placements"] == st1["placements"]
        assert st2["replicas"] == st1["replicas"]
        assert [u["index"] for u in st2["unscheduled"]] == [u["index"] for u in st1["unscheduled"]]
        # From then on the state is a fixed point, byte for byte.
        third = world.run()
        assert third.SerializeToString(deterministic=True) == \
            second.SerializeToString(deterministic=True)


@PROPERTY
@given(worlds(), clusters(names=st.just(["g"])), st.randoms(use_true_random=False))
def test_adding_a_cluster_never_moves_a_replica(world, new, rnd):
    world.clusters = evolve(world.clusters, rnd)
    world.step()
    steady = world.step()
    before = placements(steady)
    kept = {int(m.group(1)) for m in
            (re.match(r"replica (\d+) stays on ", s) for s in messages(steady)) if m}
    (g,) = copy.deepcopy(new)
    g["metadata"]["name"] = "0-new" if rnd.random() < 0.5 else "zz-new"  # sorts first or last
    world.clusters.append(g)
    after = placements(world.run())
    for index, where in before.items():
        if index not in kept:
            assert after.get(index) == where, (index, where, after.get(index))


JUNK = [None, "x", -1, 1.5, [], {}, {"a": 1}, [1], True]


def _paths(obj, path=()):
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*path, i))


def corrupt(obj: dict, rnd: random.Random) -> dict:
    obj = copy.deepcopy(obj)
    paths = [p for p in _paths(obj) if p and p[0] not in ("apiVersion", "kind")]
    path = rnd.choice(paths)
    parent = obj
    for step in path[:-1]:
        parent = parent[step]
    if isinstance(parent, dict) and rnd.random() < 0.3:
        del parent[path[-1]]
    else:
        parent[path[-1]] = copy.deepcopy(rnd.choice(JUNK))
    return obj


@PROPERTY
@given(worlds(), st.randoms(use_true_random=False), st.sampled_from(["cluster", "own", "other"]))
def test_a_malformed_input_never_raises_and_never_loses_a_replica(world, rnd, what):
    world.apply(world.run())
    if what == "cluster":
        i = rnd.randrange(len(world.clusters))
        world.clusters[i] = corrupt(world.clusters[i], rnd)
    elif what == "own" and world.observed:
        k = rnd.choice(sorted(world.observed))
        world.observed[k] = corrupt(world.observed[k], rnd)
    elif world.others:
        i = rnd.randrange(len(world.others))
        world.others[i] = corrupt(world.others[i], rnd)
    rsp = world.run()
    assert not fatal(rsp), fatal(rsp)
    out = desired(rsp)
    st_ = status(rsp)
    placed = {p["index"] for p in st_["placements"]}
    drained = {u["index"] for u in st_["unscheduled"] if u["reason"].startswith("drained")}
    for k, mr in world.observed.items():
        if k in out:
            continue
        # Gone from the desired state only when scaled down, moved (its
        # index placed elsewhere) or drained by a NoExecute taint.
        index = ((mr.get("metadata") or {}).get("labels") or {}).get(LABEL_REPLICA_INDEX)
        assert isinstance(index, str) and index.isdigit(), (k, mr.get("metadata"))
        i = int(index)
        assert i in placed or i in drained, (k, i, placed, drained)


def test_the_packing_oracle_is_exact():
    # First-fit decreasing fails the first (5 4 | 3 3 3 | 2 left over); it fits
    # as 5 3 2 | 4 3 3.
    assert packs([(5,), (4,), (3,), (3,), (3,), (2,)], (10,), 2)
    assert not packs([(5,), (4,), (3,), (3,), (3,), (3,)], (10,), 2)
    # Six free devices in all, but a 3-device pod per node at most.
    assert not packs([(3,), (3,), (3,)], (4,), 2)
    assert packs([(4, 0), (0, 4), (4, 4)], (4, 4), 2)
    assert not packs([(1,)], (8,), 0) and packs([(0,)], (8,), 0)
    assert not packs([(9,)], (8,), 4)
