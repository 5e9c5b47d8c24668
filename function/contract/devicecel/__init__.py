"""Device selection by DRA CEL expressions, with Kubernetes semantics.

A node pool publishes devices shaped like a DRA ResourceSlice device
(``driver``, ``attributes``, ``capacity``); users select them with the CEL
expressions Kubernetes' DRA uses, e.g.
``device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0``.
This package evaluates those the way ``k8s.io/dynamic-resource-allocation/cel``
does; ``tests/test_devicecel.py`` checks that against the Go library itself.

CEL library: ``cel-expr-python``, the official CEL-C++ runtime from the
cel-expr project. It type-checks the way cel-go does, so what Kubernetes
rejects at compile time is rejected here at compile time too. It has
heterogeneous equality, optionals and ``cel.bind``, and it allows custom
functions, member overloads on declared types included. ``cel-python``
(celpy) has no checker, raises errors on heterogeneous equality such as
string attribute == 1, and has no ``.?``. ``common-expression-language``
can't carry custom value types like Quantity.

How the Kubernetes pieces map onto it, one module each:

* ``library.py``: Kubernetes' CEL library (Quantity, Semver, their
  functions) and the environment a selector compiles in;
* ``device.py``: the ``device`` variable of one device shape;
* ``selector.py``: compiling a selector (cached by its text) and evaluating
  it on a device, where CEL-C++ differs from cel-go (cross-type numeric
  comparisons, unknown domains read as ``{}``);
* ``cost.py``: Kubernetes' cost limits for a selector (CEL-C++'s Python API
  has no cost tracking): the worst-case cost estimated over the checked AST
  with cel-go's and Kubernetes' cost model, refused above 1,000,000, and the
  same bound checked again for a device larger than that estimate assumed;
* ``runtimecost.py``: the same estimate priced as CEL-C++ pays (replace by
  its output, list concatenation by size, library calls as Python callbacks),
  and fixed bounds on intermediate strings and lists;
* ``sandbox.py`` and ``worker.py``: every evaluation in a worker process
  with a memory cap and a computing budget; a selector past either is
  refused from then on (``CelBudgetError``).

Known differences (the ``divergence`` cases of tests/cel/corpus.yaml):

* A domain defaulted to ``{}`` (selector.py) shows up when the same
  expression counts or lists the domains of ``device.attributes``
  (``size()``, ``in``, ``exists``). In Kubernetes,
  ``has(device.attributes.foo)`` is always true.
* Not declared here, so compile errors: the Kubernetes regex (``find``),
  URL, IP, CIDR, format and lists libraries, and the cel-go sets and lists
  extensions.
* Compile errors in Kubernetes that are evaluation errors here: mixed-type
  list or map literals, invalid regex/duration/timestamp literals, and
  constant conversions such as ``int("x")``.
* ``isInteger``/``asInteger``: Kubernetes answers from the Quantity's
  internal form, so "1000m", "1Pi" and "1.5"+"0.5" aren't integers there.
  library.py answers from the value.
* ``asApproximateFloat`` is correctly rounded here; Kubernetes' result can
  differ in the last bit.
* CEL-C++ stops an evaluation after 10,000 comprehension iterations in all
  (its iteration budget, not settable from Python): a selector that iterates
  more fails at run time here, where Kubernetes runs it within its cost limit.
* Cost: Kubernetes meters an evaluation's actual cost and stops it at the
  limit; CEL-C++ cannot meter, so the bound is checked before evaluating,
  from the estimates with the device's own sizes, and the sandbox stops what
  they missed by time and memory rather than by cost. A selector whose estimate
  for a device is over the limit fails on it even where the actual cost
  would have stayed under (the estimate is an upper bound); within the
  sizes Kubernetes declares for a device this never happens to a selector
  that compiled.
"""

from __future__ import annotations

from function.contract.devicecel.device import DeviceActivation, device_activation
from function.contract.devicecel.selector import (
    CelBudgetError,
    CelCompileError,
    CelCostError,
    CelError,
    CelEvalError,
    CelSandboxError,
    CompiledSelector,
    compile_selector,
    digest,
    over_budget,
)
from function.contract.devicecel.sandbox import exceeded

__all__ = [
    "CelError",
    "CelBudgetError",
    "CelSandboxError",
    "CelCompileError",
    "CelCostError",
    "CelEvalError",
    "CompiledSelector",
    "DeviceActivation",
    "compile_selector",
    "digest",
    "exceeded",
    "over_budget",
    "device_activation",
]
