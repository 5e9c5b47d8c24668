"""The RunFunction request as the handlers read it, and the readiness they write.

fn.py wraps every request in a `Request` before it dispatches, so a handler
never decodes protobuf itself: the observed composite and composed resources
come as plain Python (structs.py: integers restored, keys sorted), required
resources as plain Python or, for a handler that remembers what it parsed
across reconciles, as the serialized bytes of each item (wire.py: the server
leaves them undecoded, and a cache keys on them).

`message` is the request itself, for the SDK's helpers (`response.to`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf.message import Message

from function.kit import structs, wire


class Request:
    """One RunFunctionRequest or wire.SerializedRequest, read lazily."""

    def __init__(self, message: Message) -> None:
        self.message = message

    @functools.cached_property
    def composite(self) -> dict[str, Any]:
        """The observed composite resource."""
        return structs.to_dict(self.message.observed.composite.resource)

    def composite_part(self, *path: str) -> bytes:
        """The serialized value at `path` in the observed composite (b"" when
        absent): what a cache keyed on part of the composite keys on."""
        fields = self.message.observed.composite.resource.fields
        value = None
        for name in path:
            if name not in fields:  # tested first: indexing a map inserts the key
                return b""
            value = fields[name]
            fields = value.struct_value.fields
        return value.SerializeToString(deterministic=True) if value is not None else b""

    def observed(self, kind: str | None = None) -> dict[str, dict[str, Any]]:
        """The observed composed resources by key, in key order; only those of
        `kind` when given."""
        return {key: structs.to_dict(r.resource)
                for key, r in sorted(self.message.observed.resources.items())
                if kind is None or _kind(r.resource) == kind}

    def resolved(self, name: str) -> bool:
        """Whether Crossplane resolved the requirement `name` (even to nothing)."""
        return name in self.message.required_resources

    def required(self, name: str) -> list[dict[str, Any]]:
        """The resources of one resolved requirement (empty if unresolved)."""
        return structs.required(self.message, name)

    def required_items(self, name: str) -> Iterator[bytes]:
        """The resources of one resolved requirement, each as the bytes of its
        `Resource` message (nothing decoded): a key for what was parsed from it."""
        return wire.required_items(self.message, name)


def require_namespace(rsp: fnv1.RunFunctionResponse, name: str, namespace: str) -> None:
    """Require the Namespace `namespace` by name, as requirement `name`."""
    rsp.requirements.resources[name].CopyFrom(fnv1.ResourceSelector(
        api_version="v1", kind="Namespace", match_name=namespace))


def namespace_labels(req: Request, name: str, namespace: str) -> dict[str, str] | None:
    """The labels of Namespace `namespace` as requirement `name` resolved it; None
    when it is missing, or not resolved yet."""
    for n in req.required(name):
        meta = n.get("metadata")
        if not isinstance(meta, dict):
            continue
        labels = meta.get("labels") or {}
        if meta.get("name") == namespace and isinstance(labels, dict):
            return {str(k): str(v) for k, v in labels.items()}
    return None


def decode(item: bytes) -> dict[str, Any]:
    """One item of `Request.required_items` as plain Python."""
    return structs.to_dict(wire.resource(item).resource)


def desired_ready(ready: bool) -> fnv1.Ready:
    """A desired resource's (or the composite's) readiness, said explicitly."""
    return fnv1.READY_TRUE if ready else fnv1.READY_FALSE


def _kind(s) -> str:
    # Test before indexing: indexing a protobuf map inserts a missing key.
    return s.fields["kind"].string_value if "kind" in s.fields else ""
