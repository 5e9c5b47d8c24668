"""What a kubelet works out from a Pod before starting a container
(e2e/controlplane/pods/podspec.py): env with the downward API and ConfigMap/Secret
keys, `$(VAR)` expansion, volumes as files that follow their sources, and paths under
mounts rewritten."""

from __future__ import annotations

import base64

import pytest

from e2e.controlplane.pods import podspec
from e2e.controlplane.pods.podspec import PodConfigError

POD = {
    "metadata": {"name": "decode-0", "namespace": "ml-team", "uid": "u-1",
                 "labels": {"app": "engine", "modelplane.ai/role": "Decode"},
                 "annotations": {"note": "x"}},
    "spec": {"nodeName": "node-a"},
}
OBJECTS = {
    ("ConfigMap", "ml-team", "epp-config"): {"epp-config.yaml": "plugins: []\n", "level": "3"},
    ("Secret", "ml-team", "hf-token"): {"token": "hf_secret"},
}


def lookup(kind, namespace, name):
    return OBJECTS.get((kind, namespace, name))


def test_env_reads_the_downward_api_with_the_ip_kwok_assigned():
    c = {"env": [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "ROLE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['modelplane.ai/role']"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]}
    assert podspec.container_env(POD, c, "10.64.0.7", lookup) == {
        "POD_NAME": "decode-0", "NAMESPACE": "ml-team", "HOST": "10.64.0.7",
        "ROLE": "Decode", "NODE": "node-a"}


def test_env_reads_configmap_and_secret_keys_and_expands_earlier_vars_in_order():
    c = {"envFrom": [{"configMapRef": {"name": "epp-config"}, "prefix": "CFG_"}],
         "env": [
             {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}},
             {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "epp-config", "key": "level"}}},
             {"name": "URL", "value": "http://$(HOST):8000/$(LEVEL)/$(LATER)/$$(LEVEL)"},
             {"name": "HOST", "value": "h"},
             {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k",
                                                            "optional": True}}},
         ]}
    env = podspec.container_env(POD, c, "10.64.0.7", lookup)
    assert env["CFG_level"] == "3" and env["HF_TOKEN"] == "hf_secret"
    # HOST was not defined yet, LATER never is: both stay as written; $$ escapes.
    assert env["URL"] == "http://$(HOST):8000/3/$(LATER)/$(LEVEL)"
    assert "OPT" not in env


@pytest.mark.parametrize("ref, message", [
    ({"secretKeyRef": {"name": "absent", "key": "token"}}, "Secret ml-team/absent not found"),
    ({"secretKeyRef": {"name": "hf-token", "key": "nope"}}, "has no key 'nope'"),
    ({"resourceFieldRef": {"resource": "limits.cpu"}}, "not supported"),
    ({"fieldRef": {"fieldPath": "status.phase"}}, "not supported"),
])
def test_a_reference_that_cannot_be_resolved_stops_the_container(ref, message):
    with pytest.raises(PodConfigError, match=message):
        podspec.container_env(POD, {"env": [{"name": "X", "valueFrom": ref}]}, "10.64.0.7", lookup)


def test_expand_is_kubelets_not_the_shells():
    env = {"A": "1", "RANK": "2"}
    assert podspec.expand("--rank=$(RANK) ${RANK} $RANK $$(A) $(B)", env) == \
        "--rank=2 ${RANK} $RANK $(A) $(B)"


def test_volumes_are_written_as_files_with_items_and_modes(tmp_path):
    pod = dict(POD, spec={"volumes": [
        {"name": "config", "configMap": {"name": "epp-config"}},
        {"name": "token", "secret": {"secretName": "hf-token", "defaultMode": 0o400,
                                     "items": [{"key": "token", "path": "hf/token"}]}},
        {"name": "info", "downwardAPI": {"items": [
            {"path": "labels-app", "fieldRef": {"fieldPath": "metadata.labels['app']"}}]}},
        {"name": "both", "projected": {"sources": [
            {"configMap": {"name": "epp-config", "items": [{"key": "level", "path": "level"}]}},
            {"secret": {"name": "hf-token"}}]}},
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
        {"name": "models", "persistentVolumeClaim": {"claimName": "weights"}},
        {"name": "opt", "configMap": {"name": "absent", "optional": True}},
    ]})
    dirs = podspec.materialise_volumes(pod, "10.64.0.7", tmp_path, lookup)
    assert set(dirs) == {"config", "token", "info", "both", "shm", "opt"}  # no PVC
    assert (dirs["config"] / "epp-config.yaml").read_text() == "plugins: []\n"
    assert (dirs["token"] / "hf" / "token").read_text() == "hf_secret"
    assert (dirs["token"] / "hf" / "token").stat().st_mode & 0o777 == 0o400
    assert (dirs["info"] / "labels-app").read_text() == "engine"
    assert sorted(p.name for p in dirs["both"].iterdir()) == ["level", "token"]
    assert dirs["shm"].is_dir() and not any(dirs["shm"].iterdir())
    assert not any(dirs["opt"].iterdir())


def test_a_missing_configmap_volume_stops_the_pod(tmp_path):
    pod = dict(POD, spec={"volumes": [{"name": "c", "configMap": {"name": "absent"}}]})
    with pytest.raises(PodConfigError, match="ConfigMap ml-team/absent not found"):
        podspec.materialise_volumes(pod, "10.64.0.7", tmp_path, lookup)


def test_a_volume_follows_its_source_file_by_file_and_keeps_its_files_when_it_is_gone(tmp_path):
    secret = ("Secret", "lws-system", "lws-webhook-server-cert")
    objects = {secret: {"tls.crt": "OLD", "ca.crt": "CA"}}

    def lookup(kind, namespace, name):
        return objects.get((kind, namespace, name))
    pod = {"metadata": {"namespace": "lws-system"}, "spec": {"volumes": [
        {"name": "cert", "secret": {"secretName": "lws-webhook-server-cert"}},
        {"name": "scratch", "emptyDir": {}}]}}
    dirs = podspec.materialise_volumes(pod, "10.65.0.3", tmp_path, lookup)
    (dirs["scratch"] / "mine").write_text("a process's own file")
    before = {p.name: p.stat().st_ino for p in dirs["cert"].iterdir()}
    with open(dirs["cert"] / "tls.crt") as reader:  # a reader holding the old file
        objects[secret] = {"tls.crt": "NEW", "ca.crt": "CA", "tls.key": "KEY"}
        assert podspec.refresh_volumes(pod, "10.65.0.3", tmp_path, lookup) == [
            "cert/tls.crt", "cert/tls.key"]
        assert reader.read() == "OLD"  # replaced by a rename, never rewritten in place
    assert (dirs["cert"] / "tls.crt").read_text() == "NEW"
    assert (dirs["cert"] / "ca.crt").stat().st_ino == before["ca.crt"]  # unchanged: untouched
    assert sorted(p.name for p in dirs["cert"].iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    # A key removed from the Secret is removed from the volume.
    objects[secret] = {"tls.crt": "NEW", "ca.crt": "CA"}
    assert podspec.refresh_volumes(pod, "10.65.0.3", tmp_path, lookup) == ["cert/tls.key"]
    # The Secret deleted: the volume keeps its files (kubelet keeps the last content).
    del objects[secret]
    assert podspec.refresh_volumes(pod, "10.65.0.3", tmp_path, lookup) == []
    assert (dirs["cert"] / "tls.crt").read_text() == "NEW"
    assert (dirs["scratch"] / "mine").read_text() == "a process's own file"


def test_a_subpath_mount_is_a_copy_that_keeps_what_the_container_started_with(tmp_path):
    objects = {("ConfigMap", "ml-team", "app"): {"app.yaml": "v: 1\n"}}

    def lookup(kind, namespace, name):
        return objects.get((kind, namespace, name))
    pod = dict(POD, spec={"volumes": [{"name": "config", "configMap": {"name": "app"}}]})
    c = {"volumeMounts": [{"name": "config", "mountPath": "/etc/app.yaml", "subPath": "app.yaml"},
                          {"name": "config", "mountPath": "/config"}]}
    vols = podspec.materialise_volumes(pod, "10.64.0.7", tmp_path, lookup)
    (file_mount, file_host), (_, dir_host) = podspec.container_mounts(
        c, vols, tmp_path / "subpaths", podspec.following(pod))
    assert file_mount == "/etc/app.yaml" and file_host.read_text() == "v: 1\n"
    objects[("ConfigMap", "ml-team", "app")] = {"app.yaml": "v: 2\n"}
    podspec.refresh_volumes(pod, "10.64.0.7", tmp_path, lookup)
    assert (dir_host / "app.yaml").read_text() == "v: 2\n"  # the whole volume follows
    assert file_host.read_text() == "v: 1\n"                 # its subPath does not


def test_paths_under_a_mount_are_rewritten_whole_or_after_equals(tmp_path):
    c = {"volumeMounts": [{"name": "config", "mountPath": "/config"},
                          {"name": "nested", "mountPath": "/config/extra/"},
                          {"name": "one", "mountPath": "/etc/app.yaml", "subPath": "app.yaml"},
                          {"name": "pvc", "mountPath": "/models"}]}
    vols = {"config": tmp_path / "c", "nested": tmp_path / "n", "one": tmp_path / "o"}
    mounts = podspec.container_mounts(c, vols)
    assert podspec.rewrite_paths([
        "--config-file=/config/epp-config.yaml", "/config", "/config/extra/x",
        "/configs/other", "--cfg", "/etc/app.yaml", "/models/llama", "relative/config/x",
    ], mounts) == [
        f"--config-file={tmp_path}/c/epp-config.yaml", f"{tmp_path}/c", f"{tmp_path}/n/x",
        "/configs/other", "--cfg", f"{tmp_path}/o/app.yaml", "/models/llama", "relative/config/x"]


def test_decode_secret_reads_data_and_string_data():
    secret = {"data": {"token": base64.b64encode(b"abc").decode()}, "stringData": {"x": "y"}}
    assert podspec.decode_secret(secret) == {"token": "abc", "x": "y"}
