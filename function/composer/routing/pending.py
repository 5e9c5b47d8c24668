"""A serving mode whose routing layer is not written yet: compose no route, say why."""

from __future__ import annotations

from dataclasses import dataclass

from function.composer.composed import Backends
from function.composer.model import Cluster, Replica
from function.composer.routing import Routing


@dataclass(frozen=True)
class NotYetRouted:
    mode: str
    why: str

    def route(self, replica: Replica, cluster: Cluster, backends: Backends) -> Routing:
        return Routing(not_routed=self.why)
