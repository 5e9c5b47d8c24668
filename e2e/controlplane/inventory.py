"""The inventory reporter of each remote cluster, run the way its pod would run.

The InferenceCluster function composes the reporter onto every remote cluster
as a Deployment (function/cluster/reporter.py). kwok runs that pod only in
name: nothing executes it. So the harness plays the kubelet for it: it reads
the command the composed Deployment gives its container, asks the cluster for
a token of the composed ServiceAccount (TokenRequest, what the kubelet
projects into the pod), and runs the same command as a local process with a
kubeconfig holding that token instead of the in-cluster config. What the
reporter may do on the cluster is therefore exactly what the composed RBAC
grants; only the process is local.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from function.contract.inventory_report import REPORT_NAME, REPORT_NAMESPACE

DEPLOYMENT = REPORT_NAME       # the composed Deployment and ServiceAccount share the name
TOKEN_SECONDS = 7 * 24 * 3600  # outlives any run; the API server may shorten it


def component(cluster: str) -> str:
    return f"inventory:{cluster}"


def command(deployment: dict[str, Any]) -> list[str]:
    """The reporter container's command from the composed Deployment."""
    containers = deployment["spec"]["template"]["spec"]["containers"]
    (reporter,) = [c for c in containers if c.get("name") == "reporter"]
    return list(reporter["command"])


def argv(binary: Path, deployment: dict[str, Any], kubeconfig: Path) -> tuple[str, ...]:
    """The composed command with the image's entry point replaced by this repo's
    and the pod's in-cluster identity by a kubeconfig holding the same token."""
    cmd = command(deployment)
    if not cmd or not cmd[0].endswith("/function-model-serving") or "inventory" not in cmd:
        raise ValueError(f"the composed reporter runs {cmd!r}, not function-model-serving "
                         "inventory")
    return (str(binary), *cmd[1:], "--kubeconfig", str(kubeconfig))


def token_kubeconfig(admin_kubeconfig: Path, token: str, user: str = "reporter") -> str:
    """The cluster's admin kubeconfig with its user replaced by the ServiceAccount's token."""
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


def token_request_args() -> tuple[str, ...]:
    return ("create", "token", DEPLOYMENT, "-n", REPORT_NAMESPACE,
            f"--duration={TOKEN_SECONDS}s")


def rbac_args() -> tuple[str, ...]:
    """Every part of the reporter's identity the composition puts on the cluster.
    provider-kubernetes creates the composed Objects in no particular order, so
    the Deployment may exist before the ServiceAccount or its grants."""
    return ("get", "serviceaccounts,roles.rbac.authorization.k8s.io,"
            "rolebindings.rbac.authorization.k8s.io", DEPLOYMENT, "-n", REPORT_NAMESPACE,
            "-o", "name")


def cluster_rbac_args() -> tuple[str, ...]:
    return ("get", "clusterroles.rbac.authorization.k8s.io,"
            "clusterrolebindings.rbac.authorization.k8s.io", DEPLOYMENT, "-o", "name")


def deployment_args() -> tuple[str, ...]:
    return ("get", "deployments.apps", DEPLOYMENT, "-n", REPORT_NAMESPACE, "-o", "json")


def report_args() -> tuple[str, ...]:
    return ("get", "configmaps", REPORT_NAME, "-n", REPORT_NAMESPACE, "-o", "json")
