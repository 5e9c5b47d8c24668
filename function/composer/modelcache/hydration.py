"""The hydration Job: download a cache's weights, then its adapters, onto its volume.

One pod, one step per source in order (the base model, then each adapter
under `adapters/<name>`): every step but the last is an init container, so
the Job completes only when every source is staged. Each step is resumable
(a retry continues where the last pod stopped), and the Job's name carries a
digest of its steps: a changed source is a new Job (a Job's pod template
cannot change), which resumes into the same volume.

| source | the step |
|---|---|
| HuggingFace, adapters on the Hub | `python3 -c <hf_download.py> <json>`: patterns, one file, pinned commit |
| `s3://`, `gs://`, `hf://` | the downloader image's own entrypoint with `<url> <dest>` (KServe's storage initializer) |
| `oci://` | the model image itself, copying its `/models` (KServe's modelcar layout) |

The downloader image is pinned here, in one place; the function process may
override it with MODELPLANE_CACHE_DOWNLOADER_IMAGE (set on the function's
Deployment), as routing/serving_config.py's images are.

The pod meets its cluster's pod security level (podsecurity.py) and mounts no
ServiceAccount token. At `restricted` it runs as uid 1000, the downloader
image's own user (KServe's storage initializer), which also lets an `oci://`
model image (often built to run as root) pass runAsNonRoot: its step only
reads /models, world-readable in such images, and writes into the volume.
The level is part of the Job's digest: a Job's pod template cannot change.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from function.composer import kinds, podsecurity
from function.composer.modelcache import hf_download
from function.contract.cacheview import DEFAULT_MOUNT_PATH, VOLUME
from function.contract.enums import ModelSource

DOWNLOADER_IMAGE = "kserve/storage-initializer:v0.15.2"
DOWNLOADER_ENV = "MODELPLANE_CACHE_DOWNLOADER_IMAGE"
HF_TOKEN = "HF_TOKEN"
BACKOFF_LIMIT = 6  # a retried pod resumes, so retries are cheap
DOWNLOADER_UID = 1000  # the storage initializer image's USER
_HF_SCRIPT = (pathlib.Path(__file__).parent / "hf_download.py").read_text()
# hf_download.py's exit codes that fail the Job at once (podFailurePolicy), and
# what the cache says for each. Every other failure is retried.
EXIT_NO_SPACE, EXIT_NOT_FOUND = hf_download.NO_SPACE, hf_download.NOT_FOUND
FAILURES = {
    EXIT_NO_SPACE: ("VolumeTooSmall", "the weights do not fit in the volume (no space left "
                    "on it): raise sizeGiB"),
    EXIT_NOT_FOUND: ("SourceNotFound", "the repository, revision or file does not exist, or "
                     "the token may not read it"),
}
_EXIT_CODE = re.compile(r"failed with exit code (\d+)")


def failure(message: str) -> tuple[str, str]:
    """(reason, message) for a failed Job, from its Failed condition's message."""
    found = _EXIT_CODE.search(message)
    if found and int(found.group(1)) in FAILURES:
        reason, said = FAILURES[int(found.group(1))]
        return reason, f"{said} ({message})"
    return "HydrationFailed", message


def downloader_image() -> str:
    return os.environ.get(DOWNLOADER_ENV) or DOWNLOADER_IMAGE


@dataclass(frozen=True)
class Step:
    name: str                # the container's name
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]


def steps(spec: Mapping[str, Any]) -> list[Step]:
    """The Job's steps for a validated ModelCache spec, base model first."""
    out = [_step("model", _source(spec), DEFAULT_MOUNT_PATH)]
    for adapter in spec.get("adapters") or []:
        out.append(_step(f"adapter-{adapter['name']}", adapter,
                         f"{DEFAULT_MOUNT_PATH}/adapters/{adapter['name']}"))
    return out


def _source(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    if spec.get("source") == ModelSource.HUGGING_FACE:
        return {"huggingFace": spec["huggingFace"]}
    return {"uri": spec["uri"]}


def _step(name: str, source: Mapping[str, Any], dest: str) -> Step:
    hf = source.get("huggingFace")
    if hf:
        what = {"repo": hf["repo"], "revision": hf.get("revision") or "main", "dest": dest,
                "allow": list(hf.get("allowPatterns") or []),
                "ignore": list(hf.get("ignorePatterns") or [])}
        if hf.get("filename"):
            what["filename"] = hf["filename"]
        return Step(name, downloader_image(), ("python3", "-c", _HF_SCRIPT),
                    (json.dumps(what, sort_keys=True),))
    url = source["uri"]["url"]
    if url.startswith("oci://"):
        return Step(name, url.removeprefix("oci://"), ("sh", "-c", 'cp -a /models/. "$1"', "sh"),
                    (dest,))
    return Step(name, downloader_image(), (), (url, dest))


def digest(job_steps: Sequence[Step], secret: tuple[str, str] | None, level: str) -> str:
    """What the Job's pod template depends on, shortened: part of its name."""
    text = json.dumps([[s.name, s.image, s.command, s.args] for s in job_steps]
                      + [secret, level])
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def job(name: str, namespace: str, claim: str, labels: Mapping[str, str],
        job_steps: Sequence[Step], secret: tuple[str, str] | None, level: str) -> dict[str, Any]:
    """The Job; `secret` is (Secret name, key for HF_TOKEN), or (name, "") to pass
    every key of the Secret as environment (a URI source), or None; `level` the
    cluster's pod security level."""
    containers = [_container(s, secret) for s in job_steps]
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": containers[-1:],
        "volumes": [{"name": VOLUME, "persistentVolumeClaim": {"claimName": claim}}],
    }
    if len(containers) > 1:
        pod["initContainers"] = containers[:-1]
    podsecurity.harden(pod, level, run_as_user=DOWNLOADER_UID)
    return {
        **kinds.JOB.header(),
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            # A full volume or a missing repository fails at once, saying so.
            "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {
                "operator": "In", "values": sorted(FAILURES)}}]},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
        },
    }


def _container(step: Step, secret: tuple[str, str] | None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": step.name, "image": step.image}
    if step.command:
        c["command"] = list(step.command)
    c["args"] = list(step.args)
    if secret and secret[1]:
        c["env"] = [{"name": HF_TOKEN, "valueFrom": {"secretKeyRef": {
            "name": secret[0], "key": secret[1]}}}]
    elif secret:
        c["envFrom"] = [{"secretRef": {"name": secret[0]}}]
    c["resources"] = {"requests": {"cpu": "500m", "memory": "1Gi"}}
    c["volumeMounts"] = [{"name": VOLUME, "mountPath": DEFAULT_MOUNT_PATH}]
    return c
