"""Kubernetes' CEL library for DRA device selectors, declared for CEL-C++.

What k8s.io/apiserver/pkg/cel/library gives a DRA selector beyond standard
CEL, and the environment a selector compiles in (`ENV`):

* ``kubernetes.Quantity`` and ``kubernetes.Semver`` are one-field protobuf
  messages. The field holds a canonical string: the exact decimal value, or
  the version without build metadata. CEL's proto equality for ``==`` is then
  Kubernetes' semantic equality. Their functions are Python callbacks, with
  the same declarations as k8s.io/apiserver/pkg/cel/library.
* ``device`` is declared as the qualified variables ``device.driver``,
  ``device.attributes`` and so on. CEL resolves ``device.attributes`` to the
  longest declared name.

The parsers (`parse_quantity`, `parse_semver`) are Kubernetes' too; the
device data (device.py) is read with them.
"""

from __future__ import annotations

import decimal
import importlib.util
import pathlib
import functools
import re
from decimal import Decimal
from typing import Any

import semver
from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

# --- Kubernetes value types -------------------------------------------------

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


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


def _quantity_module() -> Any:
    """kubernetes.utils.quantity, loaded by itself: the package's __init__ imports
    the whole API client and its configuration (1.3 of the 1.5 s an evaluation
    worker took to start, sandbox.py), and the module needs none of it."""
    spec = importlib.util.find_spec("kubernetes")  # finds it, runs nothing
    if spec is None or spec.origin is None:
        raise ImportError("the kubernetes package is not installed")
    path = pathlib.Path(spec.origin).parent / "utils" / "quantity.py"
    loaded = importlib.util.spec_from_file_location("fms_kubernetes_quantity", path)
    if loaded is None or loaded.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


_parse_number = _quantity_module().parse_quantity

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


def parse_quantity(text: str) -> Decimal:
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
            value = _parse_number(number + suffix)
            if value.is_zero():
                return Decimal(0)
            # Kubernetes keeps at most nano precision, rounding away from zero...
            if value.as_tuple().exponent < -9:
                value = value.quantize(_NANO, rounding=decimal.ROUND_UP)
            # ...and caps binary-suffixed values at the int64 maximum.
            if binary and abs(value) > INT64_MAX:
                value = Decimal(INT64_MAX).copy_sign(value)
            return value
    except (ArithmeticError, ValueError) as e:
        raise ValueError(f"unable to parse quantity {text!r}: {e}") from None


def quantity_message(value: Decimal) -> Any:
    """Wrap a value as a kubernetes.Quantity; equal values give equal messages."""
    with decimal.localcontext(_DEC):
        canonical = "0" if value.is_zero() else str(value.normalize())
    return _QuantityMsg(value=canonical)


def _q(msg: Any) -> Decimal:
    return Decimal(msg.value)


def semver_message(v: semver.Version) -> Any:
    # Build metadata is dropped: Kubernetes' Semver equality and ordering ignore it.
    return _SemverMsg(value=str(v.replace(build=None)))


@functools.lru_cache(maxsize=4096)
def _sv(text: str) -> semver.Version:
    return semver.Version.parse(text)


def parse_semver(text: str, normalize: bool = False) -> semver.Version:
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
    if not INT64_MIN <= value <= INT64_MAX:
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
    return quantity_message(parse_quantity(s))


def _is_quantity(s: str) -> bool:
    try:
        parse_quantity(s)
        return True
    except ValueError:
        return False


def _as_integer(q: Any) -> int:
    v = _q(q)
    if v != v.to_integral_value() or not INT64_MIN <= v <= INT64_MAX:
        raise ValueError("cannot convert value to integer")
    return int(v)


def _is_integer(q: Any) -> bool:
    v = _q(q)
    return v == v.to_integral_value() and INT64_MIN <= v <= INT64_MAX


def _add(q: Any, other: Any) -> Any:
    with decimal.localcontext(_DEC):
        return quantity_message(_q(q) + (Decimal(other) if isinstance(other, int) else _q(other)))


def _sub(q: Any, other: Any) -> Any:
    with decimal.localcontext(_DEC):
        return quantity_message(_q(q) - (Decimal(other) if isinstance(other, int) else _q(other)))


def _semver(s: str, normalize: bool = False) -> Any:
    return semver_message(parse_semver(s, normalize))


def _is_semver(s: str, normalize: bool = False) -> bool:
    try:
        parse_semver(s, normalize)
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

ENV = cel.NewEnv(
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

