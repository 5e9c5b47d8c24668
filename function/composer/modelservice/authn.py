"""Who may call a ModelService: its `spec.authentication`, as an Envoy Gateway SecurityPolicy.

* `apiKeys`: `apiKeyAuth` from the Secret, the key read from `Authorization` (Envoy drops
  a `Bearer ` prefix) and removed before the request goes on (`sanitize`).
* `jwt`: `jwt.providers`, each with its issuer, audiences, a remote JWKS and the claims
  copied into request headers; the token is read from `Authorization: Bearer` only (Envoy
  Gateway's default also reads an `access_token` query parameter, which logs keep).
  Envoy Gateway forwards a verified token (its JwtProvider sets `forward`), so the route
  removes `Authorization` on its way to every endpoint without its own credential
  (objects.backend_filters): a tenant's token never reaches a provider.

One of the two, never both (the XRD's rule, checked again here): clients send either in
the same header, and Envoy Gateway runs every method a SecurityPolicy sets, each refusing
what it cannot verify, so a policy with both would admit no client.

A JWKS is fetched by the front door's Envoy, so its URI passes the rules a ModelEndpoint's
URL does (contract/destinations.py): https only; never a link-local, metadata,
unspecified or multicast address or the API server's names (`errors`, here and in the
XRD); a private address or cluster-internal name only where the front door allows it
(`refusals`, once the front door is known).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from function.contract.destinations import NEVER, FrontDoor, classify, refusal, reserved_header, \
    reserved_text
from function.contract.endpoints import AUTH_HEADER, Invalid, parse_url

FIELD = "spec.authentication"
# The XRD's message for a provider with neither issuer nor audiences (hack/gen_xrds.py).
ACCEPTS_ANY = ("a provider accepts the tokens of its issuer or for its audiences: set issuer, "
               "audiences or both, or any token its identity provider signs, for anyone, passes")
BEARER = "Bearer "


def jwt_providers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    jwt = (spec.get("authentication") or {}).get("jwt") or {}
    return [p for p in jwt.get("providers") or [] if isinstance(p, Mapping)]


def _uri_field(i: int) -> str:
    return f"{FIELD}.jwt.providers[{i}].remoteJWKS.uri"


def errors(spec: Mapping[str, Any]) -> list[str]:
    """The XRD's rules on spec.authentication, checked again."""
    auth = spec.get("authentication")
    if not isinstance(auth, Mapping):
        return []
    out = []
    if bool(auth.get("apiKeys")) == bool(auth.get("jwt")):
        out.append(f"{FIELD}: set apiKeys or jwt, not both: clients send either in the "
                   "Authorization header, and Envoy Gateway requires every method a "
                   "SecurityPolicy sets to pass")
    providers = jwt_providers(spec)
    names = [p.get("name") for p in providers]
    if len(set(names)) != len(names):
        out.append(f"{FIELD}.jwt.providers: names must be unique")
    for i, p in enumerate(providers):
        if not p.get("issuer") and not p.get("audiences"):
            out.append(f"{FIELD}.jwt.providers[{i}]: {ACCEPTS_ANY}")
        uri = (p.get("remoteJWKS") or {}).get("uri")
        try:
            scheme, host, _, _ = parse_url(uri, field=_uri_field(i))
        except Invalid as e:
            out.append(str(e))
            continue
        if scheme != "https":
            out.append(f"{_uri_field(i)} {uri!r} must be https: Envoy Gateway fetches a JWKS "
                       "over TLS verified against the system CAs")
        kind, why = classify(host)
        if kind == NEVER:
            out.append(f"{_uri_field(i)}: {why}: no front door fetches from there")
        headers = [str(c.get("header", "")) for c in p.get("claimToHeaders") or []
                   if isinstance(c, Mapping)]
        for h in headers:
            if reserved_header(h):
                out.append(f"{FIELD}.jwt.providers[{i}].claimToHeaders: the header {h!r} is "
                           f"reserved ({reserved_text()})")
        if len({h.lower() for h in headers}) != len(headers):
            out.append(f"{FIELD}.jwt.providers[{i}].claimToHeaders: claimToHeaders headers "
                       "must be unique, whatever their case")
    return out


def refusals(spec: Mapping[str, Any], door: FrontDoor) -> list[str]:
    """Why the front door may not fetch a provider's JWKS ([] if it may fetch every one)."""
    out = []
    for i, p in enumerate(jwt_providers(spec)):
        try:
            _, host, port, _ = parse_url((p.get("remoteJWKS") or {}).get("uri"),
                                         field=_uri_field(i))
        except Invalid as e:  # errors() said so already; fail closed all the same
            out.append(str(e))
            continue
        why = refusal(host, port, allowed=door.allowed, cluster_domain=door.cluster_domain)
        if why:
            out.append(f"{_uri_field(i)}: {why}")
    return out


def strips_authorization(spec: Mapping[str, Any]) -> bool:
    """Whether the route removes the client's Authorization on its way to endpoints."""
    return bool(jwt_providers(spec))


def policy(spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """The SecurityPolicy's authentication fields, or None without spec.authentication."""
    auth = spec.get("authentication") or {}
    keys = (auth.get("apiKeys") or {}).get("secretRef")
    if keys:
        return {"apiKeyAuth": {"credentialRefs": [{"group": "", "kind": "Secret",
                                                   "name": keys["name"]}],
                               "extractFrom": [{"headers": [AUTH_HEADER]}],
                               "sanitize": True}}
    providers = jwt_providers(spec)
    if not providers:
        return None
    out = []
    for p in providers:
        provider: dict[str, Any] = {"name": p["name"]}
        if p.get("issuer"):
            provider["issuer"] = p["issuer"]
        if p.get("audiences"):
            provider["audiences"] = list(p["audiences"])
        provider["remoteJWKS"] = {"uri": p["remoteJWKS"]["uri"]}
        if p.get("claimToHeaders"):
            provider["claimToHeaders"] = [{"claim": c["claim"], "header": c["header"]}
                                          for c in p["claimToHeaders"]]
        provider["extractFrom"] = {"headers": [{"name": AUTH_HEADER, "valuePrefix": BEARER}]}
        out.append(provider)
    return {"jwt": {"providers": out}}
