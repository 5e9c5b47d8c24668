"""The local control plane's provider-kubernetes takes its creation grace period from
the environment (hack/tools/provider-kubernetes/patch.sh): upstream checks the 30 s
grace before it handles a deletion, so an Object deleted soon after its creation
lingered 30-45 s after the remote object was gone. The patch fails loudly when
upstream's line moves, and the patched Go still parses."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PATCH = ROOT / "hack" / "tools" / "provider-kubernetes" / "patch.sh"
SCOPES = ("namespaced", "cluster")

UPSTREAM_OBJECT = '''package object

func Setup() {
\treconcilerOptions := []managed.ReconcilerOption{
\t\tmanaged.WithPollInterval(o.PollInterval),
\t\tmanaged.WithDeterministicExternalName(true),
\t}
}
'''


def _module(root: pathlib.Path, text: str = UPSTREAM_OBJECT) -> pathlib.Path:
    for scope in SCOPES:
        path = root / "internal" / "controller" / scope / "object" / "object.go"
        path.parent.mkdir(parents=True)
        path.write_text(text)
    return root


def _patch(out: pathlib.Path, module: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(PATCH), str(out), str(module)], capture_output=True,
                          text=True)


def test_both_object_controllers_take_their_grace_period_from_the_environment(tmp_path):
    proc = _patch(tmp_path / "out", _module(tmp_path / "mod"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"-modfile={tmp_path / 'out' / 'go.mod'}"
    for scope in SCOPES:
        pkg = tmp_path / "out" / "provider" / "internal" / "controller" / scope / "object"
        assert ("\t\tmanaged.WithDeterministicExternalName(true),\n"
                "\t\tmanaged.WithCreationGracePeriod(creationGracePeriod()),"
                ) in (pkg / "object.go").read_text()
        grace = (pkg / "zz_creation_grace_period.go").read_text()
        assert 'os.Getenv("PROVIDER_KUBERNETES_CREATION_GRACE_PERIOD")' in grace
        assert "return 30 * time.Second" in grace             # unset: upstream's value
    gomod = (tmp_path / "out" / "go.mod").read_text()
    assert gomod.rstrip().endswith("replace github.com/crossplane-contrib/provider-kubernetes"
                                   f" => {tmp_path / 'out' / 'provider'}")
    if shutil.which("gofmt"):
        fmt = subprocess.run(["gofmt", "-e", "-l", str(tmp_path / "out" / "provider")],
                             capture_output=True, text=True)
        assert fmt.returncode == 0, fmt.stderr            # still parses as Go


@pytest.mark.parametrize("changed", [
    UPSTREAM_OBJECT.replace("WithDeterministicExternalName(true)", "WithDeterministicExternalName(false)"),
    UPSTREAM_OBJECT.replace("\t\tmanaged.WithPollInterval(o.PollInterval),\n",
                            "\t\tmanaged.WithDeterministicExternalName(true),\n"),
], ids=["line gone", "line twice"])
def test_the_patch_fails_loudly_when_upstream_changes(tmp_path, changed):
    proc = _patch(tmp_path / "out", _module(tmp_path / "mod", changed))
    assert proc.returncode != 0
    assert "expected exactly one line 'managed.WithDeterministicExternalName(true),'" \
        in proc.stderr
    assert proc.stdout == ""
