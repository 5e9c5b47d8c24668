"""JWT on the front door (#33, finding 6): `spec.authentication.jwt` of a ModelService.

A service with JWT authentication gets an Envoy Gateway SecurityPolicy whose `jwt`
verifies tokens against its providers' remote JWKS; the token goes no further than the
front door; a JWKS URI is a destination of the front door's Envoy and passes the rules a
ModelEndpoint's URL does; API keys and JWT are one or the other. The XRD's CEL side is in
tests/invalid/ (ms-auth-*, ms-jwt-*).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from builders import desired, request
from test_frontdoor_security import CLOSED, backend_refs, door
from test_modelservice import endpoint, observed_of, route, routed, run, service

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.runtime import fn

TRUE, FALSE = fnv1.STATUS_CONDITION_TRUE, fnv1.STATUS_CONDITION_FALSE
INVALID = Path(__file__).parent / "invalid"
JWKS = "https://idp.example.com/.well-known/jwks.json"


ISSUER = "https://idp.example.com"


def jwt(*providers, **first):
    """spec.authentication with JWT: `providers` as given, or one built from `first`
    (issuer ISSUER unless `first` says otherwise)."""
    return {"jwt": {"providers": list(providers) or [{
        "name": "corp", "remoteJWKS": {"uri": JWKS}, "issuer": ISSUER, **first}]}}


def test_a_provider_without_issuer_or_audiences_is_refused_and_the_route_kept():
    anyone = {"name": "corp", "remoteJWKS": {"uri": JWKS}}
    rsp = run(service(authentication=jwt(anyone)), [[endpoint("a")]])
    assert routed(rsp).status == FALSE and routed(rsp).reason == "InvalidSpec"
    assert "spec.authentication.jwt.providers[0]: a provider accepts the tokens of its " \
        "issuer or for its audiences" in routed(rsp).message
    assert not [o for o in desired(rsp).values() if o["kind"] == "SecurityPolicy"]
    # Either one is enough.
    for first in ({"issuer": ISSUER}, {"audiences": ["llm-gateway"]}):
        ok = run(service(authentication=jwt({**anyone, **first})), [[endpoint("a")]])
        assert routed(ok).status == TRUE


def policy_of(rsp):
    [p] = [o for o in desired(rsp).values() if o["kind"] == "SecurityPolicy"]
    return p


def test_a_service_with_jwt_gets_a_security_policy_verifying_its_providers_tokens():
    rsp = run(service(authentication=jwt(
        issuer="https://idp.example.com", audiences=["llm-gateway"],
        claimToHeaders=[{"claim": "sub", "header": "x-user"}])), [[endpoint("a")]])
    route = desired(rsp)["control-plane-route"]
    assert routed(rsp).status == TRUE
    assert policy_of(rsp)["spec"] == {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                        "name": route["metadata"]["name"]}],
        "jwt": {"providers": [{
            "name": "corp", "issuer": "https://idp.example.com", "audiences": ["llm-gateway"],
            "remoteJWKS": {"uri": JWKS},
            "claimToHeaders": [{"claim": "sub", "header": "x-user"}],
            # The Authorization header only: not Envoy Gateway's default access_token query
            # parameter, which access logs keep.
            "extractFrom": {"headers": [{"name": "Authorization", "valuePrefix": "Bearer "}]}}]}}
    assert "apiKeyAuth" not in policy_of(rsp)["spec"]


def test_the_token_goes_no_further_than_the_front_door():
    """Envoy Gateway forwards a verified token: the route removes it for every endpoint
    that does not replace it with its own credential."""
    plain = endpoint("a", "http://10.0.0.1", {"app": "a"})
    keyed = endpoint("openai", "https://api.openai.com", {"app": "a"},
                     auth={"secretRef": {"name": "openai"}})
    replica = endpoint("r-0", "http://10.0.9.1", {"app": "a"}, rewritePath="/", replica="r-0")
    rsp = run(service(authentication=jwt()), [[plain, keyed, replica]])
    # A credential in the rule: each backendRef without one removes the token itself (a
    # rule's removal would also remove the credential, which is set before it).
    modifiers = {ref["name"].split("-")[1]: [f["requestHeaderModifier"]
                                            for f in ref.get("filters", [])
                                            if f["type"] == "RequestHeaderModifier"]
                 for ref in backend_refs(rsp)}
    assert modifiers == {"a": [{"remove": ["Authorization"]}],
                         "openai": [],  # its credential overwrites it
                         "r": [{"remove": ["Authorization"]}]}
    assert not any(f["type"] == "RequestHeaderModifier"
                   for rule in route(rsp)["spec"]["rules"] for f in rule["filters"])
    # No credential in the rule: the rule removes it, and the backendRefs keep no
    # filters (they share one Envoy cluster).
    alone = run(service(authentication=jwt()), [[plain, replica]])
    assert {"type": "RequestHeaderModifier", "requestHeaderModifier": {
        "remove": ["Authorization"]}} in route(alone)["spec"]["rules"][0]["filters"]
    assert not any("filters" in ref for ref in backend_refs(alone))
    # API keys: Envoy's filter removes the key itself (sanitize); nothing else to remove.
    keys = run(service(authentication={"apiKeys": {"secretRef": {"name": "clients"}}}),
               [[plain]])
    [ref] = backend_refs(keys)
    assert "filters" not in ref


def test_api_keys_and_jwt_together_are_refused_and_the_route_is_kept():
    first = run(service(authentication=jwt()), [[endpoint("a")]])
    both = service(authentication={**jwt(), "apiKeys": {"secretRef": {"name": "clients"}}})
    rsp = run(both, [[endpoint("a")]], observed=observed_of(first))
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "InvalidSpec")
    assert "set apiKeys or jwt, not both" in routed(rsp).message
    assert desired(rsp) == desired(first)  # kept as it is: neither opened nor dropped


@pytest.mark.parametrize("uri, said", [
    ("https://169.254.169.254/latest/meta-data", "link-local, metadata"),
    ("https://2852039166/keys", "read as an IPv4 number"),
    ("https://kubernetes.default.svc/openid/v1/jwks", "the cluster's API server"),
    ("https://metadata.google.internal/jwks", "a metadata service"),
    # Not an https URL of a host: the schema's pattern (the generated model) says so.
    ("http://idp.example.com/jwks", "should match pattern '^https://"),
    ("https://user@idp.example.com/jwks", "should match pattern"),
    ("https://idp.example.com/jwks?x=1", "should match pattern"),
])
def test_a_jwks_no_front_door_may_fetch_is_an_invalid_spec_that_composes_nothing(uri, said):
    rsp = run(service(authentication=jwt(remoteJWKS={"uri": uri})), [[endpoint("a")]])
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "InvalidSpec")
    assert "spec.authentication.jwt.providers" in routed(rsp).message
    assert "remoteJWKS.uri" in routed(rsp).message and said in routed(rsp).message
    assert desired(rsp) == {}  # fail closed: no route that would answer anyone


PRIVATE_JWKS = "https://keycloak.auth.svc.cluster.local/realms/llm/protocol/openid-connect/certs"


def test_a_private_jwks_is_fetched_only_where_the_front_door_allows_it():
    spec = service(authentication=jwt(remoteJWKS={"uri": PRIVATE_JWKS}))
    refused = run(spec, [[endpoint("a", "https://api.openai.com")]], door=[CLOSED])
    assert (routed(refused).status, routed(refused).reason) == (FALSE, "DeniedJWKS")
    assert "keycloak.auth.svc.cluster.local is a cluster-internal name" in \
        routed(refused).message
    assert "spec.frontDoor.allowedDestinations" in routed(refused).message
    assert desired(refused) == {}
    allowing = door(allowedDestinations={"hostnames": ["*.svc.cluster.local"]})
    allowed = run(spec, [[endpoint("a", "https://api.openai.com")]], door=[allowing])
    assert routed(allowed).status == TRUE
    assert policy_of(allowed)["spec"]["jwt"]["providers"][0]["remoteJWKS"]["uri"] == \
        PRIVATE_JWKS


def test_a_jwks_the_front_door_stops_allowing_keeps_what_exists_as_it_is():
    allowing = door(allowedDestinations={"hostnames": ["*.svc.cluster.local"]})
    spec = service(authentication=jwt(remoteJWKS={"uri": PRIVATE_JWKS}))
    first = run(spec, [[endpoint("a", "https://api.openai.com")]], door=[allowing])
    rsp = run(spec, [[endpoint("a", "https://api.openai.com")]], door=[CLOSED],
              observed=observed_of(first))
    assert routed(rsp).reason == "DeniedJWKS"
    assert desired(rsp) == desired(first)


@pytest.mark.parametrize("header", ["x-modelplane-replica", "Authorization", "Host",
                                    "x-envoy-original-path", "Proxy-Authorization"])
def test_a_claim_may_not_be_copied_into_a_reserved_header(header):
    rsp = run(service(authentication=jwt(claimToHeaders=[{"claim": "sub", "header": header}])),
              [[endpoint("a")]])
    assert routed(rsp).reason == "InvalidSpec"
    assert f"the header {header!r} is reserved" in routed(rsp).message


def test_provider_names_and_claim_headers_are_unique():
    twice = jwt({"name": "corp", "remoteJWKS": {"uri": JWKS}},
                {"name": "corp", "remoteJWKS": {"uri": "https://other.example.com/jwks"}})
    assert "names must be unique" in routed(run(service(authentication=twice),
                                                [[endpoint("a")]])).message
    headers = jwt(claimToHeaders=[{"claim": "sub", "header": "x-user"},
                                  {"claim": "email", "header": "X-User"}])
    assert "claimToHeaders headers must be unique" in routed(
        run(service(authentication=headers), [[endpoint("a")]])).message


@pytest.mark.parametrize("manifest", sorted([*INVALID.glob("ms-auth-*.yaml"),
                                             *INVALID.glob("ms-jwt-*.yaml")]),
                         ids=lambda p: p.stem)
def test_the_function_refuses_what_the_xrd_refuses(manifest):
    ms = yaml.safe_load(manifest.read_text())
    first = run(service(), [[endpoint("a")]])
    rsp = fn.run_function(request(ms, observed=observed_of(first)))
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "InvalidSpec"), \
        routed(rsp).message
    assert desired(rsp) == desired(first)


def test_the_jwt_policy_validates_against_the_real_crds(tools, tmp_path):
    from test_modelservice_render import ROUTE_KINDS, validate
    keyed = endpoint("openai", "https://api.openai.com", {"app": "a"},
                     auth={"secretRef": {"name": "openai"}})
    rsp = run(service(authentication=jwt(
        {"name": "corp", "issuer": "https://idp.example.com", "audiences": ["a", "b"],
         "remoteJWKS": {"uri": JWKS},
         "claimToHeaders": [{"claim": "org.team", "header": "x-team"}]},
        {"name": "partner", "audiences": ["llm-gateway"],
         "remoteJWKS": {"uri": "https://login.partner.example.com/keys"}})),
        [[keyed, endpoint("a", "http://10.0.0.1", {"app": "a"})]])
    docs = [copy.deepcopy(d) for d in desired(rsp).values() if d.get("kind") in ROUTE_KINDS]
    assert {"SecurityPolicy", "HTTPRoute"} <= {d["kind"] for d in docs}
    validate(tools, tmp_path, docs)


@pytest.mark.parametrize("uri, said", [
    ("http://idp.example.com/jwks", "must be https"),
    ("https://user@idp.example.com/jwks", "carries credentials"),
    ("https://10.0.0.1:99999/jwks", "not 1..65535"),
])
def test_the_function_checks_a_jwks_uri_itself_too(uri, said):
    """Behind the schema (an object admitted before the rule, `crossplane render`)."""
    from function.composer.modelservice import authn
    [error] = authn.errors({"authentication": jwt(remoteJWKS={"uri": uri})})
    assert error.startswith("spec.authentication.jwt.providers[0].remoteJWKS.uri") and \
        said in error
