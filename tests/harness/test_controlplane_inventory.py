"""Each remote cluster's inventory reporter runs as the pod the InferenceCluster
composes there: the pods supervisor maps the function's image to this repository's
entry point, runs the composed command, and gives it the pod's API access (a token of
its ServiceAccount) through KUBECONFIG, which the reporter reads before in-cluster
config, as client-go does. The token kubeconfig provider-kubernetes reaches a remote
cluster with keeps the cluster and drops the admin's credentials."""

from __future__ import annotations

import pathlib

import yaml

from e2e.controlplane import security
from e2e.controlplane.pods import images
from e2e.controlplane.pods.runner import Binaries, plan
from function.cluster import reporter
from function.contract.records import Cluster, ProviderConfig


def composed_pod() -> dict:
    """The pod the composed reporter Deployment's template makes."""
    cluster = Cluster("eu-west-1", {}, (), True, (), ProviderConfig("eu-west-1",
                                                                    "ClusterProviderConfig"))
    deployment = reporter.objects(cluster)["inventory-deployment"]["spec"]["forProvider"]["manifest"]
    template = deployment["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "modelplane-inventory-x", "namespace": "modelplane-system",
                         **template.get("metadata", {})},
            "spec": template["spec"]}


def test_the_reporters_image_is_mapped_whatever_its_tag():
    assert images.role(reporter.image()) is images.Role.REPORTER
    assert images.role(reporter.DEFAULT_IMAGE.rsplit(":", 1)[0] + ":v9.9.9") is images.Role.REPORTER
    assert images.runnable(composed_pod())


def test_the_reporter_runs_the_composed_command_with_the_pods_api_access(tmp_path):
    binaries = Binaries("/sim", "/epp", "/sidecar", "/lws-manager", "/repo/.venv/bin/fms")
    (run,) = plan(composed_pod(), "10.64.0.5", binaries, lambda *a: None, tmp_path,
                  api_env={"KUBECONFIG": "/pod/kubeconfig"})
    assert run.role is images.Role.REPORTER
    assert run.argv == ("/repo/.venv/bin/fms", "inventory", "--namespace", "modelplane-system",
                        "--interval", "30")
    assert run.env["KUBECONFIG"] == "/pod/kubeconfig"


def test_by_default_the_reporter_is_the_entry_point_beside_the_harness_python():
    path = pathlib.Path(Binaries("/s", "/e", "/p", "/l").path(images.Role.REPORTER))
    assert path.name == "function-model-serving" and path.parent.name == "bin"


def test_the_reporter_reads_kubeconfig_before_in_cluster_config(monkeypatch):
    from kubernetes import config

    from function.agent import inventory

    loaded = []
    monkeypatch.setattr(config, "load_kube_config", lambda config_file=None: loaded.append(
        ("kubeconfig", config_file)))
    monkeypatch.setattr(config, "load_incluster_config", lambda: loaded.append(("in-cluster",)))
    monkeypatch.setattr(inventory, "report_once", lambda *a: [])
    monkeypatch.setenv("KUBECONFIG", "/pod/kubeconfig")
    inventory.run(None, "modelplane-system", 0, once=True)
    monkeypatch.delenv("KUBECONFIG")
    inventory.run(None, "modelplane-system", 0, once=True)
    inventory.run("/flag", "modelplane-system", 0, once=True)
    assert loaded == [("kubeconfig", "/pod/kubeconfig"), ("in-cluster",), ("kubeconfig", "/flag")]


def test_the_token_kubeconfig_keeps_the_server_and_ca_and_drops_the_admin(tmp_path):
    admin = tmp_path / "admin"
    admin.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "eu",
        "clusters": [{"name": "eu", "cluster": {"server": "https://127.0.0.1:6444",
                                                "certificate-authority-data": "Q0E="}}],
        "users": [{"name": "admin", "user": {"client-certificate-data": "c2VjcmV0"}}],
        "contexts": [{"name": "eu", "context": {"cluster": "eu", "user": "admin"}}]}))
    cfg = yaml.safe_load(security.token_kubeconfig(admin, "tok", "remote"))
    assert cfg["clusters"][0]["cluster"] == {"server": "https://127.0.0.1:6444",
                                             "certificate-authority-data": "Q0E="}
    assert cfg["users"] == [{"name": "remote", "user": {"token": "tok"}}]
    assert "c2VjcmV0" not in yaml.safe_dump(cfg)
