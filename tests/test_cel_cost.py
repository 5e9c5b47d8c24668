"""Kubernetes DRA's CEL cost limits, in the function (#33).

A device selector is CEL that a tenant writes and every reconcile evaluates.
Without a cost limit a selector of a few hundred characters (a `cel.bind` over
repeated `.replace` calls, each making a string four times longer) ran for
seconds to minutes and took gigabytes. Kubernetes refuses such a selector at
admission (its estimated cost exceeds CELSelectorExpressionMaxCost,
1,000,000) and stops it at run time; devicecel now does both
(function/contract/devicecel/cost.py). The server side (the bomb and an
ordinary request at once, over gRPC) is in test_cel_cost_server.py.
"""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import sys

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from fleetgen import (
    World,
    cluster,
    condition,
    deployment,
    desired,
    device,
    fatal,
    key,
    own_replica,
    pool,
    stamp,
    to_plain,
)

from function.contract.devicecel import (
    CelCompileError,
    CelCostError,
    CelError,
    CelEvalError,
    compile_selector,
    device_activation,
)
from function.contract.devicecel import cost as celcost
from function.contract.devicecel.selector import compile_here

ROOT = pathlib.Path(__file__).resolve().parent.parent
H100 = device("gpu", "H100", count=8)


def bomb(replaces: int) -> str:
    """A selector whose string grows fourfold with every replace (on each '.'
    of the driver): 2 * 4**replaces characters for "gpu.example.com"."""
    return "cel.bind(x, device.driver" + ".replace('.', '....')" * replaces + ", x.size() > 0)"


# --- The estimate is Kubernetes' ---------------------------------------------

# Expressions and the worst-case costs Kubernetes' own test pins for them
# (k8s.io/dynamic-resource-allocation/cel/compile_test.go, expectCost), for
# those our environment declares (no list-type attributes, no regex find).
KUBERNETES_COSTS = [
    ('device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))', 6),
    ('device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))', 6),
    ('"no-such-domain" in device.attributes', 3),
    ('device.driver == ""', 2),
    ('device.driver == "dra.example.com"', 4),
    ('device.attributes["dra.example.com"].name', 4),
    ('device.attributes["dra.example.com"]["name"]', 4),
    ('cel.bind(dra, device.attributes["dra.example.com"], dra.name)', 15),
    ('device.attributes["dra.example.com"].name > 0', 5),
    ('device.attributes["dra.example.com"].name == "fish"', 5),
    ('device.attributes["dra.example.com"].name.isGreaterThan(semver("0.0.1"))', 6),
    ('device.attributes["dra.example.com"].name.isGreaterThan(semver("v0.0.1", true)) && '
     'isSemver("v1.0.0", true)', 7),
    ('device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))', 6),
    ('"name" in device.capacity["dra.example.com"] && '
     'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))', 10),
    ('!("name" in device.capacity["dra.example.com"]) || '
     'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))', 11),
    (" && ".join([
        'device.capacity["dra.example.com"].quantity.isGreaterThan(quantity("1Ki"))',
        'device.attributes["dra.example.com"].bool',
        'device.attributes["dra.example.com"].int > 0',
        'device.attributes["dra.example.com"].string == "fish"',
        'device.attributes["dra.example.com"].version.isGreaterThan(semver("0.0.1"))',
        'device.capacity["dra.example.com"]["quantity"].isGreaterThan(quantity("1Ki"))',
        'device.attributes["dra.example.com"]["bool"]',
        'device.attributes["dra.example.com"]["int"] > 0',
        'device.attributes["dra.example.com"]["string"] == "fish"',
        'device.attributes["dra.example.com"]["version"].isGreaterThan(semver("0.0.1"))']), 52),
    ('device.attributes["dra.example.com"].a && device.attributes["dra.example.com"].b && '
     'device.attributes["dra.example.com"].c', 12),
    ('device.attributes.exists_one(x, x == "dra.example.com")', 164),
    ('device.attributes["dra.example.com"].exists_one(x, x == "services")', 133),
    ('device.attributes["dra.example.com"].services.split("example").size() >= 2', 19),
    ('device.attributes["dra.example.com"].services.matches("[^a]?sym")', 18),
    ('device.capacity.exists_one(x, x == "dra.example.com")', 164),
    ('device.capacity["dra.example.com"].exists_one(x, x == "memory")', 133),
    ("device.allowMultipleAllocations == true", 3),
]


@pytest.mark.parametrize(("expression", "expected"), KUBERNETES_COSTS)
def test_the_estimated_cost_is_the_one_kubernetes_computes(expression, expected):
    assert compile_selector(expression).cost == expected


def test_the_limits_are_kubernetes_dra_limits():
    # k8s.io/api/resource/v1: CELSelectorExpressionMaxCost, CELSelectorExpressionMaxLength.
    assert (celcost.MAX_COST, celcost.MAX_LENGTH) == (1_000_000, 10_240)


# --- Over the limit: refused, with a message that says why ------------------

def test_a_selector_over_the_cost_limit_is_refused_when_it_compiles():
    with pytest.raises(CelCostError) as refused:
        compile_selector(bomb(10))
    message = str(refused.value)
    assert "too complex" in message and "estimated worst-case" in message
    assert "1,000,000" in message and "CELSelectorExpressionMaxCost" in message
    assert "cel.bind(x, device.driver.replace" in message  # names the selector
    assert isinstance(refused.value, CelCompileError)  # every caller already handles it


def test_a_selector_longer_than_kubernetes_allows_is_refused():
    with pytest.raises(CelCostError, match=r"10,241 characters long.*10,240"):
        compile_selector("true" + " " * 10_237)


def test_a_bomb_is_refused_quickly_and_without_memory():
    """Measured in a fresh process: the refusal's wall time and the process's
    peak memory. The address space is capped at 4 GB so that the unbounded
    evaluation this replaced cannot take the machine down when it fails."""
    script = f"""
import json, resource, time
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from function.contract.devicecel import CelError, compile_selector, device_activation
start = time.monotonic()
try:
    compile_selector({bomb(14)!r}).matches(device_activation({{"driver": "gpu.example.com"}}))
    outcome = "evaluated"
except CelError as e:
    outcome = type(e).__name__ + ": " + str(e)
print(json.dumps({{"outcome": outcome, "seconds": time.monotonic() - start,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout)
    assert got["outcome"].startswith("CelCostError"), got
    assert got["seconds"] < 10, got
    assert got["peak_mb"] < 1536, got


def test_a_deployment_with_a_selector_over_the_limit_keeps_every_replica_and_says_why():
    md = deployment("llama", replicas=3)
    observed = {key("a", 0): own_replica(md, "a", 0, {"vllm": "h100"}, created=stamp(1)),
                key("a", 1): own_replica(md, "a", 1, {"vllm": "h100"}, created=stamp(2))}
    md["spec"]["template"]["spec"]["engines"][0]["members"][0]["nodeSelector"]["devices"][0][
        "selectors"] = [{"cel": bomb(10)}]
    rsp = World(md, [cluster("a", pool("h100", 4, H100))], observed=observed).run()
    got = {k: to_plain(v) for k, v in desired(rsp).items()}
    assert set(got) == set(observed)  # nothing removed, moved or added
    for k, mr in observed.items():
        assert got[k]["spec"] == mr["spec"]
    state, reason, message = condition(rsp, "ReplicasScheduled")
    assert (state, reason) == ("False", "InvalidSelector")
    assert "too complex" in message and "1,000,000" in message
    assert "existing replicas are kept" in message
    assert not fatal(rsp)


def test_a_replica_with_a_selector_over_the_limit_keeps_every_object_and_says_why():
    from composer_support import compose
    from test_faults_composer import assert_kept, existing, healthy
    mr, before = healthy()
    bomb_mr = copy.deepcopy(mr)
    bomb_mr["spec"]["engines"][0]["members"][0]["deviceRequests"][0]["selectors"] = [
        {"cel": bomb(10)}]
    during = compose(bomb_mr, observed=existing(before))
    assert_kept(before, during)
    state, reason, message = during.condition("SelectorsValid")
    assert (state, reason) == ("False", "InvalidSelector")
    assert "too complex" in message and "1,000,000" in message


def test_a_quota_with_a_selector_over_the_limit_says_so_in_a_false_condition():
    from builders import conditions
    from test_quota import held, quota
    from test_quota import run as run_quota
    rsp = run_quota(quota(cel=bomb(10)), [held("x", "a", "h100")])
    c = conditions(rsp)["LimitsValid"]
    assert (c.status, c.reason) == (fnv1.STATUS_CONDITION_FALSE, "InvalidSelector")
    assert "too complex" in c.message and "CELSelectorExpressionMaxCost" in c.message


# --- The runtime limit: a device larger than the estimate assumed ------------

GROWS = ('device.attributes["gpu.example.com"].serial'
         + '.replace("a", "aaaaaaaaaa")' * 3 + '.size() > 0')


def test_within_the_declared_sizes_a_selector_runs_as_compiled():
    selector = compile_selector(GROWS)
    assert selector.cost <= celcost.MAX_COST
    assert selector.matches(device_activation(
        {"driver": "gpu.example.com", "attributes": {"serial": {"string": "a" * 64}}}))


def test_a_device_larger_than_the_declared_sizes_is_checked_against_the_limit_before_it_runs():
    # 100,000 characters where Kubernetes allows 64: the same selector would
    # build a string of 10**8 characters. Nothing validated this device
    # against DRA's limits, so its own sizes are estimated before it runs.
    huge = device_activation({"driver": "gpu.example.com",
                              "attributes": {"serial": {"string": "a" * 100_000}}})
    with pytest.raises(CelEvalError, match=r"actual cost limit exceeded on this device.*1,000,000"):
        compile_selector(GROWS).matches(huge)


# --- Ordinary selectors are not affected --------------------------------------

def _selectors(obj) -> list[str]:
    if isinstance(obj, dict):
        return [s for k, v in obj.items()
                for s in ([v] if k == "cel" and isinstance(v, str) else _selectors(v))]
    if isinstance(obj, list):
        return [s for v in obj for s in _selectors(v)]
    return []


def _outcome(expression: str, device: dict) -> tuple:
    try:
        return ("result", compile_selector(expression).matches(device_activation(device)))
    except CelError as e:
        return ("error", type(e).__name__, str(e))


def test_every_selector_of_the_examples_and_the_corpus_evaluates_as_without_a_limit(monkeypatch):
    corpus = yaml.safe_load((ROOT / "tests" / "cel" / "corpus.yaml").read_text())
    examples = sorted({s for p in (ROOT / "examples").rglob("*.yaml")
                       for doc in yaml.safe_load_all(p.read_text()) for s in _selectors(doc)})
    assert len(examples) >= 5
    cases = [(c["expression"], corpus["devices"][c["device"]]) for c in corpus["cases"]]
    devices = list(corpus["devices"].values())
    cases += [(e, d) for e in examples for d in devices]
    limited = [_outcome(e, d) for e, d in cases]
    assert not [o for o in limited if o[:2] == ("error", "CelCostError")]

    compile_here.cache_clear()
    monkeypatch.setattr(celcost, "MAX_COST", 2**64)
    unlimited = [_outcome(e, d) for e, d in cases]
    compile_here.cache_clear()
    assert limited == unlimited
