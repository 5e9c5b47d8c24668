"""A selector's CEL cost, bounded as Kubernetes DRA bounds it.

Kubernetes refuses a device selector whose estimated worst-case cost exceeds
``resourceapi.CELSelectorExpressionMaxCost`` (1,000,000 cost units) when the
API server admits it, and the scheduler stops an evaluation at the same
runtime limit. CEL-C++ (cel-expr-python 0.1.3) has neither: its Python API
offers no cost tracking, cost limit, interrupt or timeout (only a parser and a
checker, `Expression.serialize` and `eval`), so an unbounded selector such as
a ``cel.bind`` over repeated ``replace`` calls, each doubling a string, ran
for tens of seconds and took gigabytes. So the bound is computed here, before
anything runs, and deterministically:

* `estimate` walks the checked AST (`Expression.serialize` gives the
  ``cel.expr.CheckedExpr``) with cel-go's cost model as Kubernetes configures
  it: the unit costs of cel-go's checker/cost.go, the string functions of
  k8s.io/apiserver/pkg/cel/library/cost.go (``replace`` grows its result as
  there) and the sizes k8s.io/dynamic-resource-allocation/cel declares for the
  ``device`` variable (`Sizes`). Where the model cannot bound a size, the size
  is unbounded and so is the cost of anything that traverses it, as in cel-go.
* Every cost is monotone in the sizes, so a selector within the limit for the
  declared worst case stays within it for every device no larger than that
  (the cost of one evaluation is at most the estimate). A device larger than
  the declared sizes (data we did not validate) is estimated again with its
  own sizes before it is evaluated: that is the runtime limit
  (`CompiledSelector.matches`).

It is a port of the rules that matter for DRA selectors, not of cel-go's
estimator line by line: where the two differ, this one is the more cautious
(a function it does not know costs as an unbounded one would).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

# k8s.io/api/resource/v1: CELSelectorExpressionMaxCost, CELSelectorExpressionMaxLength.
MAX_COST = 1_000_000
MAX_LENGTH = 10 * 1024

_CAP = 2**64 - 1  # cel-go's estimates saturate at MaxUint64: "unbounded"


def _sat(n: int) -> int:
    return min(n, _CAP)


def _tenth(n: int) -> int:  # ceil(n * StringTraversalCostFactor), the factor being 0.1
    return _sat(-(-n // 10))


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The largest values the ``device`` variable can hold (cel-go size units:
    characters for strings, entries for maps). The defaults are what
    k8s.io/dynamic-resource-allocation/cel declares: DriverNameMaxLength,
    DeviceMaxDomainLength, DeviceMaxIDLength, DeviceAttributeMaxValueLength and
    ResourceSliceMaxAttributesAndCapacitiesPerDevice."""

    driver: int = 63
    domain: int = 63
    ident: int = 32
    value: int = 64
    entries: int = 32   # names per domain
    domains: int = 32   # domains per device

    def covers(self, other: Sizes) -> bool:
        return all(getattr(self, f.name) >= getattr(other, f.name) for f in dataclasses.fields(self))

    def union(self, other: Sizes) -> Sizes:
        return Sizes(*(max(getattr(self, f.name), getattr(other, f.name))
                       for f in dataclasses.fields(self)))


WORST_CASE = Sizes()


@dataclasses.dataclass(frozen=True)
class _Shape:
    """A value's size range (characters, entries; 1 for a scalar) and, for a
    container, the shape of its items or values and, for a map, of its keys."""

    lo: int
    hi: int
    key: _Shape | None = None
    item: _Shape | None = None

    def union(self, other: _Shape) -> _Shape:
        return _Shape(min(self.lo, other.lo), max(self.hi, other.hi),
                      _union(self.key, other.key), _union(self.item, other.item))


def _union(a: _Shape | None, b: _Shape | None) -> _Shape | None:
    return None if a is None or b is None else a.union(b)


_UNKNOWN = _Shape(0, _CAP)
_SCALAR = _Shape(1, 1)


def _unknown(shape: _Shape | None) -> _Shape:
    return _UNKNOWN if shape is None else shape


# --- the AST: the part of cel/expr/syntax.proto and checked.proto we read ----

def _ast_messages() -> tuple[Any, Any]:
    T = descriptor_pb2.FieldDescriptorProto  # noqa: N806 - protobuf's own names
    fdp = descriptor_pb2.FileDescriptorProto(name="function/contract/devicecel/ast.proto",
                                             package="fms.cel", syntax="proto3")

    def message(parent: Any, name: str, fields: Iterable[tuple], entry: bool = False,
                oneof: str = "") -> Any:
        """A message; with `oneof`, its fields but the first are one oneof (so an
        empty string constant is still told apart from no constant)."""
        m = parent.add(name=name)
        if entry:
            m.options.map_entry = True
        if oneof:
            m.oneof_decl.add(name=oneof)
        for index, (fname, number, ftype, *rest) in enumerate(fields):
            label = T.LABEL_REPEATED if rest and rest[-1] == "repeated" else T.LABEL_OPTIONAL
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if rest and rest[0] != "repeated":
                f.type_name = rest[0]
            if oneof and (index > 0 or name == "Constant"):
                f.oneof_index = 0
        return m

    msg, s, i64, b, d, u64, byt = (T.TYPE_MESSAGE, T.TYPE_STRING, T.TYPE_INT64, T.TYPE_BOOL,
                                   T.TYPE_DOUBLE, T.TYPE_UINT64, T.TYPE_BYTES)
    E = ".fms.cel.Expr"  # noqa: N806
    message(fdp.message_type, "Constant", [("bool_value", 2, b), ("int64_value", 3, i64),
            ("uint64_value", 4, u64), ("double_value", 5, d), ("string_value", 6, s),
            ("bytes_value", 7, byt)], oneof="constant_kind")
    expr = message(fdp.message_type, "Expr", [
        ("id", 2, i64), ("const_expr", 3, msg, ".fms.cel.Constant"),
        ("ident_expr", 4, msg, E + ".Ident"), ("select_expr", 5, msg, E + ".Select"),
        ("call_expr", 6, msg, E + ".Call"), ("list_expr", 7, msg, E + ".CreateList"),
        ("struct_expr", 8, msg, E + ".CreateStruct"),
        ("comprehension_expr", 9, msg, E + ".Comprehension")], oneof="expr_kind")
    message(expr.nested_type, "Ident", [("name", 1, s)])
    message(expr.nested_type, "Select", [("operand", 1, msg, E), ("field", 2, s),
                                         ("test_only", 3, b)])
    message(expr.nested_type, "Call", [("target", 1, msg, E), ("function", 2, s),
                                       ("args", 3, msg, E, "repeated")])
    message(expr.nested_type, "CreateList", [("elements", 1, msg, E, "repeated")])
    struct = message(expr.nested_type, "CreateStruct", [
        ("message_name", 1, s), ("entries", 2, msg, E + ".CreateStruct.Entry", "repeated")])
    message(struct.nested_type, "Entry", [("field_key", 2, s), ("map_key", 3, msg, E),
                                          ("value", 4, msg, E)])
    message(expr.nested_type, "Comprehension", [
        ("iter_var", 1, s), ("iter_range", 2, msg, E), ("accu_var", 3, s),
        ("accu_init", 4, msg, E), ("loop_condition", 5, msg, E), ("loop_step", 6, msg, E),
        ("result", 7, msg, E), ("iter_var2", 8, s)])
    message(fdp.message_type, "Reference", [("name", 1, s), ("overload_id", 3, s, "repeated")])
    checked = message(fdp.message_type, "CheckedExpr", [
        ("reference_map", 2, msg, ".fms.cel.CheckedExpr.ReferenceMapEntry", "repeated"),
        ("expr", 4, msg, E)])
    message(fdp.message_type, "ParsedExpr", [("expr", 2, msg, E)])
    message(checked.nested_type, "ReferenceMapEntry",
            [("key", 1, i64), ("value", 2, msg, ".fms.cel.Reference")], entry=True)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    get = lambda n: message_factory.GetMessageClass(pool.FindMessageTypeByName(n))  # noqa: E731
    return get("fms.cel.CheckedExpr"), get("fms.cel.ParsedExpr")


_CheckedExpr, _ParsedExpr = _ast_messages()
_CHECKED = "type.googleapis.com/cel.expr.CheckedExpr"
_PARSED = "type.googleapis.com/cel.expr.ParsedExpr"


def decode(serialized: bytes) -> tuple[Any, dict[int, Any]]:
    """The expression and its reference map (empty for an unchecked one)."""
    wrapped = any_pb2.Any.FromString(serialized)
    if wrapped.type_url == _CHECKED:
        checked = _CheckedExpr.FromString(wrapped.value)
        return checked.expr, dict(checked.reference_map)
    if wrapped.type_url == _PARSED:
        return _ParsedExpr.FromString(wrapped.value).expr, {}
    raise ValueError(f"unexpected serialized CEL expression {wrapped.type_url!r}")


# --- the estimate ------------------------------------------------------------

_ACCUMULATORS = frozenset({"@result", "__result__"})
# cel-go's unit costs (common/cost.go).
_SELECT_AND_IDENT, _LIST_CREATE, _MAP_CREATE, _STRUCT_CREATE = 1, 10, 30, 40
# Kubernetes reads `device.driver` as the variable `device` and a field of it;
# we declare `device.driver` as one variable (library.py), so it costs both.
_DEVICE_FIELD = 2 * _SELECT_AND_IDENT
# O(1) functions of the Kubernetes library (library/cost.go).
_UNIT = frozenset({"sign", "asInteger", "isInteger", "asApproximateFloat", "isGreaterThan",
                   "isLessThan", "compareTo", "add", "sub", "major", "minor", "patch", "size",
                   "_-_", "_*_", "_/_", "_%_", "-_", "!_", "@not_strictly_false", "int", "uint",
                   "double", "bool", "bytes", "type", "duration", "timestamp", "dyn",
                   "optional.none", "hasValue"})
# String functions that traverse their target once and give a string as long.
_TRAVERSE = frozenset({"lowerAscii", "upperAscii", "trim", "substring"})
# O(1) functions whose result is their (first) argument or their target.
_SAME_SIZE = frozenset({"optional.of", "optional.ofNonZeroValue", "value", "dyn"})


def _kind(e: Any) -> str:
    return e.WhichOneof("expr_kind") or ""


class Estimator:
    """cel-go's coster over our AST (runtimecost.py refines it for CEL-C++): `cost(e)` is the most one evaluation of `e`
    can cost, and sets `shapes[id]`, the largest value it can give."""

    def __init__(self, refs: dict[int, Any], sizes: Sizes):
        self.refs = refs
        self.locals: dict[str, list[_Shape]] = {}
        self.shapes: dict[int, _Shape] = {}
        domain = lambda value: _Shape(0, sizes.domains, _Shape(0, sizes.domain),  # noqa: E731
                                      _Shape(0, sizes.entries, _Shape(0, sizes.ident), value))
        self.variables = {
            "device.driver": _Shape(0, sizes.driver),
            "device.allowMultipleAllocations": _SCALAR,
            "device.attributes": domain(_Shape(0, sizes.value)),
            "device.capacity": domain(_SCALAR),  # a Quantity: O(1) to compare
        }

    def shape(self, e: Any) -> _Shape:
        return self.shapes.get(e.id, _UNKNOWN)

    def cost(self, e: Any) -> int:
        kind = _kind(e)
        cost, shape = getattr(self, "_" + kind)(e) if kind else (0, _UNKNOWN)
        self.shapes[e.id] = shape
        return _sat(cost)

    def _const_expr(self, e: Any) -> tuple[int, _Shape]:
        const = e.const_expr
        which = const.WhichOneof("constant_kind")
        if which in ("string_value", "bytes_value"):
            n = len(getattr(const, which))
            return 0, _Shape(n, n)
        return 0, _SCALAR

    def _ident_expr(self, e: Any) -> tuple[int, _Shape]:
        ref = self.refs.get(e.id)
        name = ref.name if ref is not None and ref.name else e.ident_expr.name
        if self.locals.get(name):
            return _SELECT_AND_IDENT, self.locals[name][-1]
        if name in self.variables:
            return _DEVICE_FIELD, self.variables[name]
        return _SELECT_AND_IDENT, _UNKNOWN

    def _select_expr(self, e: Any) -> tuple[int, _Shape]:
        sel = e.select_expr
        # An unchecked expression reads `device.driver` as a select on `device`.
        qualified = self._qualified(e)
        if qualified in self.variables and not self.locals.get("device"):
            return _DEVICE_FIELD, self.variables[qualified]
        cost = self.cost(sel.operand) + _SELECT_AND_IDENT
        return cost, _SCALAR if sel.test_only else _unknown(self.shape(sel.operand).item)

    def _qualified(self, e: Any) -> str:
        kind = _kind(e)
        if kind == "ident_expr":
            return e.ident_expr.name
        if kind == "select_expr" and not e.select_expr.test_only:
            return self._qualified(e.select_expr.operand) + "." + e.select_expr.field
        return ""

    def _list_expr(self, e: Any) -> tuple[int, _Shape]:
        elements = e.list_expr.elements
        cost = _LIST_CREATE + sum(self.cost(x) for x in elements)
        item: _Shape | None = None
        for x in elements:
            item = self.shape(x) if item is None else item.union(self.shape(x))
        return cost, _Shape(len(elements), len(elements), None, item or _Shape(0, 0))

    def _struct_expr(self, e: Any) -> tuple[int, _Shape]:
        entries = e.struct_expr.entries
        cost = _MAP_CREATE if not e.struct_expr.message_name else _STRUCT_CREATE
        key = item = None
        for entry in entries:
            cost += self.cost(entry.value)
            item = self.shape(entry.value) if item is None else item.union(self.shape(entry.value))
            if entry.HasField("map_key"):
                cost += self.cost(entry.map_key)
                key = self.shape(entry.map_key) if key is None else key.union(self.shape(entry.map_key))
        return cost, _Shape(len(entries), len(entries), key or _Shape(0, 0), item or _Shape(0, 0))

    def _comprehension_expr(self, e: Any) -> tuple[int, _Shape]:
        c = e.comprehension_expr
        cost = self.cost(c.iter_range) + self.cost(c.accu_init)
        bind = (_kind(c.iter_range) == "list_expr" and not c.iter_range.list_expr.elements
                and _kind(c.loop_condition) == "const_expr"
                and not c.loop_condition.const_expr.bool_value
                and c.accu_var not in _ACCUMULATORS)
        if bind:  # cel.bind(var, init, result): init once, then result
            self.locals.setdefault(c.accu_var, []).append(self.shape(c.accu_init))
            cost += self.cost(c.result)
            self.locals[c.accu_var].pop()
            return cost, self.shape(c.result)
        over = self.shape(c.iter_range)
        builds = _kind(c.accu_init) in ("list_expr", "struct_expr")
        # A map or filter accumulates at most one item per iteration.
        accu = _Shape(0, over.hi, None, _UNKNOWN) if builds else self.shape(c.accu_init)
        self.locals.setdefault(c.accu_var, []).append(accu)
        # Over a map the (first) variable is the key; over a list, the item
        # (or, with two variables, the index).
        first = _unknown(over.key) if over.key is not None else (
            _SCALAR if c.iter_var2 else _unknown(over.item))
        self.locals.setdefault(c.iter_var, []).append(first)
        if c.iter_var2:
            self.locals.setdefault(c.iter_var2, []).append(_unknown(over.item))
        loop = self.cost(c.loop_condition) + self.cost(c.loop_step)
        self.locals[c.iter_var].pop()
        if c.iter_var2:
            self.locals[c.iter_var2].pop()
        cost += self.cost(c.result) + _sat(over.hi * loop)
        self.locals[c.accu_var].pop()
        if builds:
            step_item = self.shape(c.loop_step).item
            return cost, _Shape(0, over.hi, None, _unknown(step_item))
        return cost, self.shape(c.result)

    def _call_expr(self, e: Any) -> tuple[int, _Shape]:
        call = e.call_expr
        args = list(call.args)
        operands = ([call.target] if call.HasField("target") else []) + args
        costs = [self.cost(x) for x in operands]  # once each: nesting stays linear
        shapes = [self.shape(x) for x in operands]
        ref = self.refs.get(e.id)
        overloads = tuple(ref.overload_id) if ref is not None else ()
        fn, shape = self._function(call.function, overloads, shapes)
        if call.function == "_?_:_" and len(costs) == 3:  # only one branch runs
            return _sat(costs[0] + max(costs[1], costs[2]) + fn), shape
        return _sat(sum(costs) + fn), shape

    def _function(self, name: str, overloads: tuple[str, ...],
                  args: list[_Shape]) -> tuple[int, _Shape]:
        """(cost of the call itself, shape of its result); `args` starts with
        the target of a member call."""
        a = args + [_UNKNOWN] * (3 - len(args))
        if name in ("_&&_", "_||_"):
            return 0, _SCALAR
        if name == "_?_:_":
            return 0, a[1].union(a[2])
        if name in ("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"):
            numeric = overloads and not any(("string" in o or "bytes" in o) for o in overloads)
            if numeric and name not in ("_==_", "_!=_"):
                return 1, _SCALAR
            return _tenth(min(a[0].hi, a[1].hi)), _SCALAR
        if name == "_+_":
            total = _Shape(_sat(a[0].lo + a[1].lo), _sat(a[0].hi + a[1].hi), None,
                           _union(a[0].item, a[1].item))
            if overloads and all(o == "add_list" for o in overloads):
                return 1, total
            if overloads and not any(o in ("add_string", "add_bytes", "add_list") for o in overloads):
                return 1, _SCALAR
            return _tenth(total.hi), total
        if name in ("_[_]", "_[?_]", "_?._"):
            return 1, _unknown(a[0].item)
        if name == "@in":
            if overloads and all(o == "in_map" for o in overloads):
                return 1, _SCALAR
            return max(1, a[1].hi), _SCALAR
        if name == "contains":
            return _sat(_tenth(a[0].hi) * _tenth(a[1].hi)), _SCALAR
        if name in ("startsWith", "endsWith"):
            return _tenth(a[1].hi), _SCALAR
        if name == "matches":
            return _sat(_tenth(a[0].hi + 1) * -(-a[1].hi // 4)), _SCALAR
        if name in ("indexOf", "lastIndexOf"):
            return _tenth(a[0].hi), _SCALAR
        if name in _TRAVERSE:  # one pass over the string, a result as long
            return _tenth(a[0].hi), a[0]
        if name in _SAME_SIZE:
            return 1, a[0]
        if name == "charAt":
            return 1, _Shape(0, 1)
        if name == "replace":
            return _tenth(2 * a[0].hi), _replaced(a[0], a[1], a[2])
        if name == "split":
            return _tenth(2 * a[0].hi), _Shape(0, _sat(a[0].hi + 1), None, _Shape(0, a[0].hi))
        if name == "join":
            item = _unknown(a[0].item)
            sep = a[1] if len(args) > 1 else _Shape(0, 0)
            size = _sat(a[0].hi * item.hi + max(a[0].hi - 1, 0) * sep.hi)
            return _tenth(size), _Shape(0, size)
        if name == "strings.quote":
            return _tenth(a[0].hi), _Shape(a[0].lo + 2, _sat(2 * a[0].hi + 2))
        if name in ("quantity", "isQuantity", "semver", "isSemver"):
            return _tenth(a[0].hi), _SCALAR
        if name == "string":  # of a string: itself; of a number: a few dozen characters
            return 1, _Shape(0, max(a[0].hi, 32))
        if name == "format":  # the result's size: unbounded, as in cel-go
            return _tenth(a[0].hi), _UNKNOWN
        if name in ("orValue", "or"):
            return 1, a[0].union(a[1])
        if name in _UNIT:
            return 1, _SCALAR
        # Anything else (format, ...): cel-go cannot bound its result either.
        return 1, _UNKNOWN


def _replaced(s: _Shape, old: _Shape, new: _Shape) -> _Shape:
    """The size of s.replace(old, new), as k8s.io/apiserver/pkg/cel/library bounds it."""
    if old.lo == 0:  # "" matches around every character
        count, kept = _sat(s.hi + 1), s.hi
    elif new.hi <= old.lo:  # never grows
        count, kept = 0, s.hi
    else:
        count, kept = -(-s.hi // old.lo), 0
    return _Shape(0, _sat(count * new.hi + kept))


def estimate(serialized: bytes, sizes: Sizes = WORST_CASE) -> int:
    """The most one evaluation of the (serialized, compiled) expression can
    cost on a device within `sizes`; at most 2**64-1, meaning unbounded."""
    return _estimate(serialized, sizes)


@functools.lru_cache(maxsize=1024)
def _estimate(serialized: bytes, sizes: Sizes) -> int:
    expr, refs = decode(serialized)
    return Estimator(refs, sizes).cost(expr)
