"""What `make bench-traffic` applies: the examples of examples/deployments/, in a
namespace of its own, made to name the pod that served each request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]   # benchmarks/traffic/ -> the repository
NS = "bench-traffic"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"   # the single-GPU and EPP examples' model
PD_MODEL = "Qwen/Qwen3-32B"                   # the prefill-decode example's


def with_pod_name(md: dict[str, Any]) -> dict[str, Any]:
    """Every engine container gets POD_NAME from the downward API, so the simulator
    names the pod that served in `x-inference-pod` (a real vLLM ignores it)."""
    from e2e.controlplane.pods import images
    for engine in md["spec"]["template"]["spec"]["engines"]:
        for member in engine["members"]:
            for c in member["template"]["spec"]["containers"]:
                role = images.role(c.get("image", ""))
                if role is not None and role.is_engine:
                    env = [e for e in c.get("env") or [] if e.get("name") != "POD_NAME"]
                    env.append({"name": "POD_NAME",
                                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
                    c["env"] = env
    return md


def example(file: str, name: str) -> dict[str, Any]:
    """examples/deployments/`file` as bench-traffic/`name`, without its Hugging Face
    token (no Secret in this namespace; the simulator needs none)."""
    from e2e.tests.live import without_hf_token
    md = yaml.safe_load((REPO / "examples" / "deployments" / file).read_text())
    md = without_hf_token(md)
    md["metadata"] = {"name": name, "namespace": NS}
    return with_pod_name(md)
