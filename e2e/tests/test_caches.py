"""A ModelCache on the real control plane: the volume binds, the hydration Job
runs to completion on every cluster of the footprint (kwok completes Job pods),
replicas land only inside the footprint and prefer warm clusters, and every
engine pod mounts the volume read-only. The auth Secret is put on each workload
cluster as the platform's sync would; the cache only observes it there, holds no
token in any Object, and says which cluster lacks it.

The cache lives in a namespace of its own: its completed Job pods would
otherwise stand in the way of other scenarios' "everything is gone" waits.
"""

from __future__ import annotations

import base64
import copy
import json

import pytest
from builders import load_one
from conftest import REPO, TIMINGS, measure_memory
from live import (MD, SERVING, Stopwatch, apply_docs, condition, ensure_namespace, get, is_true,
                  items, replicas_of, wait, wait_condition)

from e2e.controlplane.core import ControlPlane
from function.contract.cacheview import claim_name

NS = "cache-team"
MC = "modelcaches.modelplane.ai"
CACHE = load_one(REPO / "examples" / "caches" / "qwen3-8b.yaml")
DEPLOYMENT = load_one(REPO / "examples" / "caches" / "qwen3-8b-deployment.yaml")
FOOTPRINT = ["eu-west-1", "us-east-1"]  # tier=prod with spec.storage; us-central-batch is neither
HYDRATED = 2 * SERVING  # two Jobs, each created, scheduled and completed through kwok


def in_namespace(doc: dict, **spec) -> dict:
    doc = copy.deepcopy(doc)
    doc["metadata"]["namespace"] = NS
    doc["spec"].update(spec)
    return doc


TOKEN = "hf_not_a_real_token"
TOKEN_B64 = base64.b64encode(TOKEN.encode()).decode()
OBJECTS = "objects.kubernetes.m.crossplane.io"
REMOTE = "eu-west-1"  # the footprint's workload cluster; us-east-1 is the control plane


def secret(name: str = "hf-token") -> dict:
    # `data`, not `stringData`: server-side apply records no value, and no
    # last-applied-configuration annotation holds the token (which --sanitize-secrets,
    # replacing only `data`, would leave in an observing Object's status).
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": NS}, "data": {"token": TOKEN_B64}}


def sync_secret(cp: ControlPlane, cluster: str, name: str = "hf-token") -> None:
    """What the platform's sync (External Secrets, say) does: the Secret, as the tenant
    wrote it, in the same namespace on a workload cluster."""
    assert cp.cluster(cluster).remote
    ensure_namespace(cp, NS, cluster=cluster)
    cp.apply([secret(name)], cluster=cluster)


def unsync_secret(cp: ControlPlane, cluster: str, name: str) -> None:
    cp.kubectl("delete", "secret", name, "-n", NS, "--ignore-not-found", cluster=cluster)


def secret_objects(cp: ControlPlane, name: str) -> list[dict]:
    """The Objects in the cache's namespace whose manifest is the Secret `name`."""
    return [o for o in items(cp, OBJECTS, NS)
            if (o["spec"]["forProvider"]["manifest"].get("kind"), o["spec"]["forProvider"]
                ["manifest"].get("metadata", {}).get("name")) == ("Secret", name)]


@pytest.fixture(scope="module")
def staged(cp: ControlPlane):
    """The example cache, Eager, staged on its whole footprint."""
    ensure_namespace(cp, NS)
    cp.apply([secret()])   # the control plane stages it too (us-east-1), from the tenant's
    sync_secret(cp, REMOTE)
    clock = Stopwatch()
    apply_docs(cp, [in_namespace(CACHE)])
    try:
        mc = wait_condition(cp, MC, CACHE["metadata"]["name"], NS, "Staged", HYDRATED)
        TIMINGS["ModelCache: apply to Staged on 2 clusters (s)"] = clock.seconds()
        measure_memory(cp)
        yield mc
    finally:
        _delete(cp, MD, DEPLOYMENT["metadata"]["name"])
        _delete(cp, MC, CACHE["metadata"]["name"])
        unsync_secret(cp, REMOTE, "hf-token")


def test_the_cache_is_staged_on_every_cluster_of_its_footprint(cp: ControlPlane, staged):
    entries = {e["name"]: e for e in staged["status"]["clusters"]}
    assert sorted(entries) == FOOTPRINT
    assert {e["phase"] for e in entries.values()} == {"Ready"}
    assert staged["status"]["summary"] == "2/2 Ready"
    assert is_true(staged, "Ready") and is_true(staged, "SourceReady")
    claim = claim_name(NS, CACHE["metadata"]["name"])
    for name in FOOTPRINT:
        handle = cp.cluster(name)
        pvc = get(cp, "persistentvolumeclaims", claim, NS, cluster=handle)
        assert pvc["status"]["phase"] == "Bound", pvc.get("status")
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
        jobs = items(cp, "jobs", NS, "modelplane.ai/model-cache=qwen3-8b", cluster=handle)
        assert [condition(j, "Complete").get("status") for j in jobs] == ["True"], jobs
    # The workload cluster's Secret is the one the sync put there: the cache observes
    # it with one observe-only Object that names it and carries no data, no reference.
    observers = secret_objects(cp, "hf-token")
    assert len(observers) == 1, [o["metadata"]["name"] for o in items(cp, OBJECTS, NS)]
    [o] = observers
    assert o["spec"]["managementPolicies"] == ["Observe"]
    assert "references" not in o["spec"]
    manifest = o["spec"]["forProvider"]["manifest"]
    assert (manifest["kind"], manifest["metadata"]["name"], manifest["metadata"]["namespace"]) \
        == ("Secret", "hf-token", NS)
    assert not {"data", "stringData"} & set(manifest), manifest
    assert is_true(o, "Ready"), o.get("status")  # the Secret, with its key, is there
    # provider-kubernetes runs with --sanitize-secrets: what it observed reads redacted.
    assert o["status"]["atProvider"]["manifest"]["data"] == {"redacted": None}, o["status"]
    # No Object in the namespace holds the token, in its spec or its status.
    everything = json.dumps([{"spec": o.get("spec"), "status": o.get("status")}
                             for o in items(cp, OBJECTS, NS)])
    assert TOKEN not in everything and TOKEN_B64 not in everything


def test_replicas_land_inside_the_footprint_and_mount_the_cache(cp: ControlPlane, staged,
                                                                timings):
    md = in_namespace(DEPLOYMENT)
    name = md["metadata"]["name"]
    clock = Stopwatch()
    apply_docs(cp, [md])
    obj = wait_condition(cp, MD, name, NS, "Ready", SERVING)
    timings["cached deployment: apply to Ready (s)"] = clock.seconds()
    live = replicas_of(cp, NS, name)
    assert sorted(mr["spec"]["clusterName"] for mr in live) == FOOTPRINT
    assert obj["status"]["replicas"]["ready"] == 2
    claim = claim_name(NS, CACHE["metadata"]["name"])
    for mr in live:
        assert is_true(mr, "CacheReady")
        handle = cp.cluster(mr["spec"]["clusterName"])
        pods = items(cp, "pods", NS, f"modelplane.ai/replica={mr['metadata']['name']}",
                     cluster=handle)
        assert pods
        for pod in pods:
            volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
            assert volumes["model-cache"]["persistentVolumeClaim"] == {"claimName": claim,
                                                                       "readOnly": True}
            [engine] = [c for c in pod["spec"]["containers"] if c["name"] == "engine"]
            assert {"name": "model-cache", "mountPath": "/mnt/models", "readOnly": True} in \
                engine["volumeMounts"]
            assert pod["status"]["phase"] == "Running"


def test_a_cluster_without_the_secret_says_so_and_stages_once_it_is_synced(cp: ControlPlane,
                                                                           staged):
    """The Secret only on the control plane: us-east-1 hydrates, eu-west-1 waits and
    says where to sync it; once synced there, eu-west-1 stages too."""
    name, secret_name = "qwen-sync", "hf-token-sync"
    mc = in_namespace(CACHE)
    mc["metadata"]["name"] = name
    mc["spec"]["huggingFace"]["authSecret"] = {"name": secret_name, "key": "token"}
    cp.apply([secret(secret_name)])
    unsync_secret(cp, REMOTE, secret_name)
    said = (f"Secret {secret_name} not found in namespace {NS} on cluster {REMOTE}: "
            "sync it there (docs/caches.md)")
    apply_docs(cp, [mc])
    try:
        def missing_there():
            got = get(cp, MC, name, NS) or {}
            entries = {e["name"]: e for e in (got.get("status") or {}).get("clusters") or []}
            entry = entries.get(REMOTE) or {}
            if (entry.get("reason"), entry.get("message")) != ("SecretMissing", said):
                raise AssertionError(f"{REMOTE}: {entry}")
            return got
        got = wait(f"ModelCache {name} to say {REMOTE} lacks its Secret", missing_there, SERVING)
        source = condition(got, "SourceReady")
        assert (source.get("status"), source.get("reason")) == ("False", "SecretMissing")
        assert said in source.get("message", "")
        assert not is_true(got, "Ready")
        # Nothing started there without it; the control plane's cluster is not held back.
        assert items(cp, "jobs", NS, f"modelplane.ai/model-cache={name}", cluster=REMOTE) == []
        wait(f"ModelCache {name} Ready on us-east-1", lambda: _ready_on(cp, name, "us-east-1"),
             HYDRATED)
        # The platform syncs it: provider-kubernetes retries at most a minute apart.
        sync_secret(cp, REMOTE, secret_name)
        done = wait_condition(cp, MC, name, NS, "Staged", HYDRATED + 60)
        assert is_true(done, "SourceReady") and done["status"]["summary"] == "2/2 Ready"
        everything = json.dumps([{"spec": o.get("spec"), "status": o.get("status")}
                                 for o in items(cp, OBJECTS, NS)])
        assert TOKEN not in everything and TOKEN_B64 not in everything
    finally:
        _delete(cp, MC, name)
        cp.kubectl("delete", "secret", secret_name, "-n", NS, "--ignore-not-found")
        unsync_secret(cp, REMOTE, secret_name)


def cached_deployment(name: str, cache: str, replicas: int, selector=None) -> dict:
    md = in_namespace(DEPLOYMENT, replicas=replicas)
    md["metadata"]["name"] = name
    md["spec"]["template"]["spec"]["modelCacheRef"] = {"name": cache}
    if selector:
        md["spec"]["template"]["spec"]["clusterSelector"] = {"matchLabels": selector}
    return md


def on_demand(name: str, selector=None) -> dict:
    mc = in_namespace(CACHE, hydration="OnDemand")
    mc["metadata"]["name"] = name
    mc["spec"].pop("clusterSelector", None)
    if selector:
        mc["spec"]["clusterSelector"] = {"matchLabels": selector}
    return mc


def test_replicas_stay_inside_the_footprint_over_spreading(cp: ControlPlane, staged):
    """Spread alone would put the second replica on eu-west-1; the cache lives
    only on us-east-1, so both go there, and OnDemand stages it only there."""
    apply_docs(cp, [on_demand("qwen-us", {"region": "us-east"}),
                    cached_deployment("qwen-us", "qwen-us", 2)])
    try:
        wait_condition(cp, MD, "qwen-us", NS, "Ready", HYDRATED)
        assert [mr["spec"]["clusterName"] for mr in replicas_of(cp, NS, "qwen-us")] == \
            ["us-east-1", "us-east-1"]
        mc = get(cp, MC, "qwen-us", NS)
        assert [e["name"] for e in mc["status"]["clusters"]] == ["us-east-1"]
    finally:
        _delete(cp, MD, "qwen-us")
        _delete(cp, MC, "qwen-us")


def test_a_new_replica_prefers_the_cluster_where_the_cache_is_warm(cp: ControlPlane, staged):
    """OnDemand: the first deployment (pinned to us-east by its own selector)
    warms us-east-1 only; a second one, free to go anywhere, goes there too,
    where name order alone would pick eu-west-1."""
    apply_docs(cp, [on_demand("qwen-warm"),
                    cached_deployment("qwen-first", "qwen-warm", 1, {"region": "us-east"})])
    try:
        wait_condition(cp, MD, "qwen-first", NS, "Ready", HYDRATED)
        wait("ModelCache qwen-warm Ready on us-east-1",
             lambda: _ready_on(cp, "qwen-warm", "us-east-1"), SERVING)
        apply_docs(cp, [cached_deployment("qwen-second", "qwen-warm", 1)])
        wait_condition(cp, MD, "qwen-second", NS, "Ready", SERVING)
        assert [mr["spec"]["clusterName"] for mr in replicas_of(cp, NS, "qwen-second")] == \
            ["us-east-1"]
    finally:
        _delete(cp, MD, "qwen-second")
        _delete(cp, MD, "qwen-first")
        _delete(cp, MC, "qwen-warm")


def _ready_on(cp: ControlPlane, cache: str, cluster: str) -> dict:
    mc = get(cp, MC, cache, NS) or {}
    phases = {e["name"]: e["phase"] for e in (mc.get("status") or {}).get("clusters") or []}
    if phases.get(cluster) != "Ready":
        raise AssertionError(f"phases {phases}")
    return mc


def _delete(cp: ControlPlane, kind: str, name: str) -> None:
    cp.kubectl("delete", kind, name, "-n", NS, "--ignore-not-found", "--wait=false")

    def gone():
        if get(cp, kind, name, NS) is not None:
            raise AssertionError(f"{kind} {name} still there")
        return True
    wait(f"{kind} {NS}/{name} gone", gone, SERVING)
