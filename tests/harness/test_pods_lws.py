"""LeaderWorkerSet's manager as the serving stack's chart runs it, on the pod runner
(e2e/controlplane/pods/lws.py, runner.py, podspec.refresh_volumes): the LWS binary
with a copy of its config whose `webhook.certDir` is the pod's own `cert` volume,
not the machine's /tmp; that volume follows the Secret the manager fills after it
starts; the config mounted by subPath does not follow its ConfigMap."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from test_pods_runner import _record

from e2e.controlplane.pods import lws
from e2e.controlplane.pods.images import Role
from e2e.controlplane.pods.runner import Binaries, PodRunner, plan

CONFIG = """
apiVersion: config.lws.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: true
internalCertManagement:
  enable: true
"""

# The chart's lws-controller-manager pod (charts/lws/templates/manager/deployment.yaml
# of sigs.k8s.io/lws v0.9.0, default values), as the ReplicaSet creates it.
MANAGER_POD = {
    "metadata": {"name": "lws-controller-manager-7d9f-abcde", "namespace": "lws-system",
                 "uid": "uid-lws"},
    "spec": {
        "serviceAccountName": "lws-controller-manager",
        "containers": [{
            "name": "manager", "image": "registry.k8s.io/lws/lws:v0.9.0",
            "command": ["/manager"],
            "args": ["--config=/controller_manager_config.yaml", "--zap-log-level=2"],
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8081},
                               "initialDelaySeconds": 5, "periodSeconds": 10},
            "volumeMounts": [
                {"name": "manager-config", "subPath": "controller_manager_config.yaml",
                 "mountPath": "/controller_manager_config.yaml"},
                {"name": "cert", "mountPath": "/tmp/k8s-webhook-server/serving-certs",
                 "readOnly": True}]}],
        "volumes": [
            {"name": "manager-config", "configMap": {"name": "lws-manager-config"}},
            {"name": "cert", "secret": {"defaultMode": 420,
                                        "secretName": "lws-webhook-server-cert"}}]}}

FAKE = f"""#!{sys.executable}
import json, os, sys, time
json.dump({{"argv": sys.argv, "env": dict(os.environ)}}, open("record.json", "w"))
while True:
    time.sleep(60)
"""


class Objects:
    """The cluster's ConfigMaps and Secrets, as the supervisor's lookup reads them."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, str, str], dict[str, str]] = {
            ("ConfigMap", "lws-system", "lws-manager-config"):
                {"controller_manager_config.yaml": CONFIG},
            # The chart's Secret is empty: the manager's cert rotator fills it.
            ("Secret", "lws-system", "lws-webhook-server-cert"): {},
        }

    def __call__(self, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        return self.data.get((kind, namespace, name))


@pytest.fixture
def binaries(tmp_path) -> Binaries:
    fake = tmp_path / "bin" / "lws-manager"
    fake.parent.mkdir()
    fake.write_text(FAKE)
    fake.chmod(0o755)
    return Binaries("/sim", "/epp", "/sidecar", str(fake))


def _config(argv) -> tuple[Path, dict]:
    (arg,) = [a for a in argv if a.startswith("--config=")]
    path = Path(arg.split("=", 1)[1])
    return path, yaml.safe_load(path.read_text())


def test_the_charts_manager_runs_the_lws_binary_with_a_cert_dir_of_its_own_pod(binaries, tmp_path):
    pod_dir = tmp_path / "pod"
    (manager,) = plan(MANAGER_POD, "10.65.0.3", binaries, Objects(), pod_dir)
    assert manager.role is Role.LWS and manager.argv[0] == binaries.lws_manager
    assert manager.argv[2:] == ("--zap-log-level=2",)
    path, config = _config(manager.argv)
    assert path.parent == pod_dir / "containers" / "manager"
    # The ConfigMap's settings are kept; only where the certificates are read moves.
    assert config["leaderElection"] == {"leaderElect": True}
    assert config["internalCertManagement"] == {"enable": True}
    assert config["webhook"] == {"certDir": str(pod_dir / "volumes" / "cert")}
    assert "/tmp/k8s-webhook-server/serving-certs" in manager.note


def test_a_cert_dir_the_config_names_follows_its_mount_and_one_outside_every_mount_is_private(
        tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"kind": "Configuration",
                                   "webhook": {"port": 9443, "certDir": "/certs/webhook"}}))
    argv, _ = lws.translate(["/bin/lws", "--config", str(cfg), "-v"],
                            [("/certs", tmp_path / "vol")], tmp_path / "c")
    assert argv[0] == "/bin/lws" and argv[2] == "-v" and len(argv) == 3
    assert _config(argv)[1]["webhook"] == {"port": 9443, "certDir": str(tmp_path / "vol/webhook")}
    # Nothing mounted at the default: the container's own directory, never the host's /tmp.
    argv, _ = lws.translate(["/bin/lws"], [], tmp_path / "d")
    own = tmp_path / "d" / "tmp/k8s-webhook-server/serving-certs"
    assert _config(argv)[1]["webhook"]["certDir"] == str(own) and own.is_dir()
    with pytest.raises(lws.LwsConfigError, match="not a file"):
        lws.translate(["/bin/lws", f"--config={tmp_path / 'absent.yaml'}"], [], tmp_path / "e")


def test_the_secret_filled_after_start_reaches_the_cert_dir_and_the_config_stays(binaries, tmp_path):
    objects = Objects()
    runner = PodRunner("test", binaries, tmp_path / "state", objects)
    running = runner.start(MANAGER_POD, "127.0.0.1")
    try:
        started = _record(running, "manager")
        cert_dir = Path(_config(started["argv"])[1]["webhook"]["certDir"])
        # A container's /tmp is its own: TMPDIR is under its directory.
        assert started["env"]["TMPDIR"].startswith(str(running.pod_dir / "containers" / "manager"))
        assert list(cert_dir.iterdir()) == []
        # The cert rotator writes the Secret; the ConfigMap changes too.
        objects.data[("Secret", "lws-system", "lws-webhook-server-cert")] = {
            "ca.crt": "CA", "tls.crt": "CERT", "tls.key": "KEY"}
        objects.data[("ConfigMap", "lws-system", "lws-manager-config")] = {
            "controller_manager_config.yaml": "kind: Configuration\n"}
        changed = runner.sync_volumes(MANAGER_POD, running)
        assert sorted(changed) == ["cert/ca.crt", "cert/tls.crt", "cert/tls.key",
                                   "manager-config/controller_manager_config.yaml"]
        assert (cert_dir / "tls.crt").read_text() == "CERT"
        assert (cert_dir / "tls.key").stat().st_mode & 0o777 == 420
        # The subPath mount is a copy, as kubelet's bind mount: it keeps what it started with.
        (subpath,) = (running.pod_dir / "volume-subpaths").rglob("controller_manager_config.yaml")
        assert subpath.read_text() == CONFIG
        assert runner.sync_volumes(MANAGER_POD, running) == []  # nothing changed since
    finally:
        runner.stop(running, grace=2)
