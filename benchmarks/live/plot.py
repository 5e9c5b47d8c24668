"""Time to Ready against D, from the `--json` outputs of `make bench-live`.

    python -m benchmarks.live.plot OUT.png [LABEL=]RUN.json [[LABEL=]RUN.json ...]

Reads one or more results files (`python -m benchmarks.live --json FILE`, the
`Results` of report.py as `dataclasses.asdict` wrote them) and draws, per wave,
the seconds until every deployment was Ready ("all") and the p50 and p95 over
the deployments, against D (the deployments applied at once). Every run is a
point of its own, so repeated runs at one D show their spread; a line joins the
median "all" of each D. Files given a LABEL (the code or setting they measured,
say `before=a.json`) make series of their own. Only what was measured is drawn:
a wave that did not converge has no "all" and is said so in the legend's count,
never guessed.

Deterministic: the same files give a byte-identical PNG (Agg, no Software or
date in the PNG's metadata, a fixed size and DPI). `points` is pure and holds
everything the figure shows (tests/test_bench_live_plot.py); matplotlib is
imported only to draw.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.traffic.stats import percentile

WAVES = ("apply", "day-2")   # the waves' names start so (report.Wave.name)
STATS = ("all", "p50", "p95")


@dataclass(frozen=True)
class Point:
    """One wave of one run, as drawn."""

    deployments: int           # D
    wave: str                  # "apply" or "day-2"
    all: float | None          # until the last deployment was Ready; None unless all were
    p50: float | None
    p95: float | None
    converged: int             # deployments that converged in the wave
    source: str                # the file it came from
    label: str = ""            # the series it belongs to besides its wave ("": none)

    @property
    def series(self) -> str:
        return f"{self.label}: {self.wave}" if self.label else self.wave


def wave_kind(name: str) -> str | None:
    """"apply" or "day-2" for a wave's name (report.Wave.name), None for another."""
    return next((w for w in WAVES if name == w or name.startswith(w + " ")), None)


def points(runs: Iterable[tuple[str, Mapping[str, Any]]],
           labels: Mapping[str, str] | None = None) -> list[Point]:
    """Every wave of every run (source, results as JSON), sorted by D, label, wave and
    source; `labels` names the series of a source (default: none)."""
    out = []
    for source, res in runs:
        label = (labels or {}).get(source, "")
        d = int(res.get("deployments") or 0)
        for w in res.get("waves") or []:
            kind = wave_kind(str(w.get("name", "")))
            if kind is None or d < 1:
                continue
            seconds = dict(w.get("seconds") or {})
            done = sorted(float(s) for s in seconds.values() if s is not None)
            complete = bool(done) and len(done) == len(seconds)
            out.append(Point(d, kind, done[-1] if complete else None,
                             percentile(done, 50) if done else None,
                             percentile(done, 95) if done else None, len(done), source, label))
    return sorted(out, key=lambda p: (p.deployments, p.label, WAVES.index(p.wave), p.source))


def series(pts: Sequence[Point], order: Sequence[str] = ()) -> list[str]:
    """The series drawn, in legend order: unlabelled first, then by label in `order`
    (the order the command line gave them; others after, by name), then by wave."""
    def rank(label: str) -> tuple[int, str]:
        return (-1, "") if not label else \
            (order.index(label), "") if label in order else (len(order), label)
    return [s for _, _, s in sorted({(rank(p.label), WAVES.index(p.wave), p.series)
                                      for p in pts})]


def medians(pts: Sequence[Point], name: str) -> list[tuple[int, float]]:
    """(D, median "all") over the runs of series `name` that converged, by D."""
    by_d: dict[int, list[float]] = {}
    for p in pts:
        if p.series == name and p.all is not None:
            by_d.setdefault(p.deployments, []).append(p.all)
    return [(d, statistics.median(v)) for d, v in sorted(by_d.items())]


def load(paths: Sequence[Path]) -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, json.loads(p.read_text())) for p in paths]


def labelled(args: Sequence[str]) -> tuple[list[Path], dict[str, str]]:
    """`LABEL=FILE` or `FILE` arguments -> the files, and the label of each file's name."""
    paths, labels = [], {}
    for arg in args:
        label, sep, path = arg.partition("=")
        p = Path(path if sep else arg)
        paths.append(p)
        if sep:
            labels[p.name] = label
    return paths, labels


# Colour-blind-safe (Okabe-Ito), one per series in legend order.
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
MARKERS = {"all": "o", "p50": "v", "p95": "^"}


def render(pts: Sequence[Point], out: Path, title: str = "", order: Sequence[str] = ()) -> None:
    """Draw `pts` into the PNG `out`."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(9.0, 4.5), dpi=100)
    for i, name in enumerate(series(pts, order)):
        colour = COLOURS[i % len(COLOURS)]
        of_series = [p for p in pts if p.series == name]
        runs = len(of_series)
        for stat in STATS:
            xy = [(p.deployments, getattr(p, stat)) for p in of_series
                  if getattr(p, stat) is not None]
            if not xy:
                continue
            # One legend entry a series (its "all"); the percentiles' markers are
            # explained once, below.
            label = f"{name}: all ({len(xy)} of {runs} runs)" if stat == "all" else None
            ax.scatter([x for x, _ in xy], [y for _, y in xy], color=colour,
                       marker=MARKERS[stat], s=36 if stat == "all" else 18,
                       alpha=1.0 if stat == "all" else 0.6, label=label, zorder=3)
        line = medians(pts, name)
        if len(line) > 1:
            ax.plot([d for d, _ in line], [s for _, s in line], color=colour,
                    linewidth=1, zorder=2)
    for stat in STATS[1:]:
        ax.scatter([], [], color="grey", marker=MARKERS[stat], s=18, label=f"{stat} (same colours)")
    ds = sorted({p.deployments for p in pts})
    ax.set_xticks(ds)
    ax.set_xlim(0, max(ds, default=1) * 1.1 + 1)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("D: ModelDeployments applied at once")
    ax.set_ylabel("seconds from the apply to Ready")
    ax.set_title(title or "make bench-live: time to Ready against D", fontsize=10)
    ax.grid(True, linewidth=0.3)
    # Beside the axes: inside, it would hide the points of the smallest D.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    # No Software or creation time in the PNG: the same points, the same bytes.
    fig.savefig(out, format="png", metadata={"Software": None})
    plt.close(fig)


def _s(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.live.plot",
                                description="Plot time to Ready against D from the --json "
                                            "outputs of python -m benchmarks.live.")
    p.add_argument("out", type=Path, help="the PNG to write")
    p.add_argument("runs", nargs="+", metavar="[LABEL=]RUN.json",
                   help="results files (--json), each with the label of its series if any")
    p.add_argument("--title", default="", help="the figure's title")
    args = p.parse_args(argv)
    paths, labels = labelled(args.runs)
    pts = points(load(paths), labels)
    if not pts:
        p.error("no wave in the given files")
    render(pts, args.out, args.title, list(dict.fromkeys(labels.values())))
    for pt in pts:
        print(f"D={pt.deployments} {pt.series}: all {_s(pt.all)} p50 {_s(pt.p50)} "
              f"p95 {_s(pt.p95)} ({pt.converged} converged; {pt.source})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
