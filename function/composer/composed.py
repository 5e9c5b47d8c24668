"""What the composer's stages hand each other: composed objects and pod templates.

Backends (`backends.py`) turn engines into workloads; routing layers
(`routing/`) decorate that output. A `PodTemplate` is the very dict embedded in
its workload's manifest, so a routing layer that adds a sidecar or a label to
a serving pod template changes the workload it will be applied with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from function.composer.model import Engine, Member
from function.contract.enums import EngineContainerName


class Role(Enum):
    """What an object's readiness means for the replica's phase."""

    WORKLOAD = "workload"  # pods run here: all must be Available to serve
    ROUTE = "route"        # traffic reaches the pods through it (Service, HTTPRoute)
    SUPPORT = "support"    # what workloads need (claims, the remote namespace)


@dataclass
class Composed:
    key: str                  # the composed-resource key, stable across reconciles
    manifest: dict[str, Any]
    role: Role = Role.SUPPORT


@dataclass
class PodTemplate:
    engine: Engine
    member: Member
    template: dict[str, Any]  # {"metadata": ..., "spec": ...}, embedded in its workload

    @property
    def serving(self) -> bool:
        return self.member.serves

    @property
    def engine_container(self) -> dict[str, Any]:
        return next(c for c in self.template["spec"]["containers"]
                    if c["name"] == EngineContainerName.ENGINE)


@dataclass
class Workload:
    engine: Engine
    composed: Composed        # the Deployment or LeaderWorkerSet
    pods: list[PodTemplate]   # leader first for a gang


@dataclass
class Backends:
    """Every engine's workload, plus what the pods need (ResourceClaimTemplates)."""

    workloads: list[Workload] = field(default_factory=list)
    support: list[Composed] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # warnings for the user

    @property
    def pod_templates(self) -> list[PodTemplate]:
        return [p for w in self.workloads for p in w.pods]

    @property
    def serving_pods(self) -> list[PodTemplate]:
        return [p for p in self.pod_templates if p.serving]

    @property
    def objects(self) -> list[Composed]:
        return [w.composed for w in self.workloads] + self.support
