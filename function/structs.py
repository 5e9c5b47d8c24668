"""protobuf Struct -> plain Python, with integers restored.

A Struct stores every number as a double, so `count: 8` arrives as 8.0.
Kubernetes integers (counts, nodes, DRA `int` attributes) must stay ints, or
CEL sees a double where Kubernetes has an int. Whole numbers become int here,
once, at the edge; nothing inside the function sees a Struct.

A field set to null is dropped, as the API server prunes nulls from fields
that are not nullable (none of ours are): `crossplane render` and hand-built
requests do not prune, and a null would otherwise travel into our output.
"""

from __future__ import annotations

from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2


def to_dict(s: struct_pb2.Struct) -> dict[str, Any]:
    return {k: _value(v) for k, v in s.fields.items() if v.WhichOneof("kind") != "null_value"}


def _value(v: struct_pb2.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "string_value":
        return v.string_value
    if kind == "number_value":
        n = v.number_value
        return int(n) if n.is_integer() else n
    if kind == "struct_value":
        return to_dict(v.struct_value)
    if kind == "list_value":
        return [_value(x) for x in v.list_value.values]
    if kind == "bool_value":
        return v.bool_value
    return None


def required(req: fnv1.RunFunctionRequest, name: str) -> list[dict[str, Any]]:
    """The resolved required resources of one requirement (empty if unresolved)."""
    if name not in req.required_resources:
        return []
    return [to_dict(item.resource) for item in req.required_resources[name].items]
