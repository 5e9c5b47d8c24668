"""The XRDs are what a real API server accepts, and the generated code is fresh."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml
from builders import ROOT

XRDS = sorted(ROOT.glob("apis/*/definition.yaml"))


@pytest.fixture(scope="module")
def crdcheck() -> str:
    build = subprocess.run(["bash", str(ROOT / "hack" / "build-go-tool.sh"), "crdcheck"],
                           capture_output=True, text=True)
    if build.returncode != 0:
        pytest.fail(f"building tools/crdcheck failed:\n{build.stderr}")
    return build.stdout.strip()


@pytest.mark.parametrize("script", ["gen_xrds.py", "gen_models.py"])
def test_generated_files_are_fresh(script):
    out = subprocess.run([sys.executable, str(ROOT / "hack" / script), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_every_xrd_passes_the_api_servers_crd_validation_and_cel_cost_budget(crdcheck):
    out = subprocess.run([crdcheck, *map(str, XRDS)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count(": 0 errors") == len(XRDS) == 7


def test_the_check_rejects_a_rule_over_an_unbounded_list(crdcheck, tmp_path):
    """The checker itself can fail: a CEL rule over unbounded data blows the budget."""
    xrd = yaml.safe_load((ROOT / "apis/modeldeployment/definition.yaml").read_text())
    spec = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec = copy.deepcopy(spec)
    spec["properties"]["tags"] = {
        "type": "array", "items": {"type": "string"},
        "x-kubernetes-validations": [{"rule": "self.all(x, self.all(y, x.matches(y)))"}]}
    xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = spec
    path = tmp_path / "xrd.yaml"
    path.write_text(yaml.safe_dump(xrd))
    out = subprocess.run([crdcheck, str(path)], capture_output=True, text=True)
    assert out.returncode == 1
    assert "cost" in out.stdout


def test_the_deployment_xrd_has_a_scale_subresource_and_printer_columns():
    xrd = yaml.safe_load((ROOT / "apis/modeldeployment/definition.yaml").read_text())
    version = xrd["spec"]["versions"][0]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    assert [c["name"] for c in version["additionalPrinterColumns"]] == \
        ["Desired", "Scheduled", "Ready"]


def test_a_titled_schema_written_out_at_several_places_is_one_model():
    """An XRD cannot $ref, so gen_xrds writes a shared schema at every place it is used
    (every stack component's controller settings); the models hold one class for it."""
    from function.contract.models import inferencecluster as ic
    assert ic.LeaderWorkerSet.model_fields["controller"].annotation == \
        ic.EnvoyGateway.model_fields["controller"].annotation == ic.StackController | None
    sys.path.insert(0, str(ROOT / "hack"))
    import gen_models
    same = {"title": "T", "type": "string"}
    schema = {"properties": {"a": dict(same), "b": dict(same),
                             "c": {"title": "U", "type": "string"},
                             "d": {"title": "U", "type": "integer"}}}
    out = gen_models.shared_definitions(schema)
    assert out["properties"]["a"] == out["properties"]["b"] == {"$ref": "#/$defs/T"}
    assert out["$defs"] == {"T": {"type": "string", "title": "T"}}
    # A title whose places differ stays written out.
    assert out["properties"]["c"] == {"title": "U", "type": "string"}
