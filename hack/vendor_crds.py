"""Copy the CRDs of every API we compose but do not own into crds/, from pinned modules.

Each source is a Go module at the version one folder under hack/tools pins in its
go.mod (the only place the version is written), downloaded through the Go module
proxy and checked against that folder's go.sum. The copies are byte-identical
after a one-line header naming their source. The unit tests validate composed
objects against crds/ and `make cluster` installs the same files, so both see
one version of each API. `--check` fails when a copy differs from the pinned
module's file or when crds/ holds a file no source names; run
`make vendor-crds` after a bump.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
from typing import NamedTuple

from generated import write_or_check

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRDS = ROOT / "crds"


class Source(NamedTuple):
    tool: str           # folder under hack/tools whose go.mod pins the module
    module: str
    paths: list[str]    # files under the module; a glob keeps only its CRD files
    folder: str         # folder under crds/


# The plain CRDs (the gateway-crds-helm chart wraps its copies in a Helm conditional).
EG_CRDS = "charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_"
SOURCES = [
    # Gateway API's standard channel at the release Envoy Gateway's pin is built
    # against (its go.mod's sigs.k8s.io/gateway-api): HTTPRoute, Gateway, GatewayClass.
    Source("gateway-api", "sigs.k8s.io/gateway-api",
           ["config/crd/standard/gateway.networking.k8s.io_*.yaml"], "gateway-api"),
    # InferencePool v1 (and the release's other CRDs, which the EPP watches).
    Source("gateway-api-inference-extension", "sigs.k8s.io/gateway-api-inference-extension",
           ["config/crd/bases/*.yaml"], "inference-extension"),
    # LeaderWorkerSet; the v0.9 manager also runs the DisaggregatedSet controller,
    # which cannot start without its CRD.
    Source("lws", "sigs.k8s.io/lws",
           ["config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
            "config/crd/bases/disaggregatedset.x-k8s.io_disaggregatedsets.yaml"], "lws"),
    # The namespaced provider-kubernetes kinds the composer wraps remote objects in.
    Source("provider-kubernetes", "github.com/crossplane-contrib/provider-kubernetes",
           [f"package/crds/kubernetes.m.crossplane.io_{n}.yaml"
            for n in ("objects", "providerconfigs", "clusterproviderconfigs")],
           "provider-kubernetes"),
    # The EnvironmentConfig naming the Prometheus servers autoscaling may query and
    # the DeploymentRuntimeConfig recommended for the function (examples/platform/),
    # for validating the examples, and the Usage an InferenceCluster's stack composes
    # per replica (cluster/stack.py), for validating it; Crossplane installs its own.
    Source("crossplane-core", "github.com/crossplane/crossplane/v2",
           ["cluster/crds/apiextensions.crossplane.io_environmentconfigs.yaml",
            "cluster/crds/pkg.crossplane.io_deploymentruntimeconfigs.yaml",
            "cluster/crds/protection.crossplane.io_usages.yaml"], "crossplane"),
    Source("keda", "github.com/kedacore/keda/v2",
           ["config/crd/bases/keda.sh_scaledobjects.yaml",
            "config/crd/bases/keda.sh_triggerauthentications.yaml"], "keda"),
    # Every CRD of Envoy Gateway's chart: what the stack installs with its controller
    # (function/contract/stack.py), among them what a ModelService composes on the front
    # door (Backend, BackendTrafficPolicy, HTTPRouteFilter, SecurityPolicy) and the
    # EnvoyProxy that configures its Envoy on the end-to-end control plane
    # (e2e/controlplane/dataplane.py: the Envoy version, --disable-hot-restart, one
    # worker thread).
    Source("envoy-gateway", "github.com/envoyproxy/gateway", [f"{EG_CRDS}*.yaml"],
           "envoy-gateway"),
    # The PodMonitor an InferenceCluster composes when it opts in (spec.monitoring.podMonitor).
    Source("prometheus-operator", "github.com/prometheus-operator/prometheus-operator",
           ["example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml"],
           "prometheus-operator"),
]
HEADER = "# Vendored by hack/vendor_crds.py from {module}@{version} {path}; do not edit.\n"
CRD_KIND = re.compile(r"^kind: CustomResourceDefinition$", re.M)


def pinned(tool: str, module: str) -> str:
    text = (ROOT / "hack" / "tools" / tool / "go.mod").read_text()
    # `require M vX`, or `M vX` inside a `require (...)` block, `// indirect` or not.
    match = re.search(rf"^(?:require )?[ \t]*{re.escape(module)} (v\S+)(?: //.*)?$", text, re.M)
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


def files_of(src: pathlib.Path, pattern: str) -> list[pathlib.Path]:
    """One named file, or the CRD files a glob matches (a release may ship other
    manifests beside them, e.g. Gateway API's ValidatingAdmissionPolicy)."""
    if not any(c in pattern for c in "*?["):
        return [src / pattern]
    found = [p for p in sorted(src.glob(pattern)) if CRD_KIND.search(p.read_text())]
    if not found:
        raise SystemExit(f"no CRD matches {pattern} in {src}")
    return found


def render() -> dict[pathlib.Path, str]:
    files = {}
    for source in SOURCES:
        version = pinned(source.tool, source.module)
        src = module_dir(source.tool, source.module, version)
        for pattern in source.paths:
            for path in files_of(src, pattern):
                rel = path.relative_to(src).as_posix()
                files[CRDS / source.folder / path.name] = HEADER.format(
                    module=source.module, version=version, path=rel) + path.read_text()
    return files


def orphans(files: dict[pathlib.Path, str]) -> list[str]:
    """Files under crds/ that no source writes (left behind by a bump or a removal)."""
    return sorted(str(p.relative_to(ROOT)) for p in CRDS.glob("*/*.yaml") if p not in files)


if __name__ == "__main__":
    rendered = render()
    left = orphans(rendered)
    if left and "--check" in sys.argv[1:]:
        print("crds/ holds files no source in hack/vendor_crds.py writes: " + ", ".join(left),
              file=sys.stderr)
        sys.exit(1)
    for path in left:
        (ROOT / path).unlink()
    sys.exit(write_or_check(rendered, ROOT, sys.argv[1:], fix="make vendor-crds"))
