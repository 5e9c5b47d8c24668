"""Drive the real crossplane CLI against this function served locally.

Shared by `function-model-serving preview` and the end-to-end tests: start
`serve --insecure` on a free loopback port, then run `crossplane composition
render` with the Development runtime pointed at it (no Docker involved: the
CLI's `--crossplane-binary` runs the core renderer in process).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any
from dataclasses import dataclass

import yaml

from function.contract.validation import controller

ROOT = pathlib.Path(__file__).resolve().parents[2]  # the repository
DEV_TARGET = "render.crossplane.io/runtime-development-target"


class RenderError(Exception):
    """The crossplane CLI failed; the message carries what it printed."""


@dataclass(frozen=True)
class Tools:
    cli: str   # the crossplane CLI (composition render, resource validate, xpkg)
    core: str  # the core crossplane binary `composition render` runs in process


def find_tools(cli: str | None = None, core: str | None = None) -> Tools:
    """The pinned binaries: given, from the environment, or built by hack/tools.sh."""
    cli = cli or os.environ.get("CROSSPLANE_CLI")
    core = core or os.environ.get("CROSSPLANE_CORE")
    if not (cli and core):
        script = ROOT / "hack" / "tools.sh"
        if not script.exists():
            raise RenderError("the crossplane CLI was not given (--crossplane/CROSSPLANE_CLI, "
                              "--crossplane-binary/CROSSPLANE_CORE) and hack/tools.sh is absent")
        out = subprocess.run(["bash", str(script), "--env"], capture_output=True, text=True)
        if out.returncode != 0:
            raise RenderError(f"hack/tools.sh failed:\n{out.stderr}")
        env = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
        cli, core = cli or env["CROSSPLANE_CLI"], core or env["CROSSPLANE_CORE"]
    for path in (cli, core):
        if not os.access(path, os.X_OK):
            raise RenderError(f"{path} is not an executable crossplane binary")
    return Tools(cli=cli, core=core)


def wait_listening(host: str, port: int, timeout: float, proc: subprocess.Popen,
                   log: IO[bytes]) -> None:
    """Wait until the server accepts connections; fail with its log if it exits
    or the bound runs out."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RenderError(f"the function server exited ({proc.returncode}):\n{_tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), 0.2):
            return
        if time.monotonic() > deadline:
            raise RenderError(f"the function server did not listen on {host}:{port} within "
                              f"{timeout:.0f} s:\n{_tail(log)}")
        time.sleep(0.05)


def _tail(log: IO[bytes], size: int = 4000) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")[-size:]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# How long the server may take to listen. Importing the function (pydantic
# models, the CEL runtime, the kubernetes client) takes a few seconds on an idle
# machine and far longer on a 2-core machine that is also building or running a
# control plane: the wait is on the port, so a generous bound costs nothing
# when the server is quick.
START_TIMEOUT = 300.0


@contextlib.contextmanager
def serve_locally(*extra: str, timeout: float = START_TIMEOUT) -> Iterator[str]:
    """Run `function-model-serving serve --insecure` on a free port; yield its address."""
    with local_server(*extra, timeout=timeout) as (address, _):
        yield address


@contextlib.contextmanager
def local_server(*extra: str, timeout: float = START_TIMEOUT
                 ) -> Iterator[tuple[str, subprocess.Popen]]:
    """Like serve_locally, also yielding the server process (to watch its memory)."""
    address = f"127.0.0.1:{free_port()}"
    # The server's log goes to a file, never a pipe nobody reads: a full pipe
    # would block the server mid-request.
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "-m", "function.runtime.main", "serve", "--insecure", "--address", address,
         *extra],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
    try:
        host, port = address.split(":")
        wait_listening(host, int(port), timeout, proc, log)
        yield address, proc
    finally:
        log.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def render(tools: Tools, address: str, xr: pathlib.Path, composition: pathlib.Path, *,
           functions: pathlib.Path = ROOT / "examples" / "functions.yaml",
           required: Sequence[pathlib.Path] = (), observed: pathlib.Path | None = None,
           xrd: pathlib.Path | None = None, timeout: str = "2m") -> list[dict]:
    """`crossplane composition render` one XR; return the rendered documents."""
    cmd = [tools.cli, "composition", "render", str(xr), str(composition), str(functions),
           "--crossplane-binary", tools.core, "--include-function-results", "--include-full-xr",
           "--function-annotations", f"{DEV_TARGET}={address}", "--timeout", timeout]
    for path in required:
        cmd += ["--required-resources", str(path)]
    if observed is not None:
        cmd += ["--observed-resources", str(observed)]
    if xrd is not None:
        cmd += ["--xrd", str(xrd)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise RenderError(f"crossplane composition render failed ({out.returncode}):\n"
                          f"{out.stderr.strip() or out.stdout.strip()}")
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    # Crossplane reports unready composed resources in map order; sort the
    # Results so identical inputs print identical output.
    results = sorted((d for d in docs if d.get("kind") == "Result"),
                     key=lambda d: yaml.safe_dump(d, sort_keys=True))
    return [d for d in docs if d.get("kind") != "Result"] + results


def placing_deployment(mr: Mapping[str, Any]) -> dict[str, Any]:
    """The least ModelDeployment that placed `mr`, as the API server would hold it:
    the uid its controller ownerReference names and a status placing it. What the
    replica's composition requires (composer/trust.py), for a request made offline
    from a replica alone (tests, benchmarks); `owner_file` has the rendered one."""
    meta = mr.get("metadata") or {}
    ref = controller(meta) or {}
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelDeployment",
            "metadata": {"name": ref.get("name"), "namespace": meta.get("namespace"),
                         "uid": ref.get("uid")},
            "spec": {}, "status": {"placements": [{"name": meta.get("name")}]}}


def owner_file(stage1: Sequence[dict], mr: Mapping[str, Any], tmp: pathlib.Path) -> pathlib.Path:
    """A file holding the ModelDeployment a stage-1 render composed `mr` from, as the
    API server would hold it: with the uid the replica's controller ownerReference
    names (render gives the reference a uid, but prints the XR without one). The
    replica's composition requires it (composer/trust.py: its deployment's status
    names it), so a stage-2 render passes it as a required resource."""
    ref = controller(mr.get("metadata") or {}) or {}
    md = next(d for d in stage1 if d.get("kind") == ref.get("kind")
              and (d.get("metadata") or {}).get("name") == ref.get("name"))
    md = {**md, "metadata": {**md["metadata"], "uid": ref.get("uid")}}
    path = tmp / f"owner-{ref.get('name')}-{(mr.get('metadata') or {}).get('name')}.yaml"
    path.write_text(yaml.safe_dump(md))
    return path
