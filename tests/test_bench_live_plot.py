"""benchmarks/live/plot.py: what the time-to-Ready plot draws, read from the
`--json` files of `make bench-live` (the data, not the pixels)."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from benchmarks.live import plot
from benchmarks.live.report import Results, Wave


def results(d: int, apply: dict[str, float | None], day2: dict[str, float | None] | None) -> dict:
    """A run as `python -m benchmarks.live --json` writes it."""
    res = Results(machine={"cpus": 2}, clusters=6, deployments=d)
    res.waves.append(Wave("apply", 16, apply, 300.0))
    if day2 is not None:
        res.waves.append(Wave("day-2 (+1 replica each)", 26, day2, 300.0))
    return json.loads(json.dumps(asdict(res), default=str))


def test_each_wave_of_each_run_is_a_point_with_all_p50_and_p95():
    run = results(3, {"a": 10.0, "b": 20.0, "c": 30.0}, {"a": 15.0, "b": 16.0, "c": 61.0})
    (apply, day2) = plot.points([("run.json", run)])
    assert (apply.deployments, apply.wave, apply.all, apply.converged) == (3, "apply", 30.0, 3)
    # Linear between the closest ranks, as the table of report.py computes them.
    assert (apply.p50, apply.p95) == (20.0, 29.0)
    assert (day2.wave, day2.all, day2.p50) == ("day-2", 61.0, 16.0)
    assert apply.source == day2.source == "run.json"


def test_a_wave_that_did_not_converge_has_no_all_but_keeps_its_percentiles():
    """Only what was measured is drawn: the last deployment's time is unknown."""
    (apply,) = plot.points([("r", results(2, {"a": 12.0, "b": None}, None))])
    assert apply.all is None and apply.converged == 1 and apply.p50 == 12.0


def test_a_run_that_failed_before_any_wave_draws_nothing():
    assert plot.points([("r", results(10, {}, None) | {"waves": []})]) == []
    (apply,) = plot.points([("r", results(10, {}, None))])
    assert apply.all is None and apply.p50 is None and apply.converged == 0


def test_points_are_ordered_by_d_then_wave_then_file_whatever_the_order_given():
    runs = [("b.json", results(10, {"x": 27.0}, {"x": 35.0})),
            ("a.json", results(10, {"x": 26.0}, {"x": 61.0})),
            ("c.json", results(5, {"x": 14.0}, {"x": 20.0}))]
    got = [(p.deployments, p.wave, p.source) for p in plot.points(runs)]
    assert got == [(5, "apply", "c.json"), (5, "day-2", "c.json"),
                   (10, "apply", "a.json"), (10, "apply", "b.json"),
                   (10, "day-2", "a.json"), (10, "day-2", "b.json")]


def test_the_line_joins_the_median_all_of_each_d_over_converged_runs():
    runs = [("a", results(10, {"x": 26.0}, None)), ("b", results(10, {"x": 28.0}, None)),
            ("c", results(10, {"x": 40.0}, None)), ("d", results(5, {"x": 14.0, "y": None}, None))]
    assert plot.medians(plot.points(runs), "apply") == [(10, 28.0)]


def test_labelled_files_make_series_of_their_own():
    """`before=a.json after=b.json`: the same D and wave, two series, two lines."""
    paths, labels = plot.labelled(["before=x/a.json", "after=b.json", "c.json"])
    assert [str(p) for p in paths] == ["x/a.json", "b.json", "c.json"]
    assert labels == {"a.json": "before", "b.json": "after"}
    runs = [("a.json", results(10, {"x": 20.0}, {"x": 61.0})),
            ("b.json", results(10, {"x": 21.0}, {"x": 31.0})),
            ("c.json", results(10, {"x": 22.0}, None))]
    pts = plot.points(runs, labels)
    assert plot.series(pts) == ["apply", "after: apply", "after: day-2",
                                "before: apply", "before: day-2"]
    # In the order the command line gave the labels.
    assert plot.series(pts, ["before", "after"]) == ["apply", "before: apply", "before: day-2",
                                                     "after: apply", "after: day-2"]
    assert plot.medians(pts, "before: day-2") == [(10, 61.0)]
    assert plot.medians(pts, "after: day-2") == [(10, 31.0)]
    assert plot.medians(pts, "apply") == [(10, 22.0)]


def test_other_waves_are_left_out():
    run = results(4, {"x": 1.0}, None)
    run["waves"].append(dict(run["waves"][0], name="lose a cluster"))
    assert [p.wave for p in plot.points([("r", run)])] == ["apply"]


def test_the_command_reads_the_files_and_writes_the_same_png_twice(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    files = []
    for i, d in enumerate((5, 10)):
        f = tmp_path / f"run{i}.json"
        f.write_text(json.dumps(results(d, {"x": 10.0 + d}, {"x": 20.0 + d})))
        files.append(str(f))
    first, second = tmp_path / "one.png", tmp_path / "two.png"
    assert plot.main([str(first), *files]) == 0
    assert plot.main([str(second), *files]) == 0
    assert first.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert first.read_bytes() == second.read_bytes()
    assert b"Software" not in first.read_bytes()
    assert "D=10 day-2: all 30.0 p50 30.0" in capsys.readouterr().out
