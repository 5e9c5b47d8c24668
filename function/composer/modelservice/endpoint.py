"""Why a ModelEndpoint cannot be used: its check, shared by the ModelEndpoint handler
(handlers/modelendpoint.py) and the ModelServices that select it.

A ModelEndpoint is data a ModelService reads. Its own function says whether
it is usable: `Valid` True, or False with the reason (`InvalidURL`,
`UnsupportedScheme`, `InvalidRewritePath`, `InvalidHeaders`, `InvalidSpec`)
and what to change. It never fails the reconcile: an unusable endpoint is
reported, and every ModelService selecting it leaves it out and names it.
The endpoint is Ready either way (there is nothing to wait on).
"""

from __future__ import annotations

from function.contract.endpoints import Invalid, parse_endpoint
from function.contract.models.modelendpoint import ModelEndpoint
from function.contract.validation import metadata_errors, model_errors


def check(me: dict) -> Invalid | None:
    """Why a ModelEndpoint cannot be used, or None."""
    try:  # the specific reasons first: the schema's pattern would only say "no match"
        parse_endpoint(me)
    except Invalid as exc:
        return exc
    errors = metadata_errors(me, namespaced=True) + model_errors(ModelEndpoint, me)
    return Invalid("InvalidSpec", "; ".join(errors)) if errors else None
