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


def generate(folder: str, kind: str) -> str:
    xrd = yaml.safe_load((ROOT / "apis" / folder / "definition.yaml").read_text())
    schema = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema = {**schema, "title": kind}
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
