"""Bounded waits on conditions, and the probes they poll.

Nothing here sleeps for a fixed time to let something happen: every wait polls
a condition until a deadline, and a timeout names what it waited for, the last
error seen, and the tail of the logs that explain it.
"""

from __future__ import annotations

import os
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from e2e.controlplane.procs import tail

T = TypeVar("T")


def scale() -> float:
    """E2E_TIMEOUT_SCALE multiplies every deadline (a slower machine, a debugger)."""
    try:
        return max(0.1, float(os.environ.get("E2E_TIMEOUT_SCALE", "1")))
    except ValueError:
        return 1.0


class WaitTimeout(RuntimeError):
    pass


class ComponentDied(RuntimeError):
    pass


def _logs_text(logs: Iterable[Path], lines: int) -> str:
    parts = []
    for path in logs:
        parts.append(f"--- last {lines} lines of {path} ---\n{tail(Path(path), lines)}")
    return ("\n" + "\n".join(parts)) if parts else ""


def wait_for(what: str, check: Callable[[], T], timeout: float, *, interval: float = 0.25,
             max_interval: float = 2.0, logs: Iterable[Path] = (),
             died: Callable[[], str | None] | None = None, log_lines: int = 40) -> T:
    """Poll `check` until it returns something truthy; return that.

    `check` may raise: the exception counts as "not yet" and is reported on
    timeout. `died` returns a message when the process being waited for has
    exited, which ends the wait at once."""
    timeout *= scale()
    logs = list(logs)
    deadline = time.monotonic() + timeout
    last: str = ""
    delay = interval
    while True:
        try:
            result = check()
        except Exception as exc:  # noqa: BLE001 - any failure is "not yet"
            result = None
            last = f"{type(exc).__name__}: {exc}"
        if result:
            return result
        if died is not None:
            msg = died()
            if msg:
                raise ComponentDied(f"{msg} while waiting for {what}"
                                    + (f" (last error: {last})" if last else "")
                                    + _logs_text(logs, log_lines))
        now = time.monotonic()
        if now >= deadline:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}"
                              + (f"; last error: {last}" if last else "")
                              + _logs_text(logs, log_lines))
        time.sleep(min(delay, deadline - now))
        delay = min(max_interval, delay * 1.5)


def port_listening(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def bindable(port: int) -> bool:
    """Whether a listener could take `port` on every interface now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def free_port(taken: set[int] | None = None) -> int:
    """A free TCP port on 127.0.0.1 (and not in `taken`, the ports already handed out)."""
    taken = taken if taken is not None else set()
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port
    raise RuntimeError("no free port on 127.0.0.1")


def _context(ca: str | None, cert: str | None, key: str | None,
             insecure: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def http_get(url: str, *, ca: str | None = None, cert: str | None = None,
             key: str | None = None, insecure: bool = False, timeout: float = 5.0) -> tuple[int, str]:
    """(status, body) of a GET; TLS with an optional client certificate."""
    ctx = _context(ca, cert, key, insecure) if url.startswith("https") else None
    req = urllib.request.Request(url)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as rsp:
            return rsp.status, rsp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def tls_handshake(port: int, *, ca: str, cert: str | None = None, key: str | None = None,
                  server_hostname: str = "127.0.0.1", timeout: float = 3.0) -> bool:
    """A full TLS handshake (server verified against `ca`, optional client cert) succeeds."""
    ctx = _context(ca, cert, key, insecure=False)
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        with ctx.wrap_socket(sock, server_hostname=server_hostname) as tls:
            tls.do_handshake()
            return True


def probe(desc: dict) -> bool:
    """Evaluate a recorded readiness probe (see ControlPlane's component records)."""
    kind = desc.get("type")
    if kind == "none":
        return True
    if kind == "tcp":
        return port_listening(desc["port"])
    if kind == "http":
        status, body = http_get(desc["url"], ca=desc.get("ca"), cert=desc.get("cert"),
                                key=desc.get("key"), insecure=desc.get("insecure", False))
        expect = desc.get("expect")
        return status == 200 and (expect is None or body.strip() == expect)
    if kind == "tls":
        return tls_handshake(desc["port"], ca=desc["ca"], cert=desc.get("cert"),
                             key=desc.get("key"), server_hostname=desc.get("host", "127.0.0.1"))
    raise ValueError(f"unknown probe {desc!r}")
