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


# What a workload cluster's ClusterProviderConfig acts as there: the ClusterRole we
# ship, bound to a ServiceAccount the kubeconfig holds a token of (as the file's
# comment shows a platform team), instead of the cluster's admin.
REMOTE_IDENTITY = "modelplane-remote"
REMOTE_NAMESPACE = "kube-system"
REMOTE_TOKEN_SECONDS = 7 * 24 * 3600  # outlives any run


# Bound on every remote cluster: the base role, and the stack's (its controllers'
# tier: make cluster's remote clusters get LeaderWorkerSet's controller from it).
REMOTE_ROLES = ("remote-identity.yaml", "remote-identity-stack.yaml")


def remote_identity() -> list[dict[str, Any]]:
    """security/remote-identity*.yaml's ClusterRoles, a ServiceAccount and a binding of
    each role to it."""
    out: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": REMOTE_IDENTITY, "namespace": REMOTE_NAMESPACE}}]
    for file in REMOTE_ROLES:
        (role,) = [d for d in yaml.safe_load_all((SECURITY / file).read_text())
                   if d and d.get("kind") == "ClusterRole"]
        name = role["metadata"]["name"]
        out += [role,
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                 "metadata": {"name": name},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                             "name": name},
                 "subjects": [{"kind": "ServiceAccount", "name": REMOTE_IDENTITY,
                               "namespace": REMOTE_NAMESPACE}]}]
    return out


def remote_token_args() -> tuple[str, ...]:
    return ("create", "token", REMOTE_IDENTITY, "-n", REMOTE_NAMESPACE,
            f"--duration={REMOTE_TOKEN_SECONDS}s")


def token_kubeconfig(admin_kubeconfig: Path, token: str, user: str) -> str:
    """The cluster's admin kubeconfig with its user replaced by a ServiceAccount's token
    (what provider-kubernetes reaches a remote cluster with)."""
    cfg = yaml.safe_load(admin_kubeconfig.read_text())
    ctx_name = cfg["current-context"]
    (ctx,) = [c["context"] for c in cfg["contexts"] if c["name"] == ctx_name]
    (cluster,) = [c for c in cfg["clusters"] if c["name"] == ctx["cluster"]]
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": user,
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user}}],
    }, sort_keys=False)
