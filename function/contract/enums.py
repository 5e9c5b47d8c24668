"""The API's enumerations, one name per concept, as the code spells them.

Every enum of the XRDs carries a title (hack/gen_xrds.py), so the
generated models (function/contract/models/) name it: `ServingMode`, `EnginePhase`,
`MemberRole`, `ReplicaPhase`, ... A concept that appears in several XRDs is
generated once per model module, with the same values; this module picks one,
so the code has one name per concept (tests/test_enums.py checks the others
agree). Each is a StrEnum: a member equals the string the API carries, so a
record can hold either.

The serving modes, routers, engine phases and KV connectors are the table's
(function/contract/serving.py), which the XRD generator reads; the generated names are
what the rest of the function uses.
"""

from __future__ import annotations

from function.contract.models.inferencecluster import (
    DeviceClaim,
    InventorySource,
    PodSecurityLevel,
    LabelSelectorOperator,
    ProviderConfigKind,
    StackMode,
    StackPhase,
    TaintEffect,
)
from function.contract.models.modelcache import CachePhase, Hydration, ModelSource
from function.contract.models.modeldeployment import (
    EngineMetric,
    PlacementStrategy,
    SelectPolicy,
    TolerationOperator,
)
from function.contract.models.modelreplica import (
    EngineContainerName,
    EnginePhase,
    ImagePullPolicy,
    KvConnector,
    MemberRole,
    RecoveryPolicy,
    ReplicaPhase,
    Router,
    ServingMode,
)

__all__ = [
    "CachePhase", "DeviceClaim", "EngineMetric", "Hydration", "InventorySource",
    "LabelSelectorOperator", "ModelSource",
    "EngineContainerName", "EnginePhase", "ImagePullPolicy", "KvConnector", "MemberRole",
    "PlacementStrategy", "PodSecurityLevel", "ProviderConfigKind", "RecoveryPolicy", "ReplicaPhase", "Router",
    "SelectPolicy", "ServingMode", "StackMode", "StackPhase", "TaintEffect", "TolerationOperator",
]
