"""The one RunFunction entry: dispatch on the observed composite's kind.

Each kind has a handler of its own in function/handlers/ (function-template-python's
shape), listed in `handlers.HANDLERS`. Anything else, or a request we cannot
read, gets a Fatal result with a message; this function never raises, because
an exception surfaces to the user as an opaque gRPC error and tells them
nothing they can act on.

Handlers are synchronous; the gRPC server's event loop must never wait on
one, or one slow request holds every tenant's back. So `FunctionRunner` runs
each on a worker thread (one: see WORKERS), with a deadline: Crossplane's gRPC
deadline, capped at `REQUEST_DEADLINE_SECONDS`. The handler checks it between
phases (kit/deadline.py); the server answers at the deadline whether or not
the handler has stopped, with a Fatal result, which applies (and so deletes)
nothing. A CEL-C++ evaluation holds the GIL and cannot be interrupted, so the
server never runs one: each goes to a worker process with a memory cap and a
computing budget (contract/devicecel/sandbox.py), which the handler's thread
waits for without the GIL, at most 0.6 s, after both CEL cost estimates
(cost.py, runtimecost.py) admitted the selector.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from crossplane.function import logging, resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf.message import DecodeError

from function.contract.api import GROUP
from function.handlers import HANDLERS
from function.kit import deadline, wire
from function.kit.request import Request

# Our own cap on one request: the L benchmark's scheduler request (1000
# clusters, 5000 replicas) takes under a second, so this is far beyond honest work.
REQUEST_DEADLINE_SECONDS = 20.0
# One worker thread runs handlers, one request at a time, off the event loop. It
# was first because cel-expr-python evaluates extension functions (quantity(),
# semver()) only on the first thread that used them ("No PyCelArena found" on any
# other, seen on `make e2e` with four workers); selectors are now evaluated in the
# sandbox's worker process, but the handlers' caches (verdicts, parsed items) were
# written for one thread and are still shared unlocked. A selector holds this
# thread at most as long as the sandbox waits for it (contract/devicecel/sandbox.py).
WORKERS = 1


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """Serves RunFunction over gRPC, each request on a worker thread with a deadline."""

    def __init__(self, workers: int = WORKERS,
                 deadline_seconds: float = REQUEST_DEADLINE_SECONDS) -> None:
        self.log = logging.get_logger()
        self.deadline_seconds = deadline_seconds
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="run-function")

    async def RunFunction(  # noqa: N802 - the gRPC method name
        self, req: fnv1.RunFunctionRequest, context: grpc.aio.ServicerContext
    ) -> fnv1.RunFunctionResponse:
        return await self._offload(run_function, req, context, lambda: req)

    async def RunSerialized(  # noqa: N802 - named like the gRPC method it serves
        self, data: bytes, context: grpc.aio.ServicerContext
    ) -> fnv1.RunFunctionResponse:
        return await self._offload(run_serialized, data, context,
                                   lambda: wire.SerializedRequest.FromString(data))

    async def _offload(self, run, arg, context, request) -> fnv1.RunFunctionResponse:
        """`run(arg, log, deadline)` on a worker; a Fatal result at the deadline."""
        budget = self.deadline_seconds
        remaining = context.time_remaining() if context is not None else None
        if remaining is not None:
            budget = min(budget, remaining)
        until = time.monotonic() + budget
        work = asyncio.get_running_loop().run_in_executor(self.pool, run, arg, self.log, until)
        try:
            # shield: on timeout the worker runs on (a thread cannot be
            # stopped); it stops itself at its next deadline check.
            return await asyncio.wait_for(asyncio.shield(work), timeout=max(budget, 0.0))
        except TimeoutError:
            self.log.error("request deadline exceeded", seconds=round(budget, 3))
            try:
                req = request()
            except DecodeError:
                req = fnv1.RunFunctionRequest()
            return out_of_time(req, f"within its deadline of {budget:.1f}s")


def out_of_time(req, when: str) -> fnv1.RunFunctionResponse:
    """The answer to a request that ran out of time: Fatal, so nothing is applied."""
    rsp = response.to(req)
    _, kind = composite_type(req)
    response.fatal(rsp, f"function-model-serving did not finish composing {kind or 'the request'} "
                   f"{when}; nothing was changed, and Crossplane calls again on its next reconcile")
    return rsp


def run_serialized(data: bytes, log=None, until: float | None = None) -> fnv1.RunFunctionResponse:
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
    return run_function(req, log, until)


def run_function(req, log=None, until: float | None = None) -> fnv1.RunFunctionResponse:
    """Run the handler for the request's composite kind; never raise.

    `req` is a RunFunctionRequest or a wire.SerializedRequest; handlers read
    either through a `Request` view (request.py). `until` is the request's
    deadline (a time.monotonic() value), checked between phases.
    """
    rsp = response.to(req)
    api_version, kind = composite_type(req)
    log = bound(log, req, kind)
    handler = HANDLERS.get(kind) if api_version.split("/")[0] == GROUP else None
    if handler is None:
        what = f"{kind} ({api_version})" if kind else "a request without an observed composite"
        response.fatal(rsp, f"function-model-serving cannot compose {what}: it handles "
                       f"{', '.join(sorted(HANDLERS))} in group {GROUP}")
        return rsp
    if log is not None:
        log.debug("running function")
    try:
        with deadline.until(until):
            deadline.check("before starting (it waited for a worker)")
            handler(Request(req), rsp)
    except deadline.DeadlineExceeded as exc:
        if log is not None:
            log.info("stopped at the deadline", phase=exc.phase)
        return out_of_time(req, f"before its deadline: it stopped {exc.phase}")
    except Exception as exc:  # noqa: BLE001 - the last guard: report, never raise
        if log is not None:
            log.error("handler raised", error=str(exc),
                      traceback=traceback.format_exc(limit=8))
        # Start from a clean response so nothing half-built is applied: a Fatal
        # result stops Crossplane from applying (and so deleting) anything.
        rsp = response.to(req)
        response.fatal(rsp, f"internal error composing {kind}: {type(exc).__name__}: {exc}")
    return rsp


def bound(log: Any, req: Any, kind: str) -> Any:
    """The logger for one request, bound as function-template-python binds it:
    Crossplane's tag for the call, and the composite's kind, namespace and name, so
    that one reconcile's lines can be found among every tenant's."""
    if log is None:
        return None
    fields = req.observed.composite.resource.fields if req.observed.HasField("composite") else {}
    meta = fields["metadata"].struct_value.fields if "metadata" in fields else {}

    def text(key: str) -> str:
        return meta[key].string_value if key in meta else ""
    return log.bind(tag=req.meta.tag, kind=kind, namespace=text("namespace"), name=text("name"))


def composite_type(req: fnv1.RunFunctionRequest) -> tuple[str, str]:
    """The (apiVersion, kind) of the observed composite, empty when unreadable."""
    if not req.observed.HasField("composite"):
        return "", ""
    fields = req.observed.composite.resource.fields
    api_version = fields["apiVersion"].string_value if "apiVersion" in fields else ""
    kind = fields["kind"].string_value if "kind" in fields else ""
    return api_version, kind


__all__ = ["FunctionRunner", "run_function", "run_serialized", "resource"]
