"""The ModelEndpoint handler: check the endpoint, compose nothing.

A ModelEndpoint is data a ModelService reads. Its handler says whether it is
usable: `Valid` True, or False with the reason and what to change
(composer/modelservice/endpoint.py). It never fails the reconcile, so it has no
Fatal prologue: an unusable endpoint is reported, and every ModelService
selecting it leaves it out and names it. The endpoint is Ready either way
(there is nothing to wait on).
"""

from __future__ import annotations

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.composer.modelservice.endpoint import caveat, check
from function.kit.request import Request, desired_ready

VALID = "Valid"
MAX_MESSAGE = 1000


def run(req: Request, rsp: fnv1.RunFunctionResponse) -> None:
    rsp.desired.composite.ready = desired_ready(True)  # composes nothing: nothing to wait on
    bad = check(req.composite)
    if bad is None:
        response.set_conditions(rsp, resource.Condition(
            typ=VALID, status="True", reason="Valid",
            message=("ModelServices selecting this endpoint route to it"
                     + caveat(req.composite))[:MAX_MESSAGE]))
        return
    response.set_conditions(rsp, resource.Condition(
        typ=VALID, status="False", reason=bad.reason,
        message=(f"{bad}; ModelServices leave this endpoint out until it is "
                 "fixed")[:MAX_MESSAGE]))
