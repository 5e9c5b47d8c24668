"""The replica composer: ModelReplica -> workloads and routing on its cluster."""

from __future__ import annotations

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import structs

from function.models.modelreplica import ModelReplica
from function.validation import spec_errors


def run(req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse) -> None:
    mr = structs.to_dict(req.observed.composite.resource)
    meta = mr.get("metadata") or {}
    errors = spec_errors(ModelReplica, mr, mr.get("spec") or {})
    if errors:
        response.fatal(rsp, f"ModelReplica {meta.get('namespace')}/{meta.get('name')} is "
                       f"invalid: {'; '.join(errors)}")
        return
    resource.update(rsp.desired.composite, {"status": {"phase": "Pending"}})
