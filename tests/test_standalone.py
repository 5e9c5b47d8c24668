"""A public clone stands alone: nothing reads files from outside the repository."""

from __future__ import annotations

import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
# What the repository once read beside itself (split so this file does not match).
OUTSIDE = ("../" + "shared", "SHARED" + "_CRDS", 'parent / "' + 'shared"')
CODE = (".py", ".sh", ".go", ".mk", "Makefile", ".toml", ".cfg", ".ini")


def tracked() -> list[pathlib.Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [ROOT / p for p in out.stdout.decode().split("\0") if p]


def test_no_code_or_build_file_reads_beside_the_repository():
    files = [p for p in tracked() if p.name.endswith(CODE) and p.is_file()]
    assert len(files) > 100, "git ls-files found too few files to be this repository"
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
            for p in files for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
            if any(o in line for o in OUTSIDE)]
    assert hits == []


def test_every_composed_crd_kind_has_its_crd_in_the_repository():
    """The composer's kinds that are not core Kubernetes find their CRD under crds/."""
    import yaml

    from function.composer import kinds

    served = set()
    for path in (ROOT / "crds").glob("*/*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                spec = doc["spec"]
                served |= {(f"{spec['group']}/{v['name']}", spec["names"]["kind"])
                           for v in spec["versions"] if v.get("served")}
    core = {"v1", "apps/v1", "batch/v1", "rbac.authorization.k8s.io/v1", kinds.DRA_API_VERSION}
    wanted = {key for key in kinds.KINDS if key[0] not in core}
    assert len(wanted) >= 6, kinds.KINDS
    assert wanted <= served, sorted(wanted - served)


def test_the_vendored_crds_are_the_pinned_modules_files():
    """crds/ is byte-identical (after its header) to the files of the modules hack/tools
    pins, fetched through the Go module proxy and checked against their go.sum, and
    holds nothing else: `make check-vendored`."""
    import sys

    sys.path.insert(0, str(ROOT / "hack"))
    import vendor_crds

    proc = subprocess.run([sys.executable, str(ROOT / "hack" / "vendor_crds.py"), "--check"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for source in vendor_crds.SOURCES:
        version = vendor_crds.pinned(source.tool, source.module)
        files = sorted((ROOT / "crds" / source.folder).glob("*.yaml"))
        assert files, source.folder
        for crd in files:
            assert f"{source.module}@{version} " in crd.read_text().splitlines()[0], crd


def test_gateway_api_is_the_release_the_pinned_gateway_implementation_is_built_against():
    """One Gateway API for the unit tests and `make cluster`: the one Envoy Gateway supports."""
    import sys

    sys.path.insert(0, str(ROOT / "hack"))
    import vendor_crds

    assert vendor_crds.pinned("gateway-api", "sigs.k8s.io/gateway-api") == \
        vendor_crds.pinned("envoy-gateway", "sigs.k8s.io/gateway-api")
