"""A replica's side of its ModelCache: the volume in every pod, and when to start.

Every pod of the replica (serving pods and gang workers alike) mounts the
cache's volume read-only at `modelCacheRef.mountPath` in its engine
container, and finds the same path in MODELPLANE_MODEL_PATH. The engine's
command and args stay the user's: they point the engine at the path.

Workloads are held until the cache is Ready on the replica's cluster, rather
than started with an init container that waits: a held replica holds no GPU
while hundreds of gigabytes download (an init container would pin the pod,
and its devices, to a node for the whole download), needs no extra image in
the pod, and the replica says why it waits (`CacheReady`, reason
CacheHydrating). Once workloads exist they are never held back: a cache that
re-hydrates (a new revision) leaves running pods alone.
"""

from __future__ import annotations

from function.composer.composed import Backends
from function.composer.model import Replica
from function.contract.cacheview import MODEL_PATH_ENV, VOLUME, Cache, claim_name
from function.contract.enums import CachePhase

CACHE_READY = "CacheReady"


def mount(backends: Backends, replica: Replica) -> None:
    """Mount the cache in every pod template of the backends (in place)."""
    ref = replica.cache
    assert ref is not None
    claim = claim_name(replica.namespace, ref.name)
    for pod in backends.pod_templates:
        spec = pod.template["spec"]
        spec["volumes"] = [*spec.get("volumes", []), {
            "name": VOLUME, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}]
        engine = pod.engine_container
        engine["volumeMounts"] = [*engine.get("volumeMounts", []), {
            "name": VOLUME, "mountPath": ref.mount_path, "readOnly": True}]
        env = engine.get("env", [])
        if not any(e.get("name") == MODEL_PATH_ENV for e in env):  # the user's value wins
            engine["env"] = [*env, {"name": MODEL_PATH_ENV, "value": ref.mount_path}]


def waiting(cache: Cache, replica: Replica) -> tuple[str, str] | None:
    """(reason, message) while the cache is not Ready on the replica's cluster, else None."""
    if not cache.exists:
        return ("CacheMissing", f"ModelCache {cache.name} does not exist in namespace "
                f"{cache.namespace}; the engines start once it is created and Ready on "
                f"{replica.cluster}")
    on = cache.on(replica.cluster)
    if on is None:
        return ("CacheHydrating", f"ModelCache {cache.name} is not staged on {replica.cluster} "
                "yet; the engines start once it is Ready there")
    if on.phase == CachePhase.READY:
        return None
    said = f" ({on.reason}: {on.message})" if on.reason or on.message else ""
    reason = "CacheFailed" if on.phase == CachePhase.FAILED else "CacheHydrating"
    return (reason, f"ModelCache {cache.name} is {on.phase} on {replica.cluster}{said}; the "
            "engines start once it is Ready there")
