"""The front door is not an open proxy (#33, finding 6).

A tenant writes ModelEndpoints and ModelServices; the front door's Envoy sends
requests wherever they point, with whatever headers they set. These tests pin
down what a tenant can no longer do: point an endpoint at the metadata service,
the API server, loopback or a private address the platform team did not allow;
set the header that selects another namespace's replica, or a hop-by-hop one;
keep a provider's key in plain text; route on a cluster nobody admitted as a
front door, or for a namespace it does not serve. And what they can: reach the
fleet's own gateways through a replica's endpoint, a private provider the front
door allows, a provider's key from a Secret, API keys on their service. The
XRD's CEL side of each rule is in tests/invalid/ (me-url-*, me-header-*,
me-replica-*, me-auth-*, ms-rule-header-reserved, ic-front-door-*).
"""

from __future__ import annotations

import copy

import pytest
from builders import conditions, desired, request
from schemas import Schemas
from test_modelservice import DOOR, NS, endpoint, routed, run, service

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.runtime import fn

TRUE, FALSE = fnv1.STATUS_CONDITION_TRUE, fnv1.STATUS_CONDITION_FALSE
SCHEMAS = Schemas()


def door(**front_door):
    """The test front door with spec.frontDoor as given (None: no frontDoor at all)."""
    d = copy.deepcopy(DOOR)
    if front_door.get("frontDoor", {}) is None:
        del d["spec"]["frontDoor"]
    else:
        d["spec"]["frontDoor"] = {"enabled": True, **front_door}
    return d


CLOSED = door()  # admitted, every namespace, no private destination allowed


def valid(me):
    """The ModelEndpoint's own Valid condition."""
    rsp = fn.run_function(request(me))
    c = conditions(rsp)["Valid"]
    return c.status, c.reason, c.message


def backend_refs(rsp):
    route = desired(rsp)["control-plane-route"]
    return [ref for rule in route["spec"]["rules"] for ref in rule.get("backendRefs", [])]


def served(rsp):
    """The endpoints the route sends to, by the Backend's address."""
    out = set()
    for obj in desired(rsp).values():
        if obj["kind"] == "Backend":
            (addr,) = obj["spec"]["endpoints"]
            a = addr.get("ip") or addr.get("fqdn")
            out.add(f"{a.get('address') or a.get('hostname')}:{int(a['port'])}")
    return out


# --- where an endpoint may point ------------------------------------------------------


NEVER, PRIVATE, PUBLIC = "never", "private", "public"  # contract/destinations.py's classes


@pytest.mark.parametrize("host, kind", [
    ("169.254.169.254", NEVER), ("169.254.170.2", NEVER), ("0.0.0.0", NEVER),
    ("224.0.0.1", NEVER), ("255.255.255.255", NEVER), ("fd00:ec2::254", NEVER),
    ("fe80::1", NEVER), ("::", NEVER), ("::ffff:169.254.169.254", NEVER),
    ("2852039166", NEVER), ("0x7f.1", NEVER), ("127.1", NEVER), ("0xa9fea9fe", NEVER),
    ("kubernetes", NEVER), ("kubernetes.default", NEVER), ("kubernetes.default.svc", NEVER),
    ("kubernetes.default.svc.cluster.local", NEVER), ("metadata.google.internal", NEVER),
    ("127.0.0.1", PRIVATE), ("127.0.0.9", PRIVATE), ("::1", PRIVATE), ("10.127.255.1", PRIVATE),
    ("172.16.0.1", PRIVATE), ("192.168.1.1", PRIVATE), ("100.64.0.1", PRIVATE),
    ("fd12:3456::1", PRIVATE), ("::ffff:10.0.0.1", PRIVATE), ("::ffff:8.8.8.8", PUBLIC), ("localhost", PRIVATE),
    ("api.localhost", PRIVATE), ("vllm", PRIVATE), ("vllm.models.svc", PRIVATE),
    ("vllm.models.svc.cluster.local", PRIVATE), ("db.corp.internal", PRIVATE),
    ("api.openai.com", PUBLIC), ("8.8.8.8", PUBLIC), ("2606:4700::1111", PUBLIC),
    ("v1.api.example.com", PUBLIC), ("llm.1x.example.com", PUBLIC),
])
def test_each_destination_has_its_class(host, kind):
    from function.contract.destinations import classify
    assert classify(host)[0] == kind


# Names a pod's resolver completes under its search path (#48 finding 5): fewer than
# five dots, and no public top-level domain, so public DNS could not have answered.
@pytest.mark.parametrize("host, kind", [
    ("prometheus-k8s.monitoring", PRIVATE),   # <service>.<namespace>
    ("vault.vault", PRIVATE),
    ("postgres-0.postgres.db", PRIVATE),      # a headless Service's pod
    ("10-0-0-1.default.pod", PRIVATE),        # a pod by its address
    ("grafana.monitoring.svc.", PRIVATE),     # absolute, still cluster DNS
    ("llm.example", PRIVATE), ("llm.test", PRIVATE), ("nas.lan", PRIVATE),  # no public DNS
    ("api.openai.com", PUBLIC), ("generativelanguage.googleapis.com", PUBLIC),
    ("models.ai", PUBLIC), ("api.mistral.ai", PUBLIC), ("llm.corp.dev", PUBLIC),
])
def test_a_name_the_clusters_resolver_could_complete_is_cluster_internal(host, kind):
    from function.contract.destinations import classify
    assert classify(host)[0] == kind


def test_names_under_a_clusters_own_domain_are_cluster_internal():
    from function.contract.destinations import classify
    host = "grafana.monitoring.svc.k8s.corp.example.com"
    assert classify(host)[0] == PUBLIC  # under a public domain, by default
    kind, why = classify(host, "k8s.corp.example.com")
    assert kind == PRIVATE and "*.k8s.corp.example.com" in why
    # A front door says its domain on its InferenceCluster; its route leaves the name out.
    custom = copy.deepcopy(CLOSED)
    custom["spec"]["clusterDomain"] = "k8s.corp.example.com"
    url = f"http://{host}:8000"
    rsp = run(service(), [[endpoint("a", url)]], door=[custom])
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "NoServingEndpoints")
    assert "cluster-internal name" in routed(rsp).message and served(rsp) == set()
    assert served(run(service(), [[endpoint("a", url)]], door=[CLOSED])) != set()


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data",   # the instance's credentials
    "http://2852039166/",                        # the same address, as one number
    "https://kubernetes.default.svc",            # the front door's own API server
    "http://metadata.google.internal/computeMetadata/v1",
])
def test_an_endpoint_at_a_metadata_service_or_the_api_server_is_invalid(url):
    status, reason, message = valid(endpoint("sneaky", url))
    assert (status, reason) == (FALSE, "DeniedDestination"), message
    assert "no front door sends there" in message


def test_an_ipv6_literal_such_as_the_ec2_metadata_service_is_not_a_url_we_accept():
    status, reason, _ = valid(endpoint("sneaky", "http://[fd00:ec2::254]/"))
    assert (status, reason) == (FALSE, "InvalidURL")


def test_a_metadata_endpoint_is_left_out_of_the_route_even_where_10_8_is_allowed():
    rsp = run(service(), [[endpoint("a", "http://169.254.169.254")]])
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "NoServingEndpoints")
    assert "no front door sends there" in routed(rsp).message and served(rsp) == set()


@pytest.mark.parametrize("url", [
    "http://10.127.255.1:8000",            # the e2e fallback simulator's address
    "http://127.0.0.1:19000",              # the front door's own Envoy admin
    "http://100.64.1.1",                   # CGNAT
    "http://vllm.models.svc.cluster.local:8000",
    "http://prometheus-k8s.monitoring:9090",    # <service>.<namespace>, completed by the resolver
    "http://vault.vault:8200",
])
def test_a_private_endpoint_is_refused_by_a_front_door_that_does_not_allow_it(url):
    rsp = run(service(), [[endpoint("a", url)]], door=[CLOSED])
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "NoServingEndpoints")
    assert "ModelEndpoint a (" in routed(rsp).message
    assert "sends there only when its InferenceCluster's spec.frontDoor." \
        "allowedDestinations lists it" in routed(rsp).message
    assert served(rsp) == set()


def test_an_admin_allowlist_opens_exactly_what_it_names():
    allowing = door(allowedDestinations={"cidrs": ["10.127.255.1/32"],
                                         "hostnames": ["*.models.svc.cluster.local"]})
    eps = [endpoint("sim", "http://10.127.255.1:8000", {"app": "a"}),
           endpoint("next", "http://10.127.255.2:8000", {"app": "a"}),
           endpoint("vllm", "http://vllm.models.svc.cluster.local:8000", {"app": "a"}),
           endpoint("other", "http://vllm.other.svc.cluster.local:8000", {"app": "a"})]
    rsp = run(service(), [eps], door=[allowing])
    assert served(rsp) == {"10.127.255.1:8000", "vllm.models.svc.cluster.local:8000"}
    assert "ModelEndpoint next (10.127.255.2 is in 10.0.0.0/8" in routed(rsp).message
    assert "ModelEndpoint other (vllm.other.svc.cluster.local is a cluster-internal" \
        in routed(rsp).message


def test_a_private_endpoint_is_valid_but_says_who_must_allow_it():
    status, _, message = valid(endpoint("sim", "http://10.127.255.1:8000"))
    assert status == TRUE and "spec.frontDoor.allowedDestinations" in message


# --- the fleet's own gateways -----------------------------------------------------------


FLEET_GW = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
            "metadata": {"name": "eu"},
            "spec": {"gateway": {"name": "gw", "namespace": "gateway-system",
                                 "address": "http://127.0.0.3:10080"}, "nodePools": []}}


def test_a_replicas_endpoint_reaches_a_fleet_gateway_however_private_its_address():
    replica = endpoint("llama-0", "http://127.0.0.3:10080", {"app": "a"}, rewritePath="/",
                       replica="llama-0")
    rsp = run(service(), [[replica]], door=[CLOSED],
              required_extra={"inference-clusters": [CLOSED, FLEET_GW]})
    assert routed(rsp).status == TRUE and served(rsp) == {"127.0.0.3:10080"}


def test_only_a_replicas_endpoint_may_name_a_fleet_gateway_at_a_private_address():
    plain = endpoint("gw", "http://127.0.0.3:10080", {"app": "a"})
    rsp = run(service(), [[plain]], door=[CLOSED],
              required_extra={"inference-clusters": [CLOSED, FLEET_GW]})
    assert routed(rsp).reason == "NoServingEndpoints" and served(rsp) == set()


def test_a_replicas_endpoint_elsewhere_is_checked_like_any_other():
    replica = endpoint("llama-0", "http://127.0.0.1:19000", {"app": "a"}, replica="llama-0")
    rsp = run(service(), [[replica]], door=[CLOSED],
              required_extra={"inference-clusters": [CLOSED, FLEET_GW]})
    assert routed(rsp).reason == "NoServingEndpoints" and served(rsp) == set()


# --- reserved headers -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["x-modelplane-replica", "X-Modelplane-Replica",
                                  "x-modelplane-anything", "Connection", "Keep-Alive", "TE",
                                  "Trailer", "Transfer-Encoding", "Upgrade", "Host",
                                  "Proxy-Authorization", "Authorization", "x-envoy-original-path"])
def test_an_endpoint_may_not_set_a_reserved_header(name):
    me = endpoint("sneaky", "https://api.example.com",
                  requestHeaders=[{"name": name, "value": "other-team/llama-0"}])
    status, reason, _ = valid(me)
    assert (status, reason) == (FALSE, "ReservedHeader")
    rsp = run(service(), [[me]])
    assert served(rsp) == set()


@pytest.mark.parametrize("value", ["ml\r\nx-modelplane-replica: other-team/llama-0", "ml\x00",
                                   "\u0455ql", " padded"], ids=["crlf", "nul", "not-ascii", "padded"])
def test_a_header_value_or_model_name_is_printable_ascii_only(value):
    # A line break in a value the route carries would end the header and start another.
    me = endpoint("sneaky", "https://api.example.com",
                  requestHeaders=[{"name": "x-team", "value": value}])
    assert valid(me)[:2] == (FALSE, "InvalidSpec")
    assert served(run(service(), [[me]])) == set()
    for ms in (service(modelName=value), service(modelName="llama", loraAdapters=[value]),
               service(rules=[{"name": "r", "matches": [{"headers": [
                   {"name": "x-team", "value": value}]}],
                   "endpoints": [{"selector": {"matchLabels": {"app": "a"}}}]}])):
        assert routed(run(ms, [[endpoint("a")]])).reason == "InvalidSpec"


def test_printable_header_values_and_model_names_are_accepted():
    me = endpoint("ok", "https://api.example.com",
                  requestHeaders=[{"name": "x-team", "value": "ML team (gold) ~ 1/2"},
                                  {"name": "x-empty", "value": ""}])
    assert valid(me)[0] == TRUE
    ms = service(modelName="meta-llama/Llama-3.1-8B-Instruct", loraAdapters=["sql:v2"])
    assert routed(run(ms, [[endpoint("a")]])).status == TRUE


def test_the_replica_host_comes_only_from_spec_replica_and_the_endpoints_namespace():
    replica = endpoint("llama-0", "http://10.0.0.1", {"app": "a"}, replica="llama-0")
    provider = endpoint("provider", "https://api.example.com", {"app": "a"},
                        requestHeaders=[{"name": "x-org", "value": "acme"}])
    rsp = run(service(), [[replica, provider]])
    refs = {r["name"].split("-")[1]: r.get("filters") for r in backend_refs(rsp)}
    hosts = {o["metadata"]["name"].split("-")[1]: o["spec"]["endpoints"][0]["hostname"]
             for o in desired(rsp).values() if o["kind"] == "Backend"}
    assert hosts == {"llama": f"llama-0.{NS}.replica.modelplane.internal",
                     "provider": "api.example.com"}  # a DNS name: its own Host
    assert refs["llama"] is None  # no filter of its own: it shares the rule's cluster
    assert refs["provider"] == [{"type": "RequestHeaderModifier", "requestHeaderModifier": {
        "set": [{"name": "x-org", "value": "acme"}]}}]


def test_a_replicas_endpoint_cannot_rewrite_to_another_replicas_path():
    me = endpoint("llama-0", "http://10.0.0.1", replica="llama-0",
                  rewritePath="/other-team/llama-0")
    assert valid(me)[:2] == (FALSE, "InvalidReplica")


def test_a_service_rule_may_not_match_a_reserved_header():
    ms = service(rules=[{"name": "pin", "matches": [{"headers": [
        {"name": "x-modelplane-replica", "value": "other-team/llama-0"}]}],
        "endpoints": [{"selector": {"matchLabels": {"app": "a"}}}]}])
    rsp = fn.run_function(request(ms))
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "InvalidSpec")
    assert "reserved" in routed(rsp).message


def test_the_reserved_headers_are_the_xrds():
    import sys

    from builders import ROOT
    sys.path.insert(0, str(ROOT / "hack"))
    import gen_xrds

    from function.contract import destinations
    rule, _ = gen_xrds.header_not_reserved("self")
    for name in destinations.RESERVED_HEADERS:
        assert f"'{name}'" in rule
    for prefix in destinations.RESERVED_PREFIXES:
        assert f"startsWith('{prefix}')" in rule


# --- credentials from Secrets -----------------------------------------------------------


def test_a_providers_key_comes_from_a_secret_onto_its_own_backend_only():
    keyed = endpoint("openai", "https://api.openai.com", {"app": "a"},
                     auth={"secretRef": {"name": "openai"}})
    other = endpoint("other", "https://api.example.com", {"app": "a"})
    rsp = run(service(), [[keyed, other]])
    filters = [o for o in desired(rsp).values() if o["kind"] == "HTTPRouteFilter"
               and "credentialInjection" in o["spec"]]
    (cred,) = filters
    assert cred["spec"]["credentialInjection"] == {
        "header": "Authorization", "overwrite": True,  # a client's own never gets through
        "credential": {"valueRef": {"group": "", "kind": "Secret", "name": "openai"}}}
    uses = {r["name"]: [f for f in r.get("filters", []) if f["type"] == "ExtensionRef"]
            for r in backend_refs(rsp)}
    assert [n for n, f in uses.items() if f] == [n for n in uses if "-openai-" in n]
    assert uses[next(n for n in uses if "-openai-" in n)][0]["extensionRef"]["name"] == \
        cred["metadata"]["name"]


def test_a_credential_header_may_not_be_set_in_plain_text_too():
    me = endpoint("anthropic", "https://api.anthropic.com",
                  auth={"secretRef": {"name": "k"}, "header": "x-api-key"},
                  requestHeaders=[{"name": "X-Api-Key", "value": "sk-plain"}])
    assert valid(me)[:2] == (FALSE, "InvalidAuth")


# --- who may use a front door, and who may call a service -------------------------------


def test_a_labelled_cluster_is_no_front_door_until_its_platform_team_admits_it():
    rsp = run(service(), [[endpoint("a")]], door=[door(frontDoor=None)])
    assert (routed(rsp).status, routed(rsp).reason) == (FALSE, "NoGateway")
    assert "spec.frontDoor.enabled" in routed(rsp).message
    assert not [o for o in desired(rsp).values() if o["kind"] == "HTTPRoute"]


def test_a_named_cluster_is_no_front_door_until_its_platform_team_admits_it():
    workload = door(frontDoor=None)
    workload["metadata"] = {"name": "gpu-farm", "labels": {}}
    rsp = run(service(gateway={"clusterName": "gpu-farm"}), [[endpoint("a")]], door=[workload])
    assert routed(rsp).reason == "NoGateway" and "gpu-farm" in routed(rsp).message


def test_a_front_door_serves_only_the_namespaces_it_lists():
    theirs = door(namespaces=["other-team"], allowedDestinations={"cidrs": ["10.0.0.0/8"]})
    rsp = run(service(), [[endpoint("a")]], door=[theirs])
    assert routed(rsp).reason == "NoGateway"
    # It says ours is not listed, and not which tenants are (#33 finding 11).
    assert f"does not admit namespace {NS} (spec.frontDoor.namespaces)" in routed(rsp).message
    assert "other-team" not in routed(rsp).message
    ours = door(namespaces=[NS, "other-team"], allowedDestinations={"cidrs": ["10.0.0.0/8"]})
    assert routed(run(service(), [[endpoint("a")]], door=[ours])).status == TRUE


def test_a_service_with_api_keys_gets_a_security_policy_on_its_route():
    rsp = run(service(authentication={"apiKeys": {"secretRef": {"name": "llama-clients"}}}),
              [[endpoint("a")]])
    (policy,) = [o for o in desired(rsp).values() if o["kind"] == "SecurityPolicy"]
    route = desired(rsp)["control-plane-route"]
    assert policy["spec"] == {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                        "name": route["metadata"]["name"]}],
        "apiKeyAuth": {"credentialRefs": [{"group": "", "kind": "Secret",
                                           "name": "llama-clients"}],
                       "extractFrom": [{"headers": ["Authorization"]}], "sanitize": True}}
    assert policy["metadata"]["namespace"] == NS


def test_the_secret_backed_objects_validate_against_the_real_crds(tools, tmp_path):
    from test_modelservice_render import ROUTE_KINDS, validate
    keyed = endpoint("openai", "https://api.openai.com", {"app": "a"},
                     auth={"secretRef": {"name": "openai"}})
    rsp = run(service(authentication={"apiKeys": {"secretRef": {"name": "clients"}}}),
              [[keyed]])
    docs = [d for d in desired(rsp).values() if d.get("kind") in ROUTE_KINDS]
    assert {"SecurityPolicy", "HTTPRouteFilter"} <= {d["kind"] for d in docs}
    validate(tools, tmp_path, docs)
