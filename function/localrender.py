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
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_locally(*extra: str, timeout: float = 30.0) -> Iterator[str]:
    """Run `function-model-serving serve --insecure` on a free port; yield its address."""
    with local_server(*extra, timeout=timeout) as (address, _):
        yield address


@contextlib.contextmanager
def local_server(*extra: str, timeout: float = 30.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """Like serve_locally, also yielding the server process (to watch its memory)."""
    address = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "function.main", "serve", "--insecure", "--address", address,
         *extra],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        host, port = address.split(":")
        while True:
            if proc.poll() is not None:
                raise RenderError(f"the function server exited: {proc.stderr.read().decode()}")
            with contextlib.suppress(OSError), socket.create_connection((host, int(port)), 0.2):
                break
            if time.monotonic() > deadline:
                raise RenderError(f"the function server did not listen on {address}")
            time.sleep(0.05)
        yield address, proc
    finally:
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
