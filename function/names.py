"""Kubernetes names that are always valid DNS labels of at most 63 characters."""

from __future__ import annotations

import hashlib
import re

MAX = 63
_INVALID = re.compile(r"[^a-z0-9-]+")


def dns_label(*parts: str | int, max_length: int = MAX) -> str:
    """Join parts with '-' into a DNS label; shorten with a hash when too long.

    The hash covers every part, so two different inputs never collide after
    truncation (two deployments named alike in different namespaces, say).
    """
    full = "-".join(str(p) for p in parts)
    name = _INVALID.sub("-", full.lower()).strip("-")
    if len(name) <= max_length and name == full:
        return name
    digest = hashlib.sha256(full.encode()).hexdigest()[:10]
    head = name[: max_length - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}" if head else digest
