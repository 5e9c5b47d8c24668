"""Selectors are evaluated where they can be stopped: in a child process.

The cost estimate (cost.py) refuses what it can price, but it prices CEL-C++
with cel-go's model, and the two differ (a ``replace`` whose output grows, a
list concatenation CEL-C++ copies, extension functions that cost tens of
microseconds and keep their results). CEL-C++ offers Python no interrupt, no
cost limit and no memory limit, and an evaluation holds the GIL, so a selector
the estimate missed once ran for 30 s, held every other tenant's request and
grew the server past its pod's memory limit, which restarted it, and
Crossplane's retry killed the new one too.

So every evaluation runs in a worker process (worker.py) that caps its own
address space at `MEMORY_BYTES`, and the server waits for its answer at most
until it has computed for `CPU_SECONDS` (waiting without the GIL). A worker
that computes longer is killed; one that cannot allocate says so (CEL-C++
reports ``std::bad_alloc``) or ends. Either way the selector has *exceeded
its evaluation budget*: `BudgetExceeded`, remembered for the life of the
server (`exceeded`) so that no retry runs it again, and by the scheduler in
the ModelDeployment's status so that a restarted server does not either.
The budget is the worker's computing time, not the time waited, so that a
busy machine does not make an honest selector look like a runaway one: a
worker that has not computed its `CPU_SECONDS` by `WALL_SECONDS` is killed
too, but that is `Unavailable` (no verdict; the caller keeps what exists and
retries on its next reconcile), as is a worker that cannot start. What such
an unfinished evaluation computed is added up per expression (`_PARTIAL`):
an honest selector finishes and adds nothing, a runaway one reaches its
budget over a few attempts however busy the machine, and is then remembered
like any other.

One worker evaluates and a spare waits, started and imported, so a killed
worker is replaced at once; the replacement's own spare starts in the
background. Handlers run on one thread (runtime/fn.py), so one worker
suffices; a lock keeps that true for any other caller. A worker is retired
after `RECYCLE_AFTER` evaluations: CEL-C++ keeps what extension functions
such as quantity() return alive, which would otherwise grow without end.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict

MEMORY_BYTES = 192 << 20   # a worker's address space; an idle one maps ~70 MiB of it
CPU_SECONDS = 0.2          # computing; the heaviest selector the estimates admit takes ~60 ms
WALL_SECONDS = 0.6         # waiting, however busy the machine: then no verdict this time
POLL_SECONDS = 0.02        # how often the worker's computing time is read while it runs
START_SECONDS = 30.0       # a worker's start-up (its imports), on a busy machine
RECYCLE_AFTER = 20_000
_EXCEEDED_LIMIT = 4096


class BudgetExceeded(Exception):
    """The selector ran past the wall-clock budget or the worker's memory."""


class Unavailable(Exception):
    """No verdict, through no fault of the selector: retry later."""


class _Worker:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "function.contract.devicecel.worker",
             "--memory", str(MEMORY_BYTES)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            close_fds=True)
        self.ready = False
        self.used = 0
        self.cpu = 0.0  # what it had computed when it last answered (its own count)
        self._buffer = b""

    def read_line(self, timeout: float) -> bytes | None:
        """The next line; b"" once the worker has ended, None at the timeout."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        until = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = until - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b""
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def start(self, timeout: float) -> None:
        if not self.ready:
            line = self.read_line(timeout)
            said = json.loads(line) if line else {}
            if not said.get("ready"):
                self.kill()
                raise Unavailable("the selector evaluation process did not start"
                                  + (" in time" if line is None else ""))
            self.ready, self.cpu = True, float(said.get("cpu", 0.0))

    def cpu_seconds(self) -> float:
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return 0.0

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line)
        self.proc.stdin.flush()
        self.used += 1

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()

    def ended(self) -> str:
        """How the worker ended, once it has."""
        code = self.proc.wait()
        if code < 0:
            return f"signal {signal.Signals(-code).name}"
        return f"exit status {code}"


class Sandbox:
    """One evaluating worker and a spare."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: _Worker | None = None
        self._spare: _Worker | None = None

    def _worker(self) -> _Worker:
        if self._active is None or self._active.used >= RECYCLE_AFTER:
            if self._active is not None:
                self._active.kill()
            self._active, self._spare = self._spare or _Worker(), None
        if self._spare is None:
            self._spare = _Worker()
        try:
            self._active.start(START_SECONDS)
        except Unavailable:
            self._active = None  # the next evaluation starts another
            raise
        return self._active

    def _lose(self, worker: _Worker) -> None:
        worker.kill()
        if self._active is worker:
            self._active = None

    def evaluate(self, expression: str, shape: str) -> tuple[bool | None, str]:
        """(verdict, "") or (None, the CEL error's message). Raises
        BudgetExceeded or Unavailable."""
        line = json.dumps({"e": expression, "d": shape}).encode() + b"\n"
        with self._lock:
            worker = self._worker()
            cpu = worker.cpu  # read again from /proc only while it runs long
            try:
                worker.send(line)
            except OSError:
                self._lose(worker)
                raise Unavailable("the selector evaluation process ended before it was asked") \
                    from None
            until = time.monotonic() + WALL_SECONDS
            while (answer := worker.read_line(POLL_SECONDS)) is None:
                spent = worker.cpu_seconds() - cpu
                if spent >= CPU_SECONDS:
                    self._lose(worker)
                    raise BudgetExceeded(f"its evaluation computed for more than {CPU_SECONDS}s "
                                         "and was stopped")
                if time.monotonic() >= until:
                    self._lose(worker)
                    total = _PARTIAL.pop(expression, 0.0) + spent
                    if total >= CPU_SECONDS:
                        raise BudgetExceeded(f"its unfinished evaluations computed for more than "
                                             f"{CPU_SECONDS}s in all and were stopped")
                    _PARTIAL[expression] = total
                    if len(_PARTIAL) > _EXCEEDED_LIMIT:
                        _PARTIAL.popitem(last=False)
                    raise Unavailable(f"its evaluation did not finish within {WALL_SECONDS}s on a "
                                      f"busy machine (it computed for {spent:.2f}s)")
            if answer == b"":
                how = worker.ended()
                self._lose(worker)
                raise BudgetExceeded(f"its evaluation ended the process evaluating it ({how}), "
                                     f"whose memory is capped at {MEMORY_BYTES >> 20} MiB")
            got = json.loads(answer)
            worker.cpu = float(got.get("cpu", worker.cpu))
            if "over" in got:  # it ran out of memory, and the worker ends
                self._lose(worker)
                raise BudgetExceeded(f"its evaluation needed more than the {MEMORY_BYTES >> 20} MiB "
                                     "of the process evaluating it")
        if "err" in got:
            return None, str(got["err"])
        return bool(got["v"]), ""

    def close(self) -> None:
        with self._lock:
            for worker in (self._active, self._spare):
                if worker is not None:
                    worker.kill()
            self._active = self._spare = None


SANDBOX = Sandbox()

# expression -> why it exceeded its budget, for the life of the process; bounded.
_EXCEEDED: OrderedDict[str, str] = OrderedDict()
# expression -> what its unfinished evaluations computed, in seconds; bounded.
_PARTIAL: OrderedDict[str, float] = OrderedDict()


def exceeded(expression: str) -> str | None:
    """Why this expression exceeded its budget before, or None."""
    return _EXCEEDED.get(expression)


def remember(expression: str, why: str) -> None:
    _EXCEEDED[expression] = why
    _EXCEEDED.move_to_end(expression)
    if len(_EXCEEDED) > _EXCEEDED_LIMIT:
        _EXCEEDED.popitem(last=False)
