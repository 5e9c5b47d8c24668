"""Selector verdicts are remembered across reconciles (bounding cel-expr-python's leak)."""

from __future__ import annotations

from builders import EXAMPLES, load, load_one, request

from function.contract import devicecel
from function.contract.api import REQUIRE_CLUSTERS, REQUIRE_REPLICAS
from function.runtime.fn import run_function
from function.scheduler import matching


def test_each_selector_is_evaluated_once_per_device_spec_however_often_we_reconcile(
        monkeypatch):
    calls = []
    real = devicecel.CompiledSelector.matches

    def counting(self, activation):
        calls.append(1)
        return real(self, activation)

    monkeypatch.setattr(devicecel.CompiledSelector, "matches", counting)
    monkeypatch.setattr(matching, "_VERDICTS", matching.OrderedDict())
    md = load_one(EXAMPLES / "deployments" / "single-gpu.yaml")
    req = request(md, required={REQUIRE_CLUSTERS: load(EXAMPLES / "fleet"),
                                REQUIRE_REPLICAS: []})
    run_function(req)
    first = len(calls)
    assert first > 0
    for _ in range(5):
        run_function(req)
    assert len(calls) == first


def test_the_verdict_memory_is_bounded(monkeypatch):
    monkeypatch.setattr(matching, "_VERDICTS", matching.OrderedDict())
    monkeypatch.setattr(matching, "_VERDICT_LIMIT", 3)
    md = load_one(EXAMPLES / "deployments" / "single-gpu.yaml")
    run_function(request(md, required={REQUIRE_CLUSTERS: load(EXAMPLES / "fleet"),
                                       REQUIRE_REPLICAS: []}))
    assert len(matching._VERDICTS) <= 3
