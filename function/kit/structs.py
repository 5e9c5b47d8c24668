"""protobuf Struct -> plain Python, with integers restored.

A Struct stores every number as a double, so `count: 8` arrives as 8.0.
Kubernetes integers (counts, nodes, DRA `int` attributes) must stay ints, or
CEL sees a double where Kubernetes has an int. Whole numbers become int here,
once, at the edge; nothing inside the function sees a Struct.

A field set to null is dropped, as the API server prunes nulls from fields
that are not nullable (none of ours are): `crossplane render` and hand-built
requests do not prune, and a null would otherwise travel into our output.

Keys come out sorted. A Struct is a map, and its order on the wire is not
its content: Go's protobuf (Crossplane) writes maps in random order, so the
same object can arrive ordered differently on every reconcile. Anything the
function derives in dict order (a list of validation errors, say) would then
flap between reconciles; sorted keys make the output depend on content only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from google.protobuf.message import Message

from function.kit import wire


def to_dict(s: struct_pb2.Struct) -> dict[str, Any]:
    # Every fleet item a fresh process meets goes through here or through
    # lazy.to_dict, its twin: the kinds are tested inline, most common first,
    # as each call into protobuf costs more than the test itself.
    fields = s.fields
    out = {}
    for k in sorted(fields):
        v = fields[k]
        kind = v.WhichOneof("kind")
        if kind == "string_value":
            out[k] = v.string_value
        elif kind == "struct_value":
            out[k] = to_dict(v.struct_value)
        elif kind == "list_value":
            out[k] = [_value(x) for x in v.list_value.values]
        elif kind != "null_value":
            out[k] = scalar(v, kind)
    return out


def value(v: struct_pb2.Value) -> Any:
    """One Struct Value as plain Python (null: None)."""
    return _value(v)


def _value(v: struct_pb2.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "string_value":
        return v.string_value
    if kind == "struct_value":
        return to_dict(v.struct_value)
    if kind == "list_value":
        return [_value(x) for x in v.list_value.values]
    return scalar(v, kind)


def scalar(v: Any, kind: str | None) -> Any:
    """A Value that holds neither a Struct nor a list (its `kind`) as plain Python.
    `v` may be any message with Value's fields (function/kit/lazy.py)."""
    if kind == "string_value":
        return v.string_value
    if kind == "number_value":
        n = v.number_value
        return int(n) if n.is_integer() else n
    if kind == "bool_value":
        return v.bool_value
    return None


def update(r: fnv1.Resource, source: Mapping[str, Any],
           converted: dict[int, tuple[Any, Message]] | None = None) -> None:
    """`resource.update(r, source)`, sharing work between objects that share parts.

    protobuf's `Struct.update` walks every value in Python; the scheduler's
    response holds a hundred ModelReplicas built from the same deployment
    dicts (shared, not copied: output.py). Given a `converted` memo kept for
    one response, a dict or list met again (the same object) is copied from
    its first conversion in C instead of being walked again.
    """
    _fill_struct(r.resource, source, {} if converted is None else converted)


def _fill_struct(s: struct_pb2.Struct, d: Mapping[str, Any], memo) -> None:
    for k, v in d.items():
        _fill_value(s.fields[k], v, memo)


def _fill_value(val: struct_pb2.Value, v: Any, memo) -> None:
    # The exact types the function builds first (the ABC checks below cost
    # more than filling the value), then any str, number, mapping or sequence.
    t = type(v)
    if t is str:
        val.string_value = v
    elif t is dict:
        _fill_shared(val.struct_value, v, memo, _fill_struct)
    elif t is list:
        _fill_shared(val.list_value, v, memo, _fill_list)
    elif t is int or t is float:
        val.number_value = v
    elif isinstance(v, str):
        val.string_value = v
    elif isinstance(v, bool):  # before numbers: a bool is an int
        val.bool_value = v
    elif isinstance(v, (int, float)):
        val.number_value = v
    elif v is None:
        val.null_value = struct_pb2.NULL_VALUE
    elif isinstance(v, Mapping):
        _fill_shared(val.struct_value, v, memo, _fill_struct)
    elif isinstance(v, (list, tuple)):
        _fill_shared(val.list_value, v, memo, _fill_list)
    else:
        raise ValueError(f"cannot put a {type(v).__name__} in a protobuf Struct")


def _fill_list(lv: struct_pb2.ListValue, items, memo) -> None:
    for item in items:
        _fill_value(lv.values.add(), item, memo)


def _fill_shared(target: Message, v, memo, fill) -> None:
    seen = memo.get(id(v))
    if seen is not None and seen[0] is v:  # the same object (kept alive by the memo)
        target.CopyFrom(seen[1])
        return
    target.Clear()
    fill(target, v, memo)
    memo[id(v)] = (v, target)


def required(req, name: str) -> list[dict[str, Any]]:
    """The resolved required resources of one requirement (empty if unresolved).

    `req` is a RunFunctionRequest or a wire.SerializedRequest (items as bytes).
    """
    return [to_dict(r.resource) for r in wire.required_resources(req, name)]
