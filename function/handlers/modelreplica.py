"""The ModelReplica handler: a replica's workloads and routing on its cluster (function/composer/)."""

from __future__ import annotations

from function import composer
from function.contract.models.modelreplica import ModelReplica
from function.contract.validation import dig, engine_rule_errors
from function.handlers import prologue

run = prologue.admitted(ModelReplica, namespaced=True, workloads=True,
                        rules=lambda mr: engine_rule_errors(mr, dig(mr, "spec")))(composer.compose_replica)
