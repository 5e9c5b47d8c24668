"""The ModelService handler: its route on the front door (function/composer/modelservice/).

An invalid ModelService is not refused with a Fatal result: its route is kept
as it is and `Routed=False` says why, as every later problem does.
"""

from __future__ import annotations

from function.composer import modelservice
from function.contract.models.modelservice import ModelService
from function.contract.validation import dig
from function.handlers import prologue

# workloads: its route lands in a namespace named like its own, on the front door.
run = prologue.admitted(ModelService, namespaced=True, workloads=True,
                        rules=lambda ms: modelservice.spec_errors(dig(ms, "spec")),
                        on_invalid=modelservice.hold_invalid)(modelservice.route)
