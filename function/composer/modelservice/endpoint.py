"""The ModelEndpoint function: check the endpoint, compose nothing.

A ModelEndpoint is data a ModelService reads. Its own function says whether
it is usable: `Valid` True, or False with the reason (`InvalidURL`,
`UnsupportedScheme`, `InvalidRewritePath`, `InvalidHeaders`, `InvalidSpec`)
and what to change. It never fails the reconcile: an unusable endpoint is
reported, and every ModelService selecting it leaves it out and names it.
The endpoint is Ready either way (there is nothing to wait on).
"""

from __future__ import annotations

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.contract.endpoints import Invalid, parse_endpoint
from function.contract.models.modelendpoint import ModelEndpoint
from function.contract.validation import metadata_errors, model_errors
from function.kit.request import Request, desired_ready

VALID = "Valid"
MAX_MESSAGE = 1000


def check(me: dict) -> Invalid | None:
    """Why a ModelEndpoint cannot be used, or None."""
    try:  # the specific reasons first: the schema's pattern would only say "no match"
        parse_endpoint(me)
    except Invalid as exc:
        return exc
    errors = metadata_errors(me, namespaced=True) + model_errors(ModelEndpoint, me)
    return Invalid("InvalidSpec", "; ".join(errors)) if errors else None


def run(req: Request, rsp: fnv1.RunFunctionResponse) -> None:
    rsp.desired.composite.ready = desired_ready(True)  # composes nothing: nothing to wait on
    bad = check(req.composite)
    if bad is None:
        response.set_conditions(rsp, resource.Condition(
            typ=VALID, status="True", reason="Valid",
            message="ModelServices selecting this endpoint route to it"))
        return
    response.set_conditions(rsp, resource.Condition(
        typ=VALID, status="False", reason=bad.reason,
        message=(f"{bad}; ModelServices leave this endpoint out until it is "
                 "fixed")[:MAX_MESSAGE]))
