"""Shared fixtures: the pinned crossplane binaries and a locally served function."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from function.tools import localrender  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tools() -> localrender.Tools:
    """The pinned crossplane CLI and core binary; a missing tool fails, never skips."""
    try:
        return localrender.find_tools()
    except localrender.RenderError as exc:
        pytest.fail(f"the pinned crossplane binaries are not available: {exc}")


@pytest.fixture(scope="session")
def function_address():
    """`function-model-serving serve --insecure` on a free loopback port."""
    with localrender.serve_locally() as address:
        yield address


@pytest.fixture(autouse=True)
def cold_composer_cache():
    """Each test composes as a fresh process would: tests that monkeypatch the
    composer's internals must not be answered from an earlier test's
    composition. The cache itself is pinned by tests/test_composer_cache.py."""
    from function.composer import memo

    memo.CLUSTERS.clear()
    memo.COMPOSED.clear()
    yield
