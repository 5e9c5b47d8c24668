"""The one RunFunction entry: dispatch on the observed composite's kind.

Each kind has a handler of its own in function/handlers/ (function-template-python's
shape), listed in `handlers.HANDLERS`. Anything else, or a request we cannot
read, gets a Fatal result with a message; this function never raises, because
an exception surfaces to the user as an opaque gRPC error and tells them
nothing they can act on.
"""

from __future__ import annotations

import traceback

import grpc
from crossplane.function import logging, resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf.message import DecodeError

from function.contract.api import GROUP
from function.handlers import HANDLERS
from function.kit import wire
from function.kit.request import Request


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """Serves RunFunction over gRPC."""

    def __init__(self) -> None:
        self.log = logging.get_logger()

    async def RunFunction(  # noqa: N802 - the gRPC method name
        self, req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext
    ) -> fnv1.RunFunctionResponse:
        return run_function(req, self.log)

    async def RunSerialized(  # noqa: N802 - named like the gRPC method it serves
        self, data: bytes, _: grpc.aio.ServicerContext
    ) -> fnv1.RunFunctionResponse:
        return run_serialized(data, self.log)


def run_serialized(data: bytes, log=None) -> fnv1.RunFunctionResponse:
    """Run the handler for a request as it came off the wire; never raise.

    What the server runs (server.py). The request is decoded with its required
    resources left serialized (wire.py): the scheduler's carries the whole
    fleet, and each handler decodes only the items it has not seen before.
    """
    try:
        req = wire.SerializedRequest.FromString(data)
    except DecodeError as exc:
        rsp = fnv1.RunFunctionResponse()
        response.fatal(rsp, f"function-model-serving cannot decode the RunFunctionRequest: {exc}")
        return rsp
    return run_function(req, log)


def run_function(req, log=None) -> fnv1.RunFunctionResponse:
    """Run the handler for the request's composite kind; never raise.

    `req` is a RunFunctionRequest or a wire.SerializedRequest; handlers read
    either through a `Request` view (request.py).
    """
    rsp = response.to(req)
    api_version, kind = composite_type(req)
    handler = HANDLERS.get(kind) if api_version.split("/")[0] == GROUP else None
    if handler is None:
        what = f"{kind} ({api_version})" if kind else "a request without an observed composite"
        response.fatal(rsp, f"function-model-serving cannot compose {what}: it handles "
                       f"{', '.join(sorted(HANDLERS))} in group {GROUP}")
        return rsp
    try:
        handler(Request(req), rsp)
    except Exception as exc:  # noqa: BLE001 - the last guard: report, never raise
        if log is not None:
            log.error("handler raised", kind=kind, error=str(exc),
                      traceback=traceback.format_exc(limit=8))
        # Start from a clean response so nothing half-built is applied: a Fatal
        # result stops Crossplane from applying (and so deleting) anything.
        rsp = response.to(req)
        response.fatal(rsp, f"internal error composing {kind}: {type(exc).__name__}: {exc}")
    return rsp


def composite_type(req: fnv1.RunFunctionRequest) -> tuple[str, str]:
    """The (apiVersion, kind) of the observed composite, empty when unreadable."""
    if not req.observed.HasField("composite"):
        return "", ""
    fields = req.observed.composite.resource.fields
    api_version = fields["apiVersion"].string_value if "apiVersion" in fields else ""
    kind = fields["kind"].string_value if "kind" in fields else ""
    return api_version, kind


__all__ = ["FunctionRunner", "run_function", "run_serialized", "resource"]
