"""A RunFunctionRequest whose required resources stay serialized.

The scheduler's request carries the whole fleet as required resources: every
InferenceCluster and every ModelReplica, 10 MB at 1000 clusters and 5000
replicas. Decoding all of that into protobuf Structs costs about 80 ms, and
between two reconciles almost none of it has changed: the scheduler keeps
what it parsed from each item, keyed by the item's bytes (parsecache.py).

So the server decodes the scheduler's request with this message instead. It
is RunFunctionRequest field for field (built from its descriptor, so it
follows the SDK's proto), except that a Resources map value holds each item
as the bytes of its `Resource` message. Protobuf encodes a sub-message and a
`bytes` field alike (length-delimited), so the same wire data decodes into
either; protobuf itself does the decoding, in C, and never builds the
Structs. Everything else (observed, desired, context, ...) keeps its real
types, so the SDK's helpers (`response.to`, ...) work on it unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal import api_implementation
from google.protobuf.message import Message

_PACKAGE = "function_model_serving.wire"
_SDK = "." + fnv1.DESCRIPTOR.package + "."


def _file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(
        name="function_model_serving/serialized_request.proto", package=_PACKAGE,
        syntax="proto3", dependency=[fnv1.DESCRIPTOR.name])
    resources = f.message_type.add(name="SerializedResources")
    resources.field.add(name="items", number=1,
                        type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
                        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED)
    req = f.message_type.add()
    fnv1.RunFunctionRequest.DESCRIPTOR.CopyToProto(req)
    req.name = "SerializedRequest"
    for entry in req.nested_type:  # the map entries (required_resources, ...)
        for field in entry.field:
            if field.type_name == _SDK + "Resources":
                field.type_name = f".{_PACKAGE}.SerializedResources"
    for field in req.field:  # point the map fields at our copies of their entries
        field.type_name = field.type_name.replace(_SDK + "RunFunctionRequest.",
                                                  f".{_PACKAGE}.SerializedRequest.")
    return f


# upb stops decoding at 100 nested messages, and a Struct spends three on each JSON
# level (Struct, its field entry, Value): 33 levels. A CRD's schema is deeper (a
# LeaderWorkerSet's embeds a pod template's), and an observed serving-stack Object
# carries its CRD in status.atProvider.manifest: the whole request failed to decode
# ("Exceeded upb_DecodeOptions_MaxDepth"), found on make cluster. upb's only switch
# lifts the bound to 65,535 for the process. What a tenant writes is bounded by the
# XRDs' schemas (none preserves unknown fields); what is this deep is the platform's
# (CRDs, the remote objects provider-kubernetes reports).
if api_implementation.Type() == "upb":
    from google._upb import _message as _upb  # noqa: PLC2701 - upb's only depth switch

    _upb.SetAllowOversizeProtos(True)

descriptor_pool.Default().AddSerializedFile(_file().SerializeToString())
SerializedRequest: type[Message] = message_factory.GetMessageClass(
    descriptor_pool.Default().FindMessageTypeByName(f"{_PACKAGE}.SerializedRequest"))


def required_resources(req: Message, name: str) -> Iterator[fnv1.Resource]:
    """The decoded `Resource` of each item of one resolved requirement, from a
    SerializedRequest or a decoded RunFunctionRequest alike."""
    if name not in req.required_resources:
        return
    for item in req.required_resources[name].items:
        yield resource(item) if isinstance(item, bytes) else item


def required_items(req: Message, name: str) -> Iterator[bytes]:
    """The serialized `Resource` of each item of one resolved requirement.

    Works on a SerializedRequest (the bytes as they came) and on a decoded
    RunFunctionRequest (tests, `run_function`), which it serializes per item.
    """
    if name not in req.required_resources:
        return
    for item in req.required_resources[name].items:
        yield item if isinstance(item, bytes) else item.SerializeToString(deterministic=True)


def resource(item: bytes) -> fnv1.Resource:
    return fnv1.Resource.FromString(item)
