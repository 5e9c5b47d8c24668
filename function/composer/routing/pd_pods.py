"""How the PrefillDecode layer decorates the engines' pod templates (in place).

* Serving pods of each engine (Standalone pods, gang leaders) get
  `llm-d.ai/role: prefill|decode`, the label the endpoint picker's
  prefill-filter and decode-filter select on. A modelplane.ai/ label is
  never touched.
* Every prefill and decode pod, gang workers included, gets the KV-transfer
  environment of the replica's `kvConnector` (`serving_config.kv_env`;
  variables the user set keep the user's value) and one memory-backed
  /dev/shm (added once: an existing `shm` volume or /dev/shm mount is kept).
* Decode serving pods get the llm-d routing sidecar as a native sidecar (an
  init container with `restartPolicy: Always`): it starts before the engine,
  is stopped after it (so in-flight streams drain through it), restarts on
  its own, and its readiness is part of the pod's. A plain second container
  would have no ordering on startup or shutdown. The sidecar takes port 8000
  (named `http`, where the InferencePool targets) and forwards to the engine
  on `--vllm-port=<engine --port>`, speaking the P/D protocol `--kv-connector`
  names (`serving_config.SIDECAR_CONNECTORS`; `--connector` is the pinned
  sidecar's deprecated spelling); the engine's port becomes `engine` and its
  readiness probe (`/health`) moves to that port. `--secure-proxy=false`: the
  gateway speaks plain HTTP to pods, as it does for router Service.

Each decoration is idempotent: decorating twice changes nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from function.composer import pods
from function.composer.composed import PodTemplate
from function.composer.routing import serving_config
from function.composer.routing.serving_config import POOL_TARGET_PORT, ServingConfig
from function.contract.api import SERVING_PORT_NAME

LABEL_LLMD_ROLE = "llm-d.ai/role"
SIDECAR_NAME = "routing-proxy"
ENGINE_PORT_NAME = "engine"


def add_role_label(pod: PodTemplate, role: str) -> None:
    labels = pod.template["metadata"].setdefault("labels", {})
    labels[LABEL_LLMD_ROLE] = role
    pod.template["metadata"]["labels"] = dict(sorted(labels.items()))


def add_env(pod: PodTemplate, env: Sequence[Mapping[str, Any]]) -> None:
    """Ours after modelplane's gang variables and before the user's; the user's win."""
    container = pod.engine_container
    current = container.get("env") or []
    taken = {e.get("name") for e in current}
    ours = [copy.deepcopy(dict(e)) for e in env if e["name"] not in taken]
    if not ours:
        return
    gang = {pods.ENV_LEADER_ADDRESS, pods.ENV_RANK}
    at = 0
    while at < len(current) and current[at].get("name") in gang:
        at += 1
    container["env"] = current[:at] + ours + current[at:]


def add_shm(pod: PodTemplate) -> None:
    spec = pod.template["spec"]
    container = pod.engine_container
    volumes = spec.setdefault("volumes", [])
    mounts = container.setdefault("volumeMounts", [])
    if not any(v.get("name") == serving_config.SHM_VOLUME for v in volumes):
        volumes.append({"name": serving_config.SHM_VOLUME, "emptyDir": {"medium": "Memory"}})
    if not any(m.get("mountPath") == serving_config.SHM_PATH for m in mounts):
        mounts.append({"name": serving_config.SHM_VOLUME, "mountPath": serving_config.SHM_PATH})


def add_sidecar(pod: PodTemplate, engine_port: int, connector: str,
                config: ServingConfig) -> None:
    engine = pod.engine_container
    engine["ports"] = [{"name": ENGINE_PORT_NAME, "containerPort": engine_port,
                        "protocol": "TCP"}]
    engine["readinessProbe"] = {"httpGet": {"path": pods.HEALTH_PATH, "port": engine_port},
                                "timeoutSeconds": 5}
    sidecar = {
        "name": SIDECAR_NAME,
        "image": config.sidecar_image,
        "imagePullPolicy": "IfNotPresent",
        "restartPolicy": "Always",
        "args": [f"--port={POOL_TARGET_PORT}", f"--vllm-port={engine_port}",
                 f"--kv-connector={connector}", "--secure-proxy=false"],
        "ports": [{"name": SERVING_PORT_NAME, "containerPort": POOL_TARGET_PORT,
                   "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": POOL_TARGET_PORT}, "periodSeconds": 5},
        "resources": {"requests": {"cpu": config.sidecar_cpu_request,
                                   "memory": config.sidecar_memory_request},
                      "limits": {"memory": config.sidecar_memory_limit}},
        "securityContext": {"allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
    }
    init = [c for c in pod.template["spec"].get("initContainers") or []
            if c.get("name") != SIDECAR_NAME]
    pod.template["spec"]["initContainers"] = init + [sidecar]
