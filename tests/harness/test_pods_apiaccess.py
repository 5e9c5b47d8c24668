"""A pod's API access on make cluster (e2e/controlplane/pods/apiaccess.py): the relay
carries bytes both ways and stays within its bound; a pod gets a kubeconfig for a
token of its own ServiceAccount, verified by a name in the API server's certificate,
and nothing when it opts out of a token."""

from __future__ import annotations

import socket
import stat
import threading

import yaml

from e2e.controlplane.pods import apiaccess
from e2e.controlplane.pods.runner import Binaries, plan


def _echo_server() -> tuple[socket.socket, int]:
    srv = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(1024):
                    conn.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def test_the_relay_carries_bytes_both_ways_to_its_target():
    srv, port = _echo_server()
    relay = apiaccess.Relay(("127.0.0.1", 0), ("127.0.0.1", port))
    try:
        for _ in range(3):  # connections one after another reuse the relay's slots
            with socket.create_connection(relay.address, timeout=5) as c:
                c.sendall(b"get /api")
                assert c.recv(1024) == b"GET /API"
    finally:
        relay.close()
        srv.close()


def test_the_relay_refuses_connections_past_its_bound(monkeypatch):
    monkeypatch.setattr(apiaccess, "MAX_CONNECTIONS", 1)
    srv, port = _echo_server()
    relay = apiaccess.Relay(("127.0.0.1", 0), ("127.0.0.1", port))
    try:
        with socket.create_connection(relay.address, timeout=5) as first:
            first.sendall(b"a")
            assert first.recv(16) == b"A"
            with socket.create_connection(relay.address, timeout=5) as second:
                second.sendall(b"b")
                try:  # closed over the bound: an end of stream, or a reset for the unread byte
                    assert second.recv(16) == b""
                except ConnectionResetError:
                    pass
    finally:
        relay.close()
        srv.close()


def _pod(**spec):
    return {"metadata": {"name": "epp-0", "namespace": "team", "uid": "u-1"},
            "spec": {"containers": [{"name": "epp",
                                     "image": "ghcr.io/llm-d/llm-d-inference-scheduler:v0.7.1",
                                     "args": ["--pool-name=p"]}], **spec}}


def test_a_pod_gets_a_kubeconfig_for_a_token_of_its_own_service_account(tmp_path):
    asked = []

    def token(ns, account, pod, uid):
        asked.append((ns, account, pod, uid))
        return "tok"

    access = apiaccess.PodAccess("https://10.64.255.254:6443", "Q0E=", token)
    env = access(_pod(serviceAccountName="picker"), tmp_path)
    assert asked == [("team", "picker", "epp-0", "u-1")]
    path = tmp_path / "serviceaccount" / "kubeconfig"
    assert env == {"KUBECONFIG": str(path)}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    doc = yaml.safe_load(path.read_text())
    cluster = doc["clusters"][0]["cluster"]
    assert cluster == {"server": "https://10.64.255.254:6443", "certificate-authority-data": "Q0E=",
                       "tls-server-name": "kubernetes.default.svc"}
    assert doc["users"][0]["user"] == {"token": "tok"}
    assert doc["contexts"][0]["context"]["namespace"] == "team"


def test_the_default_account_and_an_opt_out_as_a_kubelet_does(tmp_path):
    asked = []
    access = apiaccess.PodAccess("https://x:1", "", lambda *a: asked.append(a) or "t")
    access(_pod(), tmp_path)
    assert asked[0][1] == "default"
    assert access(_pod(automountServiceAccountToken=False), tmp_path) == {}
    assert len(asked) == 1


def test_the_api_server_and_its_ca_come_from_the_admin_kubeconfig(tmp_path):
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"PEM")
    kc = tmp_path / "kubeconfig"
    kc.write_text(yaml.safe_dump({
        "current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k"}}],
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:40123",
                                               "certificate-authority": str(ca)}}]}))
    assert apiaccess.api_server(kc) == ("127.0.0.1", 40123, "UEVN")


def test_every_run_container_gets_the_api_env_and_its_own_env_wins(tmp_path):
    pod = _pod()
    pod["spec"]["containers"][0]["env"] = [{"name": "KUBECONFIG", "value": "/mine"}]
    binaries = Binaries("/sim", "/epp", "/sidecar", "/lws-manager")
    plans = plan(pod, "10.64.0.5", binaries, lambda *a: None, tmp_path,
                 api_env={"KUBECONFIG": "/given", "OTHER": "x"})
    assert plans[0].env["KUBECONFIG"] == "/mine" and plans[0].env["OTHER"] == "x"
    plans = plan(_pod(), "10.64.0.5", binaries, lambda *a: None, tmp_path,
                 api_env={"KUBECONFIG": "/given"})
    assert plans[0].env["KUBECONFIG"] == "/given"
