"""Readiness probes (e2e/controlplane/pods/probes.py) against real servers on
loopback: httpGet passes on 2xx/3xx only, tcpSocket on an accepted connection,
grpc on a SERVING answer from a real grpcio health service; every probe is
bounded by its timeoutSeconds. (Inside a pod namespace: the live test.)"""

from __future__ import annotations

import http.server
import socket
import threading
import time
from concurrent import futures

import grpc
import pytest

from e2e.controlplane.pods import probes
from e2e.controlplane.pods.probes import ProbeError


@pytest.fixture
def http_server():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            codes = {"/health": 200, "/moved": 302, "/starting": 503}
            if self.path == "/slow":
                time.sleep(3)
            self.send_response(codes.get(self.path, 404))
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _probe(kind, **fields):
    return {kind: fields, "timeoutSeconds": 1}


@pytest.mark.parametrize("path, ok", [("/health", True), ("/moved", True),
                                      ("/starting", False), ("/absent", False)])
def test_http_get_passes_on_2xx_and_3xx_only(http_server, path, ok):
    r = probes.run(_probe("httpGet", path=path, port=http_server), {}, "127.0.0.1", None)
    assert r.ok is ok, r.detail


def test_a_named_port_is_the_containers_port_of_that_name(http_server):
    container = {"name": "engine", "ports": [{"name": "http", "containerPort": http_server}]}
    assert probes.run(_probe("httpGet", path="/health", port="http"), container,
                      "127.0.0.1", None).ok
    with pytest.raises(ProbeError, match="not a port"):
        probes.run(_probe("httpGet", path="/health", port="metrics"), container, "127.0.0.1", None)


def test_a_slow_answer_fails_within_the_timeout(http_server):
    start = time.monotonic()
    r = probes.run(_probe("httpGet", path="/slow", port=http_server), {}, "127.0.0.1", None)
    assert not r.ok and time.monotonic() - start < 2.5


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tcp_socket_passes_while_something_listens():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert probes.run(_probe("tcpSocket", port=port), {}, "127.0.0.1", None).ok
    assert not probes.run(_probe("tcpSocket", port=port), {}, "127.0.0.1", None).ok


@pytest.fixture
def grpc_health():
    """A real gRPC server whose Health/Check answers from `status` by service name."""
    status = {"inference-extension": 1, "": 1, "draining": 2}

    def check(request: bytes, context):
        service = request[2:].decode() if request[:1] == b"\x0a" else ""
        if service not in status:
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return bytes([0x08, status[service]])

    handler = grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
        "Check": grpc.unary_unary_rpc_method_handler(
            check, request_deserializer=None, response_serializer=None)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port
    server.stop(0)


@pytest.mark.parametrize("service, ok", [("inference-extension", True), ("", True),
                                         ("draining", False), ("absent", False)])
def test_grpc_passes_on_serving_only(grpc_health, service, ok):
    r = probes.run(_probe("grpc", port=grpc_health, service=service), {}, "127.0.0.1", None)
    assert r.ok is ok, r.detail


def test_grpc_against_a_closed_port_fails():
    assert not probes.run(_probe("grpc", port=_free_port()), {}, "127.0.0.1", None).ok


def test_exec_probes_are_refused_loudly():
    with pytest.raises(ProbeError, match="only httpGet, tcpSocket and grpc"):
        probes.run({"exec": {"command": ["true"]}}, {"name": "c"}, "127.0.0.1", None)
