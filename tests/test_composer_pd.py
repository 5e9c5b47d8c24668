"""PrefillDecode (issue #5): role labels, the routing sidecar, KV plumbing, the
InferencePool and its endpoint picker, the route, fail-closed ports, readiness."""

from __future__ import annotations

import copy
import hashlib

import pytest
import yaml
from cel_expr_python import cel
from composer_support import (
    REMOTE,
    compose,
    engine_container,
    gang,
    pod_templates,
    replica,
    standalone,
    template,
)
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import given, settings
from hypothesis import strategies as st

from function.composer import memo, naming, routing
from function.composer.kinds import KINDS, judge
from function.composer.routing import Routing, serving_config
from function.composer.routing.engine_flags import engine_kind, read_flag, words
from function.composer.routing.epp import ANNOTATION_CONFIG_SHA
from function.contract.api import LABEL_SERVING
from function.contract.enums import KvConnector

PD = "PrefillDecode"
VLLM = {"command": ["vllm", "serve"]}
SHELL = {"command": ["/bin/sh", "-c"]}
H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA-H100-80GB"'


def prefill(*args: str, copies: int = 1, **fields) -> dict:
    return dict(standalone("prefill", copies=copies,
                           template=template(**{**VLLM, "args": ["m", *args], **fields})),
                phase="Prefill")


def decode(*args: str, copies: int = 2, **fields) -> dict:
    return dict(standalone("decode", copies=copies,
                           template=template(**{**VLLM, "args": ["m", *args], **fields})),
                phase="Decode")


def gang_engine(name: str, phase: str, leader_args: str, worker_args: str = "exec vllm serve m "
                "--headless", **leader_fields) -> dict:
    e = gang(name, pool="h100-8x", nodes=2,
             leader=template(**{**SHELL, "args": [leader_args], **leader_fields}),
             worker=template(**{**SHELL, "args": [worker_args]}))
    return dict(e, phase=phase)


def pd(*engines: dict, connector: str | None = None, hostnames: list | None = None,
       **kw) -> dict:
    mr = replica(*(engines or (prefill(), decode("--port=8200"))), mode=PD, **kw)
    if connector:
        mr["spec"]["serving"]["kvConnector"] = connector
    if hostnames:
        mr["spec"]["serving"]["hostnames"] = hostnames
    return mr


def workload(out, engine: str) -> dict:
    (w,) = [m for m in out.manifests().values() if m["kind"] in ("Deployment", "LeaderWorkerSet")
            and m["metadata"]["labels"].get(naming.LABEL_ENGINE) == engine]
    return w


def pods_of(out, engine: str) -> list[dict]:
    return pod_templates(workload(out, engine))


def env(pod: dict) -> dict[str, dict]:
    return {e["name"]: e for e in engine_container(pod).get("env") or []}


def sidecars(pod: dict) -> list[dict]:
    return pod["spec"].get("initContainers") or []


def routed(out) -> bool:
    return bool(out.of_kind("InferencePool"))


def epp_config(out) -> dict:
    return yaml.safe_load(out.one("ConfigMap")["data"]["epp-config.yaml"])


def without_layer(monkeypatch, mr: dict):
    """The same replica composed with a routing layer that decorates nothing."""
    class Bare:
        mode = PD

        def route(self, replica, cluster, backends):
            return Routing()

    with monkeypatch.context() as m:
        m.setitem(routing.LAYERS, (PD, "EndpointPicker"), Bare())
        memo.COMPOSED.clear()  # the composer's code changed: forget what it composed
        out = compose(mr)
    memo.COMPOSED.clear()
    return out


# --- reading engine flags ---------------------------------------------------------------


@pytest.mark.parametrize("container, port", [
    ({"args": ["m", "--port", "8200"]}, 8200),
    ({"args": ["m", "--port=8200"]}, 8200),
    ({"command": ["vllm", "serve", "m", "--port", "8300"]}, 8300),
    ({"command": ["python", "-m", "sglang.launch_server", "--port=30000"]}, 30000),
    ({"command": ["sh", "-c"], "args": ["exec vllm serve m --port 8200 --block-size=32"]}, 8200),
    ({"command": ["sh", "-c", "vllm serve m --port=8201"]}, 8201),
    ({"args": ["m", "--port", "8000", "--port=8400"]}, 8400),  # the last wins, as argparse
    ({"args": ["m", "--data-parallel-rpc-port=13345", "--port=8200"]}, 8200),
])
def test_the_engine_port_is_read_from_command_or_args_in_every_form(container, port):
    assert read_flag(words(container), ("--port",)).value == port


@pytest.mark.parametrize("container", [
    {"args": ["m", "--port", "$PORT"]}, {"args": ["m", "--port=${PORT}"]},
    {"args": ["m", "--port"]}, {"args": ["m", "--port="]}, {"args": ["m", "--port=99999"]},
    {"command": ["sh", "-c", "vllm serve m --port \"$P\""]},
])
def test_a_port_that_is_not_a_literal_number_is_unreadable(container):
    flag = read_flag(words(container), ("--port",))
    assert flag.unreadable and not flag.absent


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.one_of(st.text(max_size=40), st.sampled_from(
    ["--port", "--port=", "--block-size", "--page-size=7", "8200", "'", '"', "sh -c"]),
    st.integers(), st.none()), max_size=12))
def test_reading_flags_never_fails_on_any_words(items):
    argv = words({"args": items, "command": items[:2]})
    for names in (("--port",), ("--block-size", "--page-size")):
        flag = read_flag(argv, names)
        assert flag.value is None or 1 <= flag.value <= 1 << 16
    engine_kind({"args": items, "image": items[0] if items else None})


def test_a_shell_string_with_an_unbalanced_quote_is_still_read():
    assert read_flag(words({"args": ["vllm serve m --port 8200 --x 'oops"]}),
                     ("--port",)).value == 8200


# --- role labels --------------------------------------------------------------------------


def test_serving_pods_carry_their_engines_role_and_keep_every_other_label(monkeypatch):
    mr = pd(prefill(), gang_engine("decode", "Decode", "exec vllm serve m --port=8200"))
    out, bare = compose(mr), without_layer(monkeypatch, mr)
    (pre,) = pods_of(out, "prefill")
    lead, work = pods_of(out, "decode")
    assert pre["metadata"]["labels"]["llm-d.ai/role"] == "prefill"
    assert lead["metadata"]["labels"]["llm-d.ai/role"] == "decode"
    assert "llm-d.ai/role" not in work["metadata"]["labels"]  # workers never serve
    for engine in ("prefill", "decode"):
        for ours, theirs in zip(pods_of(out, engine), pods_of(bare, engine), strict=True):
            labels = dict(ours["metadata"]["labels"])
            labels.pop("llm-d.ai/role", None)
            assert labels == theirs["metadata"]["labels"]  # serving, workload, ... untouched


def test_the_role_label_replaces_a_users_conflicting_value():
    dec = decode("--port=8200")
    dec["members"][0]["template"]["metadata"] = {"labels": {"llm-d.ai/role": "prefill",
                                                            "team": "a"}}
    (pod,) = pods_of(compose(pd(prefill(), dec)), "decode")
    assert pod["metadata"]["labels"]["llm-d.ai/role"] == "decode"
    assert pod["metadata"]["labels"]["team"] == "a"


# --- the routing sidecar ------------------------------------------------------------------


def test_the_sidecar_fronts_standalone_decode_pods_only():
    out = compose(pd(prefill("--port", "8000"), decode("--port", "8200")))
    (pre,), (dec,) = pods_of(out, "prefill"), pods_of(out, "decode")
    assert sidecars(pre) == []
    (proxy,) = sidecars(dec)
    assert proxy["name"] == "routing-proxy"
    assert proxy["restartPolicy"] == "Always"  # a native sidecar
    assert proxy["image"].startswith("ghcr.io/llm-d/llm-d-routing-sidecar:")
    assert proxy["args"] == ["--port=8000", "--vllm-port=8200", "--kv-connector=nixlv2",
                             "--secure-proxy=false"]
    assert proxy["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    engine = engine_container(dec)
    assert engine["ports"] == [{"name": "engine", "containerPort": 8200, "protocol": "TCP"}]
    assert engine["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8200}
    assert engine["args"] == ["m", "--port", "8200"]  # flags are never touched
    # The prefill engine keeps serving 8000 itself.
    assert engine_container(pre)["ports"][0]["containerPort"] == 8000


def test_a_decode_gang_gets_the_sidecar_on_its_leader_from_a_shell_string_port():
    out = compose(pd(prefill(), gang_engine(
        "decode", "Decode", "exec vllm serve m --port=8200 --data-parallel-size=16")))
    lead, work = pods_of(out, "decode")
    assert [c["name"] for c in sidecars(lead)] == ["routing-proxy"]
    assert "--vllm-port=8200" in sidecars(lead)[0]["args"]
    assert sidecars(work) == [] and "ports" not in engine_container(work)
    assert routed(out)


def test_a_prefill_gang_gets_no_sidecar_and_its_leader_serves_the_pool():
    out = compose(pd(gang_engine("prefill", "Prefill", "exec vllm serve m --port 8000"),
                     decode("--port=8200")))
    lead, work = pods_of(out, "prefill")
    assert sidecars(lead) == [] and sidecars(work) == []
    assert lead["metadata"]["labels"][LABEL_SERVING] == "llama-us-east-1-0"
    assert routed(out)


def test_the_port_in_command_form_is_read_too():
    dec = dict(standalone("decode", template=template(
        command=["vllm", "serve", "m", "--port", "8300"], args=[])), phase="Decode")
    (pod,) = pods_of(compose(pd(prefill(), dec)), "decode")
    assert "--vllm-port=8300" in sidecars(pod)[0]["args"]


# --- fail closed ----------------------------------------------------------------------------


@pytest.mark.parametrize("args, reason", [
    ((), "DecodePortConflict"),                    # vLLM's default port is 8000
    (("--port=8000",), "DecodePortConflict"),
    (("--port", "8000"), "DecodePortConflict"),
    (("--port", "$DECODE_PORT"), "EnginePortUnreadable"),
    (("--port",), "EnginePortUnreadable"),
])
def test_a_decode_engine_that_would_take_the_sidecars_port_gets_no_route(args, reason):
    out = compose(pd(prefill(), decode(*args)))
    assert not routed(out) and not out.of_kind("HTTPRoute") and not out.of_kind("ConfigMap")
    assert len(out.of_kind("Deployment")) == 2  # the engines, not the endpoint picker
    status, got, message = out.condition("Routed")
    assert (status, got) == ("False", reason)
    assert "--port" in message and "decode engine 'decode'" in message
    (pod,) = pods_of(out, "decode")
    assert sidecars(pod) == []
    assert engine_container(pod)["args"] == ["m", *args]  # never injected
    assert "endpoint" not in out.status and not out.fatal


def test_a_prefill_engine_off_port_8000_gets_no_route():
    out = compose(pd(prefill("--port=8100"), decode("--port=8200")))
    status, reason, message = out.condition("Routed")
    assert (status, reason) == ("False", "PrefillPortMismatch")
    assert "--port=8000" in message and not routed(out)


def test_a_prefill_engine_without_a_port_serves_the_default():
    assert routed(compose(pd(prefill(), decode("--port=8200"))))


def test_every_problem_is_named_in_one_message():
    out = compose(pd(prefill("--port=$P"), decode()))
    _, reason, message = out.condition("Routed")
    assert reason == "DecodePortConflict"
    assert "decode engine 'decode'" in message and "prefill engine 'prefill'" in message


def test_a_route_composed_before_goes_away_when_the_port_breaks():
    good = compose(pd(prefill(), decode("--port=8200")))
    bad = compose(pd(prefill(), decode("--port=8000")), observed=good.desired)
    assert "httproute" not in bad.desired and "inferencepool" not in bad.desired


# --- KV plumbing ----------------------------------------------------------------------------


def test_nixl_side_channel_reaches_every_pod_and_the_user_value_wins():
    out = compose(pd(gang_engine("prefill", "Prefill", "exec vllm serve m",
                                 env=[{"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": "5557"}]),
                     gang_engine("decode", "Decode", "exec vllm serve m --port=8200")))
    p_lead, p_work = pods_of(out, "prefill")
    for pod in pods_of(out, "decode") + [p_work]:
        variables = env(pod)
        assert variables["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"] == {
            "fieldRef": {"fieldPath": "status.podIP"}}
        assert variables["VLLM_NIXL_SIDE_CHANNEL_PORT"]["value"] == "5600"
    # The user's template set the port on the prefill leader: kept, never duplicated.
    assert env(p_lead)["VLLM_NIXL_SIDE_CHANNEL_PORT"]["value"] == "5557"
    names = [e["name"] for e in engine_container(p_lead)["env"]]
    assert len(names) == len(set(names))
    # modelplane's gang variables stay first, so the user's may refer to them.
    assert names[:2] == ["MODELPLANE_LEADER_ADDRESS", "MODELPLANE_RANK"]


def test_a_user_set_side_channel_host_is_never_overridden():
    mine = {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "value": "10.0.0.9"}
    (pod,) = pods_of(compose(pd(prefill(env=[mine]), decode("--port=8200"))), "prefill")
    assert env(pod)["VLLM_NIXL_SIDE_CHANNEL_HOST"] == mine


def test_shared_memory_is_mounted_once_in_every_pod():
    out = compose(pd(gang_engine("prefill", "Prefill", "exec vllm serve m"),
                     gang_engine("decode", "Decode", "exec vllm serve m --port=8200")))
    for engine in ("prefill", "decode"):
        for pod in pods_of(out, engine):
            shm = [v for v in pod["spec"]["volumes"] if v["name"] == "shm"]
            assert shm == [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
            mounts = [m for m in engine_container(pod)["volumeMounts"]
                      if m["mountPath"] == "/dev/shm"]
            assert mounts == [{"name": "shm", "mountPath": "/dev/shm"}]


def test_decorating_twice_changes_nothing():
    from function.composer.backends import compose_backends
    from function.composer.model import parse_cluster, parse_replica
    from function.composer.routing.prefill_decode import PrefillDecodeRouting
    from composer_support import FLEET

    mr = pd(prefill(), gang_engine("decode", "Decode", "exec vllm serve m --port=8200"))
    rep = parse_replica(mr)
    clu = parse_cluster(FLEET[rep.cluster], rep)
    backends = compose_backends(rep, clu)
    layer = PrefillDecodeRouting()
    first = layer.route(rep, clu, backends)
    once = copy.deepcopy([p.template for p in backends.pod_templates])
    second = layer.route(rep, clu, backends)
    assert [p.template for p in backends.pod_templates] == once
    assert [c.manifest for c in first.objects] == [c.manifest for c in second.objects]


# --- connectors ------------------------------------------------------------------------------


@pytest.mark.parametrize("connector, proxy", [(None, "nixlv2"), ("nixl", "nixlv2"),
                                              ("lmcache", "shared-storage")])
def test_vllm_connectors_map_onto_the_sidecar(connector, proxy):
    out = compose(pd(prefill(), decode("--port=8200"), connector=connector))
    (pod,) = pods_of(out, "decode")
    assert f"--kv-connector={proxy}" in sidecars(pod)[0]["args"]
    assert ("VLLM_NIXL_SIDE_CHANNEL_HOST" in env(pod)) is (proxy == "nixlv2")


def test_every_connector_maps_onto_a_protocol_the_pinned_sidecar_accepts():
    # tests/harness/test_llmd_binaries.py checks SIDECAR_PROTOCOLS against the binary.
    emitted = {proxy for by_connector in serving_config.SIDECAR_CONNECTORS.values()
               for proxy in by_connector.values() if proxy is not None}
    assert emitted == set(serving_config.SIDECAR_PROTOCOLS)
    for by_connector in serving_config.SIDECAR_CONNECTORS.values():
        assert set(by_connector) == set(KvConnector)


def sglang(name: str, phase: str, *args: str) -> dict:
    return dict(standalone(name, template=template(
        image="lmsysorg/sglang:v0.5.4", command=["python3", "-m", "sglang.launch_server"],
        args=["--model-path", "m", *args])), phase=phase)


def test_mooncake_with_sglang_engines_speaks_sglangs_protocol():
    out = compose(pd(sglang("prefill", "Prefill", "--port", "8000", "--page-size", "64"),
                     sglang("decode", "Decode", "--port", "8200", "--page-size", "64"),
                     connector="mooncake"))
    (pod,) = pods_of(out, "decode")
    assert "--kv-connector=sglang" in sidecars(pod)[0]["args"]
    assert env(pod)["SGLANG_HOST_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert epp_config(out)["plugins"][3]["parameters"]["blockSizeTokens"] == 64
    assert not out.warnings


def test_nixl_with_sglang_engines_also_speaks_sglangs_protocol():
    out = compose(pd(sglang("prefill", "Prefill"), sglang("decode", "Decode", "--port=8200")))
    (pod,) = pods_of(out, "decode")
    assert "--kv-connector=sglang" in sidecars(pod)[0]["args"]


def test_mooncake_with_vllm_engines_has_no_sidecar_protocol_and_gets_no_route():
    out = compose(pd(prefill(), decode("--port=8200"), connector="mooncake"))
    status, reason, message = out.condition("Routed")
    assert (status, reason) == ("False", "KVConnectorUnsupported")
    assert "mooncake" in message and not routed(out)
    (pod,) = pods_of(out, "decode")
    assert sidecars(pod) == []


# --- the InferencePool, the endpoint picker, the route --------------------------------------


def test_the_pool_selects_both_engines_serving_pods_on_port_8000():
    out = compose(pd(prefill(), gang_engine("decode", "Decode", "exec vllm serve m --port=8200")))
    pool = out.one("InferencePool")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    selector = pool["spec"]["selector"]["matchLabels"]
    assert selector == {LABEL_SERVING: "llama-us-east-1-0"}
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    selected = [p for k in ("Deployment", "LeaderWorkerSet") for w in out.of_kind(k)
                for p in pod_templates(w)
                if all(p["metadata"]["labels"].get(k) == v for k, v in selector.items())]
    roles = sorted(p["metadata"]["labels"]["llm-d.ai/role"] for p in selected)
    assert roles == ["decode", "prefill"]  # no worker, no endpoint picker
    ref = pool["spec"]["endpointPickerRef"]
    svc = next(s for s in out.of_kind("Service") if s["metadata"]["name"] == ref["name"])
    assert ref == {"group": "", "kind": "Service", "name": svc["metadata"]["name"],
                   "port": {"number": 9002}, "failureMode": "FailClose"}
    assert {p["port"] for p in svc["spec"]["ports"]} == {9002, 9090}


def test_the_endpoint_picker_runs_against_its_pool_with_its_config():
    out = compose(pd())
    pool, cm = out.one("InferencePool"), out.one("ConfigMap")
    (epp,) = [d for d in out.of_kind("Deployment") if naming.LABEL_ENGINE not in
              d["metadata"]["labels"]]
    pod = epp["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    assert f"--pool-name={pool['metadata']['name']}" in c["args"]
    assert "--pool-namespace=ml-team" in c["args"]
    assert "--config-file=/config/epp-config.yaml" in c["args"]
    assert {p["containerPort"] for p in c["ports"]} == {9002, 9003, 9090}
    # The health services EPP v0.7.1 knows; with leader election any other is
    # SERVICE_UNKNOWN, and a liveness probe on it restarts every replica.
    assert c["readinessProbe"]["grpc"] == {"port": 9003, "service": "readiness"}
    assert c["livenessProbe"]["grpc"] == {"port": 9003, "service": "liveness"}
    assert pod["spec"]["volumes"] == [{"name": "config",
                                       "configMap": {"name": cm["metadata"]["name"]}}]
    assert pod["spec"]["serviceAccountName"] == out.one("ServiceAccount")["metadata"]["name"]
    assert LABEL_SERVING not in pod["metadata"]["labels"]
    svc = next(s for s in out.of_kind("Service")
               if s["metadata"]["name"] == pool["spec"]["endpointPickerRef"]["name"])
    assert all(pod["metadata"]["labels"].get(k) == v for k, v in svc["spec"]["selector"].items())


def test_the_endpoint_picker_may_read_and_nothing_more():
    out = compose(pd())
    role, binding = out.one("Role"), out.one("RoleBinding")
    assert not out.of_kind("ClusterRole") and not out.of_kind("ClusterRoleBinding")
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"]}
    assert granted == {("", "pods"), ("inference.networking.k8s.io", "inferencepools"),
                       ("inference.networking.x-k8s.io", "inferenceobjectives"),
                       ("inference.networking.x-k8s.io", "inferencemodelrewrites")}
    for rule in role["rules"]:
        assert sorted(rule["verbs"]) == ["get", "list", "watch"]
        assert "*" not in rule["apiGroups"] + rule["resources"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "namespace": "ml-team",
                                    "name": out.one("ServiceAccount")["metadata"]["name"]}]


def test_several_endpoint_pickers_elect_a_leader_with_only_that_added(monkeypatch):
    monkeypatch.setenv("MODELPLANE_EPP_REPLICAS", "2")
    out = compose(pd())
    epp = out.manifests()["epp"]
    assert epp["spec"]["replicas"] == 2
    assert "--ha-enable-leader-election" in epp["spec"]["template"]["spec"]["containers"][0][
        "args"]
    extra = [r for r in out.one("Role")["rules"]
             if r["apiGroups"] in (["coordination.k8s.io"],) or r["resources"] == ["events"]]
    assert [r["resources"] for r in extra] == [["leases"], ["events"]]


def test_the_epp_config_parses_and_names_every_plugin_its_profiles_use():
    config = epp_config(compose(pd()))
    assert config["apiVersion"] == "inference.networking.x-k8s.io/v1alpha1"
    assert config["kind"] == "EndpointPickerConfig"
    defined = {p.get("name") or p["type"] for p in config["plugins"]}
    assert len(defined) == len(config["plugins"])
    profiles = {p["name"]: [r["pluginRef"] for r in p["plugins"]]
                for p in config["schedulingProfiles"]}
    assert set(profiles) == {"prefill", "decode"}
    for refs in profiles.values():
        assert set(refs) <= defined
        assert "max-score-picker" in refs and "prefix-cache-scorer" in refs
        assert "queue-scorer" in refs
    assert "prefill-filter" in profiles["prefill"] and "decode-filter" in profiles["decode"]
    by_type = {p["type"]: p.get("parameters") or {} for p in config["plugins"]}
    handler = by_type["disagg-profile-handler"]
    assert handler["profiles"] == {"decode": "decode", "prefill": "prefill"}
    assert handler["deciders"]["prefill"] in defined  # the handler's own reference
    assert by_type[handler["deciders"]["prefill"]]["nonCachedTokens"] > 0  # really disaggregates
    assert by_type["disagg-headers-handler"] == {"prefillProfile": "prefill"}


@pytest.mark.parametrize("prefill_args, decode_args, expected", [
    ((), ("--port=8200",), 16),
    (("--block-size", "32"), ("--port=8200", "--block-size", "32"), 32),
    (("--block-size=64",), ("--port=8200", "--block-size=64"), 64),
])
def test_the_prefix_scorer_uses_the_engines_block_size(prefill_args, decode_args, expected):
    out = compose(pd(prefill(*prefill_args), decode(*decode_args)))
    scorer = next(p for p in epp_config(out)["plugins"] if p["type"] == "prefix-cache-scorer")
    assert scorer["parameters"]["blockSizeTokens"] == expected
    assert not out.warnings


def test_block_sizes_that_disagree_warn_and_the_decode_engines_wins():
    out = compose(pd(prefill("--block-size", "32"),
                     gang_engine("decode", "Decode", "exec vllm serve m --port=8200 "
                                 "--block-size=64")))
    scorer = next(p for p in epp_config(out)["plugins"] if p["type"] == "prefix-cache-scorer")
    assert scorer["parameters"]["blockSizeTokens"] == 64
    (warning,) = out.warnings
    assert "32" in warning and "64" in warning and "--block-size" in warning


def test_the_config_checksum_rolls_the_endpoint_picker_when_the_config_changes(monkeypatch):
    def checksum(out):
        epp = out.manifests()["epp"]["spec"]["template"]["metadata"]["annotations"]
        return epp[ANNOTATION_CONFIG_SHA]

    base = compose(pd())
    text = base.one("ConfigMap")["data"]["epp-config.yaml"]
    assert checksum(base) == hashlib.sha256(text.encode()).hexdigest()
    assert checksum(compose(pd())) == checksum(base)  # stable
    other_block = compose(pd(prefill("--block-size=32"), decode("--port=8200",
                                                                "--block-size=32")))
    assert checksum(other_block) != checksum(base)
    monkeypatch.setenv("MODELPLANE_PD_NON_CACHED_TOKENS", "256")
    tuned = compose(pd())
    assert checksum(tuned) != checksum(base)
    assert epp_config(tuned)["plugins"][7]["parameters"]["nonCachedTokens"] == 256


def test_images_and_sizes_come_from_the_serving_config(monkeypatch):
    monkeypatch.setenv("MODELPLANE_EPP_IMAGE", "registry.example.com/epp:v9")
    monkeypatch.setenv("MODELPLANE_ROUTING_SIDECAR_IMAGE", "registry.example.com/proxy:v9")
    monkeypatch.setenv("MODELPLANE_EPP_MEMORY_LIMIT", "8Gi")
    out = compose(pd())
    (c,) = out.manifests()["epp"]["spec"]["template"]["spec"]["containers"]
    assert c["image"] == "registry.example.com/epp:v9"
    assert c["resources"]["limits"]["memory"] == "8Gi"
    (pod,) = pods_of(out, "decode")
    assert sidecars(pod)[0]["image"] == "registry.example.com/proxy:v9"


DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize("image", [f"ghcr.io/llm-d/llm-d-inference-scheduler@{DIGEST}",
                                   f"ghcr.io/llm-d/llm-d-inference-scheduler:v0.7.1@{DIGEST}"])
def test_a_platform_pins_the_routing_images_by_digest(monkeypatch, image):
    # The defaults are tags (no registry to read digests from where this is built);
    # a platform whose policy wants digests sets them, tag kept beside for people.
    sidecar = image.replace("inference-scheduler", "routing-sidecar")
    monkeypatch.setenv("MODELPLANE_EPP_IMAGE", image)
    monkeypatch.setenv("MODELPLANE_ROUTING_SIDECAR_IMAGE", sidecar)
    out = compose(pd())
    (c,) = out.manifests()["epp"]["spec"]["template"]["spec"]["containers"]
    assert c["image"] == image
    (pod,) = pods_of(out, "decode")
    assert sidecars(pod)[0]["image"] == sidecar
    assert routed(out)


@pytest.mark.parametrize("variable, value", [("MODELPLANE_EPP_REPLICAS", "many"),
                                             ("MODELPLANE_PD_NON_CACHED_TOKENS", "0"),
                                             ("MODELPLANE_EPP_IMAGE", "not an image"),
                                             ("MODELPLANE_EPP_IMAGE", "epp@sha256:ABCD"),
                                             ("MODELPLANE_EPP_FAILURE_MODE", "Maybe")])
def test_a_malformed_override_routes_nothing_and_says_which(monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    out = compose(pd())
    status, reason, message = out.condition("Routed")
    assert (status, reason) == ("False", "ServingConfigInvalid") and variable in message
    assert not routed(out) and not out.fatal


def test_the_route_goes_to_the_pool_like_unifieds_goes_to_its_service():
    out = compose(pd(hostnames=["qwen.example.com"]))
    unified = compose(replica()).path_route()
    route = out.path_route()
    assert route["spec"]["parentRefs"] == unified["spec"]["parentRefs"]
    assert route["spec"]["hostnames"] == ["qwen.example.com"]
    for rule, u_rule in zip(route["spec"]["rules"], unified["spec"]["rules"], strict=True):
        assert rule["backendRefs"] == [{"group": "inference.networking.k8s.io",
                                        "kind": "InferencePool",
                                        "name": out.one("InferencePool")["metadata"]["name"]}]
        for key in ("matches", "filters", "timeouts"):
            assert rule.get(key) == u_rule.get(key)
        assert rule["timeouts"] == {"request": "0s"}
    assert out.status["endpoint"] == "https://llm.us-east-1.example.com/ml-team/llama-us-east-1-0"


def test_object_keys_never_meet_an_engines_keys():
    out = compose(pd(dict(prefill(), name="epp"), dict(decode("--port=8200"), name="httproute")))
    kinds = {k: m["kind"] for k, m in out.manifests().items()}
    assert kinds["epp"] == "Deployment" and kinds["httproute"] == "HTTPRoute"
    assert kinds["epp-deployment"] == "Deployment" and kinds["httproute-deployment"] == "Deployment"
    names = [m["metadata"]["name"] for m in out.manifests().values()]
    assert len(names) == len(set(names))


# --- readiness ----------------------------------------------------------------------------


AVAILABLE = {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}
ACCEPTED = {"parents": [{"parentRef": {"name": "inference-gateway"}, "controllerName": "x/y",
                         "conditions": [{"type": "Accepted", "status": "True",
                                         "reason": "Accepted"},
                                        {"type": "ResolvedRefs", "status": "True",
                                         "reason": "ResolvedRefs"}]}]}


def serving(out) -> dict[str, dict]:
    observed = {}
    for key, obj in out.desired.items():
        o = copy.deepcopy(obj)
        if o["kind"] == "Deployment":
            n = o["spec"]["replicas"]
            o["status"] = {"replicas": n, "readyReplicas": n, "updatedReplicas": n,
                           "conditions": [AVAILABLE]}
        elif o["kind"] == "LeaderWorkerSet":
            o["status"] = {"readyReplicas": o["spec"]["replicas"], "conditions": [AVAILABLE]}
        elif o["kind"] in ("HTTPRoute", "InferencePool"):
            o["status"] = copy.deepcopy(ACCEPTED)
        observed[key] = o
    return observed


def test_serving_needs_both_engines_the_endpoint_picker_and_an_accepted_route_and_pool():
    mr = pd(prefill(), gang_engine("decode", "Decode", "exec vllm serve m --port=8200"))
    everything = serving(compose(mr))
    out = compose(mr, observed=everything)
    assert out.phase == "Serving" and set(out.ready.values()) == {fnv1.READY_TRUE}
    assert out.condition("Routed")[:2] == ("True", "Accepted")
    for key, broken in (("epp", {"replicas": 1, "conditions": [{**AVAILABLE, "status": "False"}]}),
                        ("inferencepool", {"parents": []}),
                        ("inferencepool", {"parents": [{"conditions": [
                            {"type": "Accepted", "status": "True", "reason": "Accepted"},
                            {"type": "ResolvedRefs", "status": "False",
                             "reason": "InvalidExtensionRef"}]}]}),
                        ("httproute", {"parents": []}),
                        ("prefill-deployment", {"replicas": 1,
                                                "conditions": [{**AVAILABLE, "status": "False"}]}),
                        ("decode-leaderworkerset", {"conditions": [AVAILABLE]})):
        observed = copy.deepcopy(everything)
        observed[key]["status"] = broken
        out = compose(mr, observed=observed)
        assert out.phase == "Loading", key
        assert out.ready[key] == fnv1.READY_FALSE, key


def test_a_remote_replica_wraps_everything_and_waits_for_the_pool_to_be_accepted():
    mr = pd(dict(standalone("prefill", pool="l4-4x"), phase="Prefill"),
            dict(standalone("decode", pool="l4-4x", template=template(
                args=["m", "--port=8200"])), phase="Decode"), cluster=REMOTE)
    out = compose(mr)
    assert {o["kind"] for o in out.desired.values()} == {"Object"}
    pool = out.desired["inferencepool"]
    assert pool["spec"]["readiness"] == {
        "policy": "DeriveFromCelQuery",
        "celQuery": KINDS[("inference.networking.k8s.io/v1", "InferencePool")].cel_ready}
    assert out.desired["epp"]["spec"]["readiness"]["policy"] == "DeriveFromCelQuery"
    assert out.desired["epp-role"]["spec"]["readiness"] == {"policy": "SuccessfulCreate"}


CEL_ENV = cel.NewEnv(variables={"object": cel.Type.DYN})
POOL = ("inference.networking.k8s.io/v1", "InferencePool")
POOL_SAMPLES = [
    {}, {"status": {}}, {"status": {"parents": []}}, {"status": ACCEPTED},
    {"status": {"parents": [{"conditions": [{"type": "Accepted", "status": "False"}]}]}},
    {"status": {"parents": [{"conditions": [{"type": "Accepted", "status": "True"}]}]}},
    {"status": {"parents": [{"conditions": [{"type": "Accepted", "status": "True"},
                                            {"type": "ResolvedRefs", "status": "False"}]}]}},
    {"status": {"parents": [{"conditions": [{"type": "Accepted", "status": "False"}]},
                            {"conditions": [{"type": "Accepted", "status": "True"}]}]}},
    {"status": {"parents": [{"parentRef": {"name": "x"}}]}},
]


def test_the_pools_readiness_query_agrees_with_its_judge():
    program = CEL_ENV.compile(KINDS[POOL].cel_ready)
    for sample in POOL_SAMPLES:
        obj = {"apiVersion": POOL[0], "kind": POOL[1], "metadata": {"name": "x"}, **sample}
        result = program.eval(CEL_ENV.Activation({"object": obj}))
        assert result.value() is judge(obj).ready, sample


def test_a_pool_no_gateway_accepted_says_why():
    state = judge({"apiVersion": POOL[0], "kind": POOL[1], "status": {"parents": [
        {"conditions": [{"type": "Accepted", "status": "False", "reason": "NotSupported",
                         "message": "this gateway has no InferencePool support"}]}]}})
    assert not state.ready
    assert "this gateway has no InferencePool support" in state.describe()


# --- the examples --------------------------------------------------------------------------


@pytest.mark.parametrize("example", ["prefill-decode", "prefill-decode-gang"])
def test_the_pd_examples_route(example):
    from builders import EXAMPLES, load

    (md,) = load(EXAMPLES / "deployments" / f"{example}.yaml")
    engines = []
    for e in md["spec"]["template"]["spec"]["engines"]:
        e = copy.deepcopy(e)
        for m in e["members"]:
            m["nodePoolName"] = "h100-8x"
            m["deviceRequests"] = [{"name": "gpu", "count": 8, "claim": "DRA",
                                    "deviceClassName": "gpu.nvidia.com",
                                    "selectors": [{"cel": H100}]}]
        engines.append(e)
    out = compose(pd(*engines))
    assert routed(out) and out.path_route() and out.fleet_route()
    assert not out.warnings
    assert out.condition("Routed")[1] == "Pending"
