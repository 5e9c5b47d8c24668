"""What we ship for tenancy (security/, docs/security.md), as `make cluster` applies it.

The admission policies name the identities that act for the platform in their
parameter ConfigMap. On a real control plane that is Crossplane's service account;
here every component (Crossplane core, provider-kubernetes, the function's callers)
acts as the harness's admin certificate, so that is the name the ConfigMap gets.
Everything else is applied as shipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SECURITY = Path(__file__).resolve().parents[2] / "security"
# What a control plane installs; security/remote-identity.yaml is for workload clusters.
CONTROL_PLANE = ("admission.yaml", "tenant-role.yaml")
ADMIN_USER = "modelplane-e2e-admin"  # the CN of the harness's admin certificate (core._certs)
PARAMS = ("ConfigMap", "modelplane-admission")


def manifests(controllers: str = ADMIN_USER) -> list[dict[str, Any]]:
    """Every document of the control plane's files in security/, the parameter
    ConfigMap first (a binding whose parameters are missing denies everything) and
    naming `controllers`."""
    docs = [d for name in CONTROL_PLANE
            for d in yaml.safe_load_all((SECURITY / name).read_text()) if d]
    for d in docs:
        if (d["kind"], d["metadata"]["name"]) == PARAMS:
            d["data"]["controllers"] = controllers
    return sorted(docs, key=lambda d: (d["kind"], d["metadata"]["name"]) != PARAMS)
