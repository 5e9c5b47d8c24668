"""Pod security (#33 finding 7): every composed pod meets its cluster's Pod Security level.

Every pod the composer writes (engines, gang leaders and workers, the P/D
routing sidecar, the endpoint picker, the cache's hydration Job) is checked
against the Pod Security Standards' own controls (pod_security_standards.py)
for every example deployment, rendered on the example fleet: stage 1 places it,
stage 2 composes each replica. The level is the InferenceCluster's
`spec.podSecurity.enforce` (restricted unless the platform says otherwise).
"""

from __future__ import annotations

import copy

import pytest
from builders import EXAMPLES, load, load_one, request
from composer_support import (
    FLEET,
    as_composed,
    cluster,
    compose,
    inner,
    replica,
    standalone,
    template,
)
from pod_security_standards import pods_of, violations

from function.composer.modelcache import REQUIRE_SECRET
from function.composer.podsecurity import NAMESPACE_LABEL
from function.contract.api import (
    REQUIRE_CLUSTER,
    REQUIRE_OWNER,
    REQUIRE_CLUSTERS,
    REQUIRE_MODEL_CACHE,
    REQUIRE_REPLICAS,
)
from function.kit import structs
from function.runtime import fn
from function.tools import localrender

ALL_FLEET = load(EXAMPLES / "fleet")
DEPLOYMENTS = sorted((EXAMPLES / "deployments").glob("*.yaml")) + [
    EXAMPLES / "caches" / "qwen3-8b-deployment.yaml"]
CACHE = load_one(EXAMPLES / "caches" / "qwen3-8b.yaml")


def ready_cache() -> dict:
    mc = copy.deepcopy(CACHE)
    mc["status"] = {"clusters": [{"name": c["metadata"]["name"], "phase": "Ready"}
                                 for c in ALL_FLEET]}
    return mc


def placed(path) -> list[dict]:
    """Stage 1: the ModelReplicas the example places on the example fleet."""
    md = load_one(path)
    rsp = fn.run_function(request(md, required={
        REQUIRE_CLUSTERS: ALL_FLEET, REQUIRE_REPLICAS: [], REQUIRE_MODEL_CACHE: [ready_cache()]}))
    # As Crossplane creates them (owned and labelled), so the composer trusts them.
    mrs = [as_composed(structs.to_dict(r.resource))
           for k, r in sorted(rsp.desired.resources.items())
           if structs.to_dict(r.resource).get("kind") == "ModelReplica"]
    assert mrs, f"{path.name} places no replica on the example fleet"
    return mrs


def composed(mr: dict, ic: dict | None = None) -> list[dict]:
    """Stage 2: the replica's objects as they land on its cluster (Objects unwrapped)."""
    ic = ic or FLEET[mr["spec"]["clusterName"]]
    required = {REQUIRE_CLUSTER: [ic], REQUIRE_OWNER: [localrender.placing_deployment(mr)]}
    if mr["spec"].get("modelCacheRef"):
        required[REQUIRE_MODEL_CACHE] = [ready_cache()]
    rsp = fn.run_function(request(mr, required=required))
    assert not [r.message for r in rsp.results if r.severity == 1]
    return [inner(structs.to_dict(r.resource)) for _, r in sorted(rsp.desired.resources.items())]


def pods(objects: list[dict]) -> list[tuple[str, dict]]:
    return [p for o in objects for p in pods_of(o)]


def is_epp(pod: dict) -> bool:
    return [c["name"] for c in pod["spec"]["containers"]] == ["epp"]


@pytest.mark.parametrize("path", DEPLOYMENTS, ids=lambda p: p.stem)
def test_every_composed_pod_of_every_example_meets_the_restricted_standard(path):
    for mr in placed(path):
        objects = composed(mr)
        found = pods(objects)
        assert found, f"{mr['metadata']['name']} composes no pod"
        for where, pod in found:
            assert violations(pod, "restricted") == [], where
        for ns in (o for o in objects if o["kind"] == "Namespace"):
            assert ns["metadata"]["labels"][NAMESPACE_LABEL] == "restricted"


def test_the_cache_hydration_pods_meet_the_restricted_standard_as_the_downloader_user():
    required = {REQUIRE_CLUSTERS: ALL_FLEET, REQUIRE_REPLICAS: [],
                REQUIRE_SECRET: [{"apiVersion": "v1", "kind": "Secret",
                                  "metadata": {"name": "hf-token", "namespace": "ml-team"}}]}
    first = fn.run_function(request(CACHE, required=required))
    # eu-west-1's Job waits until its observe-only Object finds the Secret there.
    auth = structs.to_dict(first.desired.resources["eu-west-1-auth"].resource)
    auth["status"] = {"conditions": [{"type": "Ready", "status": "True"},
                                     {"type": "Synced", "status": "True"}]}
    rsp = fn.run_function(request(CACHE, required=required, observed={"eu-west-1-auth": auth}))
    objects = [inner(structs.to_dict(r.resource)) for r in rsp.desired.resources.values()]
    jobs = [o for o in objects if o["kind"] == "Job"]
    assert len(jobs) == 2  # us-east-1 and eu-west-1 have storage
    for where, pod in pods(jobs):
        assert violations(pod, "restricted") == [], where
        assert pod["spec"]["securityContext"]["runAsUser"] == 1000
        assert pod["spec"]["automountServiceAccountToken"] is False
    (ns,) = [o for o in objects if o["kind"] == "Namespace"]
    assert ns["metadata"]["labels"] == {NAMESPACE_LABEL: "restricted"}


def remote(level: str) -> dict:
    return cluster("eu-west-1", podSecurity={"enforce": level})


def pd_on(ic: dict) -> list[dict]:
    (mr, *_) = placed(EXAMPLES / "deployments" / "prefill-decode.yaml")
    mr["spec"]["clusterName"] = ic["metadata"]["name"]
    return composed(mr, ic)


def test_a_baseline_cluster_runs_root_images_and_still_meets_baseline():
    objects = pd_on(remote("baseline"))
    for where, pod in pods(objects):
        assert violations(pod, "baseline") == [], where
        if not is_epp(pod):
            assert "runAsNonRoot" not in pod["spec"]["securityContext"], where
            assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (ns,) = [o for o in objects if o["kind"] == "Namespace"]
    assert ns["metadata"]["labels"] == {NAMESPACE_LABEL: "baseline"}


def test_a_privileged_cluster_sets_nothing_on_engine_pods_and_labels_its_namespace_so():
    objects = pd_on(remote("privileged"))
    engines = [p for _, p in pods(objects) if not is_epp(p)]
    assert engines
    for pod in engines:
        assert "securityContext" not in pod["spec"]
        assert pod["spec"]["automountServiceAccountToken"] is False  # not a level: always
    (ns,) = [o for o in objects if o["kind"] == "Namespace"]
    assert ns["metadata"]["labels"] == {NAMESPACE_LABEL: "privileged"}


def test_only_the_endpoint_picker_keeps_a_service_account_token():
    objects = composed(placed(EXAMPLES / "deployments" / "throughput-epp.yaml")[0])
    for where, pod in pods(objects):
        spec = pod["spec"]
        if is_epp(pod):
            # It watches its InferencePool and the pool's pods (its Role).
            assert spec["serviceAccountName"] and "automountServiceAccountToken" not in spec
        else:
            assert spec["automountServiceAccountToken"] is False, where


def test_the_inventory_reporter_composed_on_a_remote_cluster_meets_the_restricted_standard():
    from function.cluster import reporter
    from function.contract.records import parse_cluster
    objects = [inner(o) for o in reporter.objects(parse_cluster(FLEET["eu-west-1"])).values()]
    (pod,) = [p for _, p in pods(objects)]
    assert violations(pod, "restricted") == []


def test_the_level_never_touches_engine_flags():
    for path in DEPLOYMENTS:
        md = load_one(path)
        written = {e["name"]: [(c.get("command"), c.get("args")) for m in e["members"]
                               for c in m["template"]["spec"]["containers"]]
                   for e in md["spec"]["template"]["spec"]["engines"]}
        for mr in placed(path):
            for _, pod in pods(composed(mr)):
                engine = next((c for c in pod["spec"]["containers"] if c["name"] == "engine"),
                              None)
                if engine is not None:
                    name = pod["metadata"]["labels"]["modelplane.ai/engine"]
                    assert (engine.get("command"), engine.get("args")) in written[name]


DENIED = {"container.apparmor.security.beta.kubernetes.io/engine": "unconfined",
          "k8s.v1.cni.cncf.io/networks": "host-net",
          "sidecar.istio.io/inject": "false",
          "vault.hashicorp.com/agent-inject": "true",
          "cdi.k8s.io/gpus": "nvidia.com/gpu=all"}


# Keys the denylist once missed (#48 finding 6): networks and fixed IPs, a mesh's
# bypass, a runtime's hypervisor, autoscalers' eviction guards. The allowlist drops them
# without naming them.
UNNAMED = {"networking.gke.io/interfaces": "[...]", "networking.gke.io/default-interface": "eth1",
           "ovn.kubernetes.io/ip_address": "10.16.0.15", "cni.projectcalico.org/ipAddrs": "[...]",
           "ambient.istio.io/redirection": "disabled",
           "io.katacontainers.config.hypervisor.kernel_params": "x",
           "karpenter.sh/do-not-disrupt": "true",
           "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


def test_annotations_and_labels_that_ask_the_cluster_for_more_are_dropped_with_a_warning():
    kept = {"owner": "ml"}
    t = template(annotations={**DENIED, **UNNAMED, **kept, "team.example.com/owner": "ml"},
                 labels={"sidecar.istio.io/inject": "false", "app": "llama"})
    out = compose(replica(standalone(template=t)))
    (pod,) = [p for _, p in pods(out.of_kind("Deployment"))]
    assert pod["metadata"]["annotations"] == kept
    assert "sidecar.istio.io/inject" not in pod["metadata"]["labels"]
    assert pod["metadata"]["labels"]["app"] == "llama"
    said = " ".join(out.warnings)
    for key in [*DENIED, *UNNAMED, "team.example.com/owner"]:
        assert key in said
    assert violations(pod, "restricted") == []


def test_a_cluster_opens_its_own_prefixes_but_never_a_denied_one():
    t = template(annotations={**DENIED, "team.example.com/owner": "ml", "owner": "ml"})
    ic = cluster("eu-west-1", podSecurity={"allowedMetadataPrefixes": [
        "team.example.com/", "sidecar.istio.io/"]})
    out = compose(replica(standalone(template=t, pool="l4-4x"), cluster="eu-west-1"), ic)
    (pod,) = [p for _, p in pods(out.of_kind("Deployment"))]
    # What the cluster opens passes; what it may not open stays dropped.
    assert pod["metadata"]["annotations"] == {"team.example.com/owner": "ml", "owner": "ml"}


def test_the_standards_checks_find_what_admission_would_refuse():
    """The checks themselves: an unhardened pod breaks each restricted control it should,
    and a default pod (nothing set) passes baseline and fails restricted."""
    bad = {"metadata": {"annotations": {
        "container.apparmor.security.beta.kubernetes.io/c": "unconfined"}},
        "spec": {"hostNetwork": True, "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
                 "securityContext": {"runAsUser": 0, "sysctls": [{"name": "kernel.msgmax"}]},
                 "containers": [{"name": "c", "ports": [{"containerPort": 1, "hostPort": 1}],
                                 "securityContext": {
                                     "privileged": True, "procMount": "Unmasked",
                                     "capabilities": {"add": ["SYS_ADMIN"]},
                                     "seccompProfile": {"type": "Unconfined"},
                                     "seLinuxOptions": {"type": "spc_t"}}}]}}
    controls = {v.split(":")[0] for v in violations(bad, "restricted")}
    assert controls == {"Host Namespaces", "Privileged Containers", "Capabilities",
                        "HostPath Volumes", "Host Ports", "AppArmor", "SELinux",
                        "/proc Mount Type", "Seccomp", "Sysctls", "Volume Types",
                        "Privilege Escalation", "Running as Non-root",
                        "Running as Non-root user"}
    plain = {"spec": {"containers": [{"name": "c"}], "volumes": [{"name": "e", "emptyDir": {}}]}}
    assert violations(plain, "baseline") == []
    assert {v.split(":")[0] for v in violations(plain, "restricted")} == {
        "Privilege Escalation", "Running as Non-root", "Seccomp", "Capabilities"}


def test_a_level_outside_the_enum_makes_the_cluster_unusable_never_weaker():
    ic = cluster("eu-west-1", podSecurity={"enforce": "none"})
    (mr, *_) = placed(EXAMPLES / "deployments" / "prefill-decode.yaml")
    mr["spec"]["clusterName"] = "eu-west-1"
    out = compose(mr, ic)
    assert not out.desired  # nothing observed, nothing composed from a malformed cluster
    status, reason, message = out.condition("ClusterResolved")
    assert (status, reason) == ("False", "ClusterMalformed") and "podSecurity" in message
