"""Backends: engines become Deployments or LeaderWorkerSets with claimed devices."""

from __future__ import annotations

import copy
import re

import pytest

from composer_support import (
    GPU_SELECTOR as GPU,
    LOCAL,
    REMOTE,
    cluster,
    compose,
    container,
    device,
    engine_container,
    gang,
    inner,
    member,
    pod_templates,
    replica,
    standalone,
    template,
)

from function.composer import naming
from function.composer.pods import ENV_LEADER_ADDRESS, ENV_RANK

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def env_names(c):
    return [e["name"] for e in c.get("env") or []]


# --- Standalone -> Deployment -----------------------------------------------------


def test_a_standalone_engine_becomes_a_deployment_with_one_pod_per_copy():
    out = compose(replica(standalone(copies=3)))
    (dep,) = out.of_kind("Deployment")
    assert dep["apiVersion"] == "apps/v1"
    assert dep["spec"]["replicas"] == 3
    assert not out.of_kind("LeaderWorkerSet")
    assert "vllm-deployment" in out.desired


def test_a_deployment_selects_only_its_own_pods():
    out = compose(replica(standalone("a"), standalone("b")))
    deps = out.of_kind("Deployment")
    assert len(deps) == 2
    selectors = [d["spec"]["selector"]["matchLabels"] for d in deps]
    assert selectors[0] != selectors[1]
    for dep, sel in zip(deps, selectors):
        assert sel == {naming.LABEL_WORKLOAD: dep["metadata"]["name"]}
        labels = dep["spec"]["template"]["metadata"]["labels"]
        assert all(labels[k] == v for k, v in sel.items())


def test_a_rollout_replaces_pods_without_surging_past_the_planned_nodes():
    (dep,) = compose(replica()).of_kind("Deployment")
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate",
                                       "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def test_a_slow_model_load_is_not_reported_as_a_stalled_rollout():
    (dep,) = compose(replica()).of_kind("Deployment")
    assert dep["spec"]["progressDeadlineSeconds"] >= 3600


# --- Leader + Worker -> LeaderWorkerSet ---------------------------------------------


def test_a_gang_becomes_a_leaderworkerset_of_leader_plus_worker_nodes():
    out = compose(replica(gang(copies=2, nodes=3)))
    (lws,) = out.of_kind("LeaderWorkerSet")
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["spec"]["replicas"] == 2
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 4
    assert not out.of_kind("Deployment")
    assert "vllm-leaderworkerset" in out.desired


def test_a_gang_waits_only_for_its_leader_pod_to_exist():
    (lws,) = compose(replica(gang())).of_kind("LeaderWorkerSet")
    assert lws["spec"]["startupPolicy"] == "LeaderCreated"


def test_a_gang_restarts_as_a_whole_when_one_pod_restarts():
    (lws,) = compose(replica(gang())).of_kind("LeaderWorkerSet")
    assert lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"


def test_the_leader_and_worker_templates_come_from_their_members():
    leader = template(args=["leader-flags"])
    worker = template(args=["worker-flags"])
    (lws,) = compose(replica(gang(leader=leader, worker=worker))).of_kind("LeaderWorkerSet")
    lead, work = pod_templates(lws)
    assert engine_container(lead)["args"] == ["leader-flags"]
    assert engine_container(work)["args"] == ["worker-flags"]
    assert lead["metadata"]["labels"][naming.LABEL_ROLE] == "Leader"
    assert work["metadata"]["labels"][naming.LABEL_ROLE] == "Worker"


def test_gang_pods_learn_their_leader_address_and_rank_from_leaderworkerset():
    (lws,) = compose(replica(gang())).of_kind("LeaderWorkerSet")
    for pod in pod_templates(lws):
        env = {e["name"]: e for e in engine_container(pod)["env"]}
        assert env[ENV_LEADER_ADDRESS] == {"name": ENV_LEADER_ADDRESS,
                                           "value": "$(LWS_LEADER_ADDRESS)"}
        assert env[ENV_RANK]["valueFrom"] == {"fieldRef": {
            "fieldPath": "metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"}}


def test_gang_variables_come_first_so_user_variables_can_refer_to_them():
    worker = template(env=[{"name": "RAY_ADDRESS", "value": "$(MODELPLANE_LEADER_ADDRESS):6379"}])
    (lws,) = compose(replica(gang(worker=worker))).of_kind("LeaderWorkerSet")
    _, work = pod_templates(lws)
    assert env_names(engine_container(work)) == [ENV_LEADER_ADDRESS, ENV_RANK, "RAY_ADDRESS"]


def test_a_template_cannot_override_the_gang_variables_and_is_told_so():
    leader = template(env=[{"name": ENV_RANK, "value": "7"}, {"name": "A", "value": "1"}])
    out = compose(replica(gang(leader=leader)))
    lead, _ = pod_templates(out.one("LeaderWorkerSet"))
    env = engine_container(lead)["env"]
    assert [e["name"] for e in env] == [ENV_LEADER_ADDRESS, ENV_RANK, "A"]
    assert "value" not in env[1]
    assert any(ENV_RANK in w for w in out.warnings)


def test_standalone_pods_get_no_gang_variables():
    (dep,) = compose(replica()).of_kind("Deployment")
    assert ENV_RANK not in env_names(engine_container(dep["spec"]["template"]))


# --- what passes through --------------------------------------------------------------


def test_engine_args_pass_through_verbatim():
    args = ["--model", "x", "--kv-transfer-config", '{"kv_connector":"NixlConnector"}',
            "$((MODELPLANE_RANK * 8))", "--port=8200"]
    command = ["/bin/sh", "-c"]
    out = compose(replica(gang(leader=template(args=args, command=command),
                               worker=template(args=args, command=command))))
    for pod in pod_templates(out.one("LeaderWorkerSet")):
        assert engine_container(pod)["args"] == args
        assert engine_container(pod)["command"] == command


def test_a_template_without_command_or_args_gets_none():
    t = {"spec": {"containers": [{"name": "engine", "image": "img:1"}]}}
    (dep,) = compose(replica(standalone(template=t))).of_kind("Deployment")
    c = engine_container(dep["spec"]["template"])
    assert "command" not in c and "args" not in c


def test_user_env_image_pull_policy_and_resources_pass_through():
    env = [{"name": "A", "value": "1"},
           {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
           {"name": "CFG", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k",
                                                             "optional": True}}},
           {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    resources = {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"memory": "24Gi"}}
    t = template(env=env, resources=resources, imagePullPolicy="IfNotPresent",
                 image="registry.example.com/vllm:1")
    (dep,) = compose(replica(standalone(template=t))).of_kind("Deployment")
    c = engine_container(dep["spec"]["template"])
    assert c["env"] == env
    assert c["image"] == "registry.example.com/vllm:1"
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert {k: v for k, v in c["resources"].items() if k != "claims"} == resources


def test_pod_labels_annotations_and_pull_secrets_pass_through():
    t = template(labels={"team": "a", "app.kubernetes.io/name": "x"},
                 annotations={"owner": "me"},
                 pull_secrets=[{"name": "registry-credentials"}])
    (dep,) = compose(replica(standalone(template=t))).of_kind("Deployment")
    pod = dep["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "a"
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "x"
    assert pod["metadata"]["annotations"] == {"owner": "me"}
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry-credentials"}]


def test_service_links_are_off_so_a_service_named_vllm_cannot_set_vllm_port():
    (dep,) = compose(replica()).of_kind("Deployment")
    assert dep["spec"]["template"]["spec"]["enableServiceLinks"] is False


# --- pools, taints and devices ----------------------------------------------------


def test_every_pod_is_pinned_to_its_pool_and_tolerates_its_taints():
    out = compose(replica(gang()))  # us-east-1 h100-8x: nvidia.com/gpu:NoSchedule
    for pod in pod_templates(out.one("LeaderWorkerSet")):
        assert pod["spec"]["nodeSelector"] == {"modelplane.ai/pool": "h100-8x"}
        assert pod["spec"]["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_a_taint_with_a_value_is_tolerated_by_that_value():
    ic = cluster(LOCAL)
    ic["spec"]["nodePools"][0]["taints"] = [{"key": "dedicated", "value": "llm",
                                             "effect": "NoExecute"}]
    (dep,) = compose(replica(), ic).of_kind("Deployment")
    assert dep["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoExecute"}]


def test_a_pool_without_taints_adds_no_tolerations():
    out = compose(replica(standalone(pool="cpu", devices=[device(
        "cpu", claim="Synthetic", device_class="", selectors=())])))
    pod = out.one("Deployment")["spec"]["template"]
    assert "tolerations" not in pod["spec"]
    assert pod["spec"]["nodeSelector"] == {"modelplane.ai/pool": "cpu"}


def test_each_device_request_becomes_an_exact_count_claim_request():
    rdma = ('device.driver == "dra.net"', 'device.attributes["dra.net"].rdma')
    devices = [device("gpu", count=4), device("rdma", count=2, device_class="dranet",
                                              selectors=rdma)]
    out = compose(replica(standalone(devices=devices)))
    rct = out.one("ResourceClaimTemplate")
    assert rct["apiVersion"] == "resource.k8s.io/v1"

    def cel(*expressions):
        return [{"cel": {"expression": e}} for e in expressions]

    assert rct["spec"]["spec"]["devices"]["requests"] == [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4,
                                    "allocationMode": "ExactCount", "selectors": cel(GPU)}},
        {"name": "rdma", "exactly": {"deviceClassName": "dranet", "count": 2,
                                     "allocationMode": "ExactCount", "selectors": cel(*rdma)}}]


def test_the_pod_references_its_claim_template_and_the_engine_claims_it():
    out = compose(replica())
    rct = out.one("ResourceClaimTemplate")
    pod = out.one("Deployment")["spec"]["template"]
    (claim,) = pod["spec"]["resourceClaims"]
    assert claim["resourceClaimTemplateName"] == rct["metadata"]["name"]
    assert engine_container(pod)["resources"]["claims"] == [{"name": claim["name"]}]


def test_the_claims_made_from_a_template_carry_the_replicas_labels():
    # Kubernetes copies spec.metadata onto each ResourceClaim it makes from the
    # template: that is how observed allocations tell this project's claims,
    # which the scheduler charges itself, from everyone else's (contract/allocated.py).
    rct = compose(replica()).one("ResourceClaimTemplate")
    assert rct["spec"]["metadata"] == {"labels": {"modelplane.ai/deployment": "llama",
                                                  "modelplane.ai/replica": "llama-us-east-1-0"}}


@pytest.mark.parametrize("where", [LOCAL, REMOTE])
def test_a_template_composed_before_the_labels_is_left_as_it_is(where):
    # A template's spec is immutable: adding spec.metadata to one that exists
    # would fail on the API server, so it stays as it was composed.
    mr = replica(standalone(pool="l4" if where == LOCAL else "l4-4x"), cluster=where)
    fresh = compose(mr)
    key, composed = next((k, v) for k, v in fresh.desired.items()
                         if inner(v)["kind"] == "ResourceClaimTemplate")
    old = copy.deepcopy(composed)
    inner(old)["spec"].pop("metadata")
    again = compose(mr, observed={key: old})
    assert "metadata" not in inner(again.desired[key])["spec"]
    assert again.desired[key] == old
    # Everything else composes as before; a template with its labels keeps them.
    assert {k: v for k, v in again.desired.items() if k != key} == \
        {k: v for k, v in fresh.desired.items() if k != key}
    assert compose(mr, observed={key: composed}).desired[key] == composed


def test_synthetic_devices_are_never_claimed():
    devices = [device("gpu", count=8),
               device("fabric", claim="Synthetic", device_class="",
                      selectors=('device.attributes["fabric.example.com"].type == "infiniband"',))]
    out = compose(replica(standalone(pool="h100-8x", devices=devices)))
    rct = out.one("ResourceClaimTemplate")
    assert [r["name"] for r in rct["spec"]["spec"]["devices"]["requests"]] == ["gpu"]


def test_a_member_with_only_synthetic_devices_gets_no_claim_at_all():
    out = compose(replica(standalone(pool="cpu", devices=[device(
        "cpu", claim="Synthetic", device_class="", selectors=())])))
    assert not out.of_kind("ResourceClaimTemplate")
    pod = out.one("Deployment")["spec"]["template"]
    assert "resourceClaims" not in pod["spec"]
    assert "claims" not in engine_container(pod).get("resources", {})


def test_a_claimless_leader_gets_no_claim_but_its_workers_do():
    out = compose(replica(gang(leader_devices=[], nodes=2)))
    (rct,) = out.of_kind("ResourceClaimTemplate")
    lead, work = pod_templates(out.one("LeaderWorkerSet"))
    assert "resourceClaims" not in lead["spec"]
    assert work["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == \
        rct["metadata"]["name"]
    # The leader still rides on the engine's pool.
    assert lead["spec"]["nodeSelector"] == {"modelplane.ai/pool": "h100-8x"}
    assert set(out.desired) >= {"vllm-worker-claims"} and "vllm-leader-claims" not in out.desired


def test_leader_and_worker_each_get_their_own_claim_template():
    out = compose(replica(gang()))
    rcts = out.of_kind("ResourceClaimTemplate")
    assert len({r["metadata"]["name"] for r in rcts}) == 2
    lead, work = pod_templates(out.one("LeaderWorkerSet"))
    assert lead["spec"]["resourceClaims"] != work["spec"]["resourceClaims"]


# --- labels ---------------------------------------------------------------------------


def test_every_label_value_is_valid_and_at_most_63_characters():
    long = "a" * 60 + ".b" * 60  # a ModelReplica name may be a 253-character subdomain
    out = compose(replica(gang(), standalone("x" * 63), name=long[:253],
                          deployment="d" * 63))
    for m in out.manifests().values():
        pods = pod_templates(m) if m["kind"] in ("Deployment", "LeaderWorkerSet") else []
        for labels in [m["metadata"].get("labels") or {}] + [p["metadata"]["labels"] for p in pods]:
            for value in labels.values():
                assert len(value) <= 63 and LABEL_VALUE.match(value), value


def test_every_object_name_is_a_dns_label_of_at_most_63_characters():
    long = "m" * 63  # the longest composite name Crossplane accepts
    out = compose(replica(gang(name="e" * 63), standalone("s" * 63), name=long))
    assert out.desired and not out.fatal
    for c in out.desired.values():
        assert len(c["metadata"]["name"]) <= 63 and DNS_1035.match(c["metadata"]["name"])
    for m in out.manifests().values():
        assert len(m["metadata"]["name"]) <= 63 and DNS_1035.match(m["metadata"]["name"])


def test_leaderworkerset_names_leave_room_for_the_names_lws_derives():
    out = compose(replica(gang(name="e" * 63), name="m" * 63))
    name = out.one("LeaderWorkerSet")["metadata"]["name"]
    # <lws>-<group>-<worker> pod names and <lws>-<group>-<10-char revision hash>
    assert len(f"{name}-255-256") <= 63 and len(f"{name}-255-abcdef0123") <= 63


def test_every_pod_carries_the_replica_engine_role_and_workload_labels():
    out = compose(replica(gang("g"), standalone("s")))
    for kind in ("Deployment", "LeaderWorkerSet"):
        for workload in out.of_kind(kind):
            for pod in pod_templates(workload):
                labels = pod["metadata"]["labels"]
                assert labels[naming.LABEL_REPLICA] == "llama-us-east-1-0"
                assert labels[naming.LABEL_ENGINE] in ("g", "s")
                assert labels[naming.LABEL_WORKLOAD] == workload["metadata"]["name"]


def test_the_container_is_always_the_curated_engine_container():
    extra = container()
    extra["securityContext"] = {"privileged": True}  # not in the schema: never copied
    out = compose(replica(standalone(template={"spec": {"containers": [extra]}})))
    c = engine_container(out.one("Deployment")["spec"]["template"])
    # The cluster's level alone writes it (podsecurity.py), never the template.
    assert c["securityContext"] == {"allowPrivilegeEscalation": False,
                                    "capabilities": {"drop": ["ALL"]}}


def test_each_engine_is_pinned_to_its_own_pool():
    mr = replica(standalone("small"), standalone("big"))
    mr["spec"]["engines"][1]["members"] = [member("Standalone", "h100-8x", [device(count=8)])]
    pools = {d["metadata"]["labels"][naming.LABEL_ENGINE]:
             d["spec"]["template"]["spec"]["nodeSelector"]["modelplane.ai/pool"]
             for d in compose(mr).of_kind("Deployment")}
    assert pools == {"small": "l4", "big": "h100-8x"}


def test_names_start_with_a_letter_as_service_names_must():
    out = compose(replica(gang("7b"), name="70b-us-east-1-0"))
    for m in list(out.desired.values()) + list(out.manifests().values()):
        assert DNS_1035.match(m["metadata"]["name"]), m["metadata"]["name"]
