"""Kubernetes names that are always valid DNS labels of at most 63 characters."""

from __future__ import annotations

import hashlib
import re

MAX = 63
_INVALID = re.compile(r"[^a-z0-9-]+")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


# Namespaces no model workload or route may use, on the control plane or on a workload
# cluster (a replica's objects, and a service's route on its front door, land in a
# namespace named like its own): Kubernetes' own (kube-*), default, the platform's
# (modelplane-system, crossplane-system), the gateways' (gateway-system,
# envoy-gateway-system) and every namespace the serving stack installs into
# (lws-system; tests/test_tenancy_refusals.py checks the stack's table against this).
# security/admission.yaml says the same to the API server (modelplane-reserved-namespaces).
RESERVED_NAMESPACES = ("default", "modelplane-system", "crossplane-system", "gateway-system",
                       "envoy-gateway-system", "lws-system")
RESERVED_NAMESPACE_PREFIX = "kube-"


def reserved_namespace(namespace: str) -> bool:
    return namespace in RESERVED_NAMESPACES or namespace.startswith(RESERVED_NAMESPACE_PREFIX)


def reserved_message(namespace: str) -> str:
    return (f"metadata.namespace: {namespace} is reserved for Kubernetes, the platform or its "
            f"gateways ({RESERVED_NAMESPACE_PREFIX}*, {', '.join(RESERVED_NAMESPACES)}): "
            "models run in a namespace of their own")


def is_dns_label(value: str) -> bool:
    """A Kubernetes DNS label: lowercase alphanumerics and '-', at most 63 characters."""
    return len(value) <= MAX and bool(_DNS_LABEL.match(value))


def is_dns_subdomain(value: str) -> bool:
    """A Kubernetes DNS subdomain: dot-separated labels, at most 253 characters."""
    return len(value) <= 253 and bool(_DNS_SUBDOMAIN.match(value))


def dns_label(*parts: str | int, max_length: int = MAX) -> str:
    """Join parts with '-' into a DNS label; shorten with a hash when too long.

    The hash covers every part, so two different inputs never collide after
    truncation (two deployments named alike in different namespaces, say).
    """
    full = "-".join(str(p) for p in parts)
    name = _INVALID.sub("-", full.lower()).strip("-")
    if len(name) <= max_length and name == full:
        return name
    return _with_digest(name, parts, max_length, 10)


def unique_label(*parts: str | int, max_length: int = MAX) -> str:
    """`<parts joined by '-'>-<digest>`: a DNS label unique per tuple of parts.

    Dash-joined parts alone can read alike for different tuples ("a-b" + "c"
    and "a" + "b-c"); the digest covers the parts joined by a character no
    Kubernetes name holds, so two tuples never share a name.
    """
    name = _INVALID.sub("-", "-".join(str(p) for p in parts).lower()).strip("-")
    return _with_digest(name, parts, max_length, 6)


def _with_digest(name: str, parts, max_length: int, size: int) -> str:
    key = "\x00".join(str(p) for p in parts)
    digest = hashlib.sha256(key.encode()).hexdigest()[:size]
    head = name[: max_length - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}" if head else digest


DIGEST = 8


def tagged_label(*parts: str | int, tag: str, identity: tuple[str | int, ...] | None = None,
                 max_length: int = MAX) -> str:
    """`<readable parts>-<digest>-<tag>`: a DNS-1035 label of at most max_length.

    For objects whose names must never meet: the digest covers `identity`
    (default: the parts) joined by a character no Kubernetes name holds, so
    two identities never share a name, even when their dash-joined parts read
    alike ("a-b" + "c" and "a" + "b-c") or the readable head is cut to fit.
    The tag is kept whole at the end, so names with different tags never
    equal each other whatever the parts (a Service can never take a
    LeaderWorkerSet's name). The name starts with a letter, as Service
    names must.
    """
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", tag):
        raise ValueError(f"tag {tag!r} must be a DNS-1035 label")
    key = "\x00".join(str(p) for p in (parts if identity is None else identity))
    digest = hashlib.sha256(key.encode()).hexdigest()[:DIGEST]
    budget = max_length - len(digest) - len(tag) - 2
    if budget < 1:
        raise ValueError(f"max_length {max_length} leaves no room for a name with tag {tag!r}")
    head = _INVALID.sub("-", "-".join(str(p) for p in parts).lower()).strip("-")
    if not head[:1].isalpha():
        head = f"mp-{head}".rstrip("-")
    head = head[:budget].rstrip("-")
    return f"{head}-{digest}-{tag}"


def replica_resource_key(cluster: str, index: int) -> str:
    """A ModelReplica's composed-resource key (Crossplane's composition-resource-name
    annotation): a move to another cluster is a new resource."""
    return f"replica-{index}-{cluster}"
