"""Which images run as real processes (e2e/controlplane/pods/images.py): by
repository, whatever the tag, digest or Docker Hub spelling; the rest stay kwok-only."""

from __future__ import annotations

import re

import pytest

from e2e.controlplane.pods import images
from e2e.controlplane.pods.images import Role


@pytest.mark.parametrize("image, want", [
    ("vllm/vllm-openai:v0.10.1.1", Role.VLLM),
    ("vllm/vllm-openai", Role.VLLM),
    ("docker.io/vllm/vllm-openai:latest", Role.VLLM),
    ("vllm/vllm-openai@sha256:" + "a" * 64, Role.VLLM),
    ("vllm/vllm-openai:v0.11.0@sha256:" + "b" * 64, Role.VLLM),
    ("lmsysorg/sglang:v0.5.3-cu129", Role.SGLANG),
    ("ghcr.io/llm-d/llm-d-inference-scheduler:v0.7.1", Role.EPP),
    ("ghcr.io/llm-d/llm-d-routing-sidecar:v0.7.1", Role.SIDECAR),
    # The manager of the LeaderWorkerSet chart a serving stack installs.
    ("registry.k8s.io/lws/lws:v0.9.0", Role.LWS),
    # Near misses stay kwok-only.
    ("vllm/vllm-openai-cpu:v0.10.1", None),
    ("myregistry.example.com/vllm/vllm-openai:v0.10.1", None),
    ("ghcr.io/llm-d/llm-d:v0.2.0", None),
    ("registry.k8s.io/lws/lws-webhook:v0.9.0", None),
    ("busybox:1.36", None),
    ("localhost:5000/vllm/vllm-openai", None),
    ("", None),
])
def test_role_is_decided_by_repository_not_tag(image, want):
    assert images.role(image) is want


def test_repository_keeps_a_registry_port_and_drops_the_tag():
    assert images.repository("localhost:5000/team/engine:v1") == "localhost:5000/team/engine"
    assert images.repository("docker.io/library/busybox:1.36") == "busybox"


def _pod(*containers, init=()):
    return {"spec": {"containers": [{"name": f"c{i}", "image": im} for i, im in enumerate(containers)],
                     "initContainers": [{"name": f"i{i}", "image": im, "restartPolicy": "Always"}
                                        for i, im in enumerate(init)]}}


def test_a_pod_runs_when_any_container_or_sidecar_is_mapped():
    assert images.runnable(_pod("vllm/vllm-openai:v1"))
    assert images.runnable(_pod("vllm/vllm-openai:v1", "busybox"))
    # The decode pod of P/D: the routing sidecar is an init container.
    assert images.runnable(_pod("busybox", init=["ghcr.io/llm-d/llm-d-routing-sidecar:v0.7.1"]))
    assert not images.runnable(_pod("busybox", "nginx:1"))
    assert not images.runnable({"spec": {}})


@pytest.mark.parametrize("image", [
    "vllm/vllm-openai:v0.10.1.1", "docker.io/vllm/vllm-openai", "lmsysorg/sglang:v0.4",
    "ghcr.io/llm-d/llm-d-routing-sidecar:v0.7.1",
    "ghcr.io/llm-d/llm-d-inference-scheduler@sha256:00", "registry.k8s.io/lws/lws:v0.9.0"])
def test_image_regex_matches_every_image_of_a_live_role(image):
    assert re.search(images.image_regex(), image)
    assert images.runnable(_pod(image))


def test_every_mapped_role_runs_for_real_the_epp_included():
    assert images.LIVE == frozenset(images.Role)
    assert set(images.REPOSITORIES.values()) <= images.LIVE


@pytest.mark.parametrize("image", [
    "vllm/vllm-openai-cpu:v1", "ghcr.io/llm-d/llm-d-inference-scheduler-x:v1",
    "xvllm/vllm-openai:v1", "busybox", "ghcrXio/llm-d/llm-d-routing-sidecar:v1"])
def test_image_regex_rejects_what_role_rejects(image):
    assert images.role(image) is None
    assert not re.search(images.image_regex(), image)


def test_every_role_has_a_binary():
    assert set(images.BINARY_VARIABLE) == set(Role)
