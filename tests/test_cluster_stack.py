"""The serving stack an InferenceCluster composes (spec.stack) and what it reports.

Managed components become provider-kubernetes Objects of the manifests rendered at
build time from the pinned modules, CRDs before what needs them, never deleted by
the stack; External ones are observed; every replica on the cluster holds a Usage
of the CRDs it needs; status.stack and StackReady say where each component is. A
cluster without a stack composes, requires and reports exactly what it did.
"""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import sys

import pytest
from builders import composite, conditions, desired, request
from composer_support import FLEET, REMOTE, compose, gang, replica, standalone
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from fleetgen import cluster, pool, to_plain
from schemas import Schemas
from test_cluster_inventory import h100_cluster, remote_cluster, run_cluster
from test_composer_pd import gang_engine, pd

from function.cluster import stack, stackstatus
from function.contract.enums import StackMode
from function.contract.records import parse_cluster
from function.contract.stack import BY_FIELD, COMPONENTS, Tier, managed_fields, spec_errors
from function.contract.stack import object_name as stack_object_name
from function.runtime import fn

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))
import gen_stack  # noqa: E402

MANAGED = {"gatewayAPI": {"mode": "Managed"}, "inferenceExtension": {"mode": "Managed"},
           "leaderWorkerSet": {"mode": "Managed"}}


def with_stack(ic: dict, **components) -> dict:
    ic["spec"]["stack"] = components
    return ic


def remote(**components) -> dict:
    return with_stack(remote_cluster(inventory={"source": "Declared"}), **components)


def ready(obj: dict, status: str = "True") -> dict:
    return {**obj, "status": {"conditions": [{"type": "Ready", "status": status},
                                             {"type": "Synced", "status": "True"}]}}


def stack_status(rsp) -> list[dict]:
    return to_plain(composite(rsp))["status"]["stack"]["components"]


def stack_ready(rsp) -> tuple[str, str, str]:
    c = conditions(rsp)["StackReady"]
    return ({fnv1.STATUS_CONDITION_TRUE: "True", fnv1.STATUS_CONDITION_FALSE: "False"}
            .get(c.status, "Unknown"), c.reason, c.message)


def crd(name: str, *versions: str, established: bool = True) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {"versions": [{"name": v, "served": True} for v in versions]},
            "status": {"conditions": [{"type": "Established",
                                       "status": "True" if established else "False"}]}}


# --- without a stack: exactly as before ------------------------------------------

@pytest.mark.parametrize("make", [lambda: h100_cluster(), lambda: remote_cluster()],
                         ids=["control-plane", "remote"])
def test_a_cluster_without_a_stack_composes_requires_and_reports_nothing_more(make):
    rsp = run_cluster(make())
    assert not [k for k in desired(rsp) if k.startswith("stack")]
    assert "StackReady" not in conditions(rsp)
    assert "stack" not in to_plain(composite(rsp))["status"]
    assert not [r for r in rsp.requirements.resources if r.startswith(stack.REQUIRE_STACK)]


@pytest.mark.parametrize("make", [lambda: h100_cluster(), lambda: remote_cluster()],
                         ids=["control-plane", "remote"])
def test_a_cluster_with_a_stack_still_reports_its_pools(make):
    # Found on `make cluster`: the stack's status was written over the pools', so a
    # cluster declaring a stack reported no capacity and took no replica.
    ic = with_stack(make(), leaderWorkerSet={"mode": "External"})
    status = to_plain(composite(run_cluster(ic)))["status"]
    assert status["nodePools"] and status["nodes"] > 0
    assert [e["name"] for e in status["stack"]["components"]] == ["leaderWorkerSet"]


# --- Managed: the rendered manifests, through Objects ------------------------------

def install(ic: dict) -> tuple[dict, dict]:
    """Reconcile the cluster, each time observing every composed object Ready, until its
    stack composes nothing more: (the last desired objects, the observed they became)."""
    observed: dict = {}
    while True:
        objs = desired(run_cluster(ic, observed=observed))
        if set(objs) <= set(observed):
            return objs, observed
        observed = {k: ready(v) for k, v in objs.items()}


def test_managed_components_compose_an_object_per_rendered_crd_that_validates():
    objs = desired(run_cluster(remote(**MANAGED)))
    keys = sorted(k for k in objs if k.startswith("stack-"))
    want = sorted(stack.object_key(f, o.name) for f in MANAGED
                  for o in stack.rendered(f).objects if o.tier == Tier.CRDS)
    # 10 Gateway API, 2 Inference Extension, 2 LWS CRDs and the namespace of its controller.
    assert keys == want and len(keys) == 15
    names = [objs[k]["metadata"]["name"] for k in keys]
    assert len(set(names)) == len(names) and all(len(n) <= 63 for n in names)
    schemas = Schemas()
    for key in keys:
        obj = objs[key]
        spec = obj["spec"]
        assert obj["metadata"]["namespace"] == "crossplane-system"
        assert spec["providerConfigRef"] == {"name": "eu-west-1", "kind": "ClusterProviderConfig"}
        # Never Delete: deleting a CRD deletes every object of its kind on the cluster.
        assert spec["managementPolicies"] == ["Observe", "Create", "Update", "LateInitialize"]
        assert schemas.errors(to_plain(obj)) == [], key
        if spec["forProvider"]["manifest"]["kind"] == "Namespace":
            assert spec["readiness"] == {"policy": "SuccessfulCreate"}
            continue
        assert spec["readiness"]["policy"] == "DeriveFromCelQuery"
        assert "Established" in spec["readiness"]["celQuery"] and spec["watch"] is True
        # Only the kind the composer writes must serve its version; the others are
        # Ready once Established (InferencePoolImport serves v1alpha1 only, found on
        # make cluster: the stack never became ready).
        crd = spec["forProvider"]["manifest"]
        field = crd["metadata"]["labels"]["modelplane.ai/stack-component"]
        versions = "object.spec.versions" in spec["readiness"]["celQuery"]
        assert versions == (crd["metadata"]["name"] == BY_FIELD[field].probe), key
    lws = objs[stack.object_key("leaderWorkerSet", "leaderworkersets.leaderworkerset.x-k8s.io")]
    manifest = lws["spec"]["forProvider"]["manifest"]
    assert manifest["metadata"]["labels"]["modelplane.ai/stack-component"] == "leaderWorkerSet"
    assert "description" not in json.dumps(manifest["spec"]["versions"][0]["schema"])[:2000]


def test_every_rendered_manifest_fits_an_object_with_room_for_its_observed_copy():
    for component in COMPONENTS:
        for o in stack.rendered(component.field).objects:
            assert len(json.dumps(o.manifest, separators=(",", ":"))) <= gen_stack.MAX_MANIFEST_BYTES


def test_versions_are_the_pinned_modules_and_the_rendering_is_current_and_deterministic():
    versions = {c.field: stack.rendered(c.field).version for c in COMPONENTS}
    assert versions == {"gatewayAPI": "v1.6.1", "inferenceExtension": "v1.6.0",
                        "leaderWorkerSet": "v0.9.0", "envoyGateway": "v1.9.1", "keda": "v2.18.3"}
    assert gen_stack.render() == gen_stack.render()
    out = subprocess.run([sys.executable, str(ROOT / "hack" / "gen_stack.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_descriptions_go_but_a_field_named_description_stays():
    schema = {"type": "object", "description": "x", "properties": {
        "description": {"type": "string", "description": "a field"},
        "items": {"type": "array", "items": {"type": "object", "description": "y",
                                             "properties": {"a": {"description": "z"}}}}}}
    assert gen_stack.without_descriptions(schema) == {"type": "object", "properties": {
        "description": {"type": "string"},
        "items": {"type": "array", "items": {"type": "object", "properties": {"a": {}}}}}}


def test_nothing_ready_yet_is_progressing_and_the_stack_not_ready():
    rsp = run_cluster(remote(**MANAGED))
    assert [(e["name"], e["phase"], e["reason"]) for e in stack_status(rsp)] == [
        ("gatewayAPI", "Progressing", "Installing"),
        ("inferenceExtension", "Progressing", "Installing"),
        ("leaderWorkerSet", "Progressing", "Waiting")]
    assert stack_status(rsp)[2] == {"name": "leaderWorkerSet", "version": "v0.9.0",
                                    "mode": "Managed", "phase": "Progressing",
                                    "reason": "Waiting",
                                    "message": "16 of 19 objects wait for earlier ones to be Ready"}
    status, reason, message = stack_ready(rsp)
    assert (status, reason) == ("False", "Progressing")
    assert message.startswith("gatewayAPI Progressing: 0 of 10 objects Ready (not yet: "
                              "backendtlspolicies.gateway.networking.k8s.io, ")
    # Followed every 10 s while it installs (its Objects' events trip the breaker).
    assert rsp.meta.ttl.ToSeconds() == 10
    # The stack's Objects never make the cluster itself unready.
    assert all(rsp.desired.resources[k].ready == fnv1.READY_TRUE
               for k in desired(rsp) if k.startswith("stack-"))


def test_every_object_ready_is_installed_and_the_stack_ready():
    _, observed = install(remote(**MANAGED))
    rsp = run_cluster(remote(**MANAGED), observed=observed)
    assert {e["phase"] for e in stack_status(rsp)} == {"Installed"}
    assert stack_ready(rsp) == ("True", "Ready", "3 components ready")
    assert rsp.meta.ttl.ToSeconds() > 10  # ready: no longer followed closely


def test_an_object_the_provider_cannot_apply_fails_its_component_with_the_providers_word():
    first = desired(run_cluster(remote(**MANAGED)))
    observed = {k: ready(v) for k, v in first.items()}
    key = stack.object_key("leaderWorkerSet", "leaderworkersets.leaderworkerset.x-k8s.io")
    observed[key] = {**first[key], "status": {"conditions": [
        {"type": "Synced", "status": "False", "reason": "ReconcileError",
         "message": "cannot create object: etcdserver: request is too large"}]}}
    rsp = run_cluster(remote(**MANAGED), observed=observed)
    lws = stack_status(rsp)[2]
    assert (lws["phase"], lws["reason"]) == ("Failed", "ReconcileError")
    assert lws["message"] == ("leaderworkersets.leaderworkerset.x-k8s.io: cannot create "
                              "object: etcdserver: request is too large")
    assert stack_ready(rsp)[:2] == ("False", "Failed")


# --- the controllers' tier: LeaderWorkerSet's chart ---------------------------------

def test_once_its_crds_are_ready_lws_gets_its_charts_controller_never_deleted():
    objs, _ = install(remote(**MANAGED))
    chart = {k: v for k, v in objs.items() if k.startswith("stack-leaderWorkerSet-")
             and v["spec"]["forProvider"]["manifest"]["kind"] not in
             ("CustomResourceDefinition", "Namespace")}
    manifests = {k: v["spec"]["forProvider"]["manifest"] for k, v in chart.items()}
    kinds = sorted(m["kind"] for m in manifests.values())
    assert kinds.count("Deployment") == 1 and "MutatingWebhookConfiguration" in kinds
    names = [o["metadata"]["name"] for o in objs.values()]  # every tier's
    assert len(set(names)) == len(names) and all(len(n) <= 63 for n in names)
    schemas = Schemas()
    for key, obj in chart.items():
        manifest = manifests[key]
        assert obj["spec"]["managementPolicies"] == stack.KEEP, key
        assert schemas.errors(to_plain(obj)) == [], key
        labels = manifest["metadata"]["labels"]
        assert labels["modelplane.ai/stack-component"] == "leaderWorkerSet"
        assert labels.get("app.kubernetes.io/managed-by") != "Helm"  # no Helm release owns it
        if manifest["metadata"].get("namespace"):
            assert manifest["metadata"]["namespace"] == "lws-system", key
        if manifest["kind"] == "Deployment":
            # Ready once rolled out and Available, not merely created.
            assert obj["spec"]["readiness"] == {"policy": "DeriveFromCelQuery",
                                                "celQuery": stack.AVAILABLE}
            image = manifest["spec"]["template"]["spec"]["containers"][0]["image"]
            assert image == "registry.k8s.io/lws/lws:v0.9.0"  # the pinned module's version
        else:
            assert obj["spec"]["readiness"] == {"policy": "SuccessfulCreate"}, key


def test_a_controller_not_available_keeps_its_component_installing():
    objs, observed = install(remote(**MANAGED))
    key = stack.object_key("leaderWorkerSet", "deployment-lws-controller-manager")
    observed[key] = ready(objs[key], "False")
    rsp = run_cluster(remote(**MANAGED), observed=observed)
    lws = stack_status(rsp)[2]
    assert (lws["phase"], lws["reason"], lws["message"]) == (
        "Progressing", "Installing",
        "18 of 19 objects Ready (not yet: deployment-lws-controller-manager)")
    assert stack_ready(rsp)[:2] == ("False", "Progressing")


SETTINGS = {"image": "mirror.example.com/lws/lws:v0.9.0", "replicas": 2,
            "nodeSelector": {"node-role.example.com/system": "true"},
            "tolerations": [{"key": "system", "operator": "Exists", "effect": "NoSchedule"}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                          "limits": {"memory": "512Mi"}}}


def test_the_platforms_controller_settings_land_on_the_charts_deployment_only():
    plain, _ = install(remote(**MANAGED))
    ic = remote(**{**MANAGED, "leaderWorkerSet": {"mode": "Managed", "controller": SETTINGS}})
    objs, _ = install(ic)
    key = stack.object_key("leaderWorkerSet", "deployment-lws-controller-manager")
    spec = objs[key]["spec"]["forProvider"]["manifest"]["spec"]
    pod = spec["template"]["spec"]
    (manager,) = pod["containers"]
    assert (spec["replicas"], pod["nodeSelector"], pod["tolerations"]) == (
        2, SETTINGS["nodeSelector"], SETTINGS["tolerations"])
    assert manager["image"] == SETTINGS["image"]
    assert manager["resources"] == SETTINGS["resources"]
    # The rest of the Deployment, and every other object, as the chart renders it.
    before = plain[key]["spec"]["forProvider"]["manifest"]["spec"]
    assert manager["args"] == before["template"]["spec"]["containers"][0]["args"]
    assert spec["selector"] == before["selector"]
    assert {k: v for k, v in objs.items() if k != key} == \
        {k: v for k, v in plain.items() if k != key}
    assert Schemas().errors(to_plain(objs[key])) == []


@pytest.mark.parametrize("entry, message", [
    ({"mode": "External", "controller": {"replicas": 2}},
     "controller overrides apply to the controller the stack installs: mode Managed"),
    ({"mode": "Managed", "controller": {"resources": {"limits": {"nvidia.com/gpu": 1}}}},
     "stack.leaderWorkerSet.controller's resources name limits.nvidia.com/gpu"),
    ({"mode": "Managed", "controller": {"tolerations": [{"operator": "Equal"}]}},
     "a toleration without a key must use operator Exists"),
    ({"mode": "Managed", "controller": {"nodeSelector": {"not a key!": "x"}}},
     "keys must be qualified names"),
])
def test_the_function_refuses_controller_settings_admission_refuses(entry, message):
    spec = remote(leaderWorkerSet=entry)["spec"]
    assert any(message in e for e in spec_errors(spec)), spec_errors(spec)


def test_a_charts_objects_get_the_stacks_labels_and_lose_helms_managed_by():
    component = BY_FIELD["leaderWorkerSet"]
    got = gen_stack.labelled({"name": "x", "labels": {
        "app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/name": "lws"}}, component)
    assert got == {"name": "x", "labels": {
        "app.kubernetes.io/name": "lws", "app.kubernetes.io/part-of": "function-model-serving",
        "modelplane.ai/stack-component": "leaderWorkerSet"}}


def test_a_failed_sync_of_a_ready_object_leaves_its_component_installed():
    # Found on make cluster: while a remote API server restarted, RBAC refused the
    # provider's read of a Ready RoleBinding, and the whole stack said Failed, so the
    # cluster took no new replicas for a minute.
    objs, observed = install(remote(**MANAGED))
    key = stack.object_key("leaderWorkerSet", "rolebinding-lws-leader-election-rolebinding")
    observed[key] = {**objs[key], "status": {"conditions": [
        {"type": "Ready", "status": "True"},
        {"type": "Synced", "status": "False", "reason": "ReconcileError",
         "message": "observe failed: cannot get object: forbidden"}]}}
    rsp = run_cluster(remote(**MANAGED), observed=observed)
    assert stack_status(rsp)[2]["phase"] == "Installed"
    assert stack_ready(rsp)[0] == "True"


# --- install order ----------------------------------------------------------------

CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
       "metadata": {"name": "things.example.com"}}
CONTROLLER = {"apiVersion": "apps/v1", "kind": "Deployment",
              "metadata": {"name": "thing-controller", "namespace": "thing-system"}}
TIERED = {"leaderWorkerSet": stack.Rendered("leaderWorkerSet", "v0.9.0", (
    stack.Manifest(Tier.CRDS, "things.example.com", CRD),
    stack.Manifest(Tier.CONTROLLERS, "thing-controller", CONTROLLER)))}


def test_a_later_tier_waits_for_every_earlier_object_to_be_ready_and_then_stays():
    cluster_record = parse_cluster(remote(**MANAGED))
    lws = [stack.Declared(BY_FIELD["leaderWorkerSet"], StackMode.MANAGED)]
    crd_key = stack.object_key("leaderWorkerSet", "things.example.com")
    ctl_key = stack.object_key("leaderWorkerSet", "thing-controller")
    assert set(stack.managed_objects(cluster_record, lws, {}, TIERED)) == {crd_key}
    crd_obj = stack.managed_objects(cluster_record, lws, {}, TIERED)[crd_key]
    # Not Ready yet: still only the CRD, and the component says what waits.
    entries = stackstatus.components(lws, {crd_key: crd_obj}, {crd_key: ready(crd_obj, "False")},
                                     None, TIERED)
    assert (entries[0]["phase"], entries[0]["reason"]) == ("Progressing", "Waiting")
    assert set(stack.managed_objects(cluster_record, lws, {crd_key: ready(crd_obj, "False")},
                                     TIERED)) == {crd_key}
    # Ready: the controller follows, never deleted by the stack either.
    both = stack.managed_objects(cluster_record, lws, {crd_key: ready(crd_obj)}, TIERED)
    assert set(both) == {crd_key, ctl_key}
    assert both[ctl_key]["spec"]["managementPolicies"] == stack.KEEP
    # Composed once, it stays when the CRD's Ready flickers.
    flicker = {crd_key: ready(crd_obj, "False"), ctl_key: ready(both[ctl_key])}
    assert set(stack.managed_objects(cluster_record, lws, flicker, TIERED)) == {crd_key, ctl_key}


# --- External: observed, never installed --------------------------------------------

def test_an_external_component_on_a_remote_cluster_is_an_observe_only_probe():
    objs = desired(run_cluster(remote(gatewayAPI={"mode": "External"})))
    assert [k for k in objs if k.startswith("stack")] == ["stack-gatewayAPI-probe"]
    probe = objs["stack-gatewayAPI-probe"]
    assert probe["spec"]["managementPolicies"] == ["Observe"]
    assert probe["spec"]["forProvider"]["manifest"] == {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "httproutes.gateway.networking.k8s.io"}}
    assert probe["metadata"]["name"].endswith("-probe")
    # An observe-only manifest only names what to read: the Object is what must validate.
    envelope = to_plain(probe)
    envelope["spec"]["forProvider"]["manifest"] = {"apiVersion": "v1", "kind": "ConfigMap",
                                                   "metadata": {"name": "x"}}
    assert Schemas().errors(envelope) == []


@pytest.mark.parametrize("observed_crd, synced, phase, reason", [
    (crd("httproutes.gateway.networking.k8s.io", "v1", "v1beta1"), None, "Observed", "Served"),
    (crd("httproutes.gateway.networking.k8s.io", "v1beta1"), None, "Failed", "VersionNotServed"),
    (crd("httproutes.gateway.networking.k8s.io", "v1", established=False), None,
     "Progressing", "NotEstablished"),
    (None, {"type": "Synced", "status": "False", "reason": "ReconcileError",
            "message": "observe-only resource does not exist"}, "Failed", "NotFound"),
    (None, None, "Progressing", "NotObservedYet"),
])
def test_what_the_probe_sees_is_the_components_phase(observed_crd, synced, phase, reason):
    ic = remote(gatewayAPI={"mode": "External"})
    probe = desired(run_cluster(ic))["stack-gatewayAPI-probe"]
    status: dict = {"conditions": [synced] if synced else []}
    if observed_crd:
        status["atProvider"] = {"manifest": observed_crd}
    rsp = run_cluster(ic, observed={"stack-gatewayAPI-probe": {**probe, "status": status}})
    entry = stack_status(rsp)[0]
    assert (entry["mode"], entry["phase"], entry["reason"]) == ("External", phase, reason)
    assert stack_ready(rsp)[0] == ("True" if phase == "Observed" else "False")


def test_the_control_plane_clusters_stack_reads_its_crds_directly():
    ic = with_stack(h100_cluster(), keda={"mode": "External"},
                    leaderWorkerSet={"mode": "External"})
    rsp = run_cluster(ic)
    sel = rsp.requirements.resources["stack-crds/keda"]
    assert (sel.api_version, sel.kind, sel.match_name) == (
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", "scaledobjects.keda.sh")
    assert not [k for k in desired(rsp) if k.startswith("stack")]
    req = request(ic, required={"model-replicas": [],
                                "stack-crds/keda": [crd("scaledobjects.keda.sh", "v1alpha1")],
                                "stack-crds/leaderWorkerSet": []})
    entries = stack_status(fn.run_function(req))
    assert [(e["name"], e["phase"]) for e in entries] == [("leaderWorkerSet", "Failed"),
                                                          ("keda", "Observed")]
    assert "does not exist on the control-plane cluster" in entries[0]["message"]


# --- Usages: a CRD's Object stays while replicas need it ----------------------------

def installed(ic: dict, *fields: str) -> dict:
    """The cluster as its own status reports it: these Managed components Installed."""
    ic = copy.deepcopy(ic)
    ic["spec"]["stack"] = dict(MANAGED)
    ic["status"] = {"conditions": [{"type": "StackReady", "status": "True"}],
                    "stack": {"components": [
                        {"name": f, "mode": "Managed",
                         "phase": "Installed" if f in fields else "Progressing"}
                        for f in MANAGED]}}
    return ic


def usages_of(out) -> dict[str, dict]:
    return {k: v for k, v in out.desired.items() if k.startswith("stack-usage")}


def test_a_replica_holds_a_usage_of_each_installed_crd_it_needs():
    mr = replica(gang(pool="h100-8x-rdma"), cluster=REMOTE)
    ic = installed(FLEET[REMOTE], "gatewayAPI", "leaderWorkerSet")
    out = compose(mr, ic)
    usages = usages_of(out)
    # Its route and its LeaderWorkerSet; inferenceExtension is still Progressing (and
    # a Unified replica without an endpoint picker composes no InferencePool anyway).
    assert sorted(usages) == ["stack-usage-gatewayAPI", "stack-usage-leaderWorkerSet"]
    u = usages["stack-usage-leaderWorkerSet"]
    lws = stack_object_name(parse_cluster(ic).name, "leaderworkersets.leaderworkerset.x-k8s.io")
    assert u["apiVersion"] == "protection.crossplane.io/v1beta1"
    assert u["metadata"]["namespace"] == "ml-team"
    assert u["spec"]["of"] == {"apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
                               "kind": "Object",
                               "resourceRef": {"name": lws, "namespace": "crossplane-system"}}
    assert u["spec"]["by"] == {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
                               "resourceRef": {"name": mr["metadata"]["name"]}}
    assert u["spec"]["replayDeletion"] is True
    assert [e for v in usages.values() for e in Schemas().errors(v)] == []
    assert all(out.ready[k] == fnv1.READY_TRUE for k in usages)


def on_pool(mr: dict, pool: str) -> dict:
    for engine in mr["spec"]["engines"]:
        for member in engine["members"]:
            member["nodePoolName"] = pool
    return mr


def test_a_replica_holds_no_usage_of_a_crd_whose_kind_it_does_not_compose():
    """A single-pod Unified replica composes a Deployment and an HTTPRoute: it needs
    Gateway API's CRDs, not LeaderWorkerSet's or the InferencePool's (each Usage is
    an apply on every look at the replica)."""
    ic = installed(FLEET[REMOTE], *MANAGED)
    unified = compose(replica(standalone(pool="l4-4x"), cluster=REMOTE), ic)
    assert sorted(usages_of(unified)) == ["stack-usage-gatewayAPI"]
    disaggregated = compose(on_pool(pd(cluster=REMOTE), "l4-4x"), ic)
    assert sorted(usages_of(disaggregated)) == ["stack-usage-gatewayAPI",
                                                 "stack-usage-inferenceExtension"]


def test_a_usage_once_composed_stays_while_the_replica_runs():
    mr = on_pool(pd(gang_engine("prefill", "Prefill", "exec vllm serve m"),
                    gang_engine("decode", "Decode", "exec vllm serve m --port=8200"),
                    cluster=REMOTE),
                 "h100-8x-rdma")
    first = compose(mr, installed(FLEET[REMOTE], *MANAGED))
    assert len(usages_of(first)) == 3
    # The component taken out of the stack (or its status flickering): the Object it
    # holds stays held while this replica runs.
    again = compose(mr, installed(FLEET[REMOTE]), observed=first.desired)
    assert usages_of(again) == usages_of(first)


def test_no_usage_on_the_control_plane_or_without_a_stack():
    assert not usages_of(compose(replica(standalone())))
    assert not usages_of(compose(replica(standalone(pool="l4-4x"), cluster=REMOTE)))


def test_the_cluster_itself_composes_no_usage_whatever_runs_there():
    # Its composition does not grow with the replicas on it.
    objs = desired(run_cluster(remote(**MANAGED)))
    rsp = run_cluster(remote(**MANAGED), observed={k: ready(v) for k, v in objs.items()})
    assert not [k for k in desired(rsp) if "usage" in k]


# --- the rules, checked again ------------------------------------------------------

@pytest.mark.parametrize("spec, says", [
    ({"providerConfigRef": {"name": "x"}, "stack": {"keda": {"mode": "Managed"}}},
     "this release does not install KEDA"),
    ({"providerConfigRef": {"name": "x"}, "stack": {"inferenceExtension": {"mode": "Managed"}}},
     "stack.inferenceExtension needs stack.gatewayAPI"),
    ({"stack": {"leaderWorkerSet": {"mode": "Managed"}}},
     "the control-plane cluster's stack (no providerConfigRef) only observes"),
    ({"providerConfigRef": {"name": "x", "kind": "ProviderConfig"},
      "stack": {"keda": {"mode": "External"}}}, "through a ClusterProviderConfig"),
    ({"providerConfigRef": {"name": "x"}, "frontDoor": {"enabled": True},
      "stack": {"gatewayAPI": {"mode": "External"},
                "envoyGateway": {"mode": "External", "backendAPI": False}}},
     "a front door needs Envoy Gateway's Backend API"),
])
def test_invalid_combinations_are_refused(spec, says):
    assert [e for e in spec_errors(spec) if says in e]
    ic = cluster("bad", pool("cpu", 1))
    ic["spec"].update(spec)
    rsp = run_cluster(ic)
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert fatal and says in fatal[0]


def test_a_valid_stack_breaks_no_rule():
    assert spec_errors(remote(**MANAGED, envoyGateway={"mode": "External"})["spec"]) == []
    assert spec_errors({"stack": {"keda": {"mode": "External"}}}) == []


def test_the_objects_sent_are_exactly_the_objects_built():
    """The manifests are copied from Structs built once (stack.put): the same objects."""
    ic = remote(**MANAGED, envoyGateway={"mode": "External"})
    sent = desired(run_cluster(ic))
    components = stack.declared(ic["spec"])
    assert components is not None
    built = {**stack.managed_objects(parse_cluster(ic), components, {}),
             **stack.probe_objects(parse_cluster(ic), components)}
    assert {k: to_plain(v) for k, v in sent.items() if k in built} == to_plain(built)


def test_managed_fields_are_the_components_and_gateway_the_stack_installs():
    spec = {"stack": {"gatewayAPI": {"mode": "Managed"}, "keda": {"mode": "External"},
                      "gateway": {"mode": "Managed", "gatewayClassName": "eg"},
                      "notAComponent": {"mode": "Managed"}}}
    assert managed_fields(spec) == {"gatewayAPI", "gateway"}
    assert managed_fields({}) == managed_fields({"stack": "nonsense"}) == frozenset()
