"""The cache function: a ModelCache staged on a volume per cluster, and what it says."""

from __future__ import annotations

import copy

import pytest
from builders import EXAMPLES, composite, conditions, desired, load, load_one, request
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.composer.modelcache import REQUIRE_SECRET, hydration
from function.contract.api import LABEL_MODEL_CACHE, REQUIRE_CLUSTERS, REQUIRE_REPLICAS
from function.contract.cacheview import claim_name
from function.runtime import fn

FLEET = load(EXAMPLES / "fleet")  # us-east-1 (local, storage), eu-west-1 (remote, storage),
#                                   us-central-batch (remote, no storage)
CACHE = load_one(EXAMPLES / "caches" / "qwen3-8b.yaml")
SECRET = {"apiVersion": "v1", "kind": "Secret",
          "metadata": {"name": "hf-token", "namespace": "ml-team"}}


def run(mc=CACHE, *, fleet=FLEET, replicas=(), secret=(SECRET,), observed=None, resolved=True):
    required = {REQUIRE_CLUSTERS: fleet, REQUIRE_REPLICAS: list(replicas),
                REQUIRE_SECRET: list(secret)} if resolved else None
    return fn.run_function(request(mc, required=required, observed=observed))


def cache(**spec) -> dict:
    mc = copy.deepcopy(CACHE)
    mc["spec"].update(spec)
    return mc


def uses(cluster: str, name: str = "qwen3-8b") -> dict:
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
            "metadata": {"name": f"r-{cluster}", "namespace": "ml-team",
                         "labels": {LABEL_MODEL_CACHE: name}},
            "spec": {"clusterName": cluster, "modelCacheRef": {"name": name}, "engines": []}}


def entries(rsp) -> dict[str, tuple[str, str]]:
    return {e["name"]: (e["phase"], e["reason"]) for e in composite(rsp)["status"]["clusters"]}


def secret_there(cluster: str = "eu-west-1", *, ready: str = "True", synced: str = "True",
                 message: str = "") -> dict:
    """The observe-only Object of the cache's Secret on `cluster`, as provider-kubernetes
    reports it."""
    obj = desired(run())[f"{cluster}-auth"]
    return {f"{cluster}-auth": {**obj, "status": {"conditions": [
        {"type": "Ready", "status": ready},
        {"type": "Synced", "status": synced, **({"message": message} if message else {})}]}}}


# What crossplane-runtime writes on an observe-only Object whose remote object is gone.
NOT_FOUND = "observe failed: external resource does not exist"


def the_job(out: dict, cluster: str) -> dict:
    [key] = [k for k in out if k.startswith(f"{cluster}-hydrate-")]
    obj = out[key]
    return obj["spec"]["forProvider"]["manifest"] if obj["kind"] == "Object" else obj


def test_eager_stages_on_every_cluster_of_the_footprint_that_has_storage():
    rsp = run(observed=secret_there())
    out = desired(rsp)
    assert sorted(entries(rsp)) == ["eu-west-1", "us-east-1"]  # batch: not prod
    # The control plane: the claim and the Job as they are; the user's Secret is used in place.
    claim = out["us-east-1-claim"]
    assert claim["kind"] == "PersistentVolumeClaim"
    assert claim["metadata"] == {"name": claim_name("ml-team", "qwen3-8b"), "namespace": "ml-team",
                                 "labels": {LABEL_MODEL_CACHE: "qwen3-8b",
                                            "modelplane.ai/purpose": "support"}}
    assert claim["spec"] == {"accessModes": ["ReadWriteMany"], "storageClassName": "nfs-rwx",
                             "resources": {"requests": {"storage": "40Gi"}}}
    assert "us-east-1-secret" not in out and "us-east-1-namespace" not in out
    # A remote cluster: everything wrapped, the namespace too, and its Secret observed there.
    assert {k for k in out if k.startswith("eu-west-1-")} == {
        "eu-west-1-namespace", "eu-west-1-claim", "eu-west-1-auth",
        next(k for k in out if k.startswith("eu-west-1-hydrate-"))}
    assert all(out[k]["kind"] == "Object" for k in out if k.startswith("eu-west-1-"))
    remote_claim = out["eu-west-1-claim"]["spec"]["forProvider"]["manifest"]
    assert remote_claim["spec"]["storageClassName"] == "filestore-rwx"


def test_a_remote_cluster_observes_the_secret_and_never_copies_it():
    out = desired(run(observed=secret_there()))
    obj = out["eu-west-1-auth"]
    assert obj["kind"] == "Object"
    assert obj["spec"]["managementPolicies"] == ["Observe"]
    # It names the Secret and nothing more: no data, no reference that provider-kubernetes
    # would resolve (and persist) into the Object's spec.
    assert obj["spec"]["forProvider"]["manifest"] == {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token",
                                                           "namespace": "ml-team"}}
    assert obj["spec"]["readiness"] == {"policy": "DeriveFromCelQuery",
                                        "celQuery": 'has(object.data) && "token" in object.data'}
    assert "watch" not in obj["spec"]
    for o in out.values():
        assert "references" not in o.get("spec", {})
        manifest = (o.get("spec", {}).get("forProvider") or {}).get("manifest") or o
        assert manifest["kind"] != "Secret" or obj is o


def test_the_secrets_readiness_query_needs_the_key_the_job_reads():
    from cel_expr_python import cel
    env = cel.NewEnv(variables={"object": cel.Type.DYN})
    program = env.compile(desired(run())["eu-west-1-auth"]["spec"]["readiness"]["celQuery"])

    def ready(secret):
        return program.eval(env.Activation({"object": secret})).value()
    base = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token"}}
    assert ready({**base, "data": {"token": "aGY="}}) is True
    assert ready({**base, "data": {"other": "aGY="}}) is False
    assert ready(base) is False


def test_the_control_planes_secret_is_read_only_where_the_control_plane_stages_the_cache():
    remote_only = cache(clusterSelector={"matchLabels": {"region": "eu-west"}})
    assert REQUIRE_SECRET not in run(remote_only).requirements.resources
    assert REQUIRE_SECRET in run().requirements.resources  # us-east-1 is the control plane


def test_a_secret_missing_on_a_cluster_says_where_and_holds_back_only_a_new_job():
    gone = secret_there(synced="False", message=NOT_FOUND)
    rsp = run(observed=gone)
    assert entries(rsp) == {"eu-west-1": ("Pending", "SecretMissing"),
                            "us-east-1": ("Pending", "Creating")}
    said = "Secret hf-token not found in namespace ml-team on cluster eu-west-1: sync it " \
        "there (docs/caches.md)"
    [entry] = [e for e in composite(rsp)["status"]["clusters"] if e["name"] == "eu-west-1"]
    assert entry["message"] == said
    source = conditions(rsp)["SourceReady"]
    assert (source.status, source.reason, source.message) == \
        (fnv1.STATUS_CONDITION_FALSE, "SecretMissing", said)
    assert not any(k.startswith("eu-west-1-hydrate-") for k in desired(rsp))
    # A Job already running there is kept as it is, and so is the rest; a Ready the
    # Secret had before it went (the provider leaves it) does not hide that it is gone.
    started = observed_job(desired(run(observed=secret_there())), "eu-west-1", active=1)
    stale = secret_there(ready="True", synced="False", message=NOT_FOUND)
    got = desired(run(observed={**stale, **started}))
    assert set(started) <= set(got)
    assert conditions(run(observed={**stale, **started}))["SourceReady"].reason == \
        "SecretMissing"


def test_a_secret_without_the_key_or_not_observed_yet_holds_back_the_job_and_says_why():
    no_key = run(observed=secret_there(ready="False"))
    assert entries(no_key)["eu-west-1"] == ("Pending", "SecretKeyMissing")
    assert "has no key token" in conditions(no_key)["SourceReady"].message
    first = run()
    assert entries(first)["eu-west-1"] == ("Pending", "CheckingSecret")
    assert conditions(first)["SourceReady"].reason == "CheckingSecret"
    unreadable = run(observed=secret_there(synced="False", message="observe failed: cannot get "
                                           "object: secrets is forbidden"))
    assert entries(unreadable)["eu-west-1"] == ("Pending", "SecretUnreadable")
    for rsp in (no_key, first, unreadable):
        assert not any(k.startswith("eu-west-1-hydrate-") for k in desired(rsp))


def test_a_uri_sources_secret_only_has_to_exist():
    mc = cache(source="URI", uri={"url": "s3://models/q", "sizeGiB": 40,
                                  "authSecret": {"name": "s3"}}, adapters=[])
    del mc["spec"]["huggingFace"]
    obj = desired(run(mc, secret=[{**SECRET, "metadata": {"name": "s3", "namespace": "ml-team"}}]))[
        "eu-west-1-auth"]
    assert obj["spec"]["readiness"] == {"policy": "SuccessfulCreate"}
    assert obj["spec"]["forProvider"]["manifest"]["metadata"]["name"] == "s3"


def copying_object() -> dict:
    """The Object an earlier release composed to copy the Secret, as observed."""
    return {"apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "Object",
            "metadata": {"name": "qwen3-8b-eu-west-1-secret-x", "namespace": "ml-team",
                         "labels": {LABEL_MODEL_CACHE: "qwen3-8b"}},
            "spec": {"forProvider": {"manifest": {
                "apiVersion": "v1", "kind": "Secret", "data": {"token": "aGZfc2VjcmV0"},
                "metadata": {"name": "hf-token", "namespace": "ml-team"}}},
                "providerConfigRef": {"name": "eu-west-1", "kind": "ClusterProviderConfig"},
                "references": [{"patchesFrom": {"apiVersion": "v1", "kind": "Secret",
                                                "name": "hf-token", "namespace": "ml-team",
                                                "fieldPath": "data"}}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


@pytest.mark.parametrize("replicas", [(), ("eu-west-1",)])
def test_an_earlier_copy_is_made_observe_only_then_dropped_leaving_the_remote_secret(replicas):
    users = [uses(c) for c in replicas]
    old = copying_object()
    first = desired(run(replicas=users, observed={"eu-west-1-secret": old}))["eu-west-1-secret"]
    # Observe-only: deleting it later deletes nothing on the cluster. Its reference stays,
    # so that its deletion releases the control plane's Secret; the data is not ours to send.
    assert first["spec"]["managementPolicies"] == ["Observe"]
    assert first["spec"]["references"] == old["spec"]["references"]
    assert "data" not in first["spec"]["forProvider"]["manifest"]
    observe_only = {**old, "spec": {**old["spec"], "managementPolicies": ["Observe"]}}
    # Then it goes, even where a replica uses the cache (what is kept for it is the rest).
    assert "eu-west-1-secret" not in desired(run(replicas=users,
                                                 observed={"eu-west-1-secret": observe_only}))


def test_the_job_downloads_the_model_then_each_adapter_into_the_volume():
    job = the_job(desired(run()), "us-east-1")
    pod = job["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["model"]
    assert [c["name"] for c in pod["containers"]] == ["adapter-sql"]
    model = pod["initContainers"][0]
    assert model["image"] == hydration.DOWNLOADER_IMAGE
    assert model["command"][:2] == ["python3", "-c"]
    assert '"allow": ["*.safetensors", "*.json", "tokenizer*"]' in model["args"][0]
    assert model["env"] == [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": "hf-token", "key": "token"}}}]
    assert pod["volumes"] == [{"name": "model-cache", "persistentVolumeClaim": {
        "claimName": claim_name("ml-team", "qwen3-8b")}}]
    assert '"dest": "/mnt/models/adapters/sql"' in pod["containers"][0]["args"][0]
    assert pod["restartPolicy"] == "Never"


@pytest.mark.parametrize("url,image,args", [
    ("s3://models/qwen3", hydration.DOWNLOADER_IMAGE, ["s3://models/qwen3", "/mnt/models"]),
    ("oci://registry.example.com/models/qwen3:1.0", "registry.example.com/models/qwen3:1.0",
     ["/mnt/models"]),
])
def test_a_uri_source_uses_the_downloaders_entrypoint_or_the_model_image(url, image, args):
    mc = cache(source="URI", uri={"url": url, "sizeGiB": 40, "authSecret": {"name": "s3"}},
               adapters=[])
    del mc["spec"]["huggingFace"]
    s3 = {**SECRET, "metadata": {"name": "s3", "namespace": "ml-team"}}
    [step] = the_job(desired(run(mc, secret=[s3])), "us-east-1")["spec"]["template"]["spec"][
        "containers"]
    assert (step["image"], step["args"]) == (image, args)
    assert step["envFrom"] == [{"secretRef": {"name": "s3"}}]


def test_a_changed_source_is_a_new_job_and_the_old_one_goes():
    before = {k for k in desired(run(observed=secret_there())) if "-hydrate-" in k}
    after = {k for k in desired(run(cache(huggingFace={**CACHE["spec"]["huggingFace"],
                                                        "revision": "v2"}),
                                    observed=secret_there()))
             if "-hydrate-" in k}
    assert len(before) == len(after) == 2 and not before & after


def test_on_demand_stages_only_where_a_replica_uses_the_cache():
    rsp = run(cache(hydration="OnDemand"), replicas=[uses("eu-west-1")])
    assert sorted(entries(rsp)) == ["eu-west-1"]
    assert not any(k.startswith("us-east-1") for k in desired(rsp))


def test_on_demand_with_no_replica_stages_nothing_and_is_ready():
    rsp = run(cache(hydration="OnDemand"))
    assert desired(rsp) == {} and entries(rsp) == {}
    assert rsp.desired.composite.ready == fnv1.READY_TRUE
    assert composite(rsp)["status"]["summary"] == "0/0 Ready"


def test_a_forged_label_does_not_make_a_replica_a_user():
    forged = uses("eu-west-1")
    forged["spec"]["modelCacheRef"]["name"] = "other"
    assert entries(run(cache(hydration="OnDemand"), replicas=[forged])) == {}


def observed_job(out: dict, cluster: str, **status) -> dict:
    [key] = [k for k in out if k.startswith(f"{cluster}-hydrate-")]
    return {key: {**out[key], "status": status}}


def test_phases_follow_the_volume_and_the_job():
    out = desired(run())
    bound = {"us-east-1-claim": {**out["us-east-1-claim"], "status": {"phase": "Bound"}}}
    unbound = {"us-east-1-claim": {**out["us-east-1-claim"], "status": {"phase": "Pending"}}}
    done = observed_job(out, "us-east-1", conditions=[{"type": "Complete", "status": "True"}])
    running = observed_job(out, "us-east-1", active=1)
    failed = observed_job(out, "us-east-1", conditions=[{
        "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit"}])
    assert entries(run())["us-east-1"] == ("Pending", "Creating")
    assert entries(run(observed={**bound, **running}))["us-east-1"] == ("Hydrating", "Downloading")
    assert entries(run(observed={**unbound, **running}))["us-east-1"] == \
        ("Pending", "WaitingForVolume")
    assert entries(run(observed={**bound, **done}))["us-east-1"] == ("Ready", "Hydrated")
    rsp = run(observed={**bound, **failed})
    assert entries(rsp)["us-east-1"] == ("Failed", "HydrationFailed")
    staged = conditions(rsp)["Staged"]
    assert (staged.status, staged.reason) == (fnv1.STATUS_CONDITION_FALSE, "HydrationFailed")
    assert "BackoffLimitExceeded: Job has reached the specified backoff limit" in staged.message


@pytest.mark.parametrize("code,reason", [(28, "VolumeTooSmall"), (3, "SourceNotFound"),
                                         (1, "HydrationFailed")])
def test_a_job_failed_by_its_pod_failure_policy_says_why(code, reason):
    out = desired(run())
    assert the_job(out, "us-east-1")["spec"]["podFailurePolicy"] == {"rules": [{
        "action": "FailJob", "onExitCodes": {"operator": "In", "values": [3, 28]}}]}
    failed = observed_job(out, "us-east-1", conditions=[{
        "type": "Failed", "status": "True", "reason": "PodFailurePolicy",
        "message": f"Container model for pod ml-team/x failed with exit code {code} matching "
                   "FailJob rule at index 0"}])
    rsp = run(observed=failed)
    assert entries(rsp)["us-east-1"] == ("Failed", reason)
    if code == 28:
        [entry] = [e for e in composite(rsp)["status"]["clusters"] if e["name"] == "us-east-1"]
        assert entry["message"].startswith("the weights do not fit in the volume")


def test_every_cluster_ready_makes_the_cache_ready():
    out = desired(run(observed=secret_there()))
    observed = dict(secret_there())
    for c in ("us-east-1", "eu-west-1"):
        observed.update(observed_job(out, c, conditions=[{"type": "Complete", "status": "True"}]))
    # The remote Job's Object: ready through its CEL query, the inner status observed.
    remote = next(k for k in observed if k.startswith("eu-west-1-hydrate-"))
    observed[remote] = {**out[remote], "status": {
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "True"}],
        "atProvider": {"manifest": {**out[remote]["spec"]["forProvider"]["manifest"], "status": {
            "conditions": [{"type": "Complete", "status": "True"}]}}}}}
    rsp = run(observed=observed)
    assert entries(rsp) == {"eu-west-1": ("Ready", "Hydrated"), "us-east-1": ("Ready", "Hydrated")}
    assert conditions(rsp)["SourceReady"].status == fnv1.STATUS_CONDITION_TRUE
    assert composite(rsp)["status"]["summary"] == "2/2 Ready"
    assert conditions(rsp)["Staged"].reason == "Staged"
    assert rsp.desired.composite.ready == fnv1.READY_TRUE


def test_a_secret_missing_on_the_control_plane_holds_back_new_jobs_and_keeps_a_started_one():
    out = desired(run(observed=secret_there()))
    started = observed_job(out, "us-east-1", active=1)
    rsp = run(secret=[], observed=started)
    assert list(started)[0] in desired(rsp)  # kept
    assert entries(rsp)["us-east-1"][1] != "SecretMissing"  # the Job says how it goes
    fresh = run(secret=[])
    assert not any(k.startswith("us-east-1-hydrate-") for k in desired(fresh))
    assert entries(fresh)["us-east-1"] == ("Pending", "SecretMissing")
    source = conditions(fresh)["SourceReady"]
    assert (source.reason, source.message) == (
        "SecretMissing", "Secret hf-token does not exist in namespace ml-team; create it to "
        "start hydrating")


def test_a_narrowed_footprint_keeps_the_volume_where_a_replica_still_mounts_it():
    out = desired(run(observed=secret_there()))
    observed = {k: v for k, v in out.items() if k.startswith("eu-west-1")}
    narrowed = cache(clusterSelector={"matchLabels": {"region": "us-east"}})
    kept = desired(run(narrowed, replicas=[uses("eu-west-1")], observed=observed))
    assert set(observed) <= set(kept)
    dropped = desired(run(narrowed, observed=observed))
    assert not any(k.startswith("eu-west-1") for k in dropped)


def test_a_cluster_gone_keeps_its_objects_while_a_replica_there_uses_the_cache():
    out = desired(run(observed=secret_there()))
    observed = {k: v for k, v in out.items() if k.startswith("eu-west-1")}
    fleet = [ic for ic in FLEET if ic["metadata"]["name"] != "eu-west-1"]
    rsp = run(fleet=fleet, replicas=[uses("eu-west-1")], observed=observed)
    assert set(observed) <= set(desired(rsp))
    assert entries(rsp)["eu-west-1"][1] == "KeptInUse"


def test_an_existing_claim_never_shrinks_nor_changes_its_storage_class():
    out = desired(run())
    observed = {k: out[k] for k in ("us-east-1-claim", "eu-west-1-claim")}
    smaller = cache(huggingFace={**CACHE["spec"]["huggingFace"], "sizeGiB": 10})
    fleet = [{**ic, "spec": {**ic["spec"], "storage": {"storageClassName": "other"}}}
             if ic["metadata"]["name"] == "us-east-1" else ic for ic in FLEET]
    got = desired(run(smaller, fleet=fleet, observed=observed))
    local = got["us-east-1-claim"]["spec"]
    assert (local["storageClassName"], local["resources"]["requests"]["storage"]) == \
        ("nfs-rwx", "40Gi")
    remote = got["eu-west-1-claim"]["spec"]["forProvider"]["manifest"]["spec"]
    assert remote["resources"]["requests"]["storage"] == "40Gi"
    bigger = cache(huggingFace={**CACHE["spec"]["huggingFace"], "sizeGiB": 80})
    grown = desired(run(bigger, observed=observed))["us-east-1-claim"]["spec"]
    assert grown["resources"]["requests"]["storage"] == "80Gi"


def test_until_everything_is_resolved_every_object_is_kept():
    observed = desired(run())
    rsp = run(resolved=False, observed=observed)
    assert set(desired(rsp)) == set(observed)


@pytest.mark.parametrize("spec,message", [
    ({"source": "URI"}, "source URI needs spec.uri, and no spec.huggingFace"),
    ({"uri": {"url": "ftp://x/y", "sizeGiB": 1}}, "uri.url"),
    ({"huggingFace": {"repo": "Qwen/Qwen3-8B", "sizeGiB": 1, "filename": "a.gguf",
                      "allowPatterns": ["*"]}}, "filename stages one file"),
])
def test_bad_input_is_a_fatal_result_that_says_what_is_wrong(spec, message):
    rsp = run(cache(**spec))
    [result] = [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert message in result.message and desired(rsp) == {}


@pytest.fixture(scope="module")
def schemas():
    from schemas import Schemas
    return Schemas()


@pytest.mark.parametrize("hydrate", ["Eager", "OnDemand"])
def test_every_composed_object_validates_against_the_real_schemas(hydrate, schemas):
    out = desired(run(cache(hydration=hydrate), replicas=[uses("eu-west-1")],
                      observed=secret_there()))
    assert out and any(k.startswith("eu-west-1-hydrate-") for k in out)
    errors = [e for obj in out.values() for e in schemas.errors(obj)]
    assert not errors, errors
