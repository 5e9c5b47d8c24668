"""The InferenceCluster handler: its pools' observed and used capacity (function/cluster/).

A cluster whose schema or record does not hold is refused with a Fatal result;
its status, as this function's output, is not read as input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import cluster
from function.contract.models.inferencecluster import InferenceCluster
from function.contract.records import Malformed
from function.contract.stack import spec_errors
from function.handlers import prologue
from function.kit.request import Request


def rules(ic: Mapping[str, Any]) -> list[str]:
    """The stack's rules (contract/stack.py), which admission should have applied."""
    spec = ic.get("spec")
    return spec_errors(spec) if isinstance(spec, Mapping) else []


@prologue.admitted(InferenceCluster, namespaced=False, prune=False, rules=rules)
def run(req: Request, rsp: fnv1.RunFunctionResponse, ic: dict[str, Any]) -> None:
    # Read as a record once: a cluster that is not one is refused like a schema error.
    try:
        record = cluster.declared(ic)
    except Malformed as exc:
        prologue.refuse(ic, rsp, [str(exc)], namespaced=False)
        return
    cluster.status(req, rsp, ic, record)
