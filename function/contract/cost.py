"""A node pool's price per node-hour, exact.

`spec.nodePools[].costPerNodeHour` is a decimal string ("2.48"), never a
float: the scheduler compares prices to choose where a replica goes, and two
prices that read equal must compare equal on every machine. It is parsed into
whole ten-thousandths of the fleet's currency unit (`UNIT`), an int.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

# At most six integer digits (no leading zero but "0" itself) and four
# decimals: one spelling per integer part, and every price fits in an int64
# after multiplying by any node count the schema allows.
PATTERN = r"^(0|[1-9][0-9]{0,5})(\.[0-9]{1,4})?$"
MAX_LENGTH = len("999999.9999")
UNIT = 10_000  # ten-thousandths per currency unit
_PATTERN = re.compile(PATTERN)


def parse(text: str) -> int:
    """The price in ten-thousandths; ValueError unless `text` matches PATTERN."""
    m = _PATTERN.fullmatch(text)
    if m is None:
        raise ValueError(f"costPerNodeHour {text[:40]!r} is not a decimal of at most 6 digits "
                         "and 4 decimals")
    decimals = (m[2] or ".")[1:]
    return int(m[1]) * UNIT + int(decimals.ljust(4, "0"))


def text(cost: int) -> str:
    """A price as the schema spells it, shortest form ("2.48", "0")."""
    whole, part = divmod(cost, UNIT)
    return f"{whole}.{part:04d}".rstrip("0").rstrip(".")


# What an unpriced pool's nodes cost when placements are compared: more than
# any priced placement can (6 digits x UNIT x the nodes and engines a replica
# may have stays far below it), so unknown ranks after every priced choice.
UNKNOWN = 1 << 62


def of(price: int | None, nodes: int | Fraction) -> int:
    """`nodes` nodes (a share of one: an eighth for one GPU of eight) for an hour at
    `price` (None: unknown, ranked last), rounded up to whole ten-thousandths."""
    if price is None:
        return UNKNOWN
    return price * nodes if isinstance(nodes, int) else math.ceil(price * nodes)


def total(costs) -> int:
    """A placement's cost from its parts' (`of`); UNKNOWN when any is unknown."""
    return min(sum(costs), UNKNOWN)
