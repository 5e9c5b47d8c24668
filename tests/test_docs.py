"""The README is a front page, and the documentation's links lead somewhere.

The deep material lives in docs/, one subject a page; the README stays short
enough to read at once and links there.
"""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
README_MAX_LINES = 320
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) outside code: the target up to an optional #anchor or "title".
LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]*)(?:#[^)\s]*)?(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^[ \t]*```.*?^[ \t]*```", re.M | re.S)  # fences may be indented
SPAN = re.compile(r"`[^`\n]*`")


def relative_links(text: str) -> list[str]:
    text = SPAN.sub("", FENCE.sub("", text))
    return [t for t in LINK.findall(text)
            if t and not re.match(r"^[a-z][a-z0-9+.-]*:", t)]  # http:, mailto:...


def test_the_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_that_exists(page):
    broken = [t for t in relative_links(page.read_text()) if not (page.parent / t).exists()]
    assert broken == [], f"{page.relative_to(ROOT)} links to missing files: {broken}"


def test_the_readme_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    linked = {(ROOT / t).resolve() for t in relative_links(readme)}
    unlinked = [p.name for p in (ROOT / "docs").glob("*.md") if p.resolve() not in linked]
    assert unlinked == []


def test_the_link_finder_sees_links_and_skips_code():
    text = ("[a](docs/a.md) [b](b.md#x) [web](https://x.io) [top](#top)\n"
            "`[c](c.md)`\n```\n[d](d.md)\n```\n  ```cel\n  [e](e.md)\n  ```\n")
    assert relative_links(text) == ["docs/a.md", "b.md"]
