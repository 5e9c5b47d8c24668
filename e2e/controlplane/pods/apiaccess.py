"""A pod's access to its cluster's API server, as a kubelet would give it.

In Kubernetes a pod reaches the API server at the `kubernetes` Service and
authenticates with its ServiceAccount's token, mounted by the kubelet. Here a
pod is a network namespace on its cluster's bridge, and the API server listens
on the root namespace's 127.0.0.1, which is not the pod's. So:

* `Relay` listens on the bridge's own address (the one address a pod namespace
  can reach; it has no default route) and copies bytes to the API server's
  loopback address. TLS passes through untouched: the pod verifies the API
  server's certificate itself, by a name the certificate holds
  (`kubernetes.default.svc`), and the relay never sees a credential.
* `PodAccess` asks the API server for a token of the pod's ServiceAccount bound
  to the pod (TokenRequest, as the kubelet's projected volume does: deleting the
  pod invalidates it) and writes a kubeconfig for it; the container gets
  `KUBECONFIG` (client-go and controller-runtime read it before in-cluster
  config), since a path like /var/run/secrets/... cannot be mounted per process.
  What the pod may do is therefore what its Role grants: the composed RBAC is
  exercised for real. A pod with `automountServiceAccountToken: false` gets nothing.
"""

from __future__ import annotations

import base64
import os
import socket
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

RELAY_PORT = 6443             # on the bridge address, one bridge per cluster
MAX_CONNECTIONS = 64          # a runaway client cannot exhaust the supervisor's threads
SERVER_NAME = "kubernetes.default.svc"  # in the API server's certificate (core.py _certs)
TOKEN_SECONDS = 24 * 3600     # longer than any run; the pod's deletion revokes it sooner
BUFFER = 65536

# (namespace, service account, pod name, pod uid) -> a bound token.
TokenSource = Callable[[str, str, str, str], str]


class Relay:
    """A TCP relay from (listen_host, listen_port) to (target_host, target_port)."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        self._sock = socket.create_server(listen, reuse_port=False)
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="api-relay", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._sock.accept()
            except OSError:
                return  # closed
            if not self._slots.acquire(blocking=False):
                client.close()  # over the bound: the client retries, as it would on a refusal
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            client.close()
            self._slots.release()
            return
        upstream.settimeout(None)
        done = threading.Event()
        threading.Thread(target=_pump, args=(upstream, client, done), daemon=True).start()
        _pump(client, upstream, done)
        done.wait()
        for s in (client, upstream):
            s.close()
        self._slots.release()

    def close(self) -> None:
        self._closed.set()
        self._sock.close()


def _pump(src: socket.socket, dst: socket.socket, done: threading.Event) -> None:
    """Copy src -> dst until either side ends; then end both directions."""
    try:
        while data := src.recv(BUFFER):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        done.set()


def api_server(admin_kubeconfig: Path) -> tuple[str, int, str]:
    """(host, port, CA as base64 PEM) of the current context's cluster."""
    doc = yaml.safe_load(Path(admin_kubeconfig).read_text())
    current = doc.get("current-context")
    context = next(c["context"] for c in doc["contexts"] if c["name"] == current)
    cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == context["cluster"])
    url = urlsplit(cluster["server"])
    if cluster.get("certificate-authority-data"):
        ca = cluster["certificate-authority-data"]
    else:
        ca = base64.b64encode(Path(cluster["certificate-authority"]).read_bytes()).decode()
    return url.hostname or "127.0.0.1", url.port or 443, ca


def kubeconfig(server: str, ca_data: str, token: str, namespace: str) -> dict[str, Any]:
    """A kubeconfig for one pod: the relay's address, verified as SERVER_NAME."""
    return {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": {
            "server": server, "certificate-authority-data": ca_data,
            "tls-server-name": SERVER_NAME}}],
        "users": [{"name": "serviceaccount", "user": {"token": token}}],
        "contexts": [{"name": "pod", "context": {
            "cluster": "cluster", "user": "serviceaccount", "namespace": namespace}}],
        "current-context": "pod",
    }


class PodAccess:
    """`(pod, pod_dir) -> env`: the env that gives a pod's containers its API access."""

    def __init__(self, server: str, ca_data: str, token: TokenSource) -> None:
        self.server, self.ca_data, self.token = server, ca_data, token

    def __call__(self, pod: Mapping[str, Any], pod_dir: Path) -> dict[str, str]:
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        if spec.get("automountServiceAccountToken") is False:
            return {}
        namespace = meta.get("namespace") or "default"
        account = spec.get("serviceAccountName") or "default"
        token = self.token(namespace, account, meta.get("name", ""), meta.get("uid", ""))
        path = Path(pod_dir) / "serviceaccount" / "kubeconfig"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            yaml.safe_dump(kubeconfig(self.server, self.ca_data, token, namespace), out)
        return {"KUBECONFIG": str(path)}
