"""The InferenceCluster handler: its pools' observed and used capacity (function/cluster/).

A cluster whose schema or record does not hold is refused with a Fatal result;
its status, as this function's output, is not read as input.
"""

from __future__ import annotations

from function import cluster
from function.contract.models.inferencecluster import InferenceCluster
from function.handlers import prologue

run = prologue.admitted(InferenceCluster, namespaced=False, prune=False,
                        rules=cluster.record_errors)(cluster.status)
