"""Write generated files, or with --check report the ones that are stale."""

from __future__ import annotations

import pathlib
import sys


def write_or_check(files: dict[pathlib.Path, str], root: pathlib.Path, argv: list[str],
                   fix: str = "make generate") -> int:
    stale = []
    for path, text in files.items():
        if "--check" in argv:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(root)))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if stale:
        print(f"stale, run `{fix}`: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0
