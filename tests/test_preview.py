"""`function-model-serving preview` (behind `make demo`) through the real CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from builders import ROOT

pytestmark = pytest.mark.e2e


def preview(*args: str, tools) -> subprocess.CompletedProcess:
    env = {"CROSSPLANE_CLI": tools.cli, "CROSSPLANE_CORE": tools.core, "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "function.runtime.main", "preview", *args], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=300)


def test_the_demo_prints_placements_pools_objects_and_an_explained_shortfall(tools):
    out = preview("--deployment", "examples/deployments/multinode-gang.yaml", "--replicas", "4",
                  tools=tools)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "REPLICA" in text and "Pools after placement:" in text
    assert "LeaderWorkerSet" in text and "(provider-kubernetes Object)" in text
    assert "replica 3: 0/3 clusters fit replica 3:" in text
    # and what each cluster said
    assert '    us-east-1: has no pool matching engine "vllm"' in text
    assert "ReplicasScheduled=False (Unschedulable)" in text


def test_the_prefill_decode_preview_shows_both_engines_the_pool_the_picker_and_the_route(tools):
    out = preview("--deployment", "examples/deployments/prefill-decode.yaml", tools=tools)
    assert out.returncode == 0, out.stderr
    for what in ("prefill", "decode", "InferencePool", "HTTPRoute", "Deployment"):
        assert what in out.stdout, what


def test_the_autoscaled_preview_shows_the_scaled_object_on_the_control_plane(tools):
    out = preview("--deployment", "examples/deployments/autoscaled.yaml", tools=tools)
    assert out.returncode == 0, out.stderr
    control = out.stdout.split("Objects on the control plane:\n", 1)[1].splitlines()
    assert control[0].startswith("  ScaledObject qwen3-8b-") and control[0].endswith(
        "-autoscaler"), out.stdout
    assert control[1].startswith("  TriggerAuthentication qwen3-8b-"), out.stdout
    assert "Autoscaling=False (Pending): KEDA ScaledObject" in out.stdout
    docs = list(yaml.safe_load_all(preview("--deployment", "examples/deployments/autoscaled.yaml",
                                           "-o", "yaml", tools=tools).stdout))
    (so,) = [d for d in docs if d["kind"] == "ScaledObject"]
    assert so["spec"]["scaleTargetRef"]["kind"] == "ModelDeployment"


def test_yaml_output_is_one_stream_of_every_rendered_object(tools):
    out = preview("--deployment", "examples/deployments/single-gpu.yaml", "-o", "yaml",
                  tools=tools)
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    kinds = [d["kind"] for d in docs]
    assert kinds.count("ModelDeployment") == 1 and kinds.count("ModelReplica") == 2
    assert all(d.get("status") for d in docs if d["kind"] in ("ModelDeployment", "ModelReplica"))
    assert "Deployment" in kinds or "Object" in kinds


def test_a_render_failure_exits_non_zero_and_shows_the_clis_error(tools, tmp_path):
    bad = tmp_path / "md.yaml"
    bad.write_text("apiVersion: modelplane.ai/v1alpha1\nkind: ModelDeployment\nmetadata: {name: x}\n"
                   "spec: {template: {spec: {engines: []}}}\n")
    out = preview("--deployment", str(bad), tools=tools)
    assert out.returncode == 1
    assert "preview failed" in out.stderr and "crossplane" in out.stderr


def services_fleet(tmp_path, service="llama"):
    """The example fleet plus a ModelService example and its external provider."""
    for path in (ROOT / "examples" / "fleet").glob("*.yaml"):
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / f"{service}.yaml").write_text(
        (ROOT / f"examples/services/{service}.yaml").read_text())
    external = [d for d in yaml.safe_load_all((ROOT / "examples/services/endpoints.yaml")
                                              .read_text()) if d and "provider" in
                (d["metadata"].get("labels") or {})]
    (tmp_path / "provider.yaml").write_text(yaml.safe_dump_all(external))
    return tmp_path


def test_the_preview_shows_the_routes_its_replicas_would_receive(tools, tmp_path):
    fleet = services_fleet(tmp_path)
    out = preview("--fleet", str(fleet), "--deployment", "examples/deployments/single-gpu.yaml",
                  tools=tools)
    assert out.returncode == 0, out.stderr
    routes = out.stdout.split("Routes (ModelServices of the fleet directory in this "
                              "namespace):\n", 1)[1].splitlines()
    assert routes[0] == ("  llama -> https://llm.us-east-1.example.com/ml-team/llama "
                         "(Primary entries take traffic)")
    # The two previewed replicas share the stable entry; the canary has none yet.
    previewed = [r for r in routes if "(this preview)" in r]
    assert len(previewed) == 2 and all(r.split()[0] == "endpoints[0]" and r.endswith("50%")
                                       for r in previewed), routes
    assert any(r.split()[:2] == ["endpoints[1]", "(none)"] for r in routes), routes
    assert "Routed=True (Primary)" in out.stdout


def test_the_preview_shows_each_rules_share_of_its_own_traffic(tools, tmp_path):
    fleet = services_fleet(tmp_path, "llama-rules")
    out = preview("--fleet", str(fleet), "--deployment", "examples/deployments/single-gpu.yaml",
                  tools=tools)
    assert out.returncode == 0, out.stderr
    rows = [r.split() for r in out.stdout.splitlines()]
    # The canary has no replica: its rule's fallback, the previewed replicas, takes
    # the rule's traffic, half each.
    canary = [r for r in rows if r[:3] == ["rules[0]", "(canary-testers)", "fallback[0]"]]
    assert len(canary) == 2 and all(r[-3:] == ["(this", "preview)", "50%"] for r in canary), rows
    # Only the replica on eu-west-1 takes eu-residency's requests.
    (eu,) = [r for r in rows if r[:2] == ["rules[1]", "(eu-residency)"]]
    assert "eu-west-1" in eu[3] and eu[-1] == "100%", rows


def test_without_a_serving_replica_the_preview_routes_to_the_fallback(tools, tmp_path):
    fleet = services_fleet(tmp_path)
    out = preview("--fleet", str(fleet), "--deployment", "examples/deployments/single-gpu.yaml",
                  "--replicas", "0", tools=tools)
    assert out.returncode == 0, out.stderr
    assert "(Fallback entries take traffic)" in out.stdout
    assert "fallback[0]  openai" in out.stdout and "100%" in out.stdout


def test_the_yaml_output_carries_the_rendered_route(tools, tmp_path):
    fleet = services_fleet(tmp_path)
    docs = list(yaml.safe_load_all(preview(
        "--fleet", str(fleet), "--deployment", "examples/deployments/single-gpu.yaml",
        "-o", "yaml", tools=tools).stdout))
    (route,) = [d for d in docs if d.get("kind") == "HTTPRoute"
                and d["metadata"].get("labels", {}).get("modelplane.ai/model-service") == "llama"]
    assert len(route["spec"]["rules"][0]["backendRefs"]) == 2


def _commands(group):
    import click

    for name, command in group.commands.items():
        yield name, command
        if isinstance(command, click.Group):
            yield from _commands(command)


def test_no_command_declares_an_option_twice():
    """click keeps the last of two options that share a flag and warns on every call;
    `--replicas` was once both the ledger directory and the what-if count."""
    from function.runtime.main import cli

    for name, command in _commands(cli):
        seen: dict[str, str] = {}
        for param in command.params:
            for flag in [*param.opts, *param.secondary_opts]:
                assert flag not in seen, f"{name}: {flag} is declared by {seen[flag]} and {param.name}"
                seen[flag] = param.name


def test_preview_help_prints_no_warning_and_names_each_option_once():
    out = subprocess.run([sys.executable, "-W", "error", "-m", "function.runtime.main", "preview",
                          "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert "--replicas-dir DIRECTORY" in out.stdout and "--replicas INTEGER RANGE" in out.stdout


def test_a_replica_in_the_replicas_dir_stays_where_it_runs(tools, tmp_path):
    """The example's replica 0, written by hand (no composed-resource key), moved to
    us-east-1: the preview keeps it there and places replica 1 on the other cluster."""
    example = (ROOT / "examples" / "replicas" / "llama-3-1-8b-0.yaml").read_text()
    (tmp_path / "r.yaml").write_text(example.replace("eu-west-1", "us-east-1")
                                     .replace("nodePoolName: l4-4x", "nodePoolName: l4"))
    out = preview("--replicas-dir", str(tmp_path), tools=tools)
    assert out.returncode == 0, out.stderr
    rows = [line.split()[:4] for line in out.stdout.splitlines()[2:4]]
    assert rows[0] == ["llama-3-1-8b-0", "us-east-1", "vllm", "l4"]
    assert rows[1][1:] == ["eu-west-1", "vllm", "l4-4x"]


def test_another_deployments_replica_in_the_replicas_dir_holds_its_nodes(tools, tmp_path):
    """The ledger: a gang of another deployment on eu-west-1's h100 pool takes two
    of its four nodes, and the previewed gang takes the other two."""
    first = preview("--deployment", "examples/deployments/multinode-gang.yaml", "-o", "yaml",
                    tools=tools)
    assert first.returncode == 0, first.stderr
    (replica,) = [d for d in yaml.safe_load_all(first.stdout)
                  if d and d.get("kind") == "ModelReplica"]
    labels = {**replica["metadata"]["labels"], "modelplane.ai/deployment": "other"}
    labels.pop("crossplane.io/composite")
    replica["metadata"] = {"name": "other-0", "namespace": "ml-team", "labels": labels}
    replica["spec"].pop("crossplane")
    (tmp_path / "other-0.yaml").write_text(yaml.safe_dump(replica))

    def h100_used(*args: str) -> str:
        out = preview("--deployment", "examples/deployments/multinode-gang.yaml", *args,
                      tools=tools)
        assert out.returncode == 0, out.stderr
        (row,) = [line.split() for line in out.stdout.splitlines()
                  if line.startswith("eu-west-1") and "h100-8x-rdma" in line]
        return row[3]

    assert h100_used() == "2"
    assert h100_used("--replicas-dir", str(tmp_path)) == "4"
