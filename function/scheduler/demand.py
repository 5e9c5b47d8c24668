"""Other ModelDeployments as a Pack deployment reads them: which wait for capacity.

A Pack deployment requires every ModelDeployment (room.py). What it needs of
each is small: its identity, whether its status says some replica found no
cluster (status.replicas.scheduled below spec.replicas), and, only for those,
what placement reads of its template. `parse` gives that as one `Demand`;
parsecache.DEPLOYMENTS keeps it per content across reconciles, and its fast
reader converts the template only of a deployment that waits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from function.contract import cacheview
from function.contract.enums import PlacementStrategy
from function.contract.models.modeldeployment import ModelDeployment
from function.contract.validation import dig, pruned, spec_errors
from function.scheduler import autoscaling
from function.scheduler.filters import Deployment
from function.scheduler.room import Waiting


@dataclass(frozen=True)
class Demand:
    namespace: str
    name: str
    # Set when it waits and placement can read it: valid, and mounting no
    # ModelCache (where that one may go is its cache's to say).
    waiting: Waiting | None = None


def strategy(tspec: Mapping[str, Any]) -> PlacementStrategy:
    return PlacementStrategy((tspec.get("placement") or {}).get("strategy")
                             or PlacementStrategy.SPREAD)


def deployment(tspec: Mapping[str, Any], cache: cacheview.Cache | None, namespace: str = "",
               namespace_labels: Mapping[str, str] | None = None) -> Deployment:
    """What placement reads of a (valid, pruned) template spec, in `namespace`
    (whose labels None: unknown, admitted only by clusters without a namespaceSelector)."""
    return Deployment(match_labels=(tspec.get("clusterSelector") or {}).get("matchLabels") or {},
                      tolerations=tspec.get("tolerations") or [],
                      engines=tspec.get("engines") or [], cache=cache, strategy=strategy(tspec),
                      namespace=namespace, namespace_labels=namespace_labels)


def identity(md: Mapping[str, Any]) -> tuple[str, str]:
    meta = dig(md, "metadata")
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def short(md: Mapping[str, Any]) -> bool:
    """Whether its status says some of its replicas found no cluster."""
    want = dig(md, "spec").get("replicas", 1)
    scheduled = dig(md, "status", "replicas").get("scheduled")
    return (isinstance(want, int) and isinstance(scheduled, int)
            and not isinstance(want, bool) and not isinstance(scheduled, bool)
            and scheduled < want)


def parse(md: Mapping[str, Any]) -> Demand:
    ns, name = identity(md)
    if not short(md):
        return Demand(ns, name)
    core = autoscaling.without(md)
    tspec = dig(core, "spec", "template", "spec")
    if spec_errors(ModelDeployment, core, tspec) or cacheview.cache_ref(tspec) is not None:
        return Demand(ns, name)
    tspec = dig(pruned(ModelDeployment, core), "spec", "template", "spec")
    meta = dig(md, "metadata")
    age = (str(meta.get("creationTimestamp") or "~"), ns, name)
    # Its Namespace's labels are not read: a cluster with a namespaceSelector is
    # never counted as room for it, so no replica moves on a guess.
    return Demand(ns, name, Waiting(f"{ns}/{name}", age, deployment(tspec, None, ns)))
