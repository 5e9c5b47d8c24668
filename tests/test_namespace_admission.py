"""Which namespaces may use which clusters: InferenceCluster spec.namespaceSelector (#33).

The platform team admits namespaces to a cluster by their labels. The scheduler
places no new replica of another namespace there (a named filter step with its
own reason), whatever the deployment tolerates; the composer composes nothing
new for a replica there and keeps what it already composed. Replicas already
placed when the selector narrows stay, as under a NoSchedule taint.
"""

from __future__ import annotations

import pytest
import yaml
from builders import ROOT, composite, desired, load, load_one, request
from composer_support import compose, replica, standalone
from composer_support import cluster as example_cluster
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from fleetgen import (
    NS,
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
    taint,
)

from function.composer.modelcache import REQUIRE_SECRET
from function.contract.api import REQUIRE_CLUSTERS, REQUIRE_OWN_NAMESPACE, REQUIRE_REPLICAS
from function.contract.records import Malformed, parse_cluster
from function.contract.selectors import SelectorError, parse_selector
from function.runtime import fn

H100 = device("gpu", "H100", count=1)  # one GPU a node: a one-GPU replica takes a node
TEAM_A = {"tenant": "a"}


def namespace(name: str = NS, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name,
                                                  **labels}}}


def admitting(name: str, selector: dict | None, **kw) -> dict:
    ic = cluster(name, pool("h100", 4, H100), **kw)
    if selector is not None:
        ic["spec"]["namespaceSelector"] = selector
    return ic


ONLY_TEAM_A = {"matchLabels": TEAM_A}


# --- the scheduler ---------------------------------------------------------------


def test_the_scheduler_requires_its_own_namespace_by_name():
    rsp = World(deployment("llama"), []).run(resolved=False)
    sel = rsp.requirements.resources[REQUIRE_OWN_NAMESPACE]
    assert (sel.api_version, sel.kind, sel.match_name) == ("v1", "Namespace", NS)


def test_a_cluster_that_does_not_admit_the_namespace_gets_no_replica_and_says_why():
    clusters = [admitting("a", ONLY_TEAM_A), cluster("b", pool("h100", 1, H100))]
    world = World(deployment("llama", replicas=2), clusters, namespaces=[namespace(tenant="b")])
    rsp = world.run()
    assert {c for c, _ in placements(rsp).values()} == {"b"}
    (short,) = status(rsp)["unscheduled"]
    assert {"name": "a", "reason": "does not admit namespace ml-team (spec.namespaceSelector)"} \
        in short["clusters"]


@pytest.mark.parametrize("selector", [
    ONLY_TEAM_A,
    {"matchExpressions": [{"key": "tenant", "operator": "In", "values": ["a", "c"]}]},
    {"matchExpressions": [{"key": "tenant", "operator": "Exists"}]},
    {"matchExpressions": [{"key": "quarantined", "operator": "DoesNotExist"}]},
    {"matchExpressions": [{"key": "tenant", "operator": "NotIn", "values": ["b"]}]},
    {},
], ids=["matchLabels", "in", "exists", "does-not-exist", "not-in", "empty"])
def test_a_cluster_whose_selector_matches_the_namespace_takes_its_replicas(selector):
    world = World(deployment("llama"), [admitting("a", selector)],
                  namespaces=[namespace(**TEAM_A)])
    assert placements(world.run()) == {0: ("a", {"vllm": "h100"})}


@pytest.mark.parametrize("toleration", [
    {"operator": "Exists"},
    {"key": "dedicated", "operator": "Exists"},
], ids=["keyless-exists", "exists-key"])
def test_no_toleration_gets_past_the_namespace_selector(toleration):
    # A key-less Exists tolerates every taint; the selector is not a taint.
    clusters = [admitting("a", ONLY_TEAM_A, taints=[taint("dedicated", "NoSchedule")])]
    world = World(deployment("llama", tolerations=[toleration]), clusters,
                  namespaces=[namespace(tenant="b")])
    rsp = world.run()
    assert placements(rsp) == {}
    assert status(rsp)["unscheduled"][0]["reason"] == (
        "0/1 clusters fit replica 0: 1 does not admit namespace ml-team "
        "(spec.namespaceSelector)")


def test_a_missing_namespace_is_admitted_only_where_no_selector_is_set():
    # Not waited for: Crossplane resolved the requirement to nothing.
    clusters = [admitting("a", {}), cluster("b", pool("h100", 1, H100))]
    rsp = World(deployment("llama", replicas=2), clusters).run()
    assert {c for c, _ in placements(rsp).values()} == {"b"}
    assert status(rsp)["unscheduled"][0]["clusters"][0] == {
        "name": "a", "reason": "does not admit namespace ml-team (spec.namespaceSelector; "
                               "its Namespace was not found)"}


def test_a_narrowed_selector_keeps_the_replicas_already_placed_and_places_no_new_one():
    md = deployment("llama", replicas=2)
    mr = own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1))
    world = World(md, [admitting("a", ONLY_TEAM_A)], observed={key("a", 0): mr},
                  namespaces=[namespace(tenant="b")])
    rsp = world.run()
    assert placements(rsp) == {0: ("a", {"vllm": "h100"})}
    assert condition(rsp, "ReplicasScheduled")[:2] == ("False", "Unschedulable")
    assert "does not admit namespace ml-team" in status(rsp)["unscheduled"][0]["reason"]


def test_a_cluster_with_an_unreadable_selector_is_skipped_not_opened():
    # Read unvalidated (admission may be older than the function): malformed, not "all".
    bad = admitting("a", {"matchExpressions": [{"key": "tenant", "operator": "In"}]})
    rsp = World(deployment("llama"), [bad], namespaces=[namespace(**TEAM_A)]).run()
    assert placements(rsp) == {}
    assert any("InferenceCluster a is malformed" in r.message for r in rsp.results)


# --- the selector itself -----------------------------------------------------------


@pytest.mark.parametrize("raw, labels, selected", [
    ({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]},
     {"a": "1"}, False),
    ({"matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["x"]}]}, {}, True),
    ({"matchExpressions": [{"key": "b", "operator": "In", "values": ["x"]}]}, {}, False),
    ({"matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]}, {"b": ""}, False),
], ids=["labels-and-expressions", "not-in-absent", "in-absent", "does-not-exist-empty"])
def test_label_selectors_mean_what_kubernetes_means(raw, labels, selected):
    sel = parse_selector(raw, "s")
    assert sel is not None and sel.matches(labels) is selected


@pytest.mark.parametrize("raw", [
    {"matchExpressions": [{"key": "b", "operator": "Exists", "values": ["x"]}]},
    {"matchExpressions": [{"key": "b", "operator": "NotIn", "values": []}]},
    {"matchExpressions": [{"key": "b", "operator": "Gt", "values": ["1"]}]},
    {"matchExpressions": [{"operator": "Exists"}]},
    {"matchLabels": {"a": 1}},
    {"matchExpressions": [{"key": f"k{i}", "operator": "Exists"} for i in range(17)]},
], ids=["exists-with-values", "not-in-empty", "unknown-operator", "no-key", "not-a-string",
        "too-many"])
def test_a_selector_that_breaks_the_rules_is_refused(raw):
    with pytest.raises(SelectorError):
        parse_selector(raw, "s")
    ic = admitting("a", raw)
    with pytest.raises(Malformed):
        parse_cluster(ic)


# --- the composer --------------------------------------------------------------------


def _narrowed(selector: dict) -> dict:
    return example_cluster(namespaceSelector=selector)


def test_the_composer_requires_the_replicas_namespace_by_name():
    sel = compose(replica()).rsp.requirements.resources[REQUIRE_OWN_NAMESPACE]
    assert (sel.api_version, sel.kind, sel.match_name) == ("v1", "Namespace", "ml-team")


def test_a_replica_on_a_cluster_that_does_not_admit_its_namespace_composes_nothing():
    out = compose(replica(), _narrowed(ONLY_TEAM_A), namespaces=[namespace(tenant="b")])
    assert not out.fatal
    assert out.desired == {}
    status_, why, message = out.condition("ClusterResolved")
    assert (status_, why) == ("False", "NamespaceNotAdmitted")
    assert message.startswith("InferenceCluster us-east-1 does not admit namespace ml-team "
                              "(spec.namespaceSelector): its labels do not match tenant=a")


@pytest.mark.parametrize("namespaces, reason, said", [
    ([], "NamespaceNotAdmitted", "its Namespace was not found"),
    (None, "Resolving", "waiting for Crossplane to resolve Namespace ml-team"),
], ids=["missing", "unresolved"])
def test_a_replica_whose_namespace_is_unknown_is_not_admitted_where_a_selector_is_set(
        namespaces, reason, said):
    out = compose(replica(), _narrowed({}), namespaces=namespaces)
    assert out.desired == {}
    assert out.condition("ClusterResolved")[1] == reason
    assert said in out.condition("ClusterResolved")[2]


def test_what_a_replica_composed_is_kept_when_the_selector_narrows():
    mr = replica(standalone("s"), status={"phase": "Serving",
                                          "endpoint": "https://old.example.com/p"})
    before = compose(mr, namespaces=[namespace(tenant="b")])
    observed = {k: {**v, "status": {"readyReplicas": 1, "availableReplicas": 1}}
                for k, v in before.desired.items()}
    out = compose(mr, _narrowed(ONLY_TEAM_A), observed=observed,
                  namespaces=[namespace(tenant="b")])
    assert set(out.desired) == set(before.desired) and before.desired
    for k, obj in out.desired.items():
        assert obj["spec"] == before.desired[k]["spec"], k
    assert "existing objects are kept" in out.condition("ClusterResolved")[2]
    assert out.status["endpoint"] == "https://old.example.com/p"


def test_a_replica_whose_namespace_is_admitted_composes_as_before():
    plain = compose(replica())
    out = compose(replica(), _narrowed(ONLY_TEAM_A), namespaces=[namespace(**TEAM_A)])
    assert out.desired == plain.desired
    assert out.condition("ClusterResolved")[:2] == ("True", "Resolved")
    assert set(out.ready.values()) <= {fnv1.READY_TRUE, fnv1.READY_FALSE}


@pytest.mark.parametrize("path", sorted(
    (ROOT / "tests" / "invalid").glob("ic-namespace-selector-*.yaml")), ids=lambda p: p.stem)
def test_the_function_refuses_every_selector_the_xrd_refuses(path):
    doc = yaml.safe_load(path.read_text())
    with pytest.raises(Malformed) as err:
        parse_cluster(doc)
    expected = path.read_text().splitlines()[0].split("Invalid value: ", 1)
    if len(expected) == 2:  # a CEL rule: worded alike
        assert expected[1] in str(err.value)


# --- the cache function ----------------------------------------------------------------
# A ModelCache's volume and hydration Job are workloads of its namespace too.


def _cache_run(fleet, *, namespaces, replicas=(), observed=None):
    mc = load_one(ROOT / "examples" / "caches" / "qwen3-8b.yaml")
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "hf-token", "namespace": NS}}
    required = {REQUIRE_CLUSTERS: fleet, REQUIRE_REPLICAS: list(replicas),
                REQUIRE_SECRET: [secret]}
    if namespaces is not None:
        required[REQUIRE_OWN_NAMESPACE] = namespaces
    return fn.run_function(request(mc, required=required, observed=observed))


def _fleet(selector: dict | None) -> list[dict]:
    fleet = load(ROOT / "examples" / "fleet")
    for ic in fleet:
        if ic["metadata"]["name"] == "eu-west-1" and selector is not None:
            ic["spec"]["namespaceSelector"] = selector
    return fleet


def test_a_cache_stages_nothing_on_a_cluster_that_does_not_admit_its_namespace():
    rsp = _cache_run(_fleet(ONLY_TEAM_A), namespaces=[namespace(tenant="b")])
    assert not any(k.startswith("eu-west-1") for k in desired(rsp))
    assert any(k.startswith("us-east-1") for k in desired(rsp))
    staged = [c for c in rsp.conditions if c.type == "Staged"][0]
    assert "1 selected clusters do not admit namespace ml-team (spec.namespaceSelector): " \
        "eu-west-1" in staged.message
    assert [e["name"] for e in composite(rsp)["status"]["clusters"]] == ["us-east-1"]


def test_a_cache_keeps_its_volume_where_a_replica_uses_it_when_the_selector_narrows():
    before = desired(_cache_run(_fleet(None), namespaces=[namespace(tenant="b")]))
    observed = {k: v for k, v in before.items() if k.startswith("eu-west-1")}
    uses = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
            "metadata": {"name": "r", "namespace": NS,
                         "labels": {"modelplane.ai/model-cache": "qwen3-8b"}},
            "spec": {"clusterName": "eu-west-1", "modelCacheRef": {"name": "qwen3-8b"},
                     "engines": []}}
    rsp = _cache_run(_fleet(ONLY_TEAM_A), namespaces=[namespace(tenant="b")],
                     replicas=[uses], observed=observed)
    assert observed and set(observed) <= set(desired(rsp))


def test_a_cache_waits_for_its_namespace_where_a_selector_is_set():
    before = desired(_cache_run(_fleet(None), namespaces=[namespace(tenant="b")]))
    rsp = _cache_run(_fleet(ONLY_TEAM_A), namespaces=None, observed=before)
    assert set(desired(rsp)) == set(before)
