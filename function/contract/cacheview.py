"""A ModelCache as its readers see it: the scheduler and the replica composer.

The cache function (function/composer/modelcache/) stages a cache's weights on a
volume per cluster and reports each cluster's phase in `status.clusters[]`.
The scheduler reads the footprint (which clusters may host the cache) and
where it is Ready, to filter and rank clusters; the replica composer reads
the phase on its own cluster, and mounts the volume by the name all three
derive here, so no one has to look the name up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from function.contract.enums import CachePhase, Hydration
from function.contract.names import tagged_label
from function.contract.records import Cluster, selects
from function.contract.validation import dig

# Where the cache mounts unless modelCacheRef.mountPath says otherwise
# (Modelplane's path), and the variable that tells the engine the same.
DEFAULT_MOUNT_PATH = "/mnt/models"
MODEL_PATH_ENV = "MODELPLANE_MODEL_PATH"
VOLUME = "model-cache"  # the pod volume's name


def claim_name(namespace: str, cache: str) -> str:
    """The PersistentVolumeClaim of a cache, the same on every cluster (in the
    cache's namespace there). Unique per (namespace, cache)."""
    return tagged_label(cache, tag="cache", identity=(namespace, cache, "cache"))


@dataclass(frozen=True)
class CacheRef:
    """A replica's `modelCacheRef`."""

    name: str
    mount_path: str = DEFAULT_MOUNT_PATH


def cache_ref(spec: Mapping[str, Any]) -> CacheRef | None:
    ref = spec.get("modelCacheRef")
    if not isinstance(ref, Mapping) or not ref.get("name"):
        return None
    return CacheRef(str(ref["name"]), str(ref.get("mountPath") or DEFAULT_MOUNT_PATH))


@dataclass(frozen=True)
class ClusterCache:
    """The cache on one cluster, as its status says."""

    phase: str  # a CachePhase
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class Cache:
    """A ModelCache: its footprint, and its phase per cluster. `exists` is
    False for a reference to a cache that is not there."""

    name: str
    namespace: str
    exists: bool = True
    match_labels: Mapping[str, str] = None  # type: ignore[assignment]
    hydration: str = Hydration.EAGER.value
    clusters: Mapping[str, ClusterCache] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        object.__setattr__(self, "match_labels", dict(self.match_labels or {}))
        object.__setattr__(self, "clusters", dict(self.clusters or {}))

    def excludes(self, cluster: Cluster) -> str | None:
        """Why a new replica that mounts this cache cannot go to `cluster`
        (a reason phrase with `{is}`/`{has}` placeholders), or None."""
        if not self.exists:
            return f"{{has}} no ModelCache {self.name} (it does not exist in namespace " \
                   f"{self.namespace})"
        if not selects(self.match_labels, cluster.labels):
            return f"{{is}} outside ModelCache {self.name}'s clusterSelector"
        if not cluster.storage_class:
            return f"{{has}} no storage for ModelCache {self.name} (spec.storage)"
        return None

    def ready_on(self, cluster: str) -> bool:
        on = self.clusters.get(cluster)
        return on is not None and on.phase == CachePhase.READY

    def on(self, cluster: str) -> ClusterCache | None:
        return self.clusters.get(cluster)


def missing(name: str, namespace: str) -> Cache:
    return Cache(name, namespace, exists=False)


def parse_cache(obj: Mapping[str, Any]) -> Cache:
    """A ModelCache read leniently: a field of the wrong type reads as unset
    (admission and the cache's own function report it)."""
    meta = dig(obj, "metadata")
    spec = dig(obj, "spec")
    selector = dig(spec, "clusterSelector", "matchLabels")
    clusters = {}
    for entry in _list(dig(obj, "status").get("clusters")):
        entry = dig(entry)
        if isinstance(entry.get("name"), str) and _str(entry.get("phase")) in set(CachePhase):
            clusters[entry["name"]] = ClusterCache(entry["phase"], _str(entry.get("reason")),
                                                   _str(entry.get("message")))
    hydration = _str(spec.get("hydration"))
    return Cache(
        name=_str(meta.get("name")), namespace=_str(meta.get("namespace")),
        match_labels={k: v for k, v in selector.items() if isinstance(v, str)},
        hydration=hydration if hydration in set(Hydration) else Hydration.EAGER.value,
        clusters=clusters)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
