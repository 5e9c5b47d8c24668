"""The ModelDeployment handler: the scheduler places its replicas (function/scheduler/).

spec.autoscaling is left out of what the prologue judges: the scheduler checks it
on its own and reports a mistake there in the Autoscaling condition.
"""

from __future__ import annotations

from function import scheduler
from function.contract.models.modeldeployment import ModelDeployment
from function.contract.validation import dig, engine_rule_errors
from function.handlers import prologue
from function.scheduler import autoscaling

run = prologue.admitted(
    ModelDeployment, namespaced=True, view=autoscaling.without, workloads=True,
    rules=lambda md: engine_rule_errors(md, dig(md, "spec", "template", "spec")))(scheduler.place)
