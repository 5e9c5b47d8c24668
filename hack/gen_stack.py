"""Render the serving stack's manifests and versions into function/cluster/stackdata/.

For every component of function/contract/stack.py's table: its version, the one
hack/tools/<tool>/go.mod pins (the only place a version is written), and, for a
component the stack can install, the manifests it installs, in install order:
the CRDs hack/vendor_crds.py copies from the same pinned modules into crds/ and,
for a component with a chart, its namespace (with the CRDs) and the objects
hack/vendor_charts.py rendered from the chart into manifests/ (the controllers'
tier). `make check-vendored` holds both to the modules.

Each CRD loses its schema's descriptions and its status: a provider-kubernetes
Object keeps the manifest in its spec and the observed object in its status, and
the API server tracks both in managedFields, so an Object stores a CRD about
four times over, and etcd refuses objects over 1.5 MiB (its default
--max-request-bytes). LeaderWorkerSet's CRD is 635 KB as JSON with its
descriptions and 132 KB without; a manifest over MAX_MANIFEST_BYTES fails the
build. Run `make generate`; `make check-generated` fails when a file is stale.
"""

from __future__ import annotations

import json
import pathlib
import sys
from collections.abc import Mapping
from typing import Any

import yaml
from generated import write_or_check
from vendor_crds import pinned

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from function.contract.stack import (  # noqa: E402
    COMPONENTS,
    LABEL_COMPONENT,
    Component,
    Tier,
    manifest_id,
)

OUT = ROOT / "function" / "cluster" / "stackdata"
CHARTS = ROOT / "manifests"
MAX_MANIFEST_BYTES = 256 * 1024  # compact JSON; about four times this is stored per Object
PART_OF = {"app.kubernetes.io/part-of": "function-model-serving"}
HELM_HOOK = "helm.sh/hook"  # and helm.sh/hook-weight, helm.sh/hook-delete-policy
SCHEMA_CHILDREN = ("items", "additionalProperties", "not")
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")


def without_descriptions(schema: Any) -> Any:
    """An OpenAPI schema without its nodes' descriptions. Only schema nodes lose one:
    a field named `description` (a key of `properties`) is a field, and stays."""
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k != "description"}
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: without_descriptions(v) for k, v in out["properties"].items()}
    for key in SCHEMA_CHILDREN:
        if isinstance(out.get(key), dict):
            out[key] = without_descriptions(out[key])
    for key in SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [without_descriptions(s) for s in out[key]]
    return out


def labelled(metadata: Mapping[str, Any], component: Component) -> dict[str, Any]:
    """Metadata with the stack's labels. Helm's `managed-by: Helm` goes: no Helm
    release manages these objects, and `helm` would refuse to adopt them anyway; so do
    its hook annotations: no Helm runs hooks, the stack's tiers order the objects."""
    labels = {k: v for k, v in (metadata.get("labels") or {}).items()
              if not (k == "app.kubernetes.io/managed-by" and v == "Helm")}
    labels = {**labels, **PART_OF, LABEL_COMPONENT: component.field}
    out = {**metadata, "labels": dict(sorted(labels.items()))}
    annotations = {k: v for k, v in (metadata.get("annotations") or {}).items()
                   if not k.startswith(HELM_HOOK)}
    if annotations:
        out["annotations"] = annotations
    else:
        out.pop("annotations", None)
    return out


def versioned_job(manifest: dict[str, Any], version: str) -> dict[str, Any]:
    """A chart's Job named after the release's version: a Job's pod template cannot
    change, so a version bump makes a new Job (the old one, done, is left) instead of
    an update the API server refuses."""
    if manifest.get("kind") != "Job":
        return manifest
    suffix = "-" + version.replace(".", "-").replace("+", "-").lower()
    metadata = {**manifest["metadata"], "name": manifest["metadata"]["name"] + suffix}
    return {**manifest, "metadata": metadata}


def crd_manifest(doc: dict[str, Any], component: Component) -> dict[str, Any]:
    meta = doc["metadata"]
    metadata = labelled({"name": meta["name"], "labels": meta.get("labels") or {}}, component)
    if meta.get("annotations"):
        metadata["annotations"] = meta["annotations"]
    spec = dict(doc["spec"])
    spec["versions"] = [
        {**v, "schema": {"openAPIV3Schema": without_descriptions(v["schema"]["openAPIV3Schema"])}}
        if "schema" in v else v for v in spec["versions"]]
    return {"apiVersion": doc["apiVersion"], "kind": doc["kind"], "metadata": metadata,
            "spec": spec}


def chart_objects(component: Component, version: str) -> list[dict[str, Any]]:
    """The controllers' tier: the chart's namespace, then what it renders."""
    chart = component.chart
    if chart is None:
        return []
    path = CHARTS / f"{component.field}.yaml"
    if not path.exists():
        raise SystemExit(f"{component.field}: {path.relative_to(ROOT)} is missing: run "
                         "`make vendor-crds`")
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": labelled({"name": chart.namespace}, component)}
    out = [{"tier": int(Tier.CRDS), "name": manifest_id(namespace), "manifest": namespace}]
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc:
            continue
        if doc.get("kind") in ("CustomResourceDefinition", "Namespace"):
            raise SystemExit(f"{component.field}: the chart renders a {doc['kind']}; the "
                             "stack installs those from crds/ and the table")
        manifest = versioned_job({**doc, "metadata": labelled(doc["metadata"], component)},
                                 version)
        size = len(json.dumps(manifest, separators=(",", ":")))
        if size > MAX_MANIFEST_BYTES:
            raise SystemExit(f"{component.field}: {manifest_id(manifest)} is {size} bytes")
        out.append({"tier": int(Tier.CONTROLLERS), "name": manifest_id(manifest),
                    "manifest": manifest})
    names = [o["name"] for o in out]
    if len(set(names)) != len(names):
        raise SystemExit(f"{component.field}: two of the chart's objects share a kind and name")
    return out


def objects(component: Component, version: str) -> list[dict[str, Any]]:
    out = chart_objects(component, version)
    for pattern in component.crds:
        files = sorted((ROOT / "crds").glob(pattern))
        if not files:
            raise SystemExit(f"{component.field}: no file under crds/ matches {pattern}")
        for path in files:
            for doc in yaml.safe_load_all(path.read_text()):
                if not doc or doc.get("kind") != "CustomResourceDefinition":
                    continue
                manifest = crd_manifest(doc, component)
                size = len(json.dumps(manifest, separators=(",", ":")))
                if size > MAX_MANIFEST_BYTES:
                    raise SystemExit(f"{component.field}: {manifest['metadata']['name']} is "
                                     f"{size} bytes as JSON, over {MAX_MANIFEST_BYTES}")
                out.append({"tier": int(Tier.CRDS), "name": manifest["metadata"]["name"],
                            "manifest": manifest})
    return sorted(out, key=lambda o: (o["tier"], o["name"]))


def render() -> dict[pathlib.Path, str]:
    files = {}
    for component in COMPONENTS:
        version = pinned(component.tool, component.module)
        head = {"component": component.field, "module": component.module, "version": version}
        files[OUT / f"{component.field}.json"] = dump(head, objects(component, version))
    return files


def dump(head: dict[str, Any], objs: list[dict[str, Any]]) -> str:
    """JSON, one object a line (compact: the function loads it; a bump's diff stays
    per object)."""
    def compact(value: Any) -> str:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    lines = [f"{compact(k)}:{compact(v)}," for k, v in sorted(head.items())]
    body = ",\n".join(compact(o) for o in objs)
    return "{\n" + "\n".join(lines) + '\n"objects":[\n' + body + ("\n" if objs else "") + "]}\n"


def orphans(files: dict[pathlib.Path, str]) -> list[pathlib.Path]:
    return sorted(p for p in OUT.glob("*.json") if p not in files)


if __name__ == "__main__":
    rendered = render()
    left = orphans(rendered)
    if left and "--check" in sys.argv[1:]:
        print("function/cluster/stackdata/ holds files no component writes: "
              + ", ".join(p.name for p in left), file=sys.stderr)
        sys.exit(1)
    for path in left:
        path.unlink()
    sys.exit(write_or_check(rendered, ROOT, sys.argv[1:]))
