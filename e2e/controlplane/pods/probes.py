"""A container's readiness probe, run inside the pod's network namespace.

Kubelet's three network probes: `httpGet` (any status in 200..399 passes),
`tcpSocket` (a connection is accepted) and `grpc` (grpc.health.v1.Health/Check
answers SERVING). Each runs in a fresh thread that first joins the pod's network
namespace with setns(2), so its sockets live there (and the caller's thread
never changes namespace); every step is bounded by the probe's timeoutSeconds.
`exec` probes are not run (they would run a command from an image that is not
here): a container with one counts as not ready, loudly, through `ProbeError`.

The gRPC check speaks HTTP/2 cleartext (as kubelet does: gRPC probes have no
TLS) with no library: grpcio's core opens its sockets on threads of its own,
outside the namespace this thread joined. One request, HPACK literals only;
the answer is read from the response DATA frame (`08 01` is SERVING), so no
header decoding is needed.
"""

from __future__ import annotations

import functools
import ctypes
import http.client
import os
import socket
import struct
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

CLONE_NEWNET = 0x40000000
DEFAULT_TIMEOUT = 1.0  # kubelet's default timeoutSeconds


class ProbeError(RuntimeError):
    """The probe cannot be run at all (unsupported kind, bad port name)."""


@dataclass(frozen=True)
class Result:
    ok: bool
    detail: str


def _setns(netns: str) -> None:
    """Move the calling thread into /run/netns/NAME."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {netns}: {os.strerror(err)}")
    finally:
        os.close(fd)


def in_netns(netns: str | None, fn: Callable[[], Result], deadline: float) -> Result:
    """Run fn in a fresh thread inside netns (None: this namespace), waiting at most deadline s."""
    box: list[Result] = []

    def body() -> None:
        try:
            if netns is not None:
                _setns(netns)
            box.append(fn())
        except OSError as e:
            box.append(Result(False, f"{type(e).__name__}: {e}"))

    t = threading.Thread(target=body, name=f"probe:{netns}", daemon=True)
    t.start()
    t.join(deadline)
    # A thread stuck past its deadline is left to its own socket timeout; its
    # namespace dies with it.
    return box[0] if box else Result(False, f"no answer within {deadline:.1f} s")


def resolve_port(port: Any, container: Mapping[str, Any]) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for p in container.get("ports") or ():
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ProbeError(f"probe port {port!r} is not a port of container {container.get('name')}")


def http_get(host: str, port: int, path: str, headers: Mapping[str, str], scheme: str,
             timeout: float) -> Result:
    conn_cls = http.client.HTTPSConnection if scheme.upper() == "HTTPS" else http.client.HTTPConnection
    kwargs: dict[str, Any] = {"timeout": timeout}
    if conn_cls is http.client.HTTPSConnection:
        import ssl
        kwargs["context"] = ssl._create_unverified_context()  # kubelet does not verify either
    conn = conn_cls(host, port, **kwargs)
    try:
        conn.request("GET", path or "/", headers=dict(headers))
        status = conn.getresponse().status
        return Result(200 <= status < 400, f"GET {path} -> {status}")
    except (OSError, http.client.HTTPException) as e:
        return Result(False, f"GET {path}: {e}")
    finally:
        conn.close()


def tcp(host: str, port: int, timeout: float) -> Result:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return Result(True, f"tcp {port} open")
    except OSError as e:
        return Result(False, f"tcp {port}: {e}")


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _literal(name: str, value: str) -> bytes:
    """HPACK 'literal header field without indexing, new name', no Huffman."""
    def string(s: str) -> bytes:
        b = s.encode()
        assert len(b) < 127, "short strings only"
        return bytes([len(b)]) + b
    return b"\x00" + string(name) + string(value)


def grpc_health(host: str, port: int, service: str, timeout: float) -> Result:
    """grpc.health.v1.Health/Check over h2c; True iff the answer is SERVING."""
    svc = service.encode()
    message = (b"\x0a" + bytes([len(svc)]) + svc) if svc else b""
    headers = b"".join(_literal(k, v) for k, v in (
        (":method", "POST"), (":scheme", "http"), (":path", "/grpc.health.v1.Health/Check"),
        (":authority", f"{host}:{port}"), ("content-type", "application/grpc"), ("te", "trailers")))
    request = (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(0x4, 0, 0, b"")
               + _frame(0x1, 0x4, 1, headers)  # HEADERS, END_HEADERS
               + _frame(0x0, 0x1, 1, b"\x00" + struct.pack(">I", len(message)) + message))
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(request)
            buf = b""
            while True:
                while len(buf) < 9 or len(buf) < 9 + int.from_bytes(buf[:3], "big"):
                    chunk = s.recv(65536)
                    if not chunk:
                        return Result(False, "grpc: connection closed before an answer")
                    buf += chunk
                length = int.from_bytes(buf[:3], "big")
                kind, flags, stream = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                payload, buf = buf[9:9 + length], buf[9 + length:]
                if kind == 0x4 and not flags & 0x1:  # SETTINGS: acknowledge
                    s.sendall(_frame(0x4, 0x1, 0, b""))
                elif kind == 0x6 and not flags & 0x1:  # PING: answer
                    s.sendall(_frame(0x6, 0x1, 0, payload))
                elif kind == 0x7:  # GOAWAY
                    return Result(False, "grpc: GOAWAY")
                elif kind == 0x3 and stream == 1:  # RST_STREAM
                    return Result(False, "grpc: stream reset")
                elif kind == 0x0 and stream == 1:
                    body = payload[5:]  # gRPC prefix: compressed flag + length
                    status = body[1] if body[:1] == b"\x08" and len(body) > 1 else 0
                    names = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
                    return Result(status == 1, f"grpc health {service or '(server)'}: "
                                               f"{names.get(status, status)}")
                elif kind == 0x1 and stream == 1 and flags & 0x1:
                    # Headers ending the stream with no message: an error status.
                    return Result(False, f"grpc health {service or '(server)'}: error status")
    except OSError as e:
        return Result(False, f"grpc {port}: {e}")


def run(probe: Mapping[str, Any], container: Mapping[str, Any], pod_ip: str,
        netns: str | None) -> Result:
    """Run a readiness probe of a container inside the pod's namespace."""
    timeout = float(probe.get("timeoutSeconds") or DEFAULT_TIMEOUT)
    if "httpGet" in probe:
        g = probe["httpGet"]
        port = resolve_port(g["port"], container)
        headers = {h["name"]: h["value"] for h in g.get("httpHeaders") or ()}
        fn = functools.partial(http_get, g.get("host") or pod_ip, port, g.get("path", "/"),
                               headers, g.get("scheme", "HTTP"), timeout)
    elif "tcpSocket" in probe:
        t = probe["tcpSocket"]
        port = resolve_port(t["port"], container)
        fn = functools.partial(tcp, t.get("host") or pod_ip, port, timeout)
    elif "grpc" in probe:
        g = probe["grpc"]
        port = int(g["port"])
        fn = functools.partial(grpc_health, pod_ip, port, g.get("service", ""), timeout)
    else:
        raise ProbeError(f"probe {sorted(probe)} of container {container.get('name')} "
                         "is not run here (only httpGet, tcpSocket and grpc)")
    # A little slack over the probe's own timeout for thread start and setns.
    return in_netns(netns, fn, timeout + 1.0)
