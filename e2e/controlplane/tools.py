"""The pinned binaries and sources: `bash hack/tools.sh --e2e --dataplane --env`, called once.

hack/tools.sh builds what is missing from the Go module proxy into the tool
cache and prints shell lines `NAME=PATH`. A failure stops the harness with the
tool's own output; nothing is skipped or built twice here.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path

BINARIES = ("CROSSPLANE_CLI", "CROSSPLANE_CORE", "CRANE", "ETCD", "KUBE_APISERVER",
            "KUBE_CONTROLLER_MANAGER", "KUBE_SCHEDULER", "KUBECTL", "KWOK", "LWS_MANAGER",
            "PROVIDER_KUBERNETES", "ENVOY_GATEWAY",
            # What runnable pods run as (e2e/controlplane/pods/).
            "INFERENCE_SIM", "EPP", "PD_SIDECAR",
            # Envoy Gateway's InferencePool extension server (tools/inferencepool-extension).
            "INFERENCEPOOL_EXTENSION")
# Module sources read at start-up (CRDs come from the repo's crds/ instead).
SOURCES = ("KWOK_SRC", "LWS_SRC", "PROVIDER_KUBERNETES_SRC")


class ToolsError(RuntimeError):
    pass


def parse_env(text: str) -> dict[str, str]:
    """`NAME=value` lines (optionally `export NAME=...`, shell-quoted) -> dict."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):]
        m = re.match(r"^([A-Z_][A-Z0-9_]*)=(.*)$", line)
        if not m:
            continue
        value = shlex.split(m.group(2)) if m.group(2) else [""]
        out[m.group(1)] = value[0] if value else ""
    return out


def check(env: Mapping[str, str]) -> dict[str, str]:
    missing = [k for k in (*BINARIES, *SOURCES) if not env.get(k)]
    if missing:
        raise ToolsError(f"hack/tools.sh --e2e --dataplane --env did not print {', '.join(missing)}")
    bad = [f"{k}={env[k]}" for k in BINARIES if not Path(env[k]).is_file()]
    bad += [f"{k}={env[k]}" for k in SOURCES if not Path(env[k]).is_dir()]
    if bad:
        raise ToolsError("hack/tools.sh --e2e --dataplane --env printed paths that do not exist: "
                         + ", ".join(bad))
    return {k: env[k] for k in (*BINARIES, *SOURCES)} | {
        k: v for k, v in env.items() if k not in BINARIES and k not in SOURCES}


def load(repo: Path, log: Path) -> dict[str, str]:
    """Run `bash hack/tools.sh --e2e --dataplane --env` once; its stderr goes to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as err:
        proc = subprocess.run(["bash", "hack/tools.sh", "--e2e", "--dataplane", "--env"], cwd=repo,
                              stdout=subprocess.PIPE, stderr=err, text=True)
    if proc.returncode != 0:
        raise ToolsError(f"`bash hack/tools.sh --e2e --dataplane --env` failed "
                         f"({proc.returncode}); "
                         f"its output ({log}):\n{log.read_text()[-6000:]}")
    return check(parse_env(proc.stdout))


def go_mod_pin(go_mod: Path, module: str) -> str:
    """The version a go.mod requires of a module (`require M vX` or in a block)."""
    for line in go_mod.read_text().splitlines():
        parts = line.strip().removeprefix("require").split()
        if len(parts) >= 2 and parts[0] == module:
            return parts[1]
    raise ToolsError(f"{go_mod} does not require {module}")


def module_dir(repo: Path, tool: str, module: str) -> Path:
    """The module cache directory of the version hack/tools/<tool>/go.mod pins,
    downloaded with `go mod download` when the cache lacks it."""
    version = go_mod_pin(repo / "hack" / "tools" / tool / "go.mod", module)
    proc = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"],
                          cwd=repo / "hack" / "tools" / tool, capture_output=True, text=True)
    try:
        info = json.loads(proc.stdout)
    except json.JSONDecodeError:
        info = {}
    if proc.returncode != 0 or not info.get("Dir"):
        raise ToolsError(f"go mod download {module}@{version} failed: "
                         f"{info.get('Error') or proc.stderr.strip()}")
    return Path(info["Dir"])


def crossplane_crds(repo: Path) -> Path:
    """cluster/crds of the Crossplane core version we run (for `core init`)."""
    path = module_dir(repo, "crossplane-core", "github.com/crossplane/crossplane/v2") \
        / "cluster" / "crds"
    if not path.is_dir():
        raise ToolsError(f"no cluster/crds in the Crossplane module at {path.parent.parent}")
    return path


def version_of_src(src: Path) -> str:
    """`.../provider-kubernetes@v1.2.0` -> `v1.2.0`."""
    name = Path(src).name
    if "@" not in name:
        raise ToolsError(f"cannot read a version from the module directory {src}")
    return name.split("@", 1)[1]
