"""`make bench` runs end to end and reports every column (a smoke run on S:
the numbers are measurements, never asserted; benchmarks/README.md has a run)."""

from __future__ import annotations

import json

from benchmarks import bench


def test_the_benchmark_reports_every_measurement(capsys):
    assert bench.main(["--sizes", "S", "--runs", "3", "--throughput-seconds", "1",
                       "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["scheduler"]
    for column in ("p50_ms", "p95_ms", "grpc_p50_ms", "grpc_p95_ms", "floor_p50_ms",
                   "ratio_to_floor", "first_run_ms", "peak_rss_mib", "churn_p50_ms",
                   "churn_p95_ms", "churn_floor_p50_ms", "churn_ratio", "first_run_ratio",
                   "pack_p50_ms", "pack_first_run_ms"):
        assert row[column] > 0, column
    assert row["request_mb"] > 0 and row["response_kb"] > 0
    (composer,) = out["composer"]
    assert composer["afresh_p50_ms"] > 0 and composer["p50_ms"] > 0
    assert out["composer_throughput_errors"] == 0 and out["composer_throughput_rps"] > 0
    assert "S" in bench.render(out)
