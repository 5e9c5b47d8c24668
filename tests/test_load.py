"""A bounded form of `make load`: concurrent clients, zero errors."""

from __future__ import annotations

from benchmarks import load


def test_concurrent_clients_get_answers_without_errors():
    result = load.run(seconds=4, clients=8, kinds="all", warmup=1, slack_kib=64 * 1024)
    # Answers from every client, however slow the machine: throughput is
    # make load's and make bench's to measure, not a timed test's.
    assert result["ok"] >= 8
    assert result["errors"] == 0 and result["fatal"] == 0, result
    assert result["pass"], result


def test_every_realistic_request_kind_is_in_the_mix():
    kinds = {name.split("/")[0] for name in load.realistic_requests()}
    assert kinds == {"schedule", "compose", "cluster"}
