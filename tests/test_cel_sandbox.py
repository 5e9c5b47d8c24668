"""Selectors evaluated in a worker process with a budget (contract/devicecel/sandbox.py),
priced as CEL-C++ pays (runtimecost.py), and remembered once over budget (#48 item 1)."""

from __future__ import annotations

import os
import signal

import pytest
import yaml
from builders import ROOT
from fleetgen import (World, cluster, condition, deployment, device, key, own_replica, placements,
                      pool, status)
from test_cel_sandbox_server import SHAPES, UNBOUNDED

from function.contract import devicecel
from function.contract.devicecel import cost, runtimecost, sandbox, selector

H100 = device("gpu", "H100", count=8)
DEVICE = devicecel.device_activation({"driver": "gpu.example.com", "attributes": {},
                                      "capacity": {}})


@pytest.fixture
def unbounded(monkeypatch):
    """A sandbox of its own whose workers evaluate with every estimate lifted,
    as if the estimates had missed the selector."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(UNBOUNDED), os.environ.get("PYTHONPATH")])))
    box = sandbox.Sandbox()
    yield box
    box.close()


def _until_verdict(box: sandbox.Sandbox, expression: str, attempts: int = 6):
    """Evaluate as Crossplane's retries would: a busy machine may give no verdict first."""
    for _ in range(attempts):
        try:
            return box.evaluate(expression, DEVICE.shape)
        except sandbox.Unavailable:
            continue
    raise AssertionError(f"no verdict after {attempts} attempts")


# --- The estimates: what CEL-C++ pays, beside what Kubernetes estimates -------

@pytest.mark.parametrize("name", sorted(SHAPES))
def test_kubernetes_estimate_admits_each_shape_and_the_runtime_model_refuses_it(name):
    program = devicecel.library.ENV.compile(SHAPES[name])
    assert cost.estimate(program.serialize()) <= cost.MAX_COST  # what Kubernetes would admit
    with pytest.raises(devicecel.CelCostError, match="too complex") as refused:
        devicecel.compile_selector(SHAPES[name])
    assert name != "quantities" or "calls the Kubernetes library in Python" in str(refused.value)
    assert name == "quantities" or "intermediate value" in str(refused.value)


def test_the_runtime_model_prices_replace_by_its_output_and_list_concatenation_by_size():
    def runtime(expression: str) -> int:
        return runtimecost.estimate(devicecel.library.ENV.compile(expression).serialize())

    # The same input, a longer output: dearer.
    short = runtime("device.driver.replace('.', '').size() > 0")
    longer = runtime("device.driver.replace('.', '..........').size() > 0")
    assert longer > short
    # A list twice as long costs about twice as much to concatenate.
    four = runtime("([1, 2] + [3, 4]).size() > 0")
    eight = runtime("([1, 2, 3, 4] + [5, 6, 7, 8]).size() > 0")
    assert eight - four >= 4
    # A library call costs what a Python callback costs.
    assert runtime('quantity("1Gi").isGreaterThan(quantity("1"))') >= 3 * runtimecost.EXTENSION_CALL


def test_every_selector_of_the_examples_and_the_corpus_is_within_the_runtime_model():
    corpus = yaml.safe_load((ROOT / "tests" / "cel" / "corpus.yaml").read_text())
    expressions = [c["expression"] for c in corpus["cases"]]
    refused = []
    for expression in expressions:
        try:
            program = devicecel.library.ENV.compile(expression)
        except Exception:  # noqa: BLE001 - not a valid selector: not this test's subject
            continue
        try:
            if runtimecost.estimate(program.serialize()) > runtimecost.MAX_COST:
                refused.append(expression)
        except runtimecost.TooLarge:
            refused.append(expression)
    assert not refused


# --- The sandbox -------------------------------------------------------------

def _outcome(run, activation) -> object:
    try:
        return run(activation)
    except devicecel.CelEvalError as e:
        return ("error", str(e))


def test_a_verdict_in_the_sandbox_equals_the_one_computed_in_process():
    corpus = yaml.safe_load((ROOT / "tests" / "cel" / "corpus.yaml").read_text())
    compared = 0
    for case in corpus["cases"]:
        try:
            compiled = devicecel.compile_selector(case["expression"])
        except devicecel.CelCompileError:
            continue
        activation = devicecel.device_activation(corpus["devices"][case["device"]])
        assert _outcome(compiled.matches, activation) == _outcome(
            compiled.evaluate_here, activation), case["expression"]
        compared += 1
    assert compared >= 50


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_sandbox_stops_each_shape_and_evaluates_on(unbounded, name):
    assert unbounded.evaluate("device.driver == 'gpu.example.com'", DEVICE.shape) == (True, "")
    with pytest.raises(sandbox.BudgetExceeded) as stopped:
        _until_verdict(unbounded, SHAPES[name])
    assert ("computed for more than" in str(stopped.value)
            or f"{sandbox.MEMORY_BYTES >> 20} MiB" in str(stopped.value))
    # The next evaluation is answered by the spare, at once.
    assert unbounded.evaluate("device.driver == 'other'", DEVICE.shape) == (False, "")


def test_a_stopped_worker_gives_no_verdict_and_its_computing_time_adds_up(unbounded):
    unbounded.evaluate("true", DEVICE.shape)  # started
    worker = unbounded._active
    assert worker is not None
    os.kill(worker.proc.pid, signal.SIGSTOP)  # the machine gives it no time at all
    with pytest.raises(sandbox.Unavailable, match="did not finish within"):
        unbounded.evaluate("device.driver == 'x'", DEVICE.shape)
    assert sandbox.exceeded("device.driver == 'x'") is None  # not the selector's fault
    assert unbounded.evaluate("device.driver == 'x'", DEVICE.shape) == (False, "")


def test_a_worker_is_retired_after_its_evaluations(monkeypatch):
    monkeypatch.setattr(sandbox, "RECYCLE_AFTER", 3)
    box = sandbox.Sandbox()
    try:
        pids = []
        for i in range(7):
            box.evaluate(f"device.driver == '{i}'", DEVICE.shape)
            assert box._active is not None
            pids.append(box._active.proc.pid)
        assert len(set(pids)) == 3 and pids[0] == pids[2] != pids[3]
    finally:
        box.close()


def test_an_expression_over_budget_is_refused_from_then_on(monkeypatch):
    expression = "device.driver.size() > 1 && device.driver != 'remembered'"
    compiled = devicecel.compile_selector(expression)
    calls = []

    def over(expr: str, shape: str):
        calls.append(expr)
        raise sandbox.BudgetExceeded("its evaluation computed for more than 0.2s and was stopped")
    monkeypatch.setattr(sandbox.SANDBOX, "evaluate", over)
    monkeypatch.setattr(sandbox, "_EXCEEDED", type(sandbox._EXCEEDED)())
    with pytest.raises(devicecel.CelBudgetError, match="exceeded its evaluation budget"):
        compiled.matches(DEVICE)
    with pytest.raises(devicecel.CelBudgetError, match="not evaluated again"):
        devicecel.compile_selector(expression)
    with pytest.raises(devicecel.CelBudgetError):
        compiled.matches(DEVICE)
    assert calls == [expression]
    assert isinstance(devicecel.CelBudgetError("x"), devicecel.CelCostError)  # every caller handles it
    assert selector.compile_here(expression) is compiled  # the worker's own compile is unaffected


# --- The scheduler: keeps everything, says why, remembers it in status ----------

def _world(expression: str, observed_status: dict | None = None, replicas: int = 1) -> World:
    """A deployment with one replica on cluster a already, asking for `replicas`."""
    md = deployment("llama", replicas=replicas)
    md["spec"]["template"]["spec"]["engines"][0]["members"][0]["nodeSelector"]["devices"][0][
        "selectors"] = [{"cel": expression}]
    if observed_status is not None:
        md["status"] = observed_status
    engine = md["spec"]["template"]["spec"]["engines"][0]["name"]
    return World(md, [cluster("a", pool("h100", 4, H100))],
                 observed={key("a", 0): own_replica(md, "a", 0, {engine: "h100"})})


def test_a_selector_over_budget_keeps_the_replicas_and_is_remembered_in_status(monkeypatch):
    expression = "device.driver.size() > 2 && device.driver != 'scheduler-over'"

    def over(expr: str, shape: str):
        raise sandbox.BudgetExceeded("its evaluation computed for more than 0.2s and was stopped")
    monkeypatch.setattr(sandbox.SANDBOX, "evaluate", over)
    monkeypatch.setattr(sandbox, "_EXCEEDED", type(sandbox._EXCEEDED)())
    from function.scheduler import matching
    monkeypatch.setattr(matching, "_VERDICTS", type(matching._VERDICTS)())
    rsp = _world(expression, replicas=2).run()  # a second replica needs the selector evaluated
    assert set(placements(rsp)) == {0}  # the one that exists is kept as it is
    state, reason, message = condition(rsp, "ReplicasScheduled")
    assert (state, reason) == ("False", "InvalidSelector")
    assert "exceeded its evaluation budget" in message
    assert status(rsp)["selectorsOverBudget"] == [
        {"selector": devicecel.digest(expression),
         "reason": "its evaluation computed for more than 0.2s and was stopped"}]


def test_a_selector_the_status_names_is_refused_without_being_evaluated(monkeypatch):
    expression = "device.driver.size() > 3 && device.driver != 'status-named'"
    monkeypatch.setattr(sandbox.SANDBOX, "evaluate", lambda *a: pytest.fail("evaluated"))
    remembered = {"selectorsOverBudget": [
        {"selector": devicecel.digest(expression), "reason": "it ran before the restart"},
        {"selector": devicecel.digest("gone from the spec"), "reason": "old"}]}
    rsp = _world(expression, remembered).run()
    assert set(placements(rsp)) == {0}
    state, reason, message = condition(rsp, "ReplicasScheduled")
    assert (state, reason) == ("False", "InvalidSelector")
    assert "it ran before the restart" in message
    # Kept while in the spec; an entry whose selector left the spec goes.
    assert status(rsp)["selectorsOverBudget"] == [
        {"selector": devicecel.digest(expression), "reason": "it ran before the restart"}]
    # Another deployment's status says nothing of this one.
    assert sandbox.exceeded(expression) is None


def test_no_verdict_keeps_every_replica_and_says_it_is_retried(monkeypatch):
    expression = "device.driver.size() > 4 && device.driver != 'busy'"

    def busy(expr: str, shape: str):
        raise sandbox.Unavailable("its evaluation did not finish within 0.6s on a busy machine")
    monkeypatch.setattr(sandbox.SANDBOX, "evaluate", busy)
    rsp = _world(expression, replicas=2).run()
    assert set(placements(rsp)) == {0}
    state, reason, message = condition(rsp, "ReplicasScheduled")
    assert (state, reason) == ("False", "SelectorNotEvaluated")
    assert "evaluated again on the next reconcile" in message
    assert "selectorsOverBudget" not in status(rsp)


def test_a_worker_that_cannot_start_gives_no_verdict_and_the_next_one_starts(monkeypatch):
    box = sandbox.Sandbox()
    real = sandbox._Worker.__init__

    def broken(self) -> None:
        real(self)
        self.proc.kill()  # dies before it says it is ready
    monkeypatch.setattr(sandbox._Worker, "__init__", broken)
    try:
        with pytest.raises(sandbox.Unavailable, match="did not start"):
            box.evaluate("true", DEVICE.shape)
        with pytest.raises(sandbox.Unavailable, match="did not start"):
            box.evaluate("true", DEVICE.shape)  # not a crash on the dead one
        monkeypatch.setattr(sandbox._Worker, "__init__", real)
        box._spare = None
        assert box.evaluate("device.driver == 'gpu.example.com'", DEVICE.shape) == (True, "")
    finally:
        box.close()
