"""Serving pods and the routing layers that decorate the backends' output."""

from __future__ import annotations

from composer_support import (
    LOCAL,
    REMOTE,
    cluster,
    compose,
    engine_container,
    gang,
    pod_templates,
    replica,
    standalone,
)

from function.composer import routing
from function.composer.composed import Composed, Role
from function.composer.routing import Routing
from function.contract.api import LABEL_SERVING

PD_ENGINES = (dict(standalone("prefill"), phase="Prefill"),
              dict(standalone("decode", copies=2), phase="Decode"))


def serving_label(pod):
    return pod["metadata"]["labels"].get(LABEL_SERVING)


# --- which pods serve --------------------------------------------------------------


def test_workers_never_carry_the_serving_label():
    lead, work = pod_templates(compose(replica(gang(nodes=3))).one("LeaderWorkerSet"))
    assert serving_label(lead) == "llama-us-east-1-0"
    assert serving_label(work) is None


def test_standalone_pods_carry_the_serving_label():
    pod = compose(replica()).one("Deployment")["spec"]["template"]
    assert serving_label(pod) == "llama-us-east-1-0"


def test_only_serving_pods_expose_port_8000_and_a_health_probe():
    out = compose(replica(gang(), standalone("s")))
    lead, work = pod_templates(out.one("LeaderWorkerSet"))
    for pod in (lead, out.one("Deployment")["spec"]["template"]):
        c = engine_container(pod)
        assert c["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
        assert c["readinessProbe"] == {"httpGet": {"path": "/health", "port": 8000},
                                       "timeoutSeconds": 5}
    worker = engine_container(work)
    assert "ports" not in worker and "readinessProbe" not in worker


# --- Unified: Service + HTTPRoute -------------------------------------------------------


def test_one_service_selects_every_serving_pod_of_the_replica():
    out = compose(replica(gang("g"), standalone("s", copies=2)))
    (svc,) = out.of_kind("Service")
    assert svc["spec"]["selector"] == {LABEL_SERVING: "llama-us-east-1-0"}
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http",
                                     "protocol": "TCP"}]
    serving = [p for k in ("Deployment", "LeaderWorkerSet") for w in out.of_kind(k)
               for p in pod_templates(w) if serving_label(p)]
    assert len(serving) == 2  # the Standalone pods and the gang's leader
    for pod in serving:
        assert all(pod["metadata"]["labels"].get(k) == v
                   for k, v in svc["spec"]["selector"].items())


def test_a_leaderworkerset_never_shares_a_name_with_a_service():
    # LWS creates a headless Service named after itself and skips it if one
    # exists, which would leave the gang without its leader's DNS name.
    names_by_kind: dict[str, set[str]] = {"LeaderWorkerSet": set(), "Service": set()}
    for name in ("a", "a-svc", "llama-us-east-1-0", "x" * 63):
        for engine in ("svc", "vllm", "lws"):
            out = compose(replica(gang(engine), name=name))
            for kind in names_by_kind:
                names_by_kind[kind] |= {m["metadata"]["name"] for m in out.of_kind(kind)}
    assert not names_by_kind["LeaderWorkerSet"] & names_by_kind["Service"]
    assert all(n.endswith("-lws") for n in names_by_kind["LeaderWorkerSet"])
    assert all(n.endswith("-svc") for n in names_by_kind["Service"])


def test_the_route_attaches_to_the_clusters_gateway():
    route = compose(replica()).path_route()
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io",
                                            "kind": "Gateway", "name": "inference-gateway",
                                            "namespace": "gateway-system"}]


def test_the_route_matches_a_prefix_unique_to_the_replica_and_strips_it():
    out = compose(replica(name="llama-us-east-1-0", namespace="team-a"))
    (rule,) = out.path_route()["spec"]["rules"]
    assert rule["matches"] == [
        {"path": {"type": "PathPrefix", "value": "/team-a/llama-us-east-1-0"}}]
    assert rule["filters"] == [{"type": "URLRewrite", "urlRewrite": {"path": {
        "type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}]
    other = compose(replica(name="llama-us-east-1-0", namespace="team-b")).path_route()
    assert other["spec"]["rules"][0]["matches"] != rule["matches"]


def test_the_route_sends_to_the_service_and_never_times_out_a_stream():
    out = compose(replica())
    for rule in [r for route in out.of_kind("HTTPRoute") for r in route["spec"]["rules"]]:
        assert rule["backendRefs"] == [{"group": "", "kind": "Service",
                                        "name": out.one("Service")["metadata"]["name"],
                                        "port": 8000}]
        assert rule["timeouts"] == {"request": "0s"}


def test_a_second_route_reaches_the_replica_by_its_fleet_host_at_any_path_unrewritten():
    # What a ModelService's route sends (through the replica's ModelEndpoint), so
    # every replica is reached at the same path: Envoy cannot rewrite per backend.
    out = compose(replica(name="llama-us-east-1-0", namespace="team-a"))
    (by_path,) = out.path_route()["spec"]["rules"]
    fleet = out.fleet_route()
    assert fleet["spec"]["hostnames"] == ["llama-us-east-1-0.team-a.replica.modelplane.internal"]
    (by_host,) = fleet["spec"]["rules"]
    assert by_host["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert "filters" not in by_host
    assert by_host["backendRefs"] == by_path["backendRefs"]
    assert fleet["spec"]["parentRefs"] == out.path_route()["spec"]["parentRefs"]
    assert fleet["metadata"]["name"] != out.path_route()["metadata"]["name"]


def test_the_route_answers_for_the_replicas_hostnames_when_it_names_any():
    assert "hostnames" not in compose(replica()).path_route()["spec"]
    mr = replica()
    mr["spec"]["serving"]["hostnames"] = ["llm.example.com", "*.models.example.com"]
    assert compose(mr).path_route()["spec"]["hostnames"] == [
        "llm.example.com", "*.models.example.com"]


def test_the_endpoint_is_the_gateway_address_plus_the_prefix():
    out = compose(replica(standalone(pool="l4-4x"), cluster=REMOTE, name="m-0"))
    assert out.status["endpoint"] == "https://llm.eu-west-1.example.com/ml-team/m-0"


def test_an_address_without_a_scheme_gets_http():
    ic = cluster(LOCAL, gateway={"name": "gw", "namespace": "gw-ns", "address": "10.0.0.1:8080"})
    assert compose(replica(), ic).status["endpoint"] == \
        "http://10.0.0.1:8080/ml-team/llama-us-east-1-0"


def test_a_gateway_without_an_address_still_routes_but_publishes_no_endpoint():
    ic = cluster(LOCAL, gateway={"name": "gw", "namespace": "gw-ns"})
    out = compose(replica(), ic)
    assert "endpoint" not in out.status
    assert {r["spec"]["parentRefs"][0]["name"] for r in out.of_kind("HTTPRoute")} == {"gw"}


# --- PrefillDecode (issue #5; tests/test_composer_pd.py has the rest) ---------------------


def test_prefill_decode_with_a_decode_engine_on_8000_composes_workloads_but_no_route():
    # PD_ENGINES' decode engine sets --port 8000, the routing sidecar's port: fail closed.
    out = compose(replica(*PD_ENGINES, mode="PrefillDecode"))
    assert len(out.of_kind("Deployment")) == 2
    assert not out.of_kind("Service") and not out.of_kind("HTTPRoute")
    status, reason, message = out.condition("Routed")
    assert (status, reason) == ("False", "DecodePortConflict")
    assert "set --port to another port" in message
    assert "endpoint" not in out.status
    assert not out.fatal


def test_a_routing_layer_decorates_the_serving_pod_templates_it_is_given(monkeypatch):
    """The interface issue #5 builds on: a layer changes serving pods in place and
    adds its own objects; the workloads are applied with its changes."""

    class SidecarRouting:
        mode = "PrefillDecode"

        def route(self, replica, cluster, backends):
            for pod in backends.serving_pods:
                pod.template["spec"]["containers"].append({"name": "sidecar", "image": "s:1"})
                pod.template["metadata"]["labels"]["example.com/phase"] = pod.engine.phase.lower()
            pool = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
                    "metadata": {"name": "pool", "namespace": replica.namespace}, "spec": {}}
            return Routing(objects=[Composed("inferencepool", pool, Role.ROUTE)],
                           endpoint="http://x/y")

    monkeypatch.setitem(routing.LAYERS, ("PrefillDecode", "EndpointPicker"), SidecarRouting())
    out = compose(replica(*PD_ENGINES, mode="PrefillDecode"))
    for dep in out.of_kind("Deployment"):
        pod = dep["spec"]["template"]
        assert [c["name"] for c in pod["spec"]["containers"]] == ["engine", "sidecar"]
        assert pod["metadata"]["labels"]["example.com/phase"] in ("prefill", "decode")
    assert "inferencepool" in out.desired
    assert out.status["endpoint"] == "http://x/y"


def test_serving_pods_of_a_gang_are_its_leaders_only(monkeypatch):
    seen = []

    class Spy:
        mode = "Unified"

        def route(self, replica, cluster, backends):
            seen.extend((p.engine.name, p.member.role) for p in backends.serving_pods)
            return Routing()

    monkeypatch.setitem(routing.LAYERS, ("Unified", "Service"), Spy())
    compose(replica(gang("g"), standalone("s")))
    assert seen == [("g", "Leader"), ("s", "Standalone")]
