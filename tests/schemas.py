"""Validate any object the functions emit, in process, as strictly as a cluster would.

Our kinds against the XRD schemas, every composed CRD kind (LWS, HTTPRoute,
InferencePool, provider-kubernetes Object and its inner manifest, KEDA, Envoy
Gateway, PodMonitor) against the CRDs vendored in crds/ from the pinned modules
(hack/vendor_crds.py: the same files `make cluster` installs), and core kinds (Deployment, Service,
ResourceClaimTemplate, ConfigMap, RBAC) with kubernetes-validate's strict
schemas. Unknown fields are errors, as with the crossplane CLI's strict
decoding. CEL rules are not evaluated here (tests/test_examples_validate.py
and the end-to-end tests run the real CLI for those).
"""

from __future__ import annotations

import copy
import pathlib
import re
from collections.abc import Mapping
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
KUBERNETES_VERSION = "1.35.0"
VENDORED = ROOT / "crds"
# libyaml's loader when PyYAML has it: crds/ is ~5 MB of YAML (Envoy Gateway's
# EnvoyProxy alone 1.4 MB), which the pure-Python loader reads about 7x slower.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Kinds whose names apimachinery validates more loosely than a DNS label, as charts the
# serving stack installs name them: RBAC objects take any path segment
# (`eg-gateway-helm-certgen:envoy-gateway-system`), webhook configurations a DNS
# subdomain. Every other kind is held to a DNS label (pods and label values carry them).
PATH_SEGMENT_NAMED = frozenset({"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"})
SUBDOMAIN_NAMED = frozenset({"CustomResourceDefinition", "MutatingWebhookConfiguration",
                             "ValidatingWebhookConfiguration"})


def _strict(schema: Any) -> Any:
    """Close every object schema that lists properties (Kubernetes prunes or rejects)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if out.get("type") == "object" and "properties" in out \
                and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        if out.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
            out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
        if out.get("x-kubernetes-embedded-resource"):
            # apiVersion/kind/metadata are implied on embedded resources.
            props = out.setdefault("properties", {})
            for key in ("apiVersion", "kind"):
                props.setdefault(key, {"type": "string"})
            props.setdefault("metadata", {"type": "object"})
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


class Schemas:
    def __init__(self, crds: pathlib.Path = VENDORED) -> None:
        self._schemas: dict[tuple[str, str], Any] = {}
        for path in sorted((ROOT / "apis").glob("*/definition.yaml")):
            xrd = yaml.safe_load(path.read_text())
            spec = xrd["spec"]
            for v in spec["versions"]:
                schema = copy.deepcopy(v["schema"]["openAPIV3Schema"])
                props = schema["properties"]
                # Crossplane adds these to every composite.
                props["spec"]["properties"]["crossplane"] = {"type": "object"}
                props["status"]["properties"]["conditions"] = {"type": "array"}
                props["apiVersion"], props["kind"] = {"type": "string"}, {"type": "string"}
                props["metadata"] = {"type": "object"}
                self._add(f"{spec['group']}/{v['name']}", spec["names"]["kind"], schema)
        # The CRDs vendored into crds/ (hack/vendor_crds.py).
        for path in sorted(crds.glob("*/*.yaml")):
            for crd in yaml.load_all(path.read_text(), Loader=_LOADER):
                if not crd or crd.get("kind") != "CustomResourceDefinition":
                    continue
                spec = crd["spec"]
                for v in spec["versions"]:
                    schema = copy.deepcopy(v["schema"]["openAPIV3Schema"])
                    schema.setdefault("properties", {})["metadata"] = {"type": "object"}
                    self._add(f"{spec['group']}/{v['name']}", spec["names"]["kind"], schema)

    def _add(self, api_version: str, kind: str, schema: Any) -> None:
        self._schemas[(api_version, kind)] = jsonschema.Draft7Validator(_strict(schema))

    def errors(self, obj: Mapping[str, Any], where: str = "") -> list[str]:
        api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
        where = where or f"{kind} {((obj.get('metadata') or {}).get('name'))}"
        errs = [f"{where}: {e}" for e in self.metadata_errors(obj)]
        validator = self._schemas.get((api_version, kind))
        if validator is not None:
            errs += [f"{where}: {'.'.join(map(str, e.absolute_path))}: {e.message}"
                     for e in validator.iter_errors(dict(obj))]
            manifest = ((obj.get("spec") or {}).get("forProvider") or {}).get("manifest")
            if kind == "Object" and isinstance(manifest, Mapping):
                errs += self.errors(manifest, f"{where} manifest")
            return errs
        try:
            kubernetes_validate.validate(dict(obj), KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            errs.append(f"{where}: no schema for {api_version} {kind}")
        except kubernetes_validate.ValidationError as e:
            errs.append(f"{where}: {'.'.join(map(str, e.path))}: {e.message}")
        return errs

    @staticmethod
    def metadata_errors(obj: Mapping[str, Any]) -> list[str]:
        meta = obj.get("metadata") or {}
        errs = []
        name = meta.get("name")
        if obj.get("kind") in SUBDOMAIN_NAMED:
            # A CRD's <plural>.<group>: a DNS subdomain (the serving stack installs CRDs).
            if not (isinstance(name, str) and len(name) <= 253
                    and all(DNS_LABEL.match(part) for part in name.split("."))):
                errs.append(f"metadata.name {name!r} is not a DNS subdomain")
        elif obj.get("kind") in PATH_SEGMENT_NAMED:
            if not (isinstance(name, str) and name and name not in (".", "..")
                    and "/" not in name and "%" not in name):
                errs.append(f"metadata.name {name!r} is not a path segment")
        elif name is not None and not (isinstance(name, str) and len(name) <= 63
                                       and DNS_LABEL.match(name)):
            errs.append(f"metadata.name {name!r} is not a DNS label of at most 63 characters")
        for key, value in (meta.get("labels") or {}).items():
            if not isinstance(value, str) or len(value) > 63:
                errs.append(f"label {key}={value!r} is not a valid label value")
        return errs
