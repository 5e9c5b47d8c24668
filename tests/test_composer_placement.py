"""Where objects go: directly on the control plane, or wrapped for a remote cluster."""

from __future__ import annotations

from composer_support import (
    LOCAL,
    REMOTE,
    cluster,
    compose,
    gang,
    inner,
    replica,
    standalone,
)

from function.composer.kinds import cel_ready

OBJECT = ("kubernetes.m.crossplane.io/v1alpha1", "Object")


def remote_replica(**kw):
    engines = kw.pop("engines", None) or (standalone(pool="l4-4x"),
                                          gang("big", pool="h100-8x-rdma"))
    return replica(*engines, cluster=REMOTE, name=kw.pop("name", "llama-eu-west-1-0"), **kw)


def test_on_the_control_plane_objects_are_composed_directly_in_the_replicas_namespace():
    out = compose(replica(gang(), standalone("s"), namespace="team-a"))
    kinds = sorted(m["kind"] for m in out.desired.values())
    assert kinds == ["Deployment", "HTTPRoute", "HTTPRoute", "LeaderWorkerSet",
                     "ResourceClaimTemplate",
                     "ResourceClaimTemplate", "ResourceClaimTemplate", "Service"]
    assert {m["metadata"]["namespace"] for m in out.desired.values()} == {"team-a"}


def test_on_a_remote_cluster_every_object_is_wrapped_in_a_provider_kubernetes_object():
    out = compose(remote_replica())
    assert out.desired
    for key, obj in out.desired.items():
        assert (obj["apiVersion"], obj["kind"]) == OBJECT, key
        assert obj["spec"]["providerConfigRef"] == {"name": "eu-west-1",
                                                    "kind": "ClusterProviderConfig"}
        assert obj["metadata"]["namespace"] == "ml-team"
    inner_kinds = sorted(inner(o)["kind"] for o in out.desired.values())
    assert inner_kinds == ["Deployment", "HTTPRoute", "HTTPRoute", "LeaderWorkerSet",
                           "Namespace",
                           "ResourceClaimTemplate", "ResourceClaimTemplate",
                           "ResourceClaimTemplate", "Service"]


def test_remote_objects_land_in_a_namespace_named_like_the_replicas():
    out = compose(remote_replica(namespace="team-a"))
    for obj in out.desired.values():
        manifest = inner(obj)
        if manifest["kind"] == "Namespace":
            assert manifest["metadata"]["name"] == "team-a"
        else:
            assert manifest["metadata"]["namespace"] == "team-a"


def test_the_shared_remote_namespace_is_never_deleted_with_a_replica():
    ns = compose(remote_replica()).desired["namespace"]
    # crossplane-runtime's supported "No Delete" set: everything but Delete.
    assert ns["spec"]["managementPolicies"] == ["Observe", "Create", "Update", "LateInitialize"]


def test_a_provider_config_kind_defaults_to_cluster_provider_config():
    ic = cluster("us-central-batch")  # providerConfigRef without kind
    mr = replica(standalone(pool="h200-8x-rdma"), cluster="us-central-batch")
    (obj,) = [o for o in compose(mr, ic).desired.values()][:1]
    assert obj["spec"]["providerConfigRef"] == {"name": "us-central-batch",
                                                "kind": "ClusterProviderConfig"}


def test_a_namespaced_provider_config_is_referenced_by_its_kind():
    ic = cluster(REMOTE, providerConfigRef={"name": "team-pc", "kind": "ProviderConfig"})
    out = compose(remote_replica(), ic)
    refs = {(o["spec"]["providerConfigRef"]["name"], o["spec"]["providerConfigRef"]["kind"])
            for o in out.desired.values()}
    assert refs == {("team-pc", "ProviderConfig")}


def test_remote_workloads_and_routes_are_ready_only_when_the_remote_object_is():
    out = compose(remote_replica())
    for key, obj in out.desired.items():
        manifest = inner(obj)
        query = cel_ready(manifest)
        if manifest["kind"] in ("Deployment", "LeaderWorkerSet", "HTTPRoute"):
            assert obj["spec"]["readiness"] == {"policy": "DeriveFromCelQuery",
                                                "celQuery": query}, key
            # Status that follows the remote object is watched, not polled.
            assert obj["spec"]["watch"] is True, key
        else:
            assert obj["spec"]["readiness"] == {"policy": "SuccessfulCreate"}, key
            assert "watch" not in obj["spec"], key


def test_two_same_named_deployments_in_two_namespaces_get_disjoint_remote_names():
    # The scheduler names replicas <deployment>-<cluster>-<index>: the same
    # deployment name in two namespaces gives the same replica name.
    a = compose(remote_replica(namespace="team-a"))
    b = compose(remote_replica(namespace="team-b"))

    def names(out):
        return ({o["metadata"]["name"] for o in out.desired.values()}
                | {inner(o)["metadata"]["name"] for o in out.desired.values()
                   if inner(o)["kind"] != "Namespace"})

    assert names(a) and names(b)
    assert not names(a) & names(b)


def test_two_same_named_deployments_in_two_namespaces_get_disjoint_local_names():
    a = compose(replica(gang(), namespace="team-a"))
    b = compose(replica(gang(), namespace="team-b"))
    assert not ({m["metadata"]["name"] for m in a.desired.values()}
                & {m["metadata"]["name"] for m in b.desired.values()})


def test_replicas_whose_dashed_names_read_alike_never_collide():
    a = compose(replica(standalone("c"), name="a-b"))
    b = compose(replica(standalone("b-c"), name="a"))
    assert not ({m["metadata"]["name"] for m in a.desired.values()}
                & {m["metadata"]["name"] for m in b.desired.values()})


def test_remote_names_stay_within_63_characters():
    # 63 is the longest composite name Crossplane accepts (names become label values).
    out = compose(remote_replica(name="r" * 63, namespace="n" * 63,
                                 engines=(standalone("e" * 63, pool="l4-4x"),)))
    assert out.desired and not out.fatal
    for obj in out.desired.values():
        assert len(obj["metadata"]["name"]) <= 63
        assert len(inner(obj)["metadata"]["name"]) <= 63


def test_names_are_stable_across_reconciles():
    assert compose(remote_replica()).desired == compose(remote_replica()).desired


def test_a_local_cluster_composes_no_namespace():
    assert "namespace" not in compose(replica()).desired
    assert LOCAL == "us-east-1"
