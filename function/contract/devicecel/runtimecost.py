"""What a selector costs the runtime that evaluates it here, CEL-C++.

cost.py estimates what Kubernetes estimates, with cel-go's model, and the
function refuses what Kubernetes would. But the selectors run on CEL-C++ and
Python callbacks, whose costs differ where it matters most (measured on the
shapes of tests/test_cel_sandbox.py):

* ``replace`` is priced on its input by cel-go, but writes its output, which
  can be far longer: two nested replaces over a bound 1,000-character string
  were estimated at 200,215 and built a 10^9-character string;
* list ``+`` costs 1 in cel-go, whose lists are persistent; CEL-C++ copies
  both: a ``cel.bind`` chain doubling a list 28 times was estimated at 387;
* the Kubernetes library's functions (``quantity()``, ``semver()``,
  ``isGreaterThan`` ...) are Python callbacks here, tens of microseconds each,
  and CEL-C++ keeps what they return until the evaluation ends; cel-go prices
  them at about 1.

So this model prices ``replace`` by what it reads and writes, list
concatenation by the items it copies, and a library call at
`EXTENSION_CALL` units (an 11-16 µs call, at the ~0.2 µs per unit the
heaviest admitted selector runs at); and it refuses any intermediate string
or list that could outgrow `MAX_STRING` or `MAX_LIST`, whatever its cost. It
is the function's own bound, checked beside Kubernetes' (selector.py), and
backed by the sandbox's budget (sandbox.py) for whatever it still misses.
"""

from __future__ import annotations

import functools
from typing import Any

from function.contract.devicecel import cost
from function.contract.devicecel.cost import Sizes

MAX_COST = cost.MAX_COST       # the same limit, in the same units
EXTENSION_CALL = 100           # cost units of one call into the Kubernetes library
MAX_STRING = 1 << 20           # characters an intermediate string may reach
MAX_LIST = 1 << 16             # items an intermediate list may reach

# The Kubernetes library's functions (library.py): Python callbacks.
EXTENSIONS = frozenset({"quantity", "isQuantity", "sign", "isGreaterThan", "isLessThan",
                        "compareTo", "asApproximateFloat", "asInteger", "isInteger", "add",
                        "sub", "semver", "isSemver", "major", "minor", "patch"})
# Functions that build a string (the size of which the model bounds).
_STRINGS = frozenset({"replace", "join", "strings.quote", "lowerAscii", "upperAscii", "trim",
                      "substring", "string"})


class TooLarge(Exception):
    """An intermediate value that could outgrow the fixed bounds."""


class RuntimeEstimator(cost.Estimator):
    """cost.Estimator with CEL-C++'s prices and the intermediate bounds."""

    def _function(self, name: str, overloads: tuple[str, ...],
                  args: list[Any]) -> tuple[int, Any]:
        fn, shape = super()._function(name, overloads, args)
        if name == "replace":  # reads its input, writes its output
            fn = cost._tenth(args[0].hi) + cost._tenth(shape.hi)
        elif name == "_+_" and overloads and all(o == "add_list" for o in overloads):
            fn = shape.hi  # CEL-C++ copies both lists into a new one
            _bound(name, shape.hi, MAX_LIST, "items")
        elif name in EXTENSIONS:
            fn = cost._sat(fn + EXTENSION_CALL)
        if name in _STRINGS or (name == "_+_" and overloads and all(
                o == "add_string" for o in overloads)):
            _bound(name, shape.hi, MAX_STRING, "characters")
        elif name == "split":
            _bound(name, shape.hi, MAX_LIST, "items")
        return fn, shape


def _bound(name: str, size: int, limit: int, unit: str) -> None:
    if size > limit:
        what = "an unbounded size" if size >= cost._CAP else f"up to {size:,} {unit}"
        shown = name.strip("_") if name.startswith("_") else name  # "_+_" is "+"
        raise TooLarge(f"its {shown!r} can build a value of {what}, more than the "
                       f"{limit:,} {unit} the function allows an intermediate value")


def estimate(serialized: bytes, sizes: Sizes = cost.WORST_CASE) -> int:
    """The most one evaluation costs CEL-C++ on a device within `sizes`.
    Raises TooLarge for an intermediate value past the fixed bounds."""
    return _estimate(serialized, sizes)


@functools.lru_cache(maxsize=1024)
def _estimate(serialized: bytes, sizes: Sizes) -> int:
    expr, refs = cost.decode(serialized)
    return RuntimeEstimator(refs, sizes).cost(expr)
