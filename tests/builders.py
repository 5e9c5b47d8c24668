"""Build RunFunctionRequests the way Crossplane sends them."""

from __future__ import annotations

import pathlib
from collections.abc import Iterable, Mapping
from typing import Any

import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def load(path: str | pathlib.Path) -> list[dict]:
    path = pathlib.Path(path)
    if not path.is_absolute():
        path = ROOT / path
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]


def load_one(path: str | pathlib.Path) -> dict:
    (doc,) = load(path)
    return doc


def request(xr: Mapping[str, Any], *, required: Mapping[str, Iterable[Mapping]] | None = None,
            observed: Mapping[str, Mapping] | None = None) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.CopyFrom(resource.dict_to_struct(dict(xr)))
    for name, objs in (required or {}).items():
        items = req.required_resources[name].items
        for obj in objs:
            items.add().resource.CopyFrom(resource.dict_to_struct(dict(obj)))
    for key, obj in (observed or {}).items():
        req.observed.resources[key].resource.CopyFrom(resource.dict_to_struct(dict(obj)))
    return req


def desired(rsp: fnv1.RunFunctionResponse) -> dict[str, dict]:
    return {k: resource.struct_to_dict(v.resource) for k, v in rsp.desired.resources.items()}


def composite(rsp: fnv1.RunFunctionResponse) -> dict:
    return resource.struct_to_dict(rsp.desired.composite.resource)


def conditions(rsp: fnv1.RunFunctionResponse) -> dict[str, fnv1.Condition]:
    return {c.type: c for c in rsp.conditions}
