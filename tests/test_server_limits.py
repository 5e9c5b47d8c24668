"""The gRPC server's limits are sized to what Crossplane sends and reads, and server
reflection is off unless asked for (#33 finding 11).

Crossplane is the server's only client. Reflection lists its services to anyone who can
reach the port; nothing of ours needs it, so it is off by default (`--enable-reflection`
turns it on, for grpcurl while debugging). A request is the fleet (about 10 MB at
benchmark size L) and is accepted up to 32 MB; a response goes to Crossplane's client,
which reads at most 4 MB, so the server sends no more.
"""

from __future__ import annotations

import subprocess
import sys

import grpc
import pytest
from builders import ROOT
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from test_transport import wait_listening

from function.runtime import main, server
from function.tools import localrender

MB = 1024 * 1024


def test_the_default_limits_are_sized_to_the_fleet_and_to_crossplanes_client():
    assert main.DEFAULT_MAX_RECV_MB == 32  # 3x the L fleet's 10.3 MB request
    assert main.DEFAULT_MAX_SEND_MB == 4   # what Crossplane's gRPC client reads
    assert server.options(32, 4) == [("grpc.max_receive_message_length", 32 * MB),
                                     ("grpc.max_send_message_length", 4 * MB)]


def _serve(*extra: str):
    address = f"127.0.0.1:{localrender.free_port()}"
    proc = subprocess.Popen([sys.executable, "-m", "function.runtime.main", "serve", "--insecure",
                             "--address", address, *extra], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_listening(address, proc)
    return address, proc


@pytest.fixture(scope="module")
def default_server():
    address, proc = _serve()
    try:
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _services(address: str) -> list[str]:
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
        return [s.name for a in answers for s in a.list_services_response.service]


def test_reflection_is_off_by_default(default_server):
    with pytest.raises(grpc.RpcError) as err:
        _services(default_server)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_reflection_is_on_only_when_asked_for():
    address, proc = _serve("--enable-reflection")
    try:
        assert "apiextensions.fn.proto.v1.FunctionRunnerService" in _services(address)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_request_above_the_default_receive_limit_is_refused(default_server):
    req = fnv1.RunFunctionRequest()
    # A field no response echoes; the client itself sends and reads anything.
    req.credentials["big"].credential_data.data["x"] = b"x" * (33 * MB)
    with grpc.insecure_channel(default_server, options=[
            ("grpc.max_send_message_length", 64 * MB),
            ("grpc.max_receive_message_length", 64 * MB)]) as channel:
        with pytest.raises(grpc.RpcError) as err:
            grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=30)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
