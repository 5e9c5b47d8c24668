"""Routing layers: how a replica's serving pods are reached, one module per mode.

A layer decorates the backends' output and never builds workloads itself:
it receives every workload with its pod templates (`Backends`), may change
the serving pod templates in place (add a sidecar, a label, move a port:
the templates are the dicts embedded in the workloads' manifests), and
returns the objects that route to them plus the replica's endpoint. Warnings
for the user go to `backends.notes`.

Unified (`unified.py`): one Service over every serving pod, one HTTPRoute on
the cluster gateway. PrefillDecode (`prefill_decode.py`): role labels, KV
transfer plumbing and the llm-d routing sidecar on the engines' pods, an
InferencePool over both engines' serving pods, its endpoint picker (EPP) and
an HTTPRoute to the pool. A layer that cannot route a replica safely composes
no routing objects and says why (`Routing.not_routed`, the `Routed`
condition); the workloads are still composed.

To add a layer: implement `RoutingLayer`, register it in `LAYERS`, and (for
new kinds) teach `readiness.py` how such an object reports readiness.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from function.composer.composed import Backends, Composed
from function.composer.model import PREFILL_DECODE, UNIFIED, Cluster, Replica
from function.composer.status import NotRouted


@dataclass
class Routing:
    objects: list[Composed] = field(default_factory=list)  # Role.ROUTE: Serving waits on them
    endpoint: str | None = None          # where clients reach the replica
    not_routed: NotRouted | None = None  # why this layer composes no route (a False condition)


class RoutingLayer(Protocol):
    mode: str

    def route(self, replica: Replica, cluster: Cluster, backends: Backends) -> Routing:
        """Decorate `backends` (serving pod templates may be changed in place)."""
        ...


def _layers() -> dict[str, RoutingLayer]:
    from function.composer.routing.prefill_decode import PrefillDecodeRouting
    from function.composer.routing.unified import UnifiedRouting

    return {UNIFIED: UnifiedRouting(), PREFILL_DECODE: PrefillDecodeRouting()}


LAYERS: dict[str, RoutingLayer] = _layers()


def layer_for(mode: str) -> RoutingLayer | None:
    return LAYERS.get(mode)
