"""The inventory reporter on a remote cluster, and the Object that reads its report back.

For an InferenceCluster with a ClusterProviderConfig, the function composes,
through provider-kubernetes `Object`s on the control plane:

* on the workload cluster: namespace modelplane-system (never deleted: other
  things may live there), a ServiceAccount that may list Nodes, ResourceSlices,
  DeviceClasses and ResourceClaims (ClusterRole)
  and write one ConfigMap (Role), and a one-replica Deployment of the
  project's own image running `function-model-serving inventory`
  (agent/inventory.py); it tolerates every taint, so it runs on any node;
* an observe-only `Object` of the report ConfigMap (management policy
  Observe: it never writes the ConfigMap), watched, so a new report reaches
  the InferenceCluster as it is written.

The Objects live in MODELPLANE_INVENTORY_NAMESPACE on the control plane
(default crossplane-system): an InferenceCluster is cluster-scoped, so its
composed Objects need a namespace of their own choosing. A namespaced
ProviderConfig cannot be used from there, so a cluster reached through one
is not observed (the condition says so).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from function.__version__ import __version__
from function.contract.api import DRA_API_VERSION, GROUP, LABEL_CLUSTER
from function.contract.inventory_report import REPORT_NAME, REPORT_NAMESPACE
from function.contract.names import tagged_label
from function.contract.records import Cluster
from function.contract.stack import OBJECT_API_VERSION, objects_namespace

# The Function package is an OCI image of this runtime; the reporter runs it.
DEFAULT_IMAGE = f"xpkg.crossplane.io/modelplane/function-model-serving:v{__version__}"
INTERVAL_SECONDS = 30
REPORT = "inventory-report"  # the composed resource key of the observe-only Object
NAME = REPORT_NAME           # the reporter's ServiceAccount, roles and Deployment
PART_OF = {"app.kubernetes.io/part-of": "function-model-serving"}
_APP = {"app.kubernetes.io/name": NAME, **PART_OF}
# Everything but Delete: create the namespace if missing, never remove it.
_SHARED = ["Observe", "Create", "Update", "LateInitialize"]


def image() -> str:
    return os.environ.get("MODELPLANE_INVENTORY_IMAGE") or DEFAULT_IMAGE


def objects(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """The composed Objects by composed-resource key, for a remote cluster."""
    assert cluster.provider_config is not None
    meta = {"namespace": REPORT_NAMESPACE, "labels": dict(_APP)}
    subject = [{"kind": "ServiceAccount", "name": NAME, "namespace": REPORT_NAMESPACE}]
    remote: dict[str, tuple[dict[str, Any], list[str] | None]] = {
        "serviceaccount": ({"apiVersion": "v1", "kind": "ServiceAccount",
                            "metadata": {"name": NAME, **meta}}, None),
        "clusterrole": ({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": NAME, "labels": dict(_APP)},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
                      # What DRA drivers publish: a pool's devices (published.py),
                      # and what claims hold of them (allocated.py).
                      {"apiGroups": [DRA_API_VERSION.split("/")[0]],
                       "resources": ["resourceslices", "deviceclasses", "resourceclaims"],
                       "verbs": ["get", "list"]}],
        }, None),
        "clusterrolebinding": ({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": NAME, "labels": dict(_APP)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": NAME},
            "subjects": subject,
        }, None),
        "role": ({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": NAME, **meta},
            # create cannot be limited by name (the object does not exist yet).
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
                      {"apiGroups": [""], "resources": ["configmaps"],
                       "resourceNames": [REPORT_NAME], "verbs": ["get", "update"]}],
        }, None),
        "rolebinding": ({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": NAME, **meta},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
            "subjects": subject,
        }, None),
        "deployment": (_deployment(meta), None),
    }
    out = {**namespace_object(cluster),
           **{f"inventory-{part}": wrap(cluster, part, manifest, policies)
              for part, (manifest, policies) in remote.items()}}
    report = wrap(cluster, "report", {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": REPORT_NAME, "namespace": REPORT_NAMESPACE}}, ["Observe"])
    report["spec"]["watch"] = True
    out[REPORT] = report
    return out


def _deployment(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, **meta},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(_APP)},
            "template": {
                "metadata": {"labels": dict(_APP)},
                "spec": {
                    "serviceAccountName": NAME,  # its token: it lists Nodes and DRA objects
                    # Pod Security "restricted" (docs/security.md): with the container's
                    # settings below, the whole profile.
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{
                        "name": "reporter",
                        "image": image(),
                        "command": ["/venv/bin/function-model-serving", "inventory",
                                    "--namespace", REPORT_NAMESPACE,
                                    "--interval", str(INTERVAL_SECONDS)],
                        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"},
                                      "limits": {"memory": "256Mi"}},
                        "securityContext": {
                            # The image's user (hack/build-image.sh).
                            "runAsNonRoot": True, "runAsUser": 65532,
                            "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
                    }],
                },
            },
        },
    }


def namespace_object(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """The namespace on the remote cluster that the reporter (and a PodMonitor,
    monitoring.py) live in, by its composed resource key: whoever composes it
    composes the same one."""
    return {"inventory-namespace": wrap(cluster, "namespace", {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": REPORT_NAMESPACE}},
        _SHARED)}


def wrap(cluster: Cluster, part: str, manifest: dict[str, Any],
         policies: list[str] | None = None, purpose: str = "inventory") -> dict[str, Any]:
    """`manifest` on the remote cluster, through a provider-kubernetes Object."""
    pc = cluster.provider_config
    assert pc is not None
    spec: dict[str, Any] = {
        "forProvider": {"manifest": manifest},
        "providerConfigRef": {"name": pc.name, "kind": pc.kind},
        "readiness": {"policy": "SuccessfulCreate"},
    }
    if policies:
        spec["managementPolicies"] = list(policies)
    return {
        "apiVersion": OBJECT_API_VERSION, "kind": "Object",
        "metadata": {"name": tagged_label(purpose, cluster.name, tag=part),
                     "namespace": objects_namespace(),
                     "labels": {LABEL_CLUSTER: cluster.name, f"{GROUP}/purpose": purpose}},
        "spec": spec,
    }
