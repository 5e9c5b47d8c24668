"""A keep-alive client that dials only loopback and harness pods.

http.client with one persistent (keep-alive) connection per target and thread, so a
measurement is a request and its whole response over an open connection (TCP setup
in neither path), timed with time.perf_counter. Requests go only to loopback
gateway URLs and harness pod addresses (e2e/tests/traffic.py's guard), each bounded
by a timeout.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

POD_HEADER = "x-inference-pod"   # the simulator's answer: which pod served
TIMEOUT = 10.0                  # seconds per request


@dataclass
class Answer:
    status: int
    seconds: float
    pod: str      # x-inference-pod: the engine pod that served, when the engine says
    body: bytes


class Tally:
    """The 200s answered through one target, counted across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ok = 0

    def add(self) -> None:
        with self._lock:
            self.ok += 1


class Client:
    """One persistent HTTP/1.1 connection to one base URL (a gateway URL with its path
    prefix, or an engine pod's address); `headers` go with every request."""

    def __init__(self, base: str, headers: Mapping[str, str] | None = None,
                 tally: Tally | None = None, timeout: float = TIMEOUT) -> None:
        from e2e.tests.traffic import _allowed  # loopback or a harness pod, nothing else
        _allowed(base)
        parts = urllib.parse.urlsplit(base)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{base}: not an http:// URL")
        self.host, self.port = parts.hostname, parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.tally = tally
        self.timeout = timeout
        self.conn: http.client.HTTPConnection | None = None

    def post(self, path: str, body: Mapping[str, Any]) -> Answer:
        data = json.dumps(body).encode()
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            t0 = time.perf_counter()
            try:
                self.conn.request("POST", self.prefix + path, body=data, headers=self.headers)
                rsp = self.conn.getresponse()
                raw = rsp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # A keep-alive connection the server closed while idle: once more, afresh.
                self.close()
                if attempt:
                    raise
                continue
            except (OSError, http.client.HTTPException):
                self.close()
                raise
            seconds = time.perf_counter() - t0
            if rsp.will_close:
                self.close()
            if rsp.status == 200 and self.tally is not None:
                self.tally.add()
            return Answer(rsp.status, seconds, rsp.getheader(POD_HEADER) or "", raw)
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


@dataclass
class Target:
    """Where requests go: base URLs (taken round robin) and the headers they carry;
    `tally` counts the 200s, to check against the engines' own counters."""

    urls: list[str]
    headers: dict[str, str] = field(default_factory=dict)
    tally: Tally = field(default_factory=Tally)

    def client(self, k: int) -> Client:
        return Client(self.urls[k % len(self.urls)], self.headers, self.tally)
