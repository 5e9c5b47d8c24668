"""The packages: the runtime image built without Docker, and the two xpkgs.

`hack/build-image.sh` builds the function's runtime image (a debootstrap'd
Debian 12 root filesystem plus /venv, assembled by crane) and
`hack/build-packages.sh` the Function and Configuration packages with the
pinned `crossplane xpkg build`. Both cache under ~/.cache/function-model-serving:
the first run on a fresh machine takes a few minutes, later runs seconds (the
image is rebuilt, in about a minute, when function/ or pyproject.toml changes).
A missing tool or a failed build fails these tests; nothing is skipped.

The smoke test unpacks the image's layers, starts its entrypoint from that
filesystem as the image's user (a private mount and PID namespace, chrooted:
what a container runtime does, minus the network namespace), and renders an
example deployment against it with the real crossplane CLI.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gzip
import hashlib
import io
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
import yaml
from builders import EXAMPLES, ROOT, load, load_one, request
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from function.__version__ import __version__
from function.tools import localrender

USER = "65532:65532"
ENTRYPOINT = ["/venv/bin/function-model-serving", "serve"]
XPKG_LABEL = "io.crossplane.xpkg:"
# Generous bounds on "reasonably small" (today about 104 MiB compressed,
# 360 MiB unpacked, most of it the kubernetes client's generated models).
MAX_COMPRESSED = 160 * 2**20
MAX_UNPACKED = 512 * 2**20


# ------------------------------------------------------------------ reading

@dataclass
class Archive:
    """A docker-archive image tarball (what crane and `xpkg build` write)."""

    path: pathlib.Path
    manifest: dict
    config: dict

    @classmethod
    def open(cls, path: pathlib.Path) -> Archive:
        with tarfile.open(path) as tar:
            (manifest,) = json.load(tar.extractfile("manifest.json"))
            config = json.load(tar.extractfile(manifest["Config"]))
        return cls(path, manifest, config)

    @property
    def layers(self) -> list[str]:
        return self.manifest["Layers"]

    def blob(self, name: str) -> bytes:
        with tarfile.open(self.path) as tar:
            return tar.extractfile(name).read()

    def layer_tar(self, name: str) -> tarfile.TarFile:
        return tarfile.open(fileobj=io.BytesIO(gzip.decompress(self.blob(name))))

    @functools.cached_property
    def digests(self) -> dict[str, str]:
        """Each layer's digest, as the xpkg labels name them."""
        return {name: "sha256:" + hashlib.sha256(self.blob(name)).hexdigest()
                for name in self.layers}

    def labelled(self, value: str) -> list[str]:
        """The layers whose xpkg label (on the config) is `value`."""
        labels = self.config["config"].get("Labels") or {}
        wanted = {k[len(XPKG_LABEL):] for k, v in labels.items()
                  if k.startswith(XPKG_LABEL) and v == value}
        return [name for name in self.layers if self.digests[name] in wanted]

    def read(self, layer: str, member: str) -> bytes:
        with self.layer_tar(layer) as tar:
            return tar.extractfile(member).read()


def run_script(*args: str, env: dict | None = None) -> str:
    """Run one of our build scripts; its failure fails the test with its log."""
    out = subprocess.run(["bash", *args], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, **(env or {})})
    if out.returncode != 0:
        pytest.fail(f"{' '.join(args)} failed ({out.returncode}):\n{out.stderr[-8000:]}")
    return out.stdout


def norm(name: str) -> str:
    return name[2:] if name.startswith("./") else name.lstrip("/")


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def image_tar() -> pathlib.Path:
    if os.geteuid() != 0:
        pytest.fail("building the runtime image needs root (debootstrap, chroot, unshare)")
    path = pathlib.Path(run_script("hack/build-image.sh").strip().splitlines()[-1])
    assert path.is_file(), path
    return path


@pytest.fixture(scope="module")
def image(image_tar) -> Archive:
    return Archive.open(image_tar)


@pytest.fixture(scope="module")
def members(image) -> list[tarfile.TarInfo]:
    found = []
    for layer in image.layers:
        with image.layer_tar(layer) as tar:
            found += tar.getmembers()
    return found


@pytest.fixture(scope="module")
def rootfs(image, tmp_path_factory) -> Iterator[pathlib.Path]:
    """The image's filesystem: its layers untarred in order, owners kept."""
    root = tmp_path_factory.mktemp("rootfs")
    with tarfile.open(image.path) as tar:
        for layer in image.layers:
            blob = tar.extractfile(layer).read()
            out = subprocess.run(["tar", "-xz", "--numeric-owner", "-C", str(root)],
                                 input=blob, capture_output=True)
            assert out.returncode == 0, out.stderr.decode()
    yield root
    # Mounts made for the smoke test live in its own namespace, never here.
    shutil.rmtree(root)


@pytest.fixture(scope="module")
def packages(tools, tmp_path_factory) -> Iterator[dict[str, Archive]]:
    out = tmp_path_factory.mktemp("dist")
    paths = run_script("hack/build-packages.sh", str(out),
                       env={"CROSSPLANE_CLI": tools.cli}).split()
    fn, cfg = (pathlib.Path(p) for p in paths)
    assert fn.name == f"function-model-serving-v{__version__}.xpkg"
    assert cfg.name == f"configuration-model-serving-v{__version__}.xpkg"
    yield {"function": Archive.open(fn), "configuration": Archive.open(cfg)}
    shutil.rmtree(out)


def package_docs(pkg: Archive) -> list[dict]:
    (layer,) = pkg.labelled("base")
    with pkg.layer_tar(layer) as tar:
        assert tar.getnames() == ["package.yaml"]
    return [d for d in yaml.safe_load_all(pkg.read(layer, "package.yaml")) if d]


def meta_of(docs: list[dict], kind: str) -> dict:
    (meta,) = [d for d in docs if d["apiVersion"].startswith("meta.pkg.crossplane.io/")]
    assert meta["kind"] == kind
    return meta


# ------------------------------------------------------------------ semver constraints

def _version(text: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", text.strip())
    assert m, f"not a version: {text!r}"
    return tuple(int(g or 0) for g in m.groups())


def admits(constraint: str, version: str) -> bool:
    """Masterminds-semver constraints as Crossplane reads them (>=, >, <=, <, =;
    ',' or space for AND, '||' for OR); anything else fails the test."""
    v = _version(version)
    ops = {">=": v.__ge__, ">": v.__gt__, "<=": v.__le__, "<": v.__lt__, "=": v.__eq__}
    for alternative in constraint.split("||"):
        terms = re.findall(r"(>=|<=|>|<|=)?\s*(v?[\d.]+)", alternative)
        assert terms and re.fullmatch(r"[\s,]*", re.sub(r"(>=|<=|>|<|=)?\s*v?[\d.]+", "",
                                                        alternative)), constraint
        if all(ops[op or "="](_version(ver)) for op, ver in terms):
            return True
    return False


def test_constraint_reading():
    assert admits(">=v0.1.0, <v0.2.0", "v0.1.0") and admits(">=v0.1.0, <v0.2.0", "0.1.9")
    assert not admits(">=v0.1.0, <v0.2.0", "v0.2.0")
    assert admits(">=v2.3.0", "v2.3.0") and not admits(">=v2.3.0", "v2.2.9")
    assert admits("<v1 || >=v3", "v3.1.0") and not admits("<v1 || >=v3", "v2.0.0")


# ------------------------------------------------------------------ the image

def test_image_runs_serve_as_the_non_root_user(image, rootfs):
    cfg = image.config
    assert (cfg["os"], cfg["architecture"]) == ("linux", "amd64")
    assert cfg["config"]["User"] == USER
    assert cfg["config"]["Entrypoint"] == ENTRYPOINT
    assert not cfg["config"].get("Cmd"), "serve's defaults (0.0.0.0:9443, mTLS) need no Cmd"
    assert "9443/tcp" in cfg["config"]["ExposedPorts"]
    passwd = (rootfs / "etc" / "passwd").read_text().splitlines()
    assert any(line.split(":")[2:4] == ["65532", "65532"] for line in passwd), passwd
    home = rootfs / cfg["config"]["WorkingDir"].lstrip("/")
    assert (home.stat().st_uid, home.stat().st_gid) == (65532, 65532)
    # Root owns the code: the function's user cannot change it.
    venv = rootfs / "venv"
    assert all(p.stat().st_uid == 0 for p in [venv, *venv.rglob("*")] if not p.is_symlink())


def test_image_is_slim(image, members):
    names = {norm(m.name): m for m in members}
    leftovers = sorted(
        n for n in names
        if (n.startswith(("var/lib/apt/lists/", "var/cache/apt/", "usr/share/man/",
                          "usr/share/info/", "usr/share/locale/", "var/log/apt/", "tmp/"))
            and not names[n].isdir())
        or (n.startswith("usr/share/doc/") and not names[n].isdir()
            and not n.endswith("/copyright"))
        or n.endswith(".deb"))
    assert not leftovers, f"apt caches, docs or temporary files in the image: {leftovers[:20]}"
    tools = sorted(n for n in names if re.fullmatch(
        r"usr/(local/)?bin/(gcc|cc|c\+\+|g\+\+|cpp|make|ld|as|x86_64-linux-gnu-gcc.*)"
        r"|usr/lib/gcc/.+|usr/include/python3.*/Python\.h"
        r"|venv/bin/pip.*|venv/lib/python3\.\d+/site-packages/(pip|setuptools|wheel)/", n))
    assert not tools, f"build tools in the image: {tools}"
    devices = [n for n, m in names.items() if m.ischr() or m.isblk() or m.isfifo()]
    assert not devices, devices
    assert not [n for n in names if os.path.basename(n).startswith(".wh.")]
    compressed = sum(len(image.blob(layer)) for layer in image.layers)
    unpacked = sum(m.size for m in members)
    assert compressed < MAX_COMPRESSED and unpacked < MAX_UNPACKED, (compressed, unpacked)


def test_the_dockerfile_builds_the_same_image(image, rootfs):
    """The Dockerfile (for machines with Docker) and the daemonless build agree."""
    text = (ROOT / "Dockerfile").read_text()
    stages = re.split(r"(?m)^FROM\s+", text)[1:]
    final = stages[-1]
    base = final.split()[0]
    assert re.fullmatch(r"debian:(12(\.\d+)*|bookworm)(-\d+)?-slim(@sha256:[0-9a-f]{64})?", base), (
        f"the final stage's base {base} is not a pinned Debian 12 slim: the tarball build "
        "uses Debian 12's python3")
    assert all(s.split()[0].startswith("debian:") for s in stages), "every stage on Debian 12"
    assert (rootfs / "etc" / "debian_version").read_text().startswith("12.")
    py = sorted(p.name for p in (rootfs / "venv" / "lib").iterdir())
    assert py == ["python3.11"] and (rootfs / "usr/bin/python3.11").exists()
    assert re.search(r"(?m)^version = 3\.11\.", (rootfs / "venv/pyvenv.cfg").read_text())

    def instruction(name: str) -> str:
        (value,) = re.findall(rf"(?m)^{name}\s+(.+)$", final)
        return value.strip()

    assert instruction("USER") == image.config["config"]["User"]
    assert json.loads(instruction("ENTRYPOINT")) == image.config["config"]["Entrypoint"]
    assert instruction("EXPOSE") + "/tcp" in image.config["config"]["ExposedPorts"]
    assert instruction("WORKDIR") == image.config["config"]["WorkingDir"]
    assert "COPY --from=" in final and not re.search(r"(?m)^\s*RUN .*pip install", final), (
        "the final stage copies /venv from the build stage and installs nothing with pip")
    env = dict(e.split("=", 1) for e in image.config["config"]["Env"])
    for key, value in env.items():
        assert f"{key}={value}" in final, f"ENV {key}={value} missing from the final stage"


# ------------------------------------------------------------------ smoke test

# Runs as the PID namespace's init (so that its death ends the namespace) and
# starts the entrypoint chrooted in the image's filesystem as the image's user.
# The mounts live in the private mount namespace and vanish with it.
_CONTAINER = r"""
root=$1 wd=$2 uid=$3 gid=$4; shift 4
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=0755,size=1m tmpfs "$root/dev"
for d in null zero full random urandom; do
  : > "$root/dev/$d"; mount --bind "/dev/$d" "$root/dev/$d"
done
ln -s /proc/self/fd "$root/dev/fd"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
/usr/bin/unshare --root="$root" --wd="$wd" --setuid="$uid" --setgid="$gid" -- "$@"
"""


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _server_pids(address: str) -> list[int]:
    pids = []
    for entry in pathlib.Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit():
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if address.encode() in argv and b"serve" in argv and b"unshare" not in argv[0] \
                        and not argv[0].endswith(b"sh"):
                    pids.append(int(entry.name))
    return pids


def _ids(pid: int) -> tuple[list[str], list[str]]:
    status = pathlib.Path(f"/proc/{pid}/status").read_text()
    uid = re.search(r"(?m)^Uid:\s+(.+)$", status).group(1).split()
    gid = re.search(r"(?m)^Gid:\s+(.+)$", status).group(1).split()
    return uid, gid


@contextlib.contextmanager
def run_image(image: Archive, rootfs: pathlib.Path, log: pathlib.Path, *args: str,
              env: dict[str, str] | None = None, timeout: float = 60.0) -> Iterator[str]:
    """Start the image's entrypoint from its filesystem, with `args` and
    `--address` on a free loopback port; yield that address."""
    cfg = image.config["config"]
    uid, _, gid = cfg["User"].partition(":")
    address = f"127.0.0.1:{localrender.free_port()}"
    argv = [*cfg["Entrypoint"], *args, "--address", address]
    env = {**dict(e.split("=", 1) for e in cfg.get("Env") or []), **(env or {})}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--", "/bin/sh", "-ec",
             _CONTAINER, "sh", str(rootfs), cfg.get("WorkingDir") or "/", uid, gid or uid, *argv],
            env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent)
    try:
        deadline = time.monotonic() + timeout
        host, port = address.split(":")
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the image's entrypoint exited ({proc.returncode}):\n"
                            f"{log.read_text()}")
            with contextlib.suppress(OSError), socket.create_connection((host, int(port)), 0.2):
                break
            if time.monotonic() > deadline:
                pytest.fail(f"the image's entrypoint did not listen on {address}:\n"
                            f"{log.read_text()}")
            time.sleep(0.1)
        yield address
    finally:
        # SIGKILL to unshare reaches the namespace's init (PR_SET_PDEATHSIG), and
        # the kernel ends every process of a PID namespace whose init is gone.
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10
        while _server_pids(address) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _server_pids(address), "the image's entrypoint outlived its namespace"


@pytest.mark.e2e
def test_the_image_entrypoint_serves_a_render(image, rootfs, tools, tmp_path):
    md = ROOT / "apis" / "modeldeployment"
    deployment = EXAMPLES / "deployments" / "single-gpu.yaml"
    with run_image(image, rootfs, tmp_path / "serve.log", "--insecure") as address:
        (pid,) = _server_pids(address)
        uid, gid = _ids(pid)
        assert set(uid) == {"65532"} and set(gid) == {"65532"}, (uid, gid)
        docs = localrender.render(tools, address, deployment, md / "composition.yaml",
                                  required=[EXAMPLES / "fleet"], xrd=md / "definition.yaml")
    (xr,) = [d for d in docs if d.get("kind") == "ModelDeployment"]
    replicas = [d for d in docs if d.get("kind") == "ModelReplica"]
    want = load_one(deployment)["spec"]["replicas"]
    assert len(replicas) == want == xr["status"]["replicas"]["scheduled"]
    scheduled = next(c for c in xr["status"]["conditions"] if c["type"] == "ReplicasScheduled")
    assert scheduled["status"] == "True", scheduled


def _openssl(*args: str, cwd: pathlib.Path) -> None:
    out = subprocess.run(["openssl", *args], capture_output=True, text=True, cwd=cwd)
    assert out.returncode == 0, f"openssl {' '.join(args)}: {out.stderr}"


def make_certs(d: pathlib.Path) -> None:
    """A CA, the function's server certificate for 127.0.0.1 and a caller's
    client certificate: the files Crossplane mounts (tls.crt, tls.key, ca.crt)."""
    d.mkdir(parents=True)
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
             "-subj", "/CN=smoke-ca", cwd=d)
    for name, cn, ext in (("tls", "function-model-serving",
                           "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
                          ("client", "crossplane", "extendedKeyUsage=clientAuth")):
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={cn}", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "1", "-extfile", f"{name}.ext",
                 "-out", f"{name}.crt", cwd=d)
    d.chmod(0o755)
    for f in d.iterdir():
        f.chmod(0o644)  # readable by the image's user; a test CA, thrown away


@pytest.mark.e2e
def test_the_image_entrypoint_serves_mtls_as_crossplane_calls_it(image, rootfs, tmp_path):
    """Without --insecure, serve uses the certificates in TLS_SERVER_CERTS_DIR and
    answers only callers presenting a certificate of that CA."""
    certs = rootfs / "tls" / "server"  # where Crossplane mounts them
    shutil.rmtree(certs, ignore_errors=True)
    make_certs(certs)
    pem = {name: (certs / name).read_bytes()
           for name in ("ca.crt", "client.crt", "client.key")}
    req = request(load_one(EXAMPLES / "fleet" / "us-east-1.yaml"))
    req.meta.tag = "smoke"
    try:
        with run_image(image, rootfs, tmp_path / "serve.log",
                       env={"TLS_SERVER_CERTS_DIR": "/tls/server"}) as address:
            creds = grpc.ssl_channel_credentials(
                root_certificates=pem["ca.crt"], private_key=pem["client.key"],
                certificate_chain=pem["client.crt"])
            with grpc.secure_channel(address, creds) as channel:
                rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=30)
            assert rsp.meta.tag == "smoke"
            anonymous = grpc.ssl_channel_credentials(root_certificates=pem["ca.crt"])
            with grpc.secure_channel(address, anonymous) as channel, \
                    pytest.raises(grpc.RpcError) as refused:
                grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        shutil.rmtree(rootfs / "tls")


# ------------------------------------------------------------------ the packages

@functools.cache
def api_docs() -> list[dict]:
    return [d for f in sorted((ROOT / "apis").rglob("*.y*ml")) for d in load(f)]


def without_status(doc: dict) -> dict:
    doc = {k: v for k, v in doc.items() if k != "status"}
    doc["metadata"] = {k: v for k, v in doc["metadata"].items()
                       if not (k == "creationTimestamp" and v is None)}
    return doc


def _key(doc: dict) -> tuple[str, str, str]:
    return doc["apiVersion"], doc["kind"], doc["metadata"]["name"]


def test_the_configuration_package_holds_every_xrd_and_composition(packages):
    docs = package_docs(packages["configuration"])
    meta = meta_of(docs, "Configuration")
    assert meta == load_one(ROOT / "crossplane.yaml")
    objects = sorted((d for d in docs if d is not meta), key=_key)
    assert [_key(d) for d in objects] == sorted(_key(d) for d in api_docs())
    # `xpkg build` decodes each object into its Go type and encodes it again,
    # which adds an empty status; everything else must be as written.
    assert [without_status(d) for d in objects] == sorted(api_docs(), key=_key), (
        "packaged objects differ from apis/")
    kinds = {d["kind"] for d in objects}
    assert kinds == {"CompositeResourceDefinition", "Composition"}
    for xrd in (d for d in objects if d["kind"] == "CompositeResourceDefinition"):
        ref = {"apiVersion": f"{xrd['spec']['group']}/{xrd['spec']['versions'][0]['name']}",
               "kind": xrd["spec"]["names"]["kind"]}
        assert any(c["kind"] == "Composition" and c["spec"]["compositeTypeRef"] == ref
                   for c in objects), f"no Composition for {ref}"


def test_the_configuration_package_examples_are_the_users_manifests(packages):
    cfg = packages["configuration"]
    (layer,) = cfg.labelled("upbound")  # the xpkg examples layer
    examples = [d for d in yaml.safe_load_all(cfg.read(layer, ".up/examples.yaml")) if d]
    want = load(EXAMPLES / "deployments") + load(EXAMPLES / "fleet")
    assert sorted(map(_key, examples)) == sorted(map(_key, want))
    assert cfg.layers == [*cfg.labelled("base"), layer], "nothing but package.yaml and examples"


def test_the_configuration_package_dependencies(packages):
    meta = meta_of(package_docs(packages["configuration"]), "Configuration")
    deps = {d["kind"]: d for d in meta["spec"]["dependsOn"]}
    assert set(deps) == {"Function", "Provider"}
    assert all(d["apiVersion"] == "pkg.crossplane.io/v1" for d in deps.values())
    render_fn = load_one(EXAMPLES / "functions.yaml")
    assert deps["Function"]["package"] == render_fn["spec"]["package"].rsplit(":", 1)[0]
    assert admits(deps["Function"]["version"], __version__), (
        f"the Configuration's Function constraint {deps['Function']['version']!r} does "
        f"not admit this repository's version {__version__}")
    assert deps["Provider"]["package"].endswith("/crossplane-contrib/provider-kubernetes")
    # v1 brought the namespaced kubernetes.m.crossplane.io API the composer emits.
    assert admits(deps["Provider"]["version"], "v1.0.0")
    assert not admits(deps["Provider"]["version"], "v0.18.0")
    crossplane = meta["spec"]["crossplane"]["version"]
    assert admits(crossplane, "v2.3.4"), "the core we render with must be admitted"
    if any("scale" in (v.get("subresources") or {})
           for d in api_docs() if d["kind"] == "CompositeResourceDefinition"
           for v in d["spec"]["versions"]):
        assert not admits(crossplane, "v2.2.99"), "XRD scale subresources need Crossplane v2.3"
    fn_meta = meta_of(package_docs(packages["function"]), "Function")
    assert fn_meta["spec"]["crossplane"]["version"] == crossplane


def test_the_function_package_embeds_the_runtime_image(packages, image):
    fn = packages["function"]
    runtime = image.config
    # The runtime image's layers, unchanged, then the package layer.
    assert fn.config["rootfs"]["diff_ids"][:-1] == runtime["rootfs"]["diff_ids"]
    assert len(fn.layers) == len(image.layers) + 1
    assert fn.labelled("base") == fn.layers[-1:]
    assert not fn.labelled("upbound"), "the Function package carries no examples"
    for key in ("Entrypoint", "User", "Env", "WorkingDir", "ExposedPorts"):
        assert fn.config["config"][key] == runtime["config"][key], key
    assert (fn.config["os"], fn.config["architecture"]) == ("linux", "amd64")

    docs = package_docs(fn)
    meta = meta_of(docs, "Function")
    assert docs == [meta], "the Function package holds only its meta (no input CRD)"
    assert meta == load_one(ROOT / "package" / "crossplane.yaml")
    notes = meta["metadata"]["annotations"]
    for key in ("description", "source", "license", "readme", "maintainer"):
        assert notes.get(f"meta.crossplane.io/{key}", "").strip(), key


def test_every_composition_calls_the_function_the_configuration_depends_on():
    """Users install the Configuration alone; the package manager installs the
    Function as a dependency and names it after its repository path
    (`<org>-<repo>`, the registry host dropped). The Compositions call that name,
    so the documented install works without installing the Function first;
    `composition render` runs the function under the same name."""
    meta = meta_of(load(ROOT / "crossplane.yaml"), "Configuration")
    (dep,) = [d for d in meta["spec"]["dependsOn"] if d["kind"] == "Function"]
    org, repo = dep["package"].split("/")[-2:]
    name = f"{org}-{repo}"
    assert repo == load_one(ROOT / "package" / "crossplane.yaml")["metadata"]["name"]
    assert load_one(EXAMPLES / "functions.yaml")["metadata"]["name"] == name
    for comp in (d for d in api_docs() if d["kind"] == "Composition"):
        assert {s["functionRef"]["name"] for s in comp["spec"]["pipeline"]} == {name}
    install = (ROOT / "docs" / "install.md").read_text()
    assert "xpkg install function" not in install, \
        "docs/install.md must let dependency resolution install the Function"
