"""Which pools can host an engine: device requests against pool devices.

A member's pods each land on one node, so a member fits a pool when one node's
devices can serve all of the member's requests at once. Requests compete for
devices (two requests may both accept an H100), so this is an assignment
problem: every request takes `count` devices of a single device kind (one
DeviceClass per request, as a DRA claim has), and no device kind gives more
than a node offers. A backtracking search finds an assignment whenever one
exists; requests and devices are tiny (<= 8 x 16), so exactness is cheap.

A request may list fungible alternatives in priority order (`firstAvailable`,
as a DRA request does). Each alternative is a candidate with its own count
and selectors, tried in priority order; `level` caps how far down the list a
match may go, so the plan can prefer, fleet-wide, the first alternative that
fits anywhere before it falls back to the next.

Everything is cached per reconcile: each CEL expression compiles once, and
each (engine, pool shape, level) is matched once however many clusters share it.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from function.contract import devicecel
from function.contract.enums import DeviceClaim
from function.contract.records import Device, Pool


@dataclass(frozen=True)
class Choice:
    """What one request got: a device kind, and for firstAvailable the alternative."""

    device: Device
    count: int
    selectors: tuple[Mapping[str, Any], ...]
    alternative: str | None = None


@dataclass(frozen=True)
class MemberFit:
    """How one member's requests map onto a pool's device kinds."""

    choices: Mapping[str, Choice]  # request name -> what it got

    @property
    def claims(self) -> bool:
        return any(c.device.claim == DeviceClaim.DRA for c in self.choices.values())


@dataclass(frozen=True)
class EngineFit:
    members: tuple[MemberFit, ...]  # in the engine's member order
    error: str = ""                  # a CEL runtime error that decided the mismatch


# (expression, device spec) -> verdict, across reconciles; bounded.
_VERDICTS: OrderedDict[tuple[str, str], bool | str] = OrderedDict()
_VERDICT_LIMIT = 100_000

class _Unfitted(enum.Enum):
    """A sentinel of its own type, so that mypy narrows `is _UNFITTED` (an object() it cannot)."""

    UNFITTED = enum.auto()


_UNFITTED: Final = _Unfitted.UNFITTED  # engine_fit: not yet worked out for this (engine, shape, level)


class Matcher:
    """Matches engines to pools for one reconcile, caching every result."""

    def __init__(self, over_budget: Mapping[str, str] | None = None) -> None:
        # expression digest -> why: what the deployment's status remembers
        # exceeded its evaluation budget (on this server or an earlier one).
        self._over_budget = over_budget or {}
        self._compiled: dict[str, devicecel.CompiledSelector] = {}
        self._activations: dict[int, Any] = {}
        self._request_device: dict[tuple[str, int], bool | str] = {}
        self._engine_shape: dict[tuple[str, str, int | None], EngineFit | None] = {}
        # engine_key is a repr of the engine's requests: computed once per
        # engine (engines live for the whole reconcile), not per pool.
        self._engine_keys: dict[int, str] = {}
        # What callers derive from an (engine, fit) pair, by their ids: both live
        # as long as this matcher (filters.place_engine).
        self.memo: dict = {}

    def compile_all(self, engines: Sequence[Mapping[str, Any]]) -> list[str]:
        """Compile every selector once; return user-facing errors for bad ones."""
        errors = []
        for engine, request, expr in selectors(engines):
            if expr in self._compiled:
                continue
            try:
                why = self._over_budget.get(devicecel.digest(expr))
                if why is not None:
                    raise devicecel.CelBudgetError(devicecel.over_budget(expr, why))
                self._compiled[expr] = devicecel.compile_selector(expr)
            except devicecel.CelError as exc:
                errors.append(f"engine {engine.get('name')!r} request "
                              f"{request.get('name')!r}: invalid CEL selector "
                              f"{expr!r}: {exc}")
        return errors

    def engine_fit(self, engine: Mapping[str, Any], pool: Pool,
                   level: int | None = None) -> EngineFit | None:
        """The engine's fit on the pool, or None when some member cannot fit.

        `level` caps the firstAvailable alternatives a request may use
        (0: only the first); None allows every alternative.
        """
        ek = self._engine_keys.get(id(engine))
        if ek is None:
            ek = self._engine_keys[id(engine)] = engine_key(engine)
        key = (ek, pool.shape, level)
        fit = self._engine_shape.get(key, _UNFITTED)
        if fit is _UNFITTED:  # a fit may be None: it is remembered too
            fit = self._engine_shape[key] = self._fit(engine, pool, level)
        return fit

    def _fit(self, engine: Mapping[str, Any], pool: Pool, level: int | None) -> EngineFit | None:
        fits = []
        for member in engine.get("members") or []:
            choices = self._assign(list(_requests(member)), pool.devices, level)
            if choices is None:
                return None
            fits.append(MemberFit(choices))
        return EngineFit(tuple(fits))

    def _assign(self, requests: list[Mapping[str, Any]], devices: Sequence[Device],
                level: int | None) -> dict[str, Choice] | None:
        # Candidates per request in preference order: alternatives by
        # priority, then device kinds in the order the pool lists them.
        candidates = []
        for r in requests:
            options = _options(r)[: None if level is None else level + 1]
            candidates.append([
                Choice(d, int(o.get("count", 1)), tuple(o.get("selectors") or ()),
                       o.get("name") if "firstAvailable" in r else None)
                for o in options for d in devices
                if int(o.get("count", 1)) <= d.count and self._matches(o, d)])
        # Most constrained request first keeps the search shallow; ties keep
        # declaration order so the result is deterministic.
        order = sorted(range(len(requests)), key=lambda i: (len(candidates[i]), i))
        left = {d.name: d.count for d in devices}
        chosen: dict[str, Choice] = {}

        def search(k: int) -> bool:
            if k == len(order):
                return True
            i = order[k]
            for c in candidates[i]:
                if left[c.device.name] >= c.count:
                    left[c.device.name] -= c.count
                    chosen[requests[i]["name"]] = c
                    if search(k + 1):
                        return True
                    left[c.device.name] += c.count
                    del chosen[requests[i]["name"]]
            return False

        return chosen if search(0) else None

    def _matches(self, request: Mapping[str, Any], device: Device) -> bool:
        for sel in request.get("selectors") or []:
            expr = sel.get("cel", "")
            key = (expr, id(device))
            if key not in self._request_device:
                self._request_device[key] = self._eval(expr, device)
            if self._request_device[key] is not True:
                return False
        return True

    def _eval(self, expr: str, device: Device) -> bool | str:
        compiled = self._compiled.get(expr)
        if compiled is None:  # not compiled: compile_all reported it
            return "invalid selector"
        # A verdict depends only on the expression and the device's spec, so
        # it is remembered for the life of the process. Besides saving work,
        # this bounds a leak: cel-expr-python keeps every Python value its
        # extension functions return (quantity(), semver()) alive, so the
        # same evaluation repeated every reconcile grew memory without end
        # (found by `make load`).
        key = (expr, device.key)
        verdict = _VERDICTS.get(key)
        if verdict is None:
            verdict = _VERDICTS[key] = self._evaluate(compiled, expr, device)
            if len(_VERDICTS) > _VERDICT_LIMIT:
                _VERDICTS.popitem(last=False)
        return verdict

    def _evaluate(self, compiled: devicecel.CompiledSelector, expr: str,
                  device: Device) -> bool | str:
        activation = self._activations.get(id(device))
        if activation is None:
            activation = self._activations[id(device)] = devicecel.device_activation(
                dict(device.spec))
        try:
            return compiled.matches(activation)
        except devicecel.CelEvalError as exc:
            # As in DRA, a selector that errors on a device does not select it.
            # One over its evaluation budget, or without a verdict, decides
            # nothing: that propagates to plan(), which keeps every replica.
            return str(exc)


def selectors(engines: Sequence[Mapping[str, Any]]) -> Iterator[tuple[Mapping[str, Any],
                                                                      Mapping[str, Any], str]]:
    """(engine, device request, CEL expression) of every selector, in spec order."""
    for engine in engines:
        for member in engine.get("members") or []:
            for request in _requests(member):
                for option in _options(request):
                    for sel in option.get("selectors") or []:
                        yield engine, request, sel.get("cel", "")


def _requests(member: Mapping[str, Any]):
    return (member.get("nodeSelector") or {}).get("devices") or []


def _options(request: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A request's ways to be satisfied: its alternatives, or itself."""
    return list(request.get("firstAvailable") or [request])


def levels(engines: Sequence[Mapping[str, Any]]) -> int:
    """How many firstAvailable priority levels the engines have (1 without any)."""
    return max([len(r.get("firstAvailable") or [r]) for e in engines
                for m in e.get("members") or [] for r in _requests(m)] or [1])


def engine_key(engine: Mapping[str, Any]) -> str:
    """What matching depends on: the members' roles and device requests."""
    return repr([(m.get("role"), _requests(m)) for m in engine.get("members") or []])
