"""A DRA device selector: compiled once, evaluated against many devices.

* Kubernetes allows cross-type numeric comparisons (``1 < 1.5``); the
  CEL-C++ checker doesn't. An expression whose only checker errors are such
  comparisons runs unchecked, since the runtime supports them. Its other type
  errors then show up at evaluation.
* A missing name in a domain is a "no such key" error, and Kubernetes
  returns ``{}`` for an unknown domain, so
  ``has(device.attributes["other.domain"].x)`` is false. CEL-C++ can't
  default a map lookup, so an evaluation that fails on a missing key that
  isn't a published domain is run again with that domain set to ``{}`` (at
  most 8 such domains). CEL has no side effects, so this gives Kubernetes'
  answer.
* Every evaluation runs in a worker process that can be stopped (sandbox.py):
  one that runs past its wall-clock or memory budget raises `CelBudgetError`,
  and the expression is refused from then on, as one over the cost limit is.
* Kubernetes' cost limits hold (cost.py): a selector longer than 10 Ki
  characters or whose estimated worst-case cost exceeds 1,000,000 is refused
  at compile time (`CelCostError`, as the API server refuses it), and a device
  larger than the sizes that estimate assumed is checked against the same
  limit with its own sizes before the selector runs on it (the scheduler's
  runtime limit).
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Any

from cel_expr_python import cel

from function.contract.devicecel import cost, runtimecost, sandbox
from function.contract.devicecel.device import DeviceActivation
from function.contract.devicecel.library import ENV

_T = cel.Type


class CelError(Exception):
    """A device selector could not be used; the message says why and where."""


class CelCompileError(CelError):
    """The expression is not a valid selector (syntax, types, result type)."""


class CelEvalError(CelError):
    """The expression failed on a particular device (missing attribute, ...)."""


class CelCostError(CelCompileError):
    """The expression is over Kubernetes' length or cost limit for a selector."""


class CelBudgetError(CelCostError):
    """An evaluation of the expression ran past its wall-clock or memory budget
    (sandbox.py): refused from then on, as an expression over the cost limit is."""


class CelSandboxError(CelError):
    """No verdict, through no fault of the expression (the evaluation process
    could not start, or the machine was too busy to run it): decide nothing, retry."""


# A checker error CEL-C++ reports for comparisons Kubernetes allows (cel-go's
# CrossTypeNumericComparisons), e.g. "found no matching overload for '_<_'
# applied to '(int, double)'".
_CROSS_NUMERIC = re.compile(
    r"found no matching overload for '_(<|<=|>|>=)_' applied to "
    r"'\((int|uint|double), (int|uint|double)\)'")
_MISSING_KEY = re.compile(r'Key not found in map : "([^"\\]*)"')
_MAX_DEFAULTED_DOMAINS = 8


def _clean(status: Any) -> str:
    """Strip CEL-C++'s status-code decoration from an error message."""
    msg = re.sub(r"^[A-Z_]+: ", "", str(status).strip())
    msg = re.sub(r"\s*\[[A-Z_]+\]$", "", msg)
    return _MISSING_KEY.sub(r"no such key: \1", msg)  # Kubernetes' wording


class CompiledSelector:
    """A device selector, compiled once and evaluated against many devices."""

    __slots__ = ("expression", "cost", "_program", "_checked")

    @staticmethod
    def _type_name(t: cel.Type) -> str:
        name = t.name()
        return name.lower() if name.isupper() else name

    def __init__(self, expression: str, program: Any, checked: bool, estimate: int):
        self.expression = expression
        self.cost = estimate  # the most one evaluation costs on a device within cost.WORST_CASE
        self._program = program
        self._checked = checked

    def matches(self, activation: DeviceActivation) -> bool:
        """True when the device is selected, evaluated in the sandbox. Raises
        CelEvalError if the expression fails on this device or gives something
        other than a bool, CelBudgetError if it ran past its budget (and is
        refused from then on), CelSandboxError if no verdict could be had."""
        if activation.error:
            raise CelEvalError(f"selector {self.expression!r}: {activation.error}")
        self._check_runtime_cost(activation)
        why = sandbox.exceeded(self.expression)
        if why is None:
            try:
                verdict, error = sandbox.SANDBOX.evaluate(self.expression, activation.shape)
            except sandbox.Unavailable as exc:
                raise CelSandboxError(f"selector {_short(self.expression)}: no verdict: {exc}; "
                                      "it is evaluated again on the next reconcile") from None
            except sandbox.BudgetExceeded as exc:
                why = str(exc)
                sandbox.remember(self.expression, why)
            else:
                if verdict is None:
                    raise CelEvalError(error)
                return verdict
        raise CelBudgetError(over_budget(self.expression, why))

    def evaluate_here(self, activation: DeviceActivation) -> bool:
        """`matches`, in this process, unbounded: what the sandbox's worker runs."""
        if activation.error:
            raise CelEvalError(f"selector {self.expression!r}: {activation.error}")
        self._check_runtime_cost(activation)
        extra: frozenset[str] = frozenset()
        cel_act = activation.cel_activation(self._checked)
        while True:
            try:
                result = self._program.eval(cel_act)
                kind = result.type()
                value = result.value()
            except Exception as e:  # the runtime's own failures (never expected)
                raise CelEvalError(f"selector {self.expression!r}: {_clean(e)}") from None
            if kind == _T.BOOL:
                return bool(value)
            if kind != _T.ERROR:
                raise CelEvalError(
                    f"selector {self.expression!r}: CEL result of type {self._type_name(kind)} "
                    "could not be converted to bool")
            # A lookup of an unpublished domain: Kubernetes reads it as {}.
            missing = _MISSING_KEY.search(str(value))
            key = missing and missing[1]
            if (key is None or key in extra or len(extra) >= _MAX_DEFAULTED_DOMAINS
                    or (key in activation.attributes and key in activation.capacity)):
                raise CelEvalError(f"selector {self.expression!r}: {_clean(value)}")
            extra |= {key}
            cel_act = ENV.Activation(activation.data(self._checked, extra))


    def _check_runtime_cost(self, activation: DeviceActivation) -> None:
        """The runtime cost limit: the estimate holds for devices within
        cost.WORST_CASE; a larger device (data nobody validated against the
        DRA limits) is estimated with its own sizes before anything runs."""
        sizes = activation.sizes(_MAX_DEFAULTED_DOMAINS)
        if cost.WORST_CASE.covers(sizes):
            return
        estimate = cost.estimate(self._program.serialize(), sizes)
        if estimate > cost.MAX_COST:
            raise CelEvalError(
                f"selector {_short(self.expression)}: actual cost limit exceeded on this device: "
                f"{_cost_text(estimate)} is more than Kubernetes' limit of {cost.MAX_COST:,} "
                f"for a device selector (CELSelectorExpressionMaxCost)")
        try:
            _check_runtime_model(self.expression, self._program.serialize(), sizes,
                                 " on this device")
        except CelCostError as e:
            raise CelEvalError(str(e)) from None


def _short(expression: str, limit: int = 120) -> str:
    """The expression quoted, shortened: an over-budget one is often long."""
    return repr(expression if len(expression) <= limit else expression[:limit] + "...")


def _cost_text(estimate: int) -> str:
    return "an unbounded cost" if estimate >= 2**64 - 1 else f"a cost of {estimate:,}"


def digest(expression: str) -> str:
    """How a status names an expression without repeating it (sha256, hex)."""
    return hashlib.sha256(expression.encode()).hexdigest()


def over_budget(expression: str, why: str) -> str:
    """What a user reads when the selector exceeded its evaluation budget."""
    return (f"device selector {_short(expression)} exceeded its evaluation budget "
            f"({sandbox.CPU_SECONDS}s of computing, {sandbox.MEMORY_BYTES >> 20} MiB): {why}; "
            "it is not "
            "evaluated again: simplify it")


def compile_selector(expression: Any) -> CompiledSelector:
    """Parse and type-check a selector once; cached by expression text.

    Raises CelCompileError with the checker's message (position and caret
    included) when the expression is not a valid bool-valued selector, and
    CelBudgetError for one whose evaluation exceeded its budget before.
    """
    if not isinstance(expression, str):
        raise CelCompileError("device selector: the CEL expression is empty")
    why = sandbox.exceeded(expression)
    if why is not None:
        raise CelBudgetError(over_budget(expression, why))
    return compile_here(expression)


@functools.lru_cache(maxsize=1024)
def compile_here(expression: str) -> CompiledSelector:
    """`compile_selector` without the sandbox's memory of over-budget
    expressions: what the worker compiles with."""
    if not isinstance(expression, str) or not expression.strip():
        raise CelCompileError("device selector: the CEL expression is empty")
    if len(expression) > cost.MAX_LENGTH:
        raise CelCostError(
            f"device selector {_short(expression)} is {len(expression):,} characters long, more "
            f"than Kubernetes' limit of {cost.MAX_LENGTH:,} (CELSelectorExpressionMaxLength)")
    try:
        program = ENV.compile(expression)
        checked = True
    except Exception as e:
        message = _clean(e)
        errors = [line for line in message.splitlines() if line.startswith("ERROR:")]
        if not errors or not all(_CROSS_NUMERIC.search(line) for line in errors):
            raise CelCompileError(f"invalid device selector {expression!r}: {message}") from None
        # Only int/uint/double ordering comparisons failed the check; Kubernetes
        # allows them and the runtime supports them, so run it unchecked.
        try:
            program = ENV.compile(expression, disable_check=True)
        except Exception as e2:
            raise CelCompileError(f"invalid device selector {expression!r}: {_clean(e2)}") from None
        checked = False
    if checked and program.return_type() not in (_T.BOOL, _T.DYN):
        raise CelCompileError(
            f"invalid device selector {expression!r}: must evaluate to bool, "
            f"not {CompiledSelector._type_name(program.return_type())}")
    # What the API server checks before it admits a DRA selector.
    estimate = _estimated(expression, "", cost.estimate, program.serialize())
    if estimate > cost.MAX_COST:
        raise CelCostError(
            f"device selector {_short(expression)} is too complex: its estimated worst-case "
            f"evaluation has {_cost_text(estimate)}, more than Kubernetes' limit of "
            f"{cost.MAX_COST:,} for a device selector (CELSelectorExpressionMaxCost)")
    _check_runtime_model(expression, program.serialize(), cost.WORST_CASE, "")
    return CompiledSelector(expression, program, checked, estimate)


def _estimated(expression: str, where: str, estimate: Any, *args: Any) -> int:
    """`estimate(*args)`, or CelCostError: a value past the fixed bounds, or a
    selector that cannot be estimated (fail closed: what we cannot bound does not run)."""
    try:
        return int(estimate(*args))
    except runtimecost.TooLarge as e:
        raise CelCostError(f"device selector {_short(expression)} is too complex{where}: "
                           f"{e}") from None
    except Exception as e:
        raise CelCostError(f"device selector {_short(expression)}: its cost cannot be "
                           f"estimated: {type(e).__name__}: {e}") from None


def _check_runtime_model(expression: str, serialized: bytes, sizes: cost.Sizes,
                         where: str) -> None:
    """What CEL-C++ would pay (runtimecost.py), within the same limit."""
    estimate = _estimated(expression, where, runtimecost.estimate, serialized, sizes)
    if estimate > runtimecost.MAX_COST:
        raise CelCostError(
            f"device selector {_short(expression)} is too complex{where}: evaluated by this "
            f"function's CEL runtime (which copies lists, writes whole replaced strings and "
            f"calls the Kubernetes library in Python) it has {_cost_text(estimate)}, more "
            f"than the limit of {runtimecost.MAX_COST:,}")

