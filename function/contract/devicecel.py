"""Device selection by DRA CEL expressions, with Kubernetes semantics.

A node pool publishes devices shaped like a DRA ResourceSlice device
(``driver``, ``attributes``, ``capacity``); users select them with the CEL
expressions Kubernetes' DRA uses, e.g.
``device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0``.
This module evaluates those the way ``k8s.io/dynamic-resource-allocation/cel``
does; ``tests/test_devicecel.py`` checks that against the Go library itself.

CEL library: ``cel-expr-python``, the official CEL-C++ runtime from the
cel-expr project. It type-checks the way cel-go does, so what Kubernetes
rejects at compile time is rejected here at compile time too. It has
heterogeneous equality, optionals and ``cel.bind``, and it allows custom
functions, member overloads on declared types included. ``cel-python``
(celpy) has no checker, raises errors on heterogeneous equality such as
string attribute == 1, and has no ``.?``. ``common-expression-language``
can't carry custom value types like Quantity.

How the Kubernetes pieces map onto it:

* ``kubernetes.Quantity`` and ``kubernetes.Semver`` are one-field protobuf
  messages. The field holds a canonical string: the exact decimal value, or
  the version without build metadata. CEL's proto equality for ``==`` is then
  Kubernetes' semantic equality. Their functions are Python callbacks, with
  the same declarations as k8s.io/apiserver/pkg/cel/library.
* ``device`` is declared as the qualified variables ``device.driver``,
  ``device.attributes`` and so on. CEL resolves ``device.attributes`` to the
  longest declared name.
* Kubernetes returns ``{}`` for an unknown domain, so
  ``has(device.attributes["other.domain"].x)`` is false. A missing name in a
  domain is a "no such key" error. CEL-C++ can't default a map lookup, so an
  evaluation that fails on a missing key that isn't a published domain is
  run again with that domain set to ``{}`` (at most 8 such domains). CEL has
  no side effects, so this gives Kubernetes' answer.
* Kubernetes allows cross-type numeric comparisons (``1 < 1.5``); the
  CEL-C++ checker doesn't. An expression whose only checker errors are such
  comparisons runs unchecked, since the runtime supports them. Its other type
  errors then show up at evaluation.

Known differences (the ``divergence`` cases of tests/cel/corpus.yaml):

* A domain defaulted as above shows up when the same expression counts or
  lists the domains of ``device.attributes`` (``size()``, ``in``,
  ``exists``). In Kubernetes, ``has(device.attributes.foo)`` is always true.
* Not declared here, so compile errors: the Kubernetes regex (``find``),
  URL, IP, CIDR, format and lists libraries, and the cel-go sets and lists
  extensions.
* Compile errors in Kubernetes that are evaluation errors here: mixed-type
  list or map literals, invalid regex/duration/timestamp literals, and
  constant conversions such as ``int("x")``.
* ``isInteger``/``asInteger``: Kubernetes answers from the Quantity's
  internal form, so "1000m", "1Pi" and "1.5"+"0.5" aren't integers there.
  This module answers from the value.
* ``asApproximateFloat`` is correctly rounded here; Kubernetes' result can
  differ in the last bit. There is no runtime cost limit.
"""

from __future__ import annotations

import decimal
import functools
import json
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import semver
from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from kubernetes.utils import parse_quantity

__all__ = [
    "CelError",
    "CelCompileError",
    "CelEvalError",
    "CompiledSelector",
    "DeviceActivation",
    "compile_selector",
    "device_activation",
]


class CelError(Exception):
    """A device selector could not be used; the message says why and where."""


class CelCompileError(CelError):
    """The expression is not a valid selector (syntax, types, result type)."""


class CelEvalError(CelError):
    """The expression failed on a particular device (missing attribute, ...)."""


# --- Kubernetes value types -------------------------------------------------

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _message_types() -> tuple[descriptor_pool.DescriptorPool, type, type]:
    """Declare kubernetes.Quantity and kubernetes.Semver as protobuf messages."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="function/contract/devicecel.proto", package="kubernetes", syntax="proto3"
    )
    for name in ("Quantity", "Semver"):
        fdp.message_type.add(name=name).field.add(
            name="value",
            number=1,
            type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    cls = lambda n: message_factory.GetMessageClass(pool.FindMessageTypeByName(n))  # noqa: E731
    return pool, cls("kubernetes.Quantity"), cls("kubernetes.Semver")


_POOL, _QuantityMsg, _SemverMsg = _message_types()

# Exact decimal arithmetic for quantities; values are at most a few dozen digits.
_DEC = decimal.Context(prec=1000, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN, traps=[
    decimal.InvalidOperation, decimal.Overflow, decimal.DivisionByZero])
_NANO = Decimal("1e-9")

# The grammar resource.ParseQuantity accepts (apimachinery parseQuantityString):
# sign, digits, optional fraction, then a suffix.  kubernetes.utils.parse_quantity
# computes the value but is more lenient (it takes "1K", " 1", "1_0", "NaN"), so
# a string must first match this.  Empty digit runs count as 0, as in Go ("1.", ".5").
_QUANTITY_RE = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?P<suffix>[eEinumkKMGTP]*[+-]?[0-9]*)\Z",
    re.ASCII,
)
_BINARY_SUFFIXES = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}
_DECIMAL_SUFFIXES = {"", "n", "u", "m", "k", "M", "G", "T", "P", "E"}
_EXPONENT_SUFFIX_RE = re.compile(r"[eE][+-]?[0-9]+\Z", re.ASCII)


def _parse_quantity(text: str) -> Decimal:
    """Parse like resource.ParseQuantity, including its rounding and cap.

    Raises ValueError with Kubernetes' wording for invalid input.
    """
    m = _QUANTITY_RE.match(text)
    if not text or not m:
        raise ValueError("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    suffix = m["suffix"]
    binary = suffix in _BINARY_SUFFIXES
    if not (binary or suffix in _DECIMAL_SUFFIXES or _EXPONENT_SUFFIX_RE.match(suffix)):
        raise ValueError("unable to parse quantity's suffix")
    number = f"{m['sign']}{m['int'] or '0'}.{m['frac'] or '0'}"
    try:
        with decimal.localcontext(_DEC):
            value = parse_quantity(number + suffix)
            if value.is_zero():
                return Decimal(0)
            # Kubernetes keeps at most nano precision, rounding away from zero...
            if value.as_tuple().exponent < -9:
                value = value.quantize(_NANO, rounding=decimal.ROUND_UP)
            # ...and caps binary-suffixed values at the int64 maximum.
            if binary and abs(value) > _INT64_MAX:
                value = Decimal(_INT64_MAX).copy_sign(value)
            return value
    except (ArithmeticError, ValueError) as e:
        raise ValueError(f"unable to parse quantity {text!r}: {e}") from None


def _quantity_msg(value: Decimal) -> Any:
    """Wrap a value as a kubernetes.Quantity; equal values give equal messages."""
    with decimal.localcontext(_DEC):
        canonical = "0" if value.is_zero() else str(value.normalize())
    return _QuantityMsg(value=canonical)


def _q(msg: Any) -> Decimal:
    return Decimal(msg.value)


def _semver_msg(v: semver.Version) -> Any:
    # Build metadata is dropped: Kubernetes' Semver equality and ordering ignore it.
    return _SemverMsg(value=str(v.replace(build=None)))


@functools.lru_cache(maxsize=4096)
def _sv(text: str) -> semver.Version:
    return semver.Version.parse(text)


def _parse_semver(text: str, normalize: bool = False) -> semver.Version:
    """Parse like blang/semver Parse; with normalize, like Kubernetes'
    normalizeAndParse: accepts a leading "v", leading zeros, missing minor/patch."""
    if normalize:
        parts = text.removeprefix("v").split(".", 2)
        for i, p in enumerate(parts):
            if len(p) > 1:
                p = p.lstrip("0")
                parts[i] = p if p and p[0].isdigit() else "0" + p
        if len(parts) < 3:
            if "+" in parts[-1] or "-" in parts[-1]:
                raise ValueError("short version cannot contain PreRelease/Build meta data")
            parts += ["0"] * (3 - len(parts))
        text = ".".join(parts)
    if not text.isascii():
        raise ValueError(f"{text} is not valid SemVer string")
    v = semver.Version.parse(text)
    numbers = [v.major, v.minor, v.patch] + [int(p) for p in (v.prerelease or "").split(".") if p.isdigit()]
    if max(numbers) >= 2**64:  # blang/semver parses numbers as uint64
        raise ValueError(f"{text}: version number out of range")
    return v


def _int64(value: int) -> int:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError("integer overflow")
    return value


def _cmp(a: Any, b: Any) -> int:
    return (a > b) - (a < b)


def _compare(a: Any, b: Any) -> int:
    """compareTo for two Quantity or two Semver messages (-1, 0, 1)."""
    if isinstance(a, _QuantityMsg):
        return _cmp(_q(a), _q(b))
    return _sv(a.value).compare(_sv(b.value))


# Function implementations.  Exceptions become CEL error values, so they are
# absorbed by || and && like in Kubernetes.
def _quantity(s: str) -> Any:
    return _quantity_msg(_parse_quantity(s))


def _is_quantity(s: str) -> bool:
    try:
        _parse_quantity(s)
        return True
    except ValueError:
        return False


def _as_integer(q: Any) -> int:
    v = _q(q)
    if v != v.to_integral_value() or not _INT64_MIN <= v <= _INT64_MAX:
        raise ValueError("cannot convert value to integer")
    return int(v)


def _is_integer(q: Any) -> bool:
    v = _q(q)
    return v == v.to_integral_value() and _INT64_MIN <= v <= _INT64_MAX


def _add(q: Any, other: Any) -> Any:
    with decimal.localcontext(_DEC):
        return _quantity_msg(_q(q) + (Decimal(other) if isinstance(other, int) else _q(other)))


def _sub(q: Any, other: Any) -> Any:
    with decimal.localcontext(_DEC):
        return _quantity_msg(_q(q) - (Decimal(other) if isinstance(other, int) else _q(other)))


def _semver(s: str, normalize: bool = False) -> Any:
    return _semver_msg(_parse_semver(s, normalize))


def _is_semver(s: str, normalize: bool = False) -> bool:
    try:
        _parse_semver(s, normalize)
        return True
    except ValueError:
        return False


_T = cel.Type
_QUANTITY = _T("kubernetes.Quantity")
_SEMVER = _T("kubernetes.Semver")


def _fn(name: str, *overloads: tuple[str, cel.Type, list[cel.Type], bool, Any]) -> cel.FunctionDecl:
    return cel.FunctionDecl(name, [
        cel.Overload(oid, ret, params, is_member=member, **({"impl": impl} if impl else {}))
        for oid, ret, params, member, impl in overloads
    ])


# Declarations as in k8s.io/apiserver/pkg/cel/library (quantity.go, semverlib.go);
# note sign() is a global function, not a method.
_FUNCTIONS = [
    _fn("quantity", ("string_to_quantity", _QUANTITY, [_T.STRING], False, _quantity)),
    _fn("isQuantity", ("is_quantity_string", _T.BOOL, [_T.STRING], False, _is_quantity)),
    _fn("sign", ("quantity_sign", _T.INT, [_QUANTITY], False, lambda q: _cmp(_q(q), 0))),
    # CEL-C++ dispatches on "message", not on the message type, so the
    # Quantity and Semver overloads of a method share one implementation.
    _fn("isGreaterThan",
        ("quantity_is_greater_than", _T.BOOL, [_QUANTITY, _QUANTITY], True, lambda a, b: _compare(a, b) > 0),
        ("semver_is_greater_than", _T.BOOL, [_SEMVER, _SEMVER], True, None)),
    _fn("isLessThan",
        ("quantity_is_less_than", _T.BOOL, [_QUANTITY, _QUANTITY], True, lambda a, b: _compare(a, b) < 0),
        ("semver_is_less_than", _T.BOOL, [_SEMVER, _SEMVER], True, None)),
    _fn("compareTo",
        ("quantity_compare_to", _T.INT, [_QUANTITY, _QUANTITY], True, lambda a, b: _compare(a, b)),
        ("semver_compare_to", _T.INT, [_SEMVER, _SEMVER], True, None)),
    _fn("asApproximateFloat", ("quantity_get_float", _T.DOUBLE, [_QUANTITY], True, lambda q: float(_q(q)))),
    _fn("asInteger", ("quantity_get_int", _T.INT, [_QUANTITY], True, _as_integer)),
    _fn("isInteger", ("quantity_is_integer", _T.BOOL, [_QUANTITY], True, _is_integer)),
    _fn("add",
        ("quantity_add", _QUANTITY, [_QUANTITY, _QUANTITY], True, _add),
        ("quantity_add_int", _QUANTITY, [_QUANTITY, _T.INT], True, _add)),
    _fn("sub",
        ("quantity_sub", _QUANTITY, [_QUANTITY, _QUANTITY], True, _sub),
        ("quantity_sub_int", _QUANTITY, [_QUANTITY, _T.INT], True, _sub)),
    _fn("semver",
        ("string_to_semver", _SEMVER, [_T.STRING], False, _semver),
        ("string_bool_to_semver", _SEMVER, [_T.STRING, _T.BOOL], False, _semver)),
    _fn("isSemver",
        ("is_semver_string", _T.BOOL, [_T.STRING], False, _is_semver),
        ("is_semver_string_bool", _T.BOOL, [_T.STRING, _T.BOOL], False, _is_semver)),
    _fn("major", ("semver_major", _T.INT, [_SEMVER], True, lambda v: _int64(_sv(v.value).major))),
    _fn("minor", ("semver_minor", _T.INT, [_SEMVER], True, lambda v: _int64(_sv(v.value).minor))),
    _fn("patch", ("semver_patch", _T.INT, [_SEMVER], True, lambda v: _int64(_sv(v.value).patch))),
]

_ENV = cel.NewEnv(
    _POOL,
    variables={
        "device.driver": _T.STRING,
        "device.allowMultipleAllocations": _T.BOOL,
        "device.attributes": _T.Map(_T.STRING, _T.Map(_T.STRING, _T.DYN)),
        "device.capacity": _T.Map(_T.STRING, _T.Map(_T.STRING, _QUANTITY)),
    },
    # The CEL extensions Kubernetes' base environment enables, as far as
    # CEL-C++ has them (strings v2 = cel-go StringsVersion(2)).
    extensions=[ext_strings.ExtStrings(2), ext_bindings.ExtBindings(), ext_optional.ExtOptional()],
    functions=_FUNCTIONS,
)


# --- Devices ----------------------------------------------------------------

class DeviceActivation:
    """The ``device`` variable for one device shape, reusable by any selector.

    Invalid device data (such as a malformed version or quantity) is kept as
    ``error`` and reported by :meth:`CompiledSelector.matches`, like the
    Kubernetes library, which fails evaluation for such a device.
    """

    __slots__ = ("driver", "attributes", "capacity", "error", "_cel")

    def __init__(self, driver: str, attributes: dict, capacity: dict, error: str | None = None):
        self.driver = driver
        self.attributes = attributes  # domain -> name -> int|bool|str|Semver message
        self.capacity = capacity  # domain -> name -> Quantity message
        self.error = error
        self._cel: dict[bool, Any] = {}

    def data(self, checked: bool, extra_domains: frozenset[str] = frozenset()) -> dict:
        attributes, capacity = self.attributes, self.capacity
        if extra_domains:  # unknown domains read as {} (see module docstring)
            attributes = {**{d: {} for d in extra_domains}, **attributes}
            capacity = {**{d: {} for d in extra_domains}, **capacity}
        device = {"driver": self.driver, "allowMultipleAllocations": False,
                  "attributes": attributes, "capacity": capacity}
        if checked:  # qualified variable names, see _ENV
            return {f"device.{k}": v for k, v in device.items()}
        return {"device": device}

    def cel_activation(self, checked: bool) -> Any:
        if checked not in self._cel:
            self._cel[checked] = _ENV.Activation(self.data(checked))
        return self._cel[checked]


def _split_name(name: str, driver: str) -> tuple[str, str]:
    """A name without a domain belongs to the driver (DRA parseQualifiedName)."""
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def _attribute_value(name: str, attr: Any) -> Any:
    kinds = [k for k in ("int", "bool", "string", "version") if isinstance(attr, dict) and k in attr]
    if len(kinds) != 1:
        raise ValueError(f"attribute {name}: needs exactly one of int, bool, string, version")
    kind, value = kinds[0], attr[kinds[0]]
    if kind == "version":
        try:
            return _semver_msg(_parse_semver(str(value)))
        except ValueError as e:
            raise ValueError(f"attribute {name}: parse semantic version: {e}") from None
    expected = {"int": int, "bool": bool, "string": str}[kind]
    if type(value) is not expected or (kind == "int" and not _INT64_MIN <= value <= _INT64_MAX):
        raise ValueError(f"attribute {name}: {kind} value {value!r} is not a {kind}")
    return value


def _capacity_value(name: str, cap: Any) -> Any:
    value = cap.get("value") if isinstance(cap, dict) else None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"capacity {name}: value must be a quantity, got {value!r}")
    try:  # the API server trims blanks when it decodes a quantity
        return _quantity_msg(_parse_quantity(str(value).strip()))
    except ValueError as e:
        raise ValueError(f"capacity {name}: {e}") from None


@functools.lru_cache(maxsize=1024)
def _activation_for(shape: str) -> DeviceActivation:
    device = json.loads(shape)
    driver = device.get("driver") or ""
    attributes: dict[str, dict] = {}
    capacity: dict[str, dict] = {}
    try:
        for name, attr in (device.get("attributes") or {}).items():
            domain, ident = _split_name(name, driver)
            attributes.setdefault(domain, {})[ident] = _attribute_value(name, attr)
        for name, cap in (device.get("capacity") or {}).items():
            domain, ident = _split_name(name, driver)
            capacity.setdefault(domain, {})[ident] = _capacity_value(name, cap)
    except ValueError as e:
        return DeviceActivation(driver, {}, {}, error=f"invalid device: {e}")
    return DeviceActivation(driver, attributes, capacity)


def device_activation(device: dict) -> DeviceActivation:
    """Build (or reuse) the CEL ``device`` variable for a device in the API shape.

    Only ``driver``, ``attributes`` and ``capacity`` matter, so devices of
    the same shape share one cached activation. This never raises; invalid
    device data makes every ``matches`` on it raise CelEvalError.
    """
    if not isinstance(device, Mapping):
        return DeviceActivation("", {}, {}, error=f"invalid device: not a mapping: {device!r}")
    shape = {k: device.get(k) for k in ("driver", "attributes", "capacity")}
    try:
        key = json.dumps(shape, sort_keys=True)
    except (TypeError, ValueError) as e:
        return DeviceActivation("", {}, {}, error=f"device data is not plain YAML/JSON: {e}")
    return _activation_for(key)


# --- Selectors --------------------------------------------------------------

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

    __slots__ = ("expression", "_program", "_checked")

    @staticmethod
    def _type_name(t: cel.Type) -> str:
        name = t.name()
        return name.lower() if name.isupper() else name

    def __init__(self, expression: str, program: Any, checked: bool):
        self.expression = expression
        self._program = program
        self._checked = checked

    def matches(self, activation: DeviceActivation) -> bool:
        """True when the device is selected. Raises CelEvalError if the
        expression fails on this device or gives something other than a bool."""
        if activation.error:
            raise CelEvalError(f"selector {self.expression!r}: {activation.error}")
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
            cel_act = _ENV.Activation(activation.data(self._checked, extra))


@functools.lru_cache(maxsize=1024)
def compile_selector(expression: str) -> CompiledSelector:
    """Parse and type-check a selector once; cached by expression text.

    Raises CelCompileError with the checker's message (position and caret
    included) when the expression is not a valid bool-valued selector.
    """
    if not isinstance(expression, str) or not expression.strip():
        raise CelCompileError("device selector: the CEL expression is empty")
    try:
        program = _ENV.compile(expression)
        checked = True
    except Exception as e:
        message = _clean(e)
        errors = [line for line in message.splitlines() if line.startswith("ERROR:")]
        if not errors or not all(_CROSS_NUMERIC.search(line) for line in errors):
            raise CelCompileError(f"invalid device selector {expression!r}: {message}") from None
        # Only int/uint/double ordering comparisons failed the check; Kubernetes
        # allows them and the runtime supports them, so run it unchecked.
        try:
            program = _ENV.compile(expression, disable_check=True)
        except Exception as e2:
            raise CelCompileError(f"invalid device selector {expression!r}: {_clean(e2)}") from None
        checked = False
    if checked and program.return_type() not in (_T.BOOL, _T.DYN):
        raise CelCompileError(
            f"invalid device selector {expression!r}: must evaluate to bool, "
            f"not {CompiledSelector._type_name(program.return_type())}")
    return CompiledSelector(expression, program, checked)
