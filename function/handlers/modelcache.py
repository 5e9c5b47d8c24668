"""The ModelCache handler: a volume, Secret and hydration Job per cluster
(function/composer/modelcache/)."""

from __future__ import annotations

from function.composer import modelcache
from function.contract import rules
from function.contract.models.modelcache import ModelCache
from function.contract.validation import dig
from function.handlers import prologue

run = prologue.admitted(ModelCache, namespaced=True, workloads=True,
                        rules=lambda mc: rules.cache_errors(dig(mc, "spec")))(modelcache.compose_cache)
