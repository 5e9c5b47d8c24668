"""Routing layers: how a replica's serving pods are reached, one per (mode, router).

A layer decorates the backends' output and never builds workloads itself:
it receives every workload with its pod templates (`Backends`), may change
the serving pod templates in place (add a sidecar, a label, move a port:
the templates are the dicts embedded in the workloads' manifests), and
returns the objects that route to them plus the replica's endpoint. Warnings
for the user go to `backends.notes`.

The layers, as the serving modes' table (`function/contract/serving.py`) names them:

* `service.py` (Unified, router Service): one Service over every serving
  pod, one HTTPRoute on the cluster gateway;
* `endpoint_picker.py` (Unified, router EndpointPicker): an InferencePool
  and its endpoint picker (`epp.py`) instead of the Service, pods untouched;
* `prefill_decode.py` (PrefillDecode, router EndpointPicker): role labels,
  KV transfer plumbing and the llm-d routing sidecar on the engines' pods
  (`pd_pods.py`, reading engine flags with `engine_flags.py`), and an
  InferencePool with its endpoint picker (`epp.py`).

What they share: `gateway.py` (the HTTPRoute and the endpoint), `epp.py`
(an InferencePool, its endpoint picker and its config) and
`serving_config.py` (the function's pinned images and settings for them,
overridable through MODELPLANE_* variables). A layer that cannot route a
replica safely composes no routing objects and says why
(`Routing.not_routed`, the `Routed` condition); the workloads are still
composed.

To add a layer: a module here whose `LAYER` implements `RoutingLayer`, named
by its (mode, router) row in the serving modes' table (`function/contract/serving.py`),
and (for new kinds) register them in `kinds.py`, with how such an object
reports readiness (`readiness.py`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Protocol

from function.composer.composed import Backends, Composed
from function.composer.model import Replica
from function.composer.status import NotRouted
from function.contract.records import Cluster
from function.contract.serving import MODES


@dataclass
class Routing:
    objects: list[Composed] = field(default_factory=list)  # Role.ROUTE: Serving waits on them
    endpoint: str | None = None          # where clients reach the replica
    not_routed: NotRouted | None = None  # why this layer composes no route (a False condition)


class RoutingLayer(Protocol):
    def route(self, replica: Replica, cluster: Cluster, backends: Backends) -> Routing:
        """Decorate `backends` (serving pod templates may be changed in place)."""
        ...


def _layers() -> dict[tuple[str, str], RoutingLayer]:
    # Imported here: the layer modules import `Routing` from this package.
    return {(mode.name, router): importlib.import_module(f"{__name__}.{module}").LAYER
            for mode in MODES.values() for router, module in mode.routers.items()}


# (mode, router) -> its layer; validation admits only the table's pairs.
LAYERS: dict[tuple[str, str], RoutingLayer] = _layers()
