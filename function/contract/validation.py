"""Parse a composite through its generated model and the XRD's rules again."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic

from function.contract import rules
from function.contract.names import is_dns_label


def model_errors(model: type[pydantic.BaseModel], obj: Mapping[str, Any], limit: int = 5) -> list[str]:
    """Schema violations as `path: message` lines, at most `limit` of them."""
    try:
        model.model_validate(obj)
    except pydantic.ValidationError as exc:
        out = []
        for err in exc.errors()[:limit]:
            path = ".".join(str(p) for p in err["loc"])
            out.append(f"{path}: {err['msg']}")
        if exc.error_count() > limit:
            out.append(f"... and {exc.error_count() - limit} more")
        return out
    return []


def dig(obj: Any, *keys: str) -> Mapping[str, Any]:
    """obj[k1][k2]..., or {} when any level is missing or not a mapping."""
    for key in keys:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj if isinstance(obj, Mapping) else {}


def controller(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """An object's controller ownerReference (from its metadata), or None."""
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return None
    return next((r for r in refs if isinstance(r, Mapping) and r.get("controller") is True),
                None)


def condition_of(obj: Mapping[str, Any] | None, typ: str) -> Mapping[str, Any] | None:
    """An object's status condition of type `typ`, if it has one."""
    for c in dig(obj, "status").get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == typ:
            return c
    return None


def metadata_errors(obj: Mapping[str, Any], namespaced: bool) -> list[str]:
    """The identity the handlers rely on: a name, a namespace, string labels."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return ["metadata: missing"]
    errors = []
    name = meta.get("name")
    # Crossplane caps composite names at 63: they become label values.
    if not isinstance(name, str) or not 0 < len(name) <= 63:
        errors.append("metadata.name: must be a non-empty string of at most 63 characters")
    namespace = meta.get("namespace")
    if namespaced and not (isinstance(namespace, str) and is_dns_label(namespace)):
        # Namespaces are DNS labels; remote objects land in one named alike.
        errors.append("metadata.namespace: must be a DNS label of at most 63 characters")
    for key in ("labels", "annotations"):
        values = meta.get(key)
        if values is not None and not (isinstance(values, Mapping) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in values.items())):
            errors.append(f"metadata.{key}: must map strings to strings")
    return errors


def pruned(model: type[pydantic.BaseModel], obj: Mapping[str, Any]) -> dict[str, Any]:
    """obj without the fields its schema does not know, as the API server prunes them.

    A structural schema drops unknown fields on write, so they never reach a
    function in a real control plane; `crossplane render` and hand-built
    requests do not prune, and an unknown field passed through would make
    our own output invalid. Call only on an object that validates.
    """
    out = model.model_validate(obj).model_dump(mode="json", by_alias=True, exclude_unset=True)
    out.update({k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj})
    return out


def spec_errors(model: type[pydantic.BaseModel], obj: Mapping[str, Any],
                engine_spec: Mapping[str, Any]) -> list[str]:
    """Everything wrong with a ModelDeployment or ModelReplica, schema first."""
    return (metadata_errors(obj, namespaced=True) + model_errors(model, obj)
            or engine_rule_errors(obj, engine_spec))


def engine_rule_errors(obj: Mapping[str, Any], engine_spec: Mapping[str, Any]) -> list[str]:
    """The API's rules for a ModelDeployment's or ModelReplica's engines and template
    metadata: what spec_errors adds once the schema holds."""
    return (rules.engine_errors(engine_spec)
            + rules.template_metadata_errors(dig(obj, "spec", "template", "metadata")))
