"""Why a ModelEndpoint cannot be used: its check, shared by the ModelEndpoint handler
(handlers/modelendpoint.py) and the ModelServices that select it.

A ModelEndpoint is data a ModelService reads. Its own function says whether
it is usable: `Valid` True, or False with the reason (`InvalidURL`,
`UnsupportedScheme`, `InvalidRewritePath`, `InvalidHeaders`, `ReservedHeader`,
`DeniedDestination`, `InvalidReplica`, `InvalidAuth`, `ReservedNamespace`,
`InvalidSpec`) and what to
change. A private destination is valid here: whether a front door sends there
is its InferenceCluster's to say (`caveat`). It never fails the reconcile: an
unusable endpoint is reported, and every ModelService selecting it leaves it
out and names it.
The endpoint is Ready either way (there is nothing to wait on).
"""

from __future__ import annotations

from function.contract.destinations import PRIVATE, classify
from function.contract.endpoints import Invalid, parse_endpoint
from function.contract.models.modelendpoint import ModelEndpoint
from function.contract.names import reserved_message, reserved_namespace
from function.contract.validation import metadata_errors, model_errors


def check(me: dict) -> Invalid | None:
    """Why a ModelEndpoint cannot be used, or None."""
    try:  # the specific reasons first: the schema's pattern would only say "no match"
        parse_endpoint(me)
    except Invalid as exc:
        return exc
    errors = metadata_errors(me, namespaced=True) + model_errors(ModelEndpoint, me)
    if errors:
        return Invalid("InvalidSpec", "; ".join(errors))
    # A reserved namespace's endpoint would put its route and credentials beside the
    # platform's: never used, whoever selects it.
    namespace = (me.get("metadata") or {}).get("namespace")
    if isinstance(namespace, str) and reserved_namespace(namespace):
        return Invalid("ReservedNamespace", reserved_message(namespace))
    return None


def caveat(me: dict) -> str:
    """What a valid endpoint's user should know: a private destination, or ""."""
    ep = parse_endpoint(me)
    kind, why = classify(ep.host)
    if kind != PRIVATE:
        return ""
    if ep.replica:
        return (f"; {why}: a front door sends there when it is one of the fleet's gateways "
                "or its spec.frontDoor.allowedDestinations lists it")
    return f"; {why}: only front doors whose spec.frontDoor.allowedDestinations list it send there"
