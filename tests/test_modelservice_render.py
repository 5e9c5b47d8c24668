"""examples/services through the real `crossplane composition render` and `resource validate`.

The example ModelService renders over the example ModelEndpoints and fleet
(Crossplane resolves each entry's selector itself), and everything it
composes passes the real CLI's validation, CEL rules included, against Envoy
Gateway's CRDs (crds/envoy-gateway) and Gateway API's (../shared/crds).
"""

from __future__ import annotations

import subprocess

import pytest
import yaml
from builders import EXAMPLES, ROOT

from function.tools import localrender

pytestmark = pytest.mark.e2e

MS = ROOT / "apis" / "modelservice"
ME = ROOT / "apis" / "modelendpoint"


@pytest.fixture(scope="module")
def rendered(tools, function_address) -> list[dict]:
    return localrender.render(tools, function_address, EXAMPLES / "services" / "llama.yaml",
                              MS / "composition.yaml", xrd=MS / "definition.yaml",
                              required=[EXAMPLES / "services" / "endpoints.yaml",
                                        EXAMPLES / "fleet"])


def test_the_example_service_routes_its_endpoints_95_5(rendered):
    (ms,) = [d for d in rendered if d.get("kind") == "ModelService"]
    assert ms["status"]["address"] == "https://llm.us-east-1.example.com/ml-team/llama"
    assert ms["status"]["active"] == "Primary"
    assert [e["endpoints"] for e in ms["status"]["entries"]] == [
        ["llama-3-1-8b-0", "llama-3-1-8b-1"], ["llama-3-1-8b-canary-0"], ["openai"]]
    (route,) = [d for d in rendered if d.get("kind") == "HTTPRoute"]
    weights = [r["weight"] for r in route["spec"]["rules"][0]["backendRefs"]]
    assert weights == [19, 19, 2]


def test_the_rendered_route_validates_against_the_real_crds(rendered, tools, tmp_path):
    docs = [d for d in rendered if d.get("kind") in
            ("Backend", "BackendTrafficPolicy", "HTTPRouteFilter", "HTTPRoute")]
    assert {d["kind"] for d in docs} == {"Backend", "BackendTrafficPolicy", "HTTPRoute"}
    for d in docs:  # render's own bookkeeping, not part of the object
        d["metadata"].pop("annotations", None)
        d["metadata"].pop("ownerReferences", None)
        d["metadata"].pop("generateName", None)
    stream = tmp_path / "route.yaml"
    stream.write_text(yaml.safe_dump_all(docs))
    shared = ROOT.parent / "shared" / "crds" / "gateway.networking.k8s.io_httproutes.yaml"
    out = subprocess.run([tools.cli, "resource", "validate",
                          f"{ROOT / 'crds' / 'envoy-gateway'},{shared}", str(stream),
                          "--cache-dir", str(tmp_path / "cache"), "--crossplane-image=",
                          "--error-on-missing-schemas"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(docs)} success cases, 0 failure cases" in out.stdout, out.stdout
