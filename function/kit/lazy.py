"""Struct values decoded one level at a time, the levels below left as bytes.

A fresh process meets every required resource for the first time: 1000
InferenceClusters of ~6 KB and 5000 ModelReplicas at the benchmark's L. The
scheduler reads only part of each (a replica's metadata and clusterName, each
cluster's rest but its pools) and keeps one parse per distinct pool or engine
list (parsecache.py), yet decoding a whole `Resource` into protobuf Structs
costs ~16 µs per replica and ~95 µs per cluster before anything is read, and
copying a cluster to drop its pools as much again.

So, as wire.py does for the request, these messages mirror `Resource`,
`Struct`, `Value` and `ListValue` field for field, with every ListValue inside
a Value typed `bytes`: protobuf encodes a sub-message and a `bytes` field
alike, so the same wire data decodes into either, in C, and stops at the
lists. A replica's engines and a cluster's pools (the lists, and most of
the bytes) stay bytes until a reader looks them up; the maps above them
(metadata, labels, spec) decode in the same call. `to_dict` converts a
Struct exactly as structs.to_dict converts the decoded one (sorted keys,
explicit nulls dropped, whole numbers int).

The one difference: a Value's list written twice in one encoding is merged
by protobuf and taken from its last occurrence here. No encoder writes a
field twice (Go's protobuf, which Crossplane uses, and Python's never do),
so for what Crossplane sends the two read alike (tests/test_parse_fast.py
compares them, map order shuffled too). Nor is a string inside a list that
is never read checked for UTF-8 here, as protobuf checks every string.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, struct_pb2
from google.protobuf.message import Message

from function.kit import structs

_PACKAGE = "function_model_serving.lazy"
_F = descriptor_pb2.FieldDescriptorProto


def _file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(
        name="function_model_serving/lazy_struct.proto", package=_PACKAGE, syntax="proto3")
    value = f.message_type.add(name="Value")
    value.oneof_decl.add(name="kind")
    # google.protobuf.Value's numbers; NullValue is an enum, a varint like int32.
    for name, number, typ in (("null_value", 1, _F.TYPE_INT32),
                              ("number_value", 2, _F.TYPE_DOUBLE),
                              ("string_value", 3, _F.TYPE_STRING),
                              ("bool_value", 4, _F.TYPE_BOOL),
                              ("struct_value", 5, _F.TYPE_MESSAGE),
                              ("list_value", 6, _F.TYPE_BYTES)):
        value.field.add(name=name, number=number, type=typ, label=_F.LABEL_OPTIONAL,
                        oneof_index=0,
                        type_name=f".{_PACKAGE}.Struct" if typ == _F.TYPE_MESSAGE else None)
    struct = f.message_type.add(name="Struct")
    entry = struct.nested_type.add(name="FieldsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=_F.TYPE_MESSAGE, label=_F.LABEL_OPTIONAL,
                    type_name=f".{_PACKAGE}.Value")
    struct.field.add(name="fields", number=1, type=_F.TYPE_MESSAGE, label=_F.LABEL_REPEATED,
                     type_name=f".{_PACKAGE}.Struct.FieldsEntry")
    # A ListValue whose values stay whole, as the bytes of each `Value`.
    items = f.message_type.add(name="ListItems")
    items.field.add(name="values", number=1, type=_F.TYPE_BYTES, label=_F.LABEL_REPEATED)
    lst = f.message_type.add(name="ListValue")
    lst.field.add(name="values", number=1, type=_F.TYPE_MESSAGE, label=_F.LABEL_REPEATED,
                  type_name=f".{_PACKAGE}.Value")
    # crossplane's Resource: field 1 is the resource Struct (the rest is not read).
    res = f.message_type.add(name="Resource")
    res.field.add(name="resource", number=1, type=_F.TYPE_MESSAGE, label=_F.LABEL_OPTIONAL,
                  type_name=f".{_PACKAGE}.Struct")
    return f


_POOL = descriptor_pool.DescriptorPool()
_POOL.AddSerializedFile(_file().SerializeToString())


def _message(name: str) -> type[Message]:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.{name}"))


Value = _message("Value")
Struct = _message("Struct")
ListValue = _message("ListValue")
ListItems = _message("ListItems")
Resource = _message("Resource")


def resource(item: bytes) -> Mapping[str, Message]:
    """The top-level fields of a serialized crossplane `Resource`'s Struct."""
    return Resource.FromString(item).resource.fields


def version(top: Mapping[str, Message]) -> tuple[str, str] | None:
    """(metadata.uid, metadata.resourceVersion) of a Resource whose top-level
    fields `resource()` decoded, or None when it lacks either (an object not read
    from an API server, e.g. render's inputs).

    The API server gives an object a new resourceVersion on every write, status
    included, so the pair names one content exactly; unlike the bytes, which Go's
    protobuf (Crossplane's gRPC client) writes with every map in a new random
    order on each request."""
    # A oneof member that is not empty is the one set, and one of another
    # kind reads empty: no need to ask which kind each Value holds.
    meta = top.get("metadata")
    fields = meta.struct_value.fields if meta is not None else {}
    uid, rv = fields.get("uid"), fields.get("resourceVersion")
    if uid is None or rv is None:
        return None
    u, r = uid.string_value, rv.string_value
    return (u, r) if u and r else None


def items(data: bytes) -> list[bytes]:
    """Each element of a serialized ListValue, as the bytes of its `Value`."""
    return list(ListItems.FromString(data).values)


def to_dict(fields_: Mapping[str, Message],
            override: Callable[[str, Message], Any] | None = None) -> dict[str, Any]:
    """structs.to_dict of the Struct whose fields these are. `override(key, v)`,
    when given, stands in for converting a field's value (None: convert it)."""
    out = {}
    for k in sorted(fields_):
        v = fields_[k]
        kind = v.WhichOneof("kind")
        if kind == "null_value":
            continue
        got = override(k, v) if override is not None else None
        if got is not None:
            out[k] = got
        elif kind == "string_value":  # kinds inline, as in structs.to_dict
            out[k] = v.string_value
        elif kind == "struct_value":
            out[k] = to_dict(v.struct_value.fields)
        elif kind == "list_value":
            out[k] = [_value(x) for x in ListValue.FromString(v.list_value).values]
        else:
            out[k] = structs.scalar(v, kind)
    return out


def value(v: Message) -> Any:
    """structs.value of the Value this is."""
    return _value(v)


def _value(v: Message) -> Any:
    k = v.WhichOneof("kind")
    if k == "string_value":
        return v.string_value
    if k == "struct_value":
        return to_dict(v.struct_value.fields)
    if k == "list_value":
        return [_value(x) for x in ListValue.FromString(v.list_value).values]
    return structs.scalar(v, k)


def canonical_value(data: bytes) -> struct_pb2.Value:
    """A serialized Value decoded as protobuf's own (for canonical bytes)."""
    return struct_pb2.Value.FromString(data)
