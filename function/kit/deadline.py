"""A request's deadline, honoured between the phases of a handler.

The server (runtime/fn.py) runs each RunFunction with a deadline: the one
Crossplane's gRPC call carries, capped by our own. Handlers call `check`
between phases (after validation, after reading the fleet, before planning);
past the deadline it raises `DeadlineExceeded`, which `fn.run_function` turns
into a Fatal result. A Fatal result applies nothing, so nothing is deleted,
and Crossplane calls again on its next reconcile.

The deadline lives in a context variable of the worker thread that runs the
request, so concurrent requests each see their own.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

_DEADLINE: ContextVar[float | None] = ContextVar("request_deadline", default=None)


class DeadlineExceeded(Exception):  # noqa: N818 - named for what happened, like TimeoutError
    """The request's deadline passed before `phase`."""

    def __init__(self, phase: str):
        super().__init__(phase)
        self.phase = phase


@contextlib.contextmanager
def until(deadline: float | None) -> Iterator[None]:
    """Run the body with `deadline` (a time.monotonic() value; None: none)."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check(phase: str) -> None:
    """Raise DeadlineExceeded if the current request's deadline has passed."""
    deadline = _DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline:
        raise DeadlineExceeded(phase)
