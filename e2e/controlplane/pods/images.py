"""Which container images run as real processes, and as what.

A composed pod is runnable when one of its containers has an image whose
*repository* is mapped here; the tag (or digest) never matters, so a version
bump in the composer keeps running. Every other image stays kwok-only: its
container is never started (kwok's status is all it gets).

| repository | runs as |
|---|---|
| `vllm/vllm-openai` | the llm-d inference simulator, with vLLM's args translated |
| `lmsysorg/sglang` | the llm-d inference simulator, with SGLang's args translated |
| `ghcr.io/llm-d/llm-d-inference-scheduler` | the EPP (`cmd/epp`); its API server through apiaccess.py's relay |
| `ghcr.io/llm-d/llm-d-routing-sidecar` | the P/D sidecar (`cmd/pd-sidecar` of the same module) |
| `registry.k8s.io/lws/lws` | LeaderWorkerSet's manager (the chart a stack installs), its config translated (lws.py) |
| `xpkg.crossplane.io/modelplane/function-model-serving` | the inventory reporter: our entry point |
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from typing import Any

from function.cluster import reporter


class Role(enum.Enum):
    """What a mapped container runs as."""

    VLLM = "vllm"          # an engine: vLLM's command line, run by the simulator
    SGLANG = "sglang"      # an engine: SGLang's command line, run by the simulator
    EPP = "epp"            # the endpoint picker: the image's entrypoint is the binary
    SIDECAR = "sidecar"    # the P/D routing sidecar: likewise
    LWS = "lws"            # LeaderWorkerSet's manager: likewise, its config file translated
    REPORTER = "reporter"  # the inventory reporter: this repository's entry point

    @property
    def is_engine(self) -> bool:
        return self in (Role.VLLM, Role.SGLANG)


# Repository (normalised: no registry for Docker Hub, no tag) -> role.
REPOSITORIES: Mapping[str, Role] = {
    "vllm/vllm-openai": Role.VLLM,
    "lmsysorg/sglang": Role.SGLANG,
    "ghcr.io/llm-d/llm-d-inference-scheduler": Role.EPP,
    "ghcr.io/llm-d/llm-d-routing-sidecar": Role.SIDECAR,
    "registry.k8s.io/lws/lws": Role.LWS,
    # The function's own image (its tag is the release's), which the reporter runs.
    reporter.DEFAULT_IMAGE.rsplit(":", 1)[0]: Role.REPORTER,
}

# The roles that run for real on `make cluster`: all of them. The EPP watches its
# cluster's API server (InferencePools, Pods) through apiaccess.py's relay.
LIVE: frozenset[Role] = frozenset(Role)

# The tool-cache variable (hack/tools.sh --e2e --dataplane --env) whose binary runs each role.
BINARY_VARIABLE: Mapping[Role, str] = {
    Role.VLLM: "INFERENCE_SIM",
    Role.SGLANG: "INFERENCE_SIM",
    Role.EPP: "EPP",
    Role.SIDECAR: "PD_SIDECAR",
    Role.LWS: "LWS_MANAGER",
    Role.REPORTER: "INVENTORY_REPORTER",
}

# Docker Hub spells one repository several ways; these prefixes all mean it.
_HUB_PREFIXES = ("docker.io/library/", "docker.io/", "index.docker.io/library/",
                 "index.docker.io/", "registry-1.docker.io/")


def repository(image: str) -> str:
    """`docker.io/vllm/vllm-openai:v0.10.1.1@sha256:...` -> `vllm/vllm-openai`.

    The tag is what follows the last `:` *after* the last `/`, so a registry port
    (`localhost:5000/x`) is kept.
    """
    name = image.strip().split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name = name[:colon]
    for prefix in _HUB_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    return name


def role(image: str) -> Role | None:
    """The role of an image, or None for an image that stays kwok-only."""
    return REPOSITORIES.get(repository(image))


def _containers(pod_spec: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    yield from pod_spec.get("initContainers") or ()
    yield from pod_spec.get("containers") or ()


def runnable(pod: Mapping[str, Any]) -> bool:
    """A pod runs for real when any of its containers (init or not) has a LIVE role."""
    spec = pod.get("spec") or {}
    return any(role(c.get("image", "")) in LIVE for c in _containers(spec))


def image_regex() -> str:
    """A regular expression matching exactly the images of LIVE roles, any tag or digest.

    Written for both Go's RE2 (kwok's gojq) and Oniguruma (jq): no look-around.
    The kwok stages in pods/stages/ embed it; a unit test keeps them equal.
    """
    hub = "|".join(_escape(p) for p in _HUB_PREFIXES)
    repos = "|".join(_escape(r) for r, role in sorted(REPOSITORIES.items()) if role in LIVE)
    return f"^({hub})?({repos})([:@].*)?$"


def _escape(name: str) -> str:
    # Names hold only [a-z0-9./-]: escaping the dot is all both dialects need
    # (re.escape would also escape `-`, which is fine in Go but noise in YAML).
    if not re.fullmatch(r"[a-z0-9./-]+", name):
        raise ValueError(f"unexpected character in image name {name!r}")
    return name.replace(".", "\\.")
