"""The harness runs each remote cluster's inventory reporter as its pod would run:
the composed command, the composed ServiceAccount's token, nothing more."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from e2e.controlplane import inventory
from function.cluster import reporter
from function.contract.records import Cluster, ProviderConfig


def composed_deployment() -> dict:
    cluster = Cluster("eu-west-1", {}, (), True, (), ProviderConfig("eu-west-1",
                                                                    "ClusterProviderConfig"))
    obj = reporter.objects(cluster)["inventory-deployment"]
    return obj["spec"]["forProvider"]["manifest"]


def test_the_reporter_runs_the_composed_command_with_a_kubeconfig(tmp_path):
    argv = inventory.argv(pathlib.Path("/repo/.venv/bin/function-model-serving"),
                          composed_deployment(), tmp_path / "kc")
    assert argv == ("/repo/.venv/bin/function-model-serving", "inventory", "--namespace",
                    "modelplane-system", "--interval", "30", "--kubeconfig", str(tmp_path / "kc"))


def test_a_composed_deployment_running_something_else_is_refused(tmp_path):
    dep = composed_deployment()
    dep["spec"]["template"]["spec"]["containers"][0]["command"] = ["sh", "-c", "true"]
    with pytest.raises(ValueError, match="not function-model-serving inventory"):
        inventory.argv(pathlib.Path("/bin/fms"), dep, tmp_path / "kc")


def test_the_token_kubeconfig_keeps_the_server_and_ca_and_drops_the_admin(tmp_path):
    admin = tmp_path / "admin"
    admin.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "eu",
        "clusters": [{"name": "eu", "cluster": {"server": "https://127.0.0.1:6444",
                                                "certificate-authority-data": "Q0E="}}],
        "users": [{"name": "admin", "user": {"client-certificate-data": "c2VjcmV0"}}],
        "contexts": [{"name": "eu", "context": {"cluster": "eu", "user": "admin"}}]}))
    cfg = yaml.safe_load(inventory.token_kubeconfig(admin, "tok"))
    assert cfg["clusters"][0]["cluster"] == {"server": "https://127.0.0.1:6444",
                                             "certificate-authority-data": "Q0E="}
    assert cfg["users"] == [{"name": "reporter", "user": {"token": "tok"}}]
    assert "c2VjcmV0" not in yaml.safe_dump(cfg)


def test_the_harness_waits_for_every_composed_part_of_the_reporters_identity():
    # provider-kubernetes creates the composed Objects in no particular order;
    # starting the reporter before its ServiceAccount exists failed a CI run.
    cluster = Cluster("eu-west-1", {}, (), True, (), ProviderConfig("eu-west-1",
                                                                    "ClusterProviderConfig"))
    composed = {obj["spec"]["forProvider"]["manifest"]["kind"].lower()
                for key, obj in reporter.objects(cluster).items()
                if key != reporter.REPORT}
    waited = set()
    for args in (inventory.rbac_args(), inventory.cluster_rbac_args(),
                 inventory.deployment_args()):
        waited |= {kind.split(".")[0].removesuffix("s") for kind in args[1].split(",")}
        assert inventory.DEPLOYMENT in args
    assert waited == composed - {"namespace"}
