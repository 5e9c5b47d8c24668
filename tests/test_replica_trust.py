"""A ModelReplica is the scheduler's (issue #33, finding 2).

The composer composes only the replicas a ModelDeployment composed: a
hand-written one would otherwise run on any cluster and pool, past quota,
taints, clusterSelector and capacity. One that no longer passes keeps what
it composed while it did. The scheduler counts a ModelReplica it cannot read
by the most it can hold instead of leaving it out of the ledger.
"""

from __future__ import annotations

import copy

import pytest
import yaml
from builders import ROOT
import composer_support
from composer_support import REMOTE, compose, replica, standalone

from function.composer import trust
from function.contract.enums import ReplicaPhase

# The composer's side ----------------------------------------------------------


def scheduled() -> dict:
    """A replica as the scheduler composes it (placed on eu-west-1's l4-4x pool)."""
    return replica(standalone(pool="l4-4x"), cluster=REMOTE)


def hand_written() -> dict:
    """The same replica applied by hand: no controller, and Crossplane labels a
    composite nobody composed with its own name."""
    mr = scheduled()
    del mr["metadata"]["ownerReferences"]
    mr["metadata"]["labels"]["crossplane.io/composite"] = mr["metadata"]["name"]
    return mr


def test_a_hand_written_replica_composes_nothing_and_says_why():
    out = compose(hand_written())
    assert out.desired == {}
    state, reason, message = out.condition(trust.SCHEDULED)
    assert (state, reason) == ("False", "NotScheduled")
    assert "its controller is not a ModelDeployment" in message
    assert "apply a ModelDeployment instead" in message
    assert out.phase == ReplicaPhase.PENDING
    assert not out.fatal
    # Derived from nothing composed, Crossplane would call it Ready.
    assert out.rsp.desired.composite.ready == 2  # READY_FALSE


def forged(change) -> dict:
    mr = scheduled()
    change(mr)
    return mr


def _meta(mr):
    return mr["metadata"]


@pytest.mark.parametrize("mr,expect", [
    (forged(lambda mr: _meta(mr)["ownerReferences"][0].update(kind="ModelService")),
     "its controller is not a ModelDeployment"),
    (forged(lambda mr: _meta(mr)["ownerReferences"][0].update(controller=False)),
     "its controller is not a ModelDeployment"),
    (forged(lambda mr: _meta(mr)["ownerReferences"][0].update(apiVersion="example.com/v1")),
     "its controller is not a ModelDeployment"),
    (forged(lambda mr: _meta(mr)["labels"].update({"modelplane.ai/deployment": "other"})),
     "does not name its controller, ModelDeployment 'llama'"),
    # Placed on eu-west-1, then pointed at another cluster by hand.
    (forged(lambda mr: mr["spec"].update(clusterName="us-east-1")),
     "its label modelplane.ai/cluster is not its spec.clusterName 'us-east-1'"),
    (forged(lambda mr: _meta(mr)["labels"].pop("modelplane.ai/replica-index")),
     "its label modelplane.ai/replica-index is not a replica index"),
], ids=["controller-kind", "not-controller", "controller-group", "deployment-label",
        "cluster-label", "index-label"])
def test_a_replica_without_what_the_scheduler_sets_composes_nothing(mr, expect):
    out = compose(mr)
    assert out.desired == {}
    state, reason, message = out.condition(trust.SCHEDULED)
    assert (state, reason) == ("False", "NotScheduled")
    assert expect in message


def test_a_scheduled_replica_composes_and_says_by_whom():
    out = compose(scheduled())
    assert out.desired
    assert out.condition(trust.SCHEDULED) == ("True", "Scheduled",
                                              "placed by ModelDeployment llama")


def test_a_replica_that_no_longer_passes_keeps_what_it_composed():
    before = compose(scheduled())
    observed = copy.deepcopy(before.desired)
    # Edited by hand after it was composed: pointed at another cluster.
    moved = scheduled()
    moved["spec"]["clusterName"] = "us-east-1"
    during = compose(moved, observed=observed)
    assert set(during.desired) == set(before.desired)
    for k, obj in before.desired.items():
        assert during.desired[k]["spec"] == obj["spec"]
    state, reason, message = during.condition(trust.SCHEDULED)
    assert (state, reason) == ("False", "NotScheduled")
    assert f"{len(observed)} existing objects are kept as they are" in message


# Its deployment must own it (#48 finding 3): a forged owner with every label set,
# uid all zeros or copied from the deployment, is composed no more.

def _owner_with(**status) -> dict:
    md = composer_support.owner(scheduled())
    md["status"] = status
    return md


@pytest.mark.parametrize("owners, expect", [
    ([], "its controller, ModelDeployment 'llama', does not exist"),
    ([{**composer_support.owner(scheduled()),
       "metadata": {**composer_support.owner(scheduled())["metadata"],
                    "uid": "00000000-0000-0000-0000-000000000000"}}],
     "its controller ownerReference's uid '0988e834-fbfa-5f95-9542-fb20c3c6422d' is not "
     "ModelDeployment 'llama''s"),
    # The uid copied from the deployment, which the tenant can read: not in its status.
    ([_owner_with(placements=[{"name": "llama-eu-west-1-7"}])],
     "ModelDeployment 'llama' does not place it"),
    ([_owner_with()], "ModelDeployment 'llama' does not place it"),
], ids=["no-deployment", "zero-uid", "not-placed", "no-status"])
def test_a_replica_its_deployment_did_not_place_composes_nothing(owners, expect):
    out = compose(scheduled(), owners=owners)
    assert out.desired == {}
    state, reason, message = out.condition(trust.SCHEDULED)
    assert (state, reason) == ("False", "NotScheduled")
    assert expect in message
    assert out.rsp.meta.ttl.seconds > 0  # asked again soon: a status may be on its way


def test_a_forged_replica_past_every_check_but_ownership_keeps_nothing_it_did_not_have():
    # 4 x 8 GPUs on a tainted cluster past a zero quota, in the finding: the composer
    # composes nothing for it, however its labels and ownerReference read.
    mr = scheduled()
    mr["metadata"]["name"] = "llama-eu-west-1-3"
    out = compose(mr, owners=[composer_support.owner(scheduled())])
    assert out.desired == {} and out.condition(trust.SCHEDULED)[1] == "NotScheduled"


def test_a_draining_replica_is_still_its_deployments():
    mr = scheduled()
    out = compose(mr, owners=[_owner_with(placements=[], draining=[mr["metadata"]["name"]])])
    assert out.desired
    assert out.condition(trust.SCHEDULED)[:2] == ("True", "Scheduled")


def test_the_replica_requires_its_deployment_by_name_in_its_namespace():
    out = compose(scheduled())
    req = out.rsp.requirements.resources["owner-deployment"]
    assert (req.kind, req.match_name, req.namespace) == ("ModelDeployment", "llama",
                                                         scheduled()["metadata"]["namespace"])


def test_a_replica_crossplane_rendered_from_a_deployment_passes():
    # The stage-1 render of an example: what Crossplane puts on a composed replica.
    docs = yaml.safe_load_all((ROOT / "tests" / "golden" / "single-gpu.yaml").read_text())
    mr = next(d for d in docs if d and d.get("kind") == "ModelReplica")
    assert trust.untrusted(mr) == []


# The scheduler's side ---------------------------------------------------------

from fleetgen import (  # noqa: E402
    World,
    cluster,
    deployment,
    device,
    engine,
    foreign_replica,
    key,
    messages,
    own_replica,
    placements,
    pool,
    product_is,
    req,
    stamp,
)
from fleetgen import standalone as standalone_member  # noqa: E402

H100 = device("gpu", "H100", count=1)  # one GPU a node: a one-GPU replica takes a node


def one_gpu(name: str = "llama", replicas: int = 1) -> dict:
    return deployment(name, engine("vllm", standalone_member(req("gpu", 1, product_is("H100")))),
                      replicas=replicas)


def across_two_pools(mr: dict) -> dict:
    """`mr` with its first engine's one member copied onto pool p2 as a one-node
    Worker: an engine on two pools, which nothing the scheduler makes looks like."""
    mr = copy.deepcopy(mr)
    members = mr["spec"]["engines"][0]["members"]
    members.append({**copy.deepcopy(members[0]), "role": "Worker", "nodePoolName": "p2",
                    "worker": {"nodes": 1}})
    return mr


def two_pool_cluster() -> list[dict]:
    return [cluster("a", pool("p1", 1, H100), pool("p2", 1, H100)),
            cluster("b", pool("h100", 1, H100))]


def test_another_deployments_replica_on_two_pools_holds_both_and_nothing_lands_there():
    held = across_two_pools(foreign_replica("gang-0", "a", {"p1": 1}, gpus=1, created=stamp(1)))
    rsp = World(one_gpu(), two_pool_cluster(), [held]).run()
    # Before, it was left out of the ledger and replica 0 went onto its nodes on a.
    assert placements(rsp) == {0: ("b", {"vllm": "h100"})}
    assert any("a ModelReplica in another namespace is malformed and counted by the most "
               "it can hold" in m for m in messages(rsp))


def test_our_own_replica_on_two_pools_is_kept_and_holds_both():
    md = one_gpu(replicas=2)
    broken = across_two_pools(own_replica(md, "a", 0, {"vllm": "p1"}, created=stamp(1)))
    rsp = World(md, two_pool_cluster(), observed={key("a", 0): broken}).run()
    assert key("a", 0) in {k for k, v in rsp.desired.resources.items()}  # kept as it is
    # Index 0 stays the broken replica's; the new ones find a full, b takes one.
    assert {i: c for i, (c, _) in placements(rsp).items() if i != 0} == {1: "b"}


def test_a_replica_labelled_ours_that_we_did_not_compose_still_holds_its_nodes():
    # Written by hand with our deployment's labels (or on its way out): not among
    # our composed resources, so only the ledger can count it.
    md = one_gpu()
    stray = own_replica(md, "a", 5, {"vllm": "p1"}, created=stamp(1), name="llama-stray")
    clusters = [cluster("a", pool("p1", 1, H100)), cluster("b", pool("h100", 1, H100))]
    rsp = World(md, clusters, [stray]).run()
    assert placements(rsp) == {0: ("b", {"vllm": "h100"})}
