"""The prologue every handler shares, written once: validate, refuse, prune.

A composite that fails its schema or the API's rules (which admission should
have refused, but `crossplane render`, hand-built requests and older API
servers let through) gets a Fatal result that names it and what is wrong: a
Fatal result stops Crossplane from applying, and so from deleting, anything.
A valid one reaches the handler's body pruned of the fields its schema does
not know, as an API server's structural schema would have pruned them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import pydantic
from crossplane.function import response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.contract.names import reserved_message, reserved_namespace
from function.contract.validation import dig, metadata_errors, model_errors, pruned
from function.kit import deadline
from function.kit.request import Request

Handler = Callable[[Request, fnv1.RunFunctionResponse], None]
Body = Callable[[Request, fnv1.RunFunctionResponse, dict[str, Any]], None]
# What is wrong with a composite beyond its schema (its rules), checked only
# once the schema holds.
Rules = Callable[[Mapping[str, Any]], list[str]]
# What a handler does with an invalid composite instead of a Fatal result.
OnInvalid = Callable[[Request, fnv1.RunFunctionResponse, list[str]], None] | None


def no_rules(_: Mapping[str, Any]) -> list[str]:
    return []


def identity(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj


def refuse(obj: Mapping[str, Any], rsp: fnv1.RunFunctionResponse, errors: list[str], *,
           namespaced: bool) -> None:
    """A Fatal result: `<Kind> [<namespace>/]<name> is invalid: <errors>`."""
    meta = dig(obj, "metadata")
    name = f"{meta.get('namespace')}/{meta.get('name')}" if namespaced else meta.get("name")
    response.fatal(rsp, f"{obj.get('kind')} {name} is invalid: {'; '.join(errors)}")


def _reserved(obj: Mapping[str, Any], workloads: bool) -> list[str]:
    ns = dig(obj, "metadata").get("namespace")
    return [reserved_message(ns)] if workloads and isinstance(ns, str) and \
        reserved_namespace(ns) else []


def admitted(model: type[pydantic.BaseModel], *, namespaced: bool, rules: Rules = no_rules,
             view: Callable[[Mapping[str, Any]], Mapping[str, Any]] = identity,
             on_invalid: OnInvalid = None, prune: bool = True,
             workloads: bool = False) -> Callable[[Body], Handler]:
    """A handler that runs `body` only on a valid composite.

    `workloads`: the kind composes workloads into a namespace named like its own (here
    or on a workload cluster), so a reserved namespace (names.RESERVED_NAMESPACES) is
    refused: the Fatal result keeps whatever exists and says why.

    `view` is the part of the composite the schema and rules judge (the
    scheduler judges spec.autoscaling on its own and leaves it out); the body
    gets that part, pruned unless `prune` is False, and reads the composite
    as it came from `req.composite` where it needs the rest.
    """
    def wrap(body: Body) -> Handler:
        @functools.wraps(body)
        def run(req: Request, rsp: fnv1.RunFunctionResponse) -> None:
            obj = view(req.composite)
            errors = (metadata_errors(obj, namespaced=namespaced) + _reserved(obj, workloads)
                      + model_errors(model, obj) or rules(obj))
            if not errors:
                deadline.check("after validating the composite")
                body(req, rsp, pruned(model, obj) if prune else dict(obj))
            elif on_invalid is not None:
                on_invalid(req, rsp, errors)
            else:
                refuse(obj, rsp, errors, namespaced=namespaced)
        return run
    return wrap
