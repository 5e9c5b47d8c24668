"""Copy the CRDs of the APIs we compose that ../shared/crds does not hold into crds/.

KEDA's ScaledObject and TriggerAuthentication, from the KEDA Go module at the
version hack/tools/keda/go.mod pins (the only place it is written), and Envoy
Gateway's Backend, BackendTrafficPolicy and HTTPRouteFilter from the module
hack/tools/envoy-gateway/go.mod pins, each downloaded
through the Go module proxy and checked against that folder's go.sum. The
copies are byte-identical after a one-line header naming their source, so tests
validate composed objects offline. `--check` fails when a copy differs from
the pinned module's file; run `python hack/vendor_crds.py` after a bump.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

from generated import write_or_check

ROOT = pathlib.Path(__file__).resolve().parent.parent
# (folder under hack/tools, module, files under the module, folder under crds/)
# The plain CRDs (the gateway-crds-helm chart wraps its copies in a Helm conditional).
EG_CRDS = "charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_"
SOURCES = [("keda", "github.com/kedacore/keda/v2",
            ["config/crd/bases/keda.sh_scaledobjects.yaml",
             "config/crd/bases/keda.sh_triggerauthentications.yaml"], "keda"),
           # What a ModelService composes on the front door (Backend,
           # BackendTrafficPolicy, HTTPRouteFilter), from the release the
           # end-to-end control plane runs (hack/tools/envoy-gateway).
           ("envoy-gateway", "github.com/envoyproxy/gateway",
            [f"{EG_CRDS}{n}.yaml" for n in ("backends", "backendtrafficpolicies",
                                            "httproutefilters")], "envoy-gateway"),
           # The PodMonitor an InferenceCluster composes when it opts in
           # (spec.monitoring.podMonitor).
           ("prometheus-operator", "github.com/prometheus-operator/prometheus-operator",
            ["example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml"],
            "prometheus-operator")]
HEADER = "# Vendored by hack/vendor_crds.py from {module}@{version} {path}; do not edit.\n"


def pinned(tool: str, module: str) -> str:
    text = (ROOT / "hack" / "tools" / tool / "go.mod").read_text()
    # `require M vX`, or `M vX` inside a `require (...)` block.
    match = re.search(rf"^(?:require )?[ \t]*{re.escape(module)} (v\S+)$", text, re.M)
    if not match:
        raise SystemExit(f"no `require {module} vX` line in hack/tools/{tool}/go.mod")
    return match.group(1)


def module_dir(tool: str, module: str, version: str) -> pathlib.Path:
    proc = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"],
                          cwd=ROOT / "hack" / "tools" / tool, capture_output=True, text=True,
                          env={**os.environ, "GOFLAGS": "-mod=mod"}, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"go mod download {module}@{version} failed:\n{proc.stdout}{proc.stderr}")
    return pathlib.Path(json.loads(proc.stdout)["Dir"])


def render() -> dict[pathlib.Path, str]:
    files = {}
    for tool, module, paths, folder in SOURCES:
        version = pinned(tool, module)
        src = module_dir(tool, module, version)
        for path in paths:
            text = (src / path).read_text()
            files[ROOT / "crds" / folder / pathlib.Path(path).name] = HEADER.format(
                module=module, version=version, path=path) + text
    return files


if __name__ == "__main__":
    sys.exit(write_or_check(render(), ROOT, sys.argv[1:]))
