"""Admission on the real API server: every manifest in tests/invalid/ is refused
with the message its `# expect:` line names, and every example is admitted.
The API server checks what `crossplane resource validate` cannot (list-map key
uniqueness, for one)."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from builders import load
from conftest import REPO
from live import ensure_namespace

from e2e.controlplane.core import ControlPlane

INVALID = sorted((REPO / "tests" / "invalid").glob("*.yaml"))


@pytest.fixture(scope="module")
def namespaces(cp: ControlPlane):
    for path in INVALID:
        ns = (yaml.safe_load(path.read_text()).get("metadata") or {}).get("namespace")
        if ns:
            ensure_namespace(cp, ns)


def said(expect: str) -> re.Pattern:
    """The `# expect:` text as the API server words it: `crossplane resource
    validate` leaves out the type the API server names after "Invalid value:"
    for a CEL rule's failure (`Invalid value: "object": <message>`)."""
    return re.compile(r'Invalid value: (?:"\w+": )?'.join(
        re.escape(part) for part in expect.split("Invalid value: ")))


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_the_api_server_refuses_an_invalid_manifest_with_its_message(cp, namespaces, path):
    expect = path.read_text().splitlines()[0].removeprefix("# expect: ").strip()
    doc = yaml.safe_load(path.read_text())
    if "status" in doc:
        proc = _write_status(cp, doc)
    else:
        proc = cp.kubectl("apply", "--dry-run=server", "-f", str(path), check=False)
    assert proc.returncode != 0, f"{path.name} was admitted"
    assert said(expect).search(proc.stderr), f"{path.name}: want {expect!r} in:\n{proc.stderr}"


def _write_status(cp: ControlPlane, doc: dict):
    """A status is written through the status subresource (the main resource
    ignores it): create the object without it, then try the status write."""
    kind = f"{doc['kind'].lower()}s.modelplane.ai"
    meta = doc["metadata"]
    ns = ["-n", meta["namespace"]] if meta.get("namespace") else []
    bare = {k: v for k, v in doc.items() if k != "status"}
    # Paused: Crossplane leaves it alone for the moment it exists.
    bare["metadata"] = {**meta, "annotations": {"crossplane.io/paused": "true"}}
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(bare))
    try:
        return cp.kubectl("patch", kind, meta["name"], *ns, "--subresource=status",
                          "--type=merge", "--dry-run=server", "-p",
                          json.dumps({"status": doc["status"]}), check=False)
    finally:
        cp.kubectl("delete", kind, meta["name"], *ns, "--wait=false")


def test_the_api_server_admits_every_example(cp, namespaces):
    for folder in ("deployments", "fleet"):
        for doc in load(REPO / "examples" / folder):
            proc = cp.kubectl("apply", "--dry-run=server", "-f", "-",
                              input=yaml.safe_dump(doc), check=False)
            assert proc.returncode == 0, (doc["metadata"]["name"], proc.stderr)
