"""Parse a composite through its generated model and the XRD's rules again."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic

from function import rules


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


def spec_errors(model: type[pydantic.BaseModel], obj: Mapping[str, Any],
                engine_spec: Mapping[str, Any]) -> list[str]:
    """Everything wrong with a ModelDeployment or ModelReplica, schema first."""
    return model_errors(model, obj) or rules.engine_errors(engine_spec)
