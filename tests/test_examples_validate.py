"""Validate the examples and the invalid manifests with the real crossplane CLI.

`crossplane resource validate` converts our XRDs to CRDs and checks manifests the
way the API server does: OpenAPI bounds, x-kubernetes-validations CEL rules,
defaults and unknown fields. The examples must pass; every file in
tests/invalid/ must be rejected with the message its `# expect:` line names.

The CLI never downloads anything here: the extensions are only our apis/ and the
CRDs vendored in crds/ (no Provider, Function or Configuration packages), and
`--crossplane-image=` drops the default Crossplane image whose built-in schemas
it would otherwise fetch. Each run gets a fresh, empty --cache-dir.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_CLI = "/root/.cache/fms-tools/cli-v2.5.0/crossplane"


def crossplane_cli() -> str:
    """The crossplane CLI binary (env CROSSPLANE_CLI); fails, never skips, if absent."""
    path = os.environ.get("CROSSPLANE_CLI", DEFAULT_CLI)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"crossplane CLI not found or not executable at {path!r}; build it with "
                    "hack/tools.sh and set CROSSPLANE_CLI", pytrace=False)
    return path


EXAMPLE_DIRS = ["examples/fleet", "examples/deployments", "examples/replicas", "examples/caches",
                "examples/quotas", "examples/services", "examples/platform", "examples/stack"]
INVALID_DIR = ROOT / "tests" / "invalid"
INVALID_FILES = sorted(INVALID_DIR.glob("*.yaml"))
EXPECT = re.compile(r"^# expect: (?P<text>\S.*?)\s*$")

# The text renderer prints one line per resource or error:
#   [✓] <apiVersion>, Kind=<Kind>, <name> validated successfully
#   [x] CEL validation error <apiVersion>, Kind=<Kind>, <name> : <message>
#   [x] schema validation error <apiVersion>, Kind=<Kind>, <name> : <message>
#   [!] could not find CRD/XRD for: <apiVersion>, Kind=<Kind>
# and ends with a summary line.
TEXT_ERROR = re.compile(r"^\[x\] (?:[A-Za-z]+ )?validation error (?P<api>\S+), "
                        r"Kind=(?P<kind>[^,]+), (?P<name>.*?) : (?P<message>.*)$")
TEXT_SUMMARY = re.compile(r"^Total (?P<total>\d+) resources: (?P<missing>\d+) missing schemas, "
                          r"(?P<ok>\d+) success cases, (?P<failed>\d+) failure cases$", re.M)


def validate(resources: list[pathlib.Path], cache_dir: pathlib.Path,
             output: str) -> subprocess.CompletedProcess:
    """Run `crossplane resource validate` on resources against apis/ and crds/."""
    extensions = [ROOT / "apis", ROOT / "crds"]
    cmd = [crossplane_cli(), "resource", "validate",
           "--cache-dir", str(cache_dir), "--crossplane-image=", "--output", output,
           ",".join(map(str, extensions)), ",".join(map(str, resources))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    # The CLI announces every package it fetches; nothing may be fetched.
    assert "downloading" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


def parse_json(proc: subprocess.CompletedProcess) -> dict:
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        pytest.fail(f"validate printed no JSON result ({e}); rc={proc.returncode}\n"
                    f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}", pytrace=False)


def manifests(path: pathlib.Path) -> list[dict]:
    files = sorted(path.rglob("*.yaml")) if path.is_dir() else [path]
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]


# --- examples ---------------------------------------------------------------------


@pytest.mark.parametrize("folder", EXAMPLE_DIRS)
def test_examples_validate(folder, tmp_path):
    path = ROOT / folder
    docs = manifests(path)
    assert docs, f"{folder} holds no manifests"
    proc = validate([path], tmp_path, "json")
    result = parse_json(proc)
    report = json.dumps(result, indent=2) + "\n" + proc.stderr
    failed = [r for r in result["resources"] if r["status"] != "valid"]
    assert not failed, report
    assert proc.returncode == 0, report
    assert result["summary"] == {"total": len(docs), "valid": len(docs), "invalid": 0,
                                 "missingSchemas": 0}, report


def test_examples_validate_text_output(tmp_path):
    """All examples at once, in the default text format a user sees."""
    paths = [ROOT / f for f in EXAMPLE_DIRS]
    total = sum(len(manifests(p)) for p in paths)
    proc = validate(paths, tmp_path, "text")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    bad = [line for line in proc.stdout.splitlines() if line.startswith(("[x]", "[!]"))]
    assert not bad, out
    ok = [line for line in proc.stdout.splitlines()
          if line.startswith("[✓]") and line.endswith("validated successfully")]
    assert len(ok) == total, out
    summary = TEXT_SUMMARY.search(proc.stdout)
    assert summary, out
    assert summary.groupdict() == {"total": str(total), "missing": "0", "ok": str(total),
                                   "failed": "0"}, out


# --- invalid manifests --------------------------------------------------------------


def invalid_case(path: pathlib.Path) -> tuple[str, dict]:
    """The `# expect:` text and the single manifest of one tests/invalid file."""
    text = path.read_text()
    match = EXPECT.match(text.splitlines()[0]) if text else None
    assert match, f"{path.name}: the first line must be '# expect: <message substring>'"
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert len(docs) == 1, f"{path.name}: holds {len(docs)} manifests, want exactly one"
    return match["text"], docs[0]


def key(doc_or_result: dict) -> tuple[str, str, str]:
    if "metadata" in doc_or_result:
        return (doc_or_result["kind"], doc_or_result["metadata"].get("namespace", ""),
                doc_or_result["metadata"]["name"])
    return (doc_or_result["kind"], doc_or_result.get("namespace", ""), doc_or_result["name"])


@pytest.fixture(scope="module")
def invalid_results(tmp_path_factory):
    """One validate run over tests/invalid/ per output format.

    Validating each file alone costs about a second a file; the names are unique,
    so one run per format serves every file.
    """
    assert INVALID_FILES, "tests/invalid/ holds no manifests"
    cache = tmp_path_factory.mktemp("crossplane-cache")
    proc = validate([INVALID_DIR], cache, "json")
    result = parse_json(proc)
    by_key = {}
    for r in result["resources"]:
        assert key(r) not in by_key, f"two invalid manifests share {key(r)}"
        by_key[key(r)] = r
    text = validate([INVALID_DIR], cache, "text")
    printed: dict[tuple[str, str], list[str]] = {}
    for line in text.stdout.splitlines():
        if m := TEXT_ERROR.match(line):
            printed.setdefault((m["kind"], m["name"]), []).append(m["message"])
    return {"json": result, "json_rc": proc.returncode, "by_key": by_key,
            "text": text, "printed": printed}


def test_invalid_run_fails(invalid_results):
    result, text = invalid_results["json"], invalid_results["text"]
    assert invalid_results["json_rc"] != 0 and text.returncode != 0
    assert result["summary"]["total"] == len(INVALID_FILES)
    assert result["summary"]["invalid"] == len(INVALID_FILES), json.dumps(result, indent=2)
    assert "could not validate all resources" in text.stderr
    summary = TEXT_SUMMARY.search(text.stdout)
    assert summary and summary["failed"] == str(len(INVALID_FILES)), text.stdout


@pytest.mark.parametrize("path", INVALID_FILES, ids=lambda p: p.stem)
def test_invalid_rejected(path, invalid_results):
    expect, doc = invalid_case(path)
    result = invalid_results["by_key"].get(key(doc))
    assert result is not None, f"validate reported nothing for {key(doc)}"
    messages = [e["message"] for e in result.get("errors", [])]
    detail = f"{path.name}: want an error containing {expect!r}, got:\n  " + "\n  ".join(messages)
    assert result["status"] == "invalid", detail
    assert any(expect in m for m in messages), detail
    # ...and the default text output prints it for this resource.
    printed = invalid_results["printed"].get((doc["kind"], doc["metadata"]["name"]), [])
    assert any(expect in m for m in printed), (
        f"{path.name}: text output lacks {expect!r}:\n{invalid_results['text'].stdout}")
