"""`preview` shows what each cluster's serving stack composes, offline, through the real
CLI, and that the scheduler places nothing on a cluster whose stack is not ready yet."""

from __future__ import annotations

import pytest
import yaml
from test_preview import preview

pytestmark = pytest.mark.e2e


def test_the_preview_lists_each_stack_component_its_version_and_what_it_composes(tools):
    out = preview("--fleet", "examples/stack", "--deployment",
                  "examples/deployments/single-gpu.yaml", tools=tools)
    assert out.returncode == 0, out.stderr
    table = out.stdout.split("Serving stack (spec.stack), as each cluster composes it:\n", 1)[1]
    rows = [line.split(None, 4) for line in table.splitlines()]
    assert rows == [
        ["CLUSTER", "COMPONENT", "MODE", "VERSION", "COMPOSES"],
        ["eu-west-2", "gatewayAPI", "Managed", "v1.6.1", "10 × CustomResourceDefinition"],
        ["eu-west-2", "inferenceExtension", "Managed", "v1.6.0", "2 × CustomResourceDefinition"],
        # Its CRDs and its controller: the tiers as each is Ready in turn.
        ["eu-west-2", "leaderWorkerSet", "Managed", "v0.9.0",
         "3 × ClusterRole, 2 × ClusterRoleBinding, 1 × ConfigMap, 2 × CustomResourceDefinition, "
         "1 × Deployment, 1 × MutatingWebhookConfiguration, 1 × Namespace, 2 × Role, "
         "2 × RoleBinding, 1 × Secret, 1 × Service, 1 × ServiceAccount, "
         "1 × ValidatingWebhookConfiguration"],
        ["eu-west-2", "envoyGateway", "Managed", "v1.9.1",
         "2 × ClusterRole, 2 × ClusterRoleBinding, 1 × ConfigMap, 8 × CustomResourceDefinition, "
         "1 × Deployment, 1 × Job, 1 × MutatingWebhookConfiguration, 1 × Namespace, 3 × Role, "
         "3 × RoleBinding, 1 × Service, 2 × ServiceAccount"],
        # The platform's DRA driver: observed with the nodes, offline not at all.
        ["eu-west-2", "draDriver", "External", "resource.k8s.io/v1",
         "nothing: observed with the cluster's nodes"],
        # The last tier: the Gateway spec.gateway names, its namespace, and its class
        # (the stack installs Envoy Gateway, so the class of its controller too).
        ["eu-west-2", "gateway", "Managed", "v1.6.1",
         "1 × Gateway, 1 × GatewayClass, 1 × Namespace"]]
    # Offline nothing is observed: the stack is not ready, so nothing is placed there.
    assert "eu-west-2: is not serving-ready (stack: not reported yet)" in out.stdout


def test_the_yaml_output_carries_the_stacks_objects(tools):
    out = preview("--fleet", "examples/stack", "--deployment",
                  "examples/deployments/single-gpu.yaml", "-o", "yaml", tools=tools)
    assert out.returncode == 0, out.stderr
    objects = [d for d in yaml.safe_load_all(out.stdout)
               if d["kind"] == "Object" and d["metadata"]["labels"].get(
                   "modelplane.ai/purpose") == "stack"]
    # 22 CRDs, LWS's namespace and 16 chart objects, Envoy Gateway's namespace and 17
    # chart objects, the Gateway, its namespace and its class.
    assert len(objects) == 60


def test_a_fleet_without_stacks_prints_no_stack_table(tools):
    out = preview("--deployment", "examples/deployments/single-gpu.yaml", tools=tools)
    assert out.returncode == 0, out.stderr
    assert "Serving stack" not in out.stdout
