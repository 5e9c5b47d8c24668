"""What a routing layer may read off an engine's command line, never write.

Engine flags belong to the user: modelplane reads the few it must agree with
(the port the engine listens on, its KV block size) and fails closed when it
cannot read them. Flags are found in `command` and `args` alike, as
`--name N` or `--name=N`, also inside one shell string such as
`sh -c "vllm serve ... --port 8200"`; the last occurrence wins, as with
argparse.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from function.composer.routing.serving_config import SGLANG, VLLM

ENGINE_NAMES = {VLLM: "vLLM", SGLANG: "SGLang"}


@dataclass(frozen=True)
class Flag:
    """A flag's last occurrence: absent, a number, or written but unreadable."""

    written: str | None = None  # the value as written; None: the flag is absent
    value: int | None = None    # the value, when it is a literal number

    @property
    def absent(self) -> bool:
        return self.written is None

    @property
    def unreadable(self) -> bool:
        return self.written is not None and self.value is None


def words(container: Mapping[str, Any]) -> list[str]:
    """`command` + `args` as argv words; a word with blanks is a shell script, split."""
    out: list[str] = []
    for item in list(container.get("command") or []) + list(container.get("args") or []):
        if not isinstance(item, str):
            continue
        if any(c.isspace() for c in item):
            try:
                out += shlex.split(item)
            except ValueError:  # an unbalanced quote: split on blanks
                out += item.split()
        else:
            out.append(item)
    return out


def read_flag(argv: Sequence[str], names: Sequence[str], *, high: int = 65535) -> Flag:
    """The last `--name V` or `--name=V` of any of `names` in argv."""
    found = Flag()
    for i, word in enumerate(argv):
        for name in names:
            if word == name:
                written = argv[i + 1] if i + 1 < len(argv) else ""
            elif word.startswith(name + "="):
                written = word[len(name) + 1:]
            else:
                continue
            number = int(written) if re.fullmatch(r"[0-9]{1,6}", written) else None
            found = Flag(written, number if number is not None and 1 <= number <= high
                         else None)
    return found


def port(container: Mapping[str, Any]) -> Flag:
    return read_flag(words(container), ("--port",))


def engine_kind(container: Mapping[str, Any]) -> str:
    """vllm, sglang, or "" when neither the command nor the image says."""
    for word in words(container):
        base = word.rsplit("/", 1)[-1]
        for kind in (VLLM, SGLANG):
            if base == kind or base.startswith(kind + "."):
                return kind
    image = str(container.get("image") or "").lower()
    repo = image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    for kind in (SGLANG, VLLM):
        if kind in repo:
            return kind
    return ""


def block_size(container: Mapping[str, Any]) -> Flag:
    """The KV block size: `--block-size` (vLLM) or `--page-size` (SGLang)."""
    return read_flag(words(container), ("--block-size", "--page-size"), high=1 << 16)
