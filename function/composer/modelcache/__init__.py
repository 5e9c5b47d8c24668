"""The cache function: ModelCache -> a volume and a hydration Job per cluster, its Secret observed.

Which clusters stage the cache:

* the footprint: InferenceClusters matching `spec.clusterSelector` that have
  `spec.storage` (a ReadWriteMany StorageClass); with `hydration: Eager`
  all of them, with `OnDemand` those hosting a ModelReplica that uses the
  cache (the scheduler labels such replicas with `modelplane.ai/model-cache`);
* and, whatever the footprint says now, every cluster hosting a replica that
  uses it: a narrowed selector never takes the volume from under a running
  replica.

On each: the PersistentVolumeClaim (`contract/cacheview.claim_name`, in the
cache's namespace) and the hydration Job (hydration.py). On a remote cluster each
is wrapped in a provider-kubernetes Object, as a replica's objects are
(placement.py), the namespace included. The auth Secret is never copied: the
platform syncs it to each cluster, and the cache only observes that it is there
(authsecret.py: an observe-only Object per remote cluster; on the control plane,
Crossplane sends the Secret as a required resource, data included, to learn whether
it exists; this function writes no token into anything it composes).

Never destructive: until the fleet, the replicas and the Secret are
resolved, everything observed is kept; a cluster that is gone, unreadable
or without storage keeps its objects while a replica there uses the cache;
a missing Secret (on the control plane, or on a cluster) holds back only a Job
not yet created. Deleting the cache
deletes its volumes, which Kubernetes' own protection keeps until the last
pod mounting one stops.

Status: one entry per staging cluster (Pending, Hydrating, Ready, Failed,
with a reason), a `<ready>/<clusters> Ready` summary, and the conditions
`Staged` and `SourceReady`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.composer import keep, kinds, placement
from function.composer.composed import Composed, Role
from function.composer.modelcache import authsecret, hydration
from function.composer.modelcache.authsecret import Presence
from function.composer.readiness import State
from function.contract.api import (
    API_VERSION,
    KIND_INFERENCE_CLUSTER,
    KIND_MODEL_REPLICA,
    LABEL_MODEL_CACHE,
    REQUIRE_CLUSTERS,
    REQUIRE_OWN_NAMESPACE,
    REQUIRE_REPLICAS,
)
from function.contract.cacheview import cache_ref, claim_name
from function.contract.enums import CachePhase, Hydration, ModelSource
from function.contract.names import tagged_label
from function.contract.records import Cluster, parse_clusters, selects
from function.contract.validation import dig
from function.kit import requeue
from function.kit.request import Request, desired_ready, namespace_labels, require_namespace

REQUIRE_SECRET = "auth-secret"
MAX_MESSAGE = 1000
STAGED = "Staged"
SOURCE_READY = "SourceReady"


@dataclass(frozen=True)
class Entry:
    """The cache on one cluster, for status.clusters[]."""

    cluster: str
    phase: CachePhase
    reason: str
    message: str

    def status(self, claim: str) -> dict[str, Any]:
        return {"name": self.cluster, "phase": self.phase.value, "reason": self.reason,
                "message": self.message[:MAX_MESSAGE], "claimName": claim}


def compose_cache(req: Request, rsp: fnv1.RunFunctionResponse, mc: dict[str, Any]) -> None:
    """Stage a valid ModelCache on every cluster it serves (handlers/modelcache.py)."""
    meta = mc["metadata"]
    spec, ns, name = mc["spec"], meta["namespace"], meta["name"]

    # Every cluster, not only the selected ones: a replica outside the
    # footprint keeps its volume, and its cluster must be known to place it.
    response.require_resources(rsp, REQUIRE_CLUSTERS, API_VERSION, KIND_INFERENCE_CLUSTER,
                               match_labels={})
    response.require_resources(rsp, REQUIRE_REPLICAS, API_VERSION, KIND_MODEL_REPLICA,
                               match_labels={LABEL_MODEL_CACHE: name}, namespace=ns)
    # Its Namespace's labels, for the clusters' spec.namespaceSelector (records.Cluster.admits).
    require_namespace(rsp, REQUIRE_OWN_NAMESPACE, ns)
    secret = auth_secret(spec)
    observed = req.observed()
    if not all(req.resolved(w) for w in (REQUIRE_CLUSTERS, REQUIRE_REPLICAS)):
        keep.keep_observed(rsp, observed)
        return

    every, unreadable = parse_clusters(req.required(REQUIRE_CLUSTERS))
    if any(c.namespace_selector is not None for c in every.values()) and \
            not req.resolved(REQUIRE_OWN_NAMESPACE):
        keep.keep_observed(rsp, observed)
        return
    # A cluster that does not admit the cache's namespace stages nothing new, as it
    # places no replica of it; what is there stays while a replica there uses it.
    labels = namespace_labels(req, REQUIRE_OWN_NAMESPACE, ns)
    clusters = {n: c for n, c in every.items() if c.admits(labels)}
    in_use = sorted({used for mr in req.required(REQUIRE_REPLICAS)
                     if (ref := cache_ref(dig(mr, "spec"))) and ref.name == name
                     and (used := dig(mr, "spec").get("clusterName")) is not None})
    selector = (spec.get("clusterSelector") or {}).get("matchLabels") or {}
    refused = [c for _, c in sorted(every.items())
               if c.name not in clusters and selects(selector, c.labels)]
    selected = [c for _, c in sorted(clusters.items()) if selects(selector, c.labels)]
    footprint = [c for c in selected if c.storage_class]
    no_storage = [c.name for c in selected if not c.storage_class]
    staging = {c.name: c for c in footprint
               if spec.get("hydration") != Hydration.ON_DEMAND or c.name in in_use}
    for cname in in_use:
        if cname in clusters and clusters[cname].storage_class:
            staging.setdefault(cname, clusters[cname])
    # The control plane's own Secret is read only where the control plane stages the
    # cache (its Job uses it in place); a remote cluster's is observed there.
    if secret and any(not c.remote for c in staging.values()):
        response.require_resources(rsp, REQUIRE_SECRET, "v1", "Secret", match_name=secret[0],
                                   namespace=ns)
        if not req.resolved(REQUIRE_SECRET):
            keep.keep_observed(rsp, observed)
            return
    local_secret = _local_presence(secret, bool(req.required(REQUIRE_SECRET)), ns)

    steps = hydration.steps(spec)
    claim = claim_name(ns, name)
    composed_keys: set[str] = set()
    entries: list[Entry] = []
    missing: list[Presence] = []
    local = next((c.name for c in staging.values() if not c.remote), None)
    for cname, cluster in sorted(staging.items()):
        # Every InferenceCluster without providerConfigRef is the control
        # plane itself: the first one's objects serve them all. (`local` is None
        # only when every staging cluster is remote.)
        owner = cname if cluster.remote or local is None else local
        # The owner's pod security level shapes its Job's pod, so its name too.
        digest = hydration.digest(steps, secret, staging[owner].pod_security)
        found = authsecret.presence(observed.get(keys(owner, digest)["auth"]), secret, ns, cname) \
            if secret and cluster.remote else local_secret
        objects = per_cluster(mc, cluster, owner, steps, digest, secret, found, observed)
        if owner == cname:
            for c in objects:
                resource.update(rsp.desired.resources[c.key], c.manifest)
                rsp.desired.resources[c.key].ready = desired_ready(
                    kinds.judge(observed.get(c.key)).ready)
                composed_keys.add(c.key)
        entries.append(judge_cluster(cname, observed, owner, digest, found))
        if not found.usable:
            missing.append(found)

    # An earlier release's copy of the Secret: observe-only first, then dropped
    # (authsecret.retired), wherever it is: deleting it as it was would delete the
    # Secret a running Job reads.
    for key in sorted(k for k in observed if k.endswith(f"-{authsecret.SECRET_KEY}")):
        if (retired := authsecret.retired(observed[key])) is not None:
            resource.update(rsp.desired.resources[key], retired)
            rsp.desired.resources[key].ready = desired_ready(kinds.judge(observed[key]).ready)
        composed_keys.add(key)

    # Objects no longer wanted go, unless a replica there still mounts the volume.
    kept = {k: v for k, v in observed.items() if k not in composed_keys
            and _cluster_of(k) in in_use}
    for e in keep.keep_observed(rsp, kept):
        entries.append(Entry(_cluster_of(e.key), CachePhase.PENDING, "KeptInUse",
                             "kept as it is: a replica there uses the cache, but the cluster is "
                             "gone, unreadable, without storage or no longer admits the "
                             "namespace now"))
    entries = _dedupe(entries)

    write_status(rsp, entries, claim, no_storage, unreadable, spec, missing, ns,
                 [c.name for c in refused])


def auth_secret(spec: Mapping[str, Any]) -> tuple[str, str] | None:
    """(Secret, key) for a Hugging Face token, (Secret, "") for a URI source's
    environment, or None."""
    if spec.get("source") == ModelSource.HUGGING_FACE:
        ref = (spec.get("huggingFace") or {}).get("authSecret")
        return (ref["name"], ref.get("key") or hydration.HF_TOKEN) if ref else None
    ref = (spec.get("uri") or {}).get("authSecret")
    return (ref["name"], "") if ref else None


def _local_presence(secret: tuple[str, str] | None, exists: bool, ns: str) -> Presence:
    """The control plane's Secret, as Crossplane sent it (or did not)."""
    if not secret or exists:
        return authsecret.PRESENT
    return Presence(authsecret.Found.MISSING, "SecretMissing",
                    f"Secret {secret[0]} does not exist in namespace {ns}; create it to start "
                    "hydrating")


def keys(owner: str, digest: str) -> dict[str, str]:
    """Composed-resource keys of one cluster's objects. The Job's carries its
    digest: a changed source drops the old Job and creates a new one."""
    return {"namespace": f"{owner}-namespace", "claim": f"{owner}-claim",
            "auth": f"{owner}-{authsecret.AUTH_KEY}", "job": f"{owner}-hydrate-{digest}"}


def _cluster_of(key: str) -> str:
    for suffix in ("-namespace", "-claim", f"-{authsecret.AUTH_KEY}",
                   f"-{authsecret.SECRET_KEY}"):
        if key.endswith(suffix):
            return key.removesuffix(suffix)
    return key.rsplit("-hydrate-", 1)[0]


def per_cluster(mc: Mapping[str, Any], cluster: Cluster, owner: str, steps, digest: str,
                secret: tuple[str, str] | None, found: Presence,
                observed: Mapping[str, Mapping[str, Any]]) -> list[Composed]:
    """The cache's objects on one cluster, placed (wrapped when remote); `found` says
    whether its auth Secret is there (always, without one)."""
    meta, spec = mc["metadata"], mc["spec"]
    ns, name = meta["namespace"], meta["name"]
    k = keys(owner, digest)
    labels = {LABEL_MODEL_CACHE: name}
    claim = claim_name(ns, name)
    size = (spec.get("huggingFace") or spec.get("uri") or {})["sizeGiB"]
    storage_class, size = _claim_as_bound(observed.get(k["claim"]), cluster.storage_class, size)
    objects = [Composed(k["claim"], {
        **kinds.PERSISTENTVOLUMECLAIM.header(),
        "metadata": {"name": claim, "namespace": ns, "labels": labels},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                 "resources": {"requests": {"storage": f"{size}Gi"}}},
    })]
    job_name = tagged_label(name, digest, tag="hydrate", identity=(ns, name, digest))
    if found.usable:
        objects.append(Composed(k["job"], hydration.job(job_name, ns, claim, labels, steps,
                                                         secret, cluster.pod_security),
                                Role.WORKLOAD))
    elif k["job"] in observed:
        # The Secret went missing after the Job started: keep the Job as it is.
        objects.append(Composed(k["job"], keep.as_desired(observed[k["job"]]), Role.WORKLOAD))
    owner_of = placement.Owner(
        ns, labels, tagged_label(name, cluster.name, tag="ns", identity=(ns, name, cluster.name)),
        object_name=lambda m: tagged_label(name, cluster.name, tag=_tag(m),
                                           identity=(ns, name, cluster.name, _tag(m))))
    placed = placement.place(kinds.recorded(objects), owner_of, cluster,
                             namespace_key=k["namespace"])
    if secret and cluster.remote:
        placed.append(Composed(k["auth"], authsecret.observer(
            secret, ns, tagged_label(name, cluster.name, tag="auth",
                                     identity=(ns, name, cluster.name, "auth")),
            owner_of, cluster)))
    return placed


_GI = re.compile(r"^(\d+)Gi$")


def _claim_as_bound(observed: Mapping[str, Any] | None, storage_class: str,
                    size: int) -> tuple[str, int]:
    """What an existing claim allows: its StorageClass is immutable and a claim
    never shrinks, so a changed class or a smaller sizeGiB keeps what is there
    (the API server would refuse the change, and the volume holds the weights)."""
    claim: Mapping[str, Any] = keep.as_desired(observed) if observed else {}
    if kinds.kind_of(claim) is kinds.OBJECT:
        claim = kinds.wrapped(claim)
    spec = claim.get("spec") or {}
    had = _GI.match(str(((spec.get("resources") or {}).get("requests") or {}).get("storage", "")))
    return (spec.get("storageClassName") or storage_class,
            max(size, int(had.group(1))) if had else size)


def _tag(manifest: Mapping[str, Any]) -> str:
    return {"PersistentVolumeClaim": "pvc"}.get(manifest["kind"], "hydrate")


def judge_cluster(cluster: str, observed: Mapping[str, Mapping[str, Any]], owner: str,
                  digest: str, found: Presence) -> Entry:
    k = keys(owner, digest)
    job = kinds.judge(observed.get(k["job"]))
    claim = kinds.judge(observed.get(k["claim"]))
    if job.failure:
        return Entry(cluster, CachePhase.FAILED, *hydration.failure(job.failure))
    if job.ready:
        return Entry(cluster, CachePhase.READY, "Hydrated", "the weights are staged")
    if not found.usable and not job.exists:
        return Entry(cluster, CachePhase.PENDING, found.reason, found.message)
    if claim.failure:
        return Entry(cluster, CachePhase.FAILED, "VolumeFailed", claim.failure)
    if job.exists and claim.ready:
        return Entry(cluster, CachePhase.HYDRATING, "Downloading", _detail(job))
    if claim.exists and not claim.ready:
        return Entry(cluster, CachePhase.PENDING, "WaitingForVolume",
                     f"the PersistentVolumeClaim is not bound yet ({_detail(claim)})")
    return Entry(cluster, CachePhase.PENDING, "Creating", "the volume and the Job are being "
                 "created")


def _detail(state: State) -> str:
    return state.detail or state.describe()


def _dedupe(entries: list[Entry]) -> list[Entry]:
    seen: dict[str, Entry] = {}
    for e in entries:
        seen.setdefault(e.cluster, e)
    return [seen[c] for c in sorted(seen)]


def write_status(rsp: fnv1.RunFunctionResponse, entries: list[Entry], claim: str,
                 no_storage: list[str], unreadable: Mapping[str, str], spec: Mapping[str, Any],
                 missing: list[Presence], ns: str,
                 not_admitted: list[str] | None = None) -> None:
    ready = sum(e.phase == CachePhase.READY for e in entries)
    resource.update(rsp.desired.composite, {"status": {
        "clusters": [e.status(claim) for e in entries],
        "readyClusters": ready,
        "summary": f"{ready}/{len(entries)} Ready",
    }})
    skipped = []
    if no_storage:
        skipped.append(f"{len(no_storage)} selected clusters have no spec.storage and cannot "
                       f"host it: {', '.join(no_storage[:20])}")
    if not_admitted:
        skipped.append(f"{len(not_admitted)} selected clusters do not admit namespace {ns} "
                       f"(spec.namespaceSelector): {', '.join(not_admitted[:20])}")
    if unreadable:
        skipped.append(f"{len(unreadable)} InferenceClusters are unreadable: "
                       + "; ".join(f"{n}: {w}" for n, w in sorted(unreadable.items())[:5]))
    on_demand = spec.get("hydration") == Hydration.ON_DEMAND
    failed = [e for e in entries if e.phase == CachePhase.FAILED]
    if failed:
        cond = ("False", "HydrationFailed", "; ".join(f"{e.cluster}: {e.reason}: {e.message}"
                                                      for e in failed))
    elif not entries and not on_demand:
        cond = ("False", "NoClusters", "no InferenceCluster in the footprint (clusterSelector, "
                "and spec.storage) can stage the cache")
    elif ready < len(entries):
        waiting = [e for e in entries if e.phase != CachePhase.READY]
        cond = ("False", "Hydrating", "; ".join(f"{e.cluster}: {e.phase.value} ({e.reason})"
                                                for e in waiting))
    else:
        cond = ("True", "Staged", f"{ready}/{len(entries)} clusters staged"
                + (" (OnDemand: staged where a replica uses it)" if on_demand else ""))
    message = "; ".join([cond[2], *skipped])[:MAX_MESSAGE]
    response.set_conditions(rsp, resource.Condition(
        typ=STAGED, status=cond[0], reason=cond[1], message=message))
    if missing:
        # Said first: what the user must do (a Secret to sync), then what is pending.
        worst = [m for m in missing if m.found is not authsecret.Found.CHECKING] or missing
        response.set_conditions(rsp, resource.Condition(
            typ=SOURCE_READY, status="False", reason=worst[0].reason,
            message="; ".join(dict.fromkeys(m.message for m in worst))[:MAX_MESSAGE]))
    else:
        response.set_conditions(rsp, resource.Condition(
            typ=SOURCE_READY, status="True", reason="SourceReady"))
    # Said explicitly: a cache with nothing composed would otherwise count as ready.
    rsp.desired.composite.ready = desired_ready(cond[0] == "True")
    if cond[1] == "Hydrating" or missing:
        requeue.soon(rsp)  # the Secret and the fleet are not watched for us


__all__ = ["run"]
