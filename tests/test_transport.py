"""The gRPC server requires mutual TLS unless --insecure is given."""

from __future__ import annotations

import subprocess
import sys

import grpc
import pytest
from builders import ROOT, load_one, request
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from function.tools import localrender


def openssl(*args: str, cwd) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, from openssl."""
    d = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
            "-keyout", "ca.key", "-out", "ca.crt", cwd=d)
    for name, san in (("tls", "IP:127.0.0.1,DNS:localhost"), ("client", "DNS:crossplane")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        (d / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "1", "-extfile", f"{name}.ext",
                "-out", f"{name}.crt", cwd=d)
    return d


@pytest.fixture(scope="module")
def mtls_server(pki):
    address = f"127.0.0.1:{localrender.free_port()}"
    proc = subprocess.Popen([sys.executable, "-m", "function.runtime.main", "serve", "--address", address,
                             "--tls-certs-dir", str(pki)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_listening(address, proc)
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def wait_listening(address, proc, timeout=30.0):
    import socket
    import time
    host, port = address.split(":")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()
        try:
            socket.create_connection((host, int(port)), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"server did not listen on {address}")


def call(address: str, creds: grpc.ChannelCredentials):
    req = request(load_one("examples/fleet/us-east-1.yaml"), required={"model-replicas": []})
    with grpc.secure_channel(address, creds) as channel:
        return grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=10)


def test_a_client_with_a_certificate_from_the_ca_is_served(pki, mtls_server):
    creds = grpc.ssl_channel_credentials(
        root_certificates=(pki / "ca.crt").read_bytes(),
        private_key=(pki / "client.key").read_bytes(),
        certificate_chain=(pki / "client.crt").read_bytes())
    rsp = call(mtls_server, creds)
    assert rsp.desired.composite.resource["status"]["nodePools"]


def test_a_client_without_a_certificate_is_refused(pki, mtls_server):
    creds = grpc.ssl_channel_credentials(root_certificates=(pki / "ca.crt").read_bytes())
    with pytest.raises(grpc.RpcError) as err:
        call(mtls_server, creds)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_plaintext_client_is_refused(mtls_server):
    req = request(load_one("examples/fleet/us-east-1.yaml"))
    with grpc.insecure_channel(mtls_server) as channel, pytest.raises(grpc.RpcError):
        grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=5)


def test_serving_without_certificates_or_insecure_refuses_to_start():
    out = subprocess.run([sys.executable, "-m", "function.runtime.main", "serve", "--address",
                          f"127.0.0.1:{localrender.free_port()}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "--tls-certs-dir" in out.stderr and "--insecure" in out.stderr
