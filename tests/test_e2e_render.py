"""End to end: the real `crossplane composition render` drives our served function.

Stage 1 renders each example ModelDeployment on the example fleet; stage 2
renders each ModelReplica it placed. Every rendered object of our kinds is
then checked by the real `crossplane resource validate` against the XRDs.
"""

from __future__ import annotations

import pathlib
import subprocess

import pytest
import yaml
from builders import EXAMPLES, ROOT, load_one

from function.tools import localrender

pytestmark = pytest.mark.e2e

DEPLOYMENTS = sorted((EXAMPLES / "deployments").glob("*.yaml"))
MD = ROOT / "apis" / "modeldeployment"
MR = ROOT / "apis" / "modelreplica"


def render_deployment(tools, address, path: pathlib.Path) -> list[dict]:
    return localrender.render(tools, address, path, MD / "composition.yaml",
                              required=[EXAMPLES / "fleet", EXAMPLES / "platform"],
                              xrd=MD / "definition.yaml")


@pytest.fixture(scope="module")
def rendered(tools, function_address) -> dict[str, list[dict]]:
    return {p.name: render_deployment(tools, function_address, p) for p in DEPLOYMENTS}


def of_kind(docs, kind):
    return [d for d in docs if d.get("kind") == kind]


def condition(obj, typ):
    return next(c for c in obj["status"]["conditions"] if c["type"] == typ)


@pytest.mark.parametrize("path", DEPLOYMENTS, ids=lambda p: p.stem)
def test_every_example_deployment_is_scheduled_on_the_example_fleet(rendered, path):
    docs = rendered[path.name]
    (md,) = of_kind(docs, "ModelDeployment")
    replicas = of_kind(docs, "ModelReplica")
    scheduled = condition(md, "ReplicasScheduled")
    assert scheduled["status"] == "True", scheduled.get("message")
    want = load_one(path)["spec"].get("replicas", 1)
    assert md["status"]["replicas"]["scheduled"] == want == len(replicas)
    for mr in replicas:
        assert mr["metadata"]["namespace"] == md["metadata"]["namespace"]
        assert mr["metadata"]["labels"]["modelplane.ai/deployment"] == md["metadata"]["name"]
        assert len(mr["metadata"]["name"]) <= 63


def test_rendering_is_byte_identical_across_runs(tools, function_address):
    path = EXAMPLES / "deployments" / "single-gpu.yaml"
    first = render_deployment(tools, function_address, path)
    second = render_deployment(tools, function_address, path)
    assert yaml.safe_dump_all(first) == yaml.safe_dump_all(second)


def test_every_placed_replica_renders_through_the_replica_composition(
        rendered, tools, function_address, tmp_path):
    for name, docs in rendered.items():
        for mr in of_kind(docs, "ModelReplica"):
            xr = tmp_path / f"{mr['metadata']['name']}.yaml"
            xr.write_text(yaml.safe_dump(mr))
            out = localrender.render(tools, function_address, xr, MR / "composition.yaml",
                                     required=[EXAMPLES / "fleet",
                                               localrender.owner_file(docs, mr, tmp_path)],
                                     xrd=MR / "definition.yaml")
            (composed,) = of_kind(out, "ModelReplica")
            assert composed["status"]["phase"], name
            assert condition(composed, "Scheduled")["status"] == "True", name


def test_rendered_objects_validate_against_the_xrds(rendered, tools, tmp_path):
    stream = tmp_path / "rendered.yaml"
    docs = [d for out in rendered.values() for d in out
            if d.get("apiVersion", "").startswith("modelplane.ai/")]
    stream.write_text(yaml.safe_dump_all(docs))
    out = subprocess.run([tools.cli, "resource", "validate", str(ROOT / "apis"), str(stream),
                          "--cache-dir", str(tmp_path / "cache"), "--crossplane-image=",
                          "--error-on-missing-schemas"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 failure cases" in out.stdout and "0 missing schemas" in out.stdout, out.stdout


def test_rendered_autoscalers_validate_against_kedas_crds(rendered, tools, tmp_path):
    """The KEDA objects stage 1 composes (examples/deployments/autoscaled.yaml), checked by
    the real CLI against KEDA's CRDs as vendored from its Go module (crds/keda)."""
    docs = [d for out in rendered.values() for d in out
            if d.get("apiVersion", "").startswith("keda.sh/")]
    assert {d["kind"] for d in docs} == {"ScaledObject", "TriggerAuthentication"}, docs
    stream = tmp_path / "keda.yaml"
    stream.write_text(yaml.safe_dump_all(docs))
    out = subprocess.run([tools.cli, "resource", "validate", str(ROOT / "crds" / "keda"),
                          str(stream), "--cache-dir", str(tmp_path / "cache"),
                          "--crossplane-image=", "--error-on-missing-schemas"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"Total {len(docs)} resources: 0 missing schemas, {len(docs)} success cases, " \
        "0 failure cases" in out.stdout, out.stdout
