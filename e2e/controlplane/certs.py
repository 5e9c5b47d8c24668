"""Certificates for the local clusters, made with the openssl CLI.

One CA signs everything the harness makes: each API server's serving
certificate (127.0.0.1, localhost and the in-cluster names), the admin client
certificate (O=system:masters), the LWS webhook's serving certificate, and
the function server's certificate (that one is signed by Crossplane's own CA,
read from the Secret `core init` writes). Service-account tokens are signed
with an RSA key pair.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


class CertError(RuntimeError):
    pass


# A minimal openssl config: the subject comes from -subj, extensions from a section.
REQ_CONFIG = "[req]\ndistinguished_name = dn\n[dn]\n"


@dataclass(frozen=True)
class Pair:
    crt: Path
    key: Path

    def pem(self) -> tuple[bytes, bytes]:
        return self.crt.read_bytes(), self.key.read_bytes()


def _openssl(*args: str, cwd: Path | None = None) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CertError(f"openssl {' '.join(args)} failed ({proc.returncode}):\n"
                        f"{proc.stderr.strip()}")


def _subject(cn: str, orgs: Sequence[str] = ()) -> str:
    for part in (cn, *orgs):
        if "/" in part or "=" in part:
            raise CertError(f"unsupported character in subject part {part!r}")
    return "".join(f"/O={o}" for o in orgs) + f"/CN={cn}"


def extensions(*, dns: Sequence[str] = (), ips: Sequence[str] = (), client: bool = False,
               server: bool = False, ca: bool = False) -> str:
    """The v3 extension section for a leaf (or CA) certificate; pure, for tests."""
    lines = []
    if ca:
        lines += ["basicConstraints=critical,CA:TRUE",
                  "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
                  "subjectKeyIdentifier=hash"]
    else:
        usages = [u for u, on in (("serverAuth", server), ("clientAuth", client)) if on]
        if not usages:
            raise CertError("a leaf certificate is for a server, a client, or both")
        lines += ["basicConstraints=critical,CA:FALSE",
                  "keyUsage=critical,digitalSignature,keyEncipherment",
                  f"extendedKeyUsage={','.join(usages)}",
                  "authorityKeyIdentifier=keyid,issuer"]
    sans = [f"DNS:{d}" for d in dns] + [f"IP:{i}" for i in ips]
    if sans:
        lines.append("subjectAltName=" + ",".join(sans))
    return "\n".join(lines) + "\n"


def make_ca(directory: Path, name: str = "ca", cn: str = "modelplane-e2e-ca",
            days: int = 3650) -> Pair:
    directory.mkdir(parents=True, exist_ok=True)
    pair = Pair(directory / f"{name}.crt", directory / f"{name}.key")
    with tempfile.NamedTemporaryFile("w", suffix=".cnf", dir=directory) as cnf:
        cnf.write(REQ_CONFIG + "[v3]\n" + extensions(ca=True))
        cnf.flush()
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(pair.key),
                 "-out", str(pair.crt), "-days", str(days), "-subj", _subject(cn),
                 "-config", cnf.name, "-extensions", "v3")
    pair.key.chmod(0o600)
    return pair


def issue(ca: Pair, directory: Path, name: str, cn: str, *, orgs: Sequence[str] = (),
          dns: Sequence[str] = (), ips: Sequence[str] = (), client: bool = False,
          server: bool = False, days: int = 3650) -> Pair:
    """A leaf certificate and its key (EC P-256), signed by `ca`."""
    directory.mkdir(parents=True, exist_ok=True)
    pair = Pair(directory / f"{name}.crt", directory / f"{name}.key")
    csr = directory / f"{name}.csr"
    with tempfile.NamedTemporaryFile("w", suffix=".cnf", dir=directory) as cnf:
        cnf.write(REQ_CONFIG)
        cnf.flush()
        _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-keyout", str(pair.key), "-out", str(csr),
                 "-subj", _subject(cn, orgs), "-config", cnf.name)
    with tempfile.NamedTemporaryFile("w", suffix=".ext", dir=directory) as ext:
        ext.write(extensions(dns=dns, ips=ips, client=client, server=server))
        ext.flush()
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca.crt), "-CAkey", str(ca.key),
                 "-set_serial", f"0x{int.from_bytes(os.urandom(8), 'big'):x}",
                 "-days", str(days), "-extfile", ext.name, "-out", str(pair.crt))
    csr.unlink()
    pair.key.chmod(0o600)
    return pair


def make_rsa_keypair(directory: Path, name: str = "sa") -> tuple[Path, Path]:
    """(private key, public key) for service-account token signing."""
    directory.mkdir(parents=True, exist_ok=True)
    key, pub = directory / f"{name}.key", directory / f"{name}.pub"
    _openssl("genrsa", "-out", str(key), "2048")
    _openssl("rsa", "-in", str(key), "-pubout", "-out", str(pub))
    key.chmod(0o600)
    return key, pub


def write_ca(directory: Path, name: str, crt_pem: bytes, key_pem: bytes) -> Pair:
    """Store a CA someone else made (Crossplane's) so `issue` can sign with it."""
    directory.mkdir(parents=True, exist_ok=True)
    pair = Pair(directory / f"{name}.crt", directory / f"{name}.key")
    pair.crt.write_bytes(crt_pem)
    pair.key.write_bytes(key_pem)
    pair.key.chmod(0o600)
    return pair


def verify(ca: Path, crt: Path) -> str:
    """openssl verify's answer ('...: OK') or raise CertError."""
    proc = subprocess.run(["openssl", "verify", "-CAfile", str(ca), str(crt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise CertError(proc.stdout + proc.stderr)
    return proc.stdout.strip()


def describe(crt: Path) -> str:
    proc = subprocess.run(["openssl", "x509", "-in", str(crt), "-noout", "-text"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise CertError(proc.stderr)
    return proc.stdout
