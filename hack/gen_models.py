"""Generate the pydantic models in function/contract/models/ from the XRD schemas.

The models are what the functions parse their inputs into; generating them
from apis/ keeps code and API in step. tests/test_xrds.py fails when the
committed models differ from what this prints. Run `make generate`.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

import yaml
from generated import write_or_check

ROOT = pathlib.Path(__file__).resolve().parent.parent
KINDS = {
    "inferencecluster": "InferenceCluster",
    "modeldeployment": "ModelDeployment",
    "modelreplica": "ModelReplica",
    "modelcache": "ModelCache",
    "inferencequota": "InferenceQuota",
    "modelendpoint": "ModelEndpoint",
    "modelservice": "ModelService",
}
# The builtin formatter keeps the output independent of black/isort versions.
OPTIONS = [
    "--input-file-type", "jsonschema",
    "--output-model-type", "pydantic_v2.BaseModel",
    "--target-python-version", "3.11",
    "--formatters", "builtin",
    "--use-annotated", "--field-constraints", "--use-double-quotes",
    "--disable-timestamp", "--use-standard-collections", "--use-union-operator",
    "--capitalise-enum-members", "--use-title-as-name", "--collapse-root-models",
    "--reuse-model",  # one class per shape: a device in spec and status is one model
    # Kubernetes types are strict: a bool is not a count, a number is not a name.
    "--strict-types", "str", "int", "bool",
]


def _titled(node: Any, found: dict[str, list[Any]]) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("title"), str):
            found.setdefault(node["title"], []).append(node)
        for value in node.values():
            _titled(value, found)
    elif isinstance(node, list):
        for value in node:
            _titled(value, found)


def _referenced(node: Any, shared: Mapping[str, Any]) -> Any:
    if isinstance(node, dict):
        if node.get("title") in shared:
            return {"$ref": f"#/$defs/{node['title']}"}
        return {k: _referenced(v, shared) for k, v in node.items()}
    if isinstance(node, list):
        return [_referenced(v, shared) for v in node]
    return node


def shared_definitions(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with each titled subschema that recurs unchanged (an XRD cannot say
    $ref: hack/gen_xrds.py writes it out at every place) made one definition, so the
    models hold one class for it, not one per place. A title whose places differ
    stays written out."""
    found: dict[str, list[Any]] = {}
    _titled(schema, found)
    shared = {t: nodes[0] for t, nodes in sorted(found.items())
              if len(nodes) > 1 and all(n == nodes[0] for n in nodes)}
    if not shared:
        return schema
    out = _referenced(schema, shared)
    out["$defs"] = {t: _referenced({k: v for k, v in node.items() if k != "title"}, shared)
                    | {"title": t} for t, node in shared.items()}
    return out


def generate(folder: str, kind: str) -> str:
    xrd = yaml.safe_load((ROOT / "apis" / folder / "definition.yaml").read_text())
    schema = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema = shared_definitions({**schema, "title": kind})
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp) / f"{folder}.json"
        out = pathlib.Path(tmp) / f"{folder}.py"
        src.write_text(json.dumps(schema, indent=1, sort_keys=True))
        subprocess.run([str(pathlib.Path(sys.executable).parent / "datamodel-codegen"),
                        "--input", str(src), "--output", str(out), *OPTIONS],
                       check=True, capture_output=True)
        text = out.read_text()
    # The temp file name is noise in the header; name the XRD instead.
    return text.replace(f"#   filename:  {folder}.json", f"#   from:  apis/{folder}/definition.yaml")


def render() -> dict[pathlib.Path, str]:
    files = {ROOT / "function" / "contract" / "models" / "__init__.py":
             '"""Pydantic models generated from apis/ by hack/gen_models.py."""\n'}
    for folder, kind in KINDS.items():
        files[ROOT / "function" / "contract" / "models" / f"{folder}.py"] = generate(folder, kind)
    return files


def main(argv: list[str]) -> int:
    return write_or_check(render(), ROOT, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
