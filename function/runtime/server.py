"""The gRPC server: the SDK's runtime, with RunFunction fed the request's bytes.

`crossplane.function.runtime.serve` registers the generated servicer, whose
deserializer decodes every request in full before our code runs. For the
scheduler that decode is most of the cost of a reconcile (see wire.py), so
v1 RunFunction is registered here with no deserializer: the handler gets the
bytes and `fn.run_serialized` decides how much to decode. Everything else is
as the SDK does it: the v1beta1 service (converted to v1 by the SDK's
wrapper), mTLS or an explicit --insecure, and a graceful stop on SIGTERM.
Unlike the SDK, server reflection is off unless asked for (`--enable-reflection`):
Crossplane does not use it, and it lists the services to anyone who reaches the
port. The message sizes are explicit (main.py says how they are sized).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Sequence
from typing import Any

import grpc
from crossplane.function import logging, runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1beta1 import run_function_pb2_grpc as grpcv1beta1
from grpc_reflection.v1alpha import reflection as grpc_reflection

from function.runtime import fn

SERVICE = fnv1.DESCRIPTOR.services_by_name["FunctionRunnerService"].full_name
# RunFunction calls in flight at once (running or waiting for a worker, fn.py);
# beyond this gRPC refuses a call with RESOURCE_EXHAUSTED, and Crossplane retries.
MAX_CONCURRENT_RPCS = 64
MB = 1024 * 1024


def run_function_handler(runner: fn.FunctionRunner) -> grpc.GenericRpcHandler:
    """v1 RunFunction, its request handed over undecoded."""
    return grpc.method_handlers_generic_handler(SERVICE, {
        "RunFunction": grpc.unary_unary_rpc_method_handler(
            runner.RunSerialized,
            request_deserializer=None,  # the handler gets the bytes
            response_serializer=fnv1.RunFunctionResponse.SerializeToString),
    })


def options(max_recv_mb: int, max_send_mb: int) -> list[tuple[str, Any]]:
    """The server's gRPC options: the largest request it reads and response it sends."""
    return [("grpc.max_receive_message_length", max_recv_mb * MB),
            ("grpc.max_send_message_length", max_send_mb * MB)]


def run(runner: fn.FunctionRunner, *, debug: bool, address: str, tls_certs_dir: str | None,
        insecure: bool, max_recv_message_size: int, max_send_message_size: int,
        enable_reflection: bool = False) -> None:
    """The SDK's `cli.run`, serving through `serve` below."""
    logging.configure(level=logging.Level.DEBUG if debug else logging.Level.INFO)
    # load_credentials returns None for None, though its signature says str.
    creds = None if tls_certs_dir is None else runtime.load_credentials(tls_certs_dir)
    serve(runner, address, creds=creds, insecure=insecure,
          options=options(max_recv_message_size, max_send_message_size),
          reflection=enable_reflection)


def serve(runner: fn.FunctionRunner, address: str, *, creds: grpc.ServerCredentials | None,
          insecure: bool, options: Sequence[tuple[str, Any]] | None = None,
          reflection: bool = False) -> None:
    if creds is None and not insecure:
        raise ValueError("no credentials were provided - did you provide credentials or use "
                         "the insecure flag?")
    try:
        loop = asyncio.get_event_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    server = grpc.aio.server(options=options, maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS)
    loop.add_signal_handler(signal.SIGTERM, lambda: asyncio.ensure_future(
        server.stop(grace=runtime.SHUTDOWN_GRACE_PERIOD_SECONDS)))
    server.add_generic_rpc_handlers((run_function_handler(runner),))
    grpcv1beta1.add_FunctionRunnerServiceServicer_to_server(
        runtime.BetaFunctionRunner(wrapped=runner), server)
    if reflection:
        grpc_reflection.enable_server_reflection(runtime.SERVICE_NAMES, server)
    if creds is not None:
        server.add_secure_port(address, creds)
    if insecure:
        server.add_insecure_port(address)

    async def start() -> None:
        await server.start()
        await server.wait_for_termination()

    try:
        loop.run_until_complete(start())
    finally:
        loop.run_until_complete(server.stop(grace=runtime.SHUTDOWN_GRACE_PERIOD_SECONDS))
        loop.close()
