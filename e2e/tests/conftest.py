"""The live control plane the scenarios run against.

`make e2e` starts one for the session from examples/fleet and stops it at the
end; with E2E_REUSE=1 the scenarios run against the one `make cluster` left
running (and leave it running). E2E_STATE_DIR names its state directory (default
.cluster/, as `python -m e2e.controlplane --state-dir`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))  # builders: the examples as documents

from e2e.controlplane.core import DEFAULT_STATE_DIR, ControlPlane  # noqa: E402

FLEET = REPO / "examples" / "fleet"
STATE_DIR = Path(os.environ.get("E2E_STATE_DIR") or DEFAULT_STATE_DIR)
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="session")
def cp():
    if os.environ.get("E2E_REUSE") == "1":
        yield ControlPlane.load(STATE_DIR)
        return
    plane = ControlPlane.up(FLEET, STATE_DIR)
    try:
        yield plane
    finally:
        measure_memory(plane)  # at least once, whichever scenarios ran
        TIMINGS["peak RSS of the control plane (MiB)"] = round(PEAK["kib"] / 1024)
        plane.down()


PEAK: dict[str, int] = {}


def measure_memory(cp: ControlPlane) -> None:
    """Remember the largest sum of VmRSS over every component seen so far."""
    PEAK["kib"] = max(PEAK.get("kib", 0), sum(cp.rss_kib().values()))


@pytest.fixture
def timings():
    return TIMINGS


def pytest_terminal_summary(terminalreporter):
    if not TIMINGS:
        return
    terminalreporter.section("e2e measurements")
    for what, value in TIMINGS.items():
        terminalreporter.write_line(f"{what}: {value}")
    out = STATE_DIR / "e2e-measurements.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(TIMINGS, indent=2) + "\n")
