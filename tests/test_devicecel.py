"""Device selection by DRA CEL expressions (function/contract/devicecel.py).

Part 1 shows the behaviour users rely on. Part 2 is the differential test: every
case of tests/cel/corpus.yaml goes through devicecel and through the real
Kubernetes library (tools/dracel, built by hack/build-go-tool.sh), and the two
must agree on the result, or on the error and its category (compile or
runtime). If the Go tool can't be built, the test fails; it never skips.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from function.contract.devicecel import (
    CelCompileError,
    CelError,
    CelEvalError,
    compile_selector,
    device_activation,
)

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "cel" / "corpus.yaml"

H100 = {
    "name": "gpu", "claim": "DRA", "driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com", "count": 8,
    "attributes": {
        "productName": {"string": "NVIDIA-H100-80GB"},
        "driverVersion": {"version": "550.54.15"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "index": {"int": 0},
        "dra.net/rdma": {"bool": True},
    },
    "capacity": {"memory": {"value": "80Gi"}},
}


def matches(expression: str, device: dict = H100) -> bool:
    return compile_selector(expression).matches(device_activation(device))


# --- Part 1: behaviour ------------------------------------------------------

@pytest.mark.parametrize("expression", [
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
    'device.capacity["gpu.nvidia.com"].memory == quantity("80Gi")',
    'device.capacity["gpu.nvidia.com"].memory == quantity("85899345920")',
    'device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("80G"))',  # Gi > G
    'quantity("1k") == quantity("1000") && quantity("1Ki") == quantity("1024")',
    'quantity("1500m") == quantity("1.5") && quantity("1e3") == quantity("1k")',
    'quantity("0.1n") == quantity("1n")',  # Kubernetes rounds up to nano precision
    'quantity("1Gi").add(quantity("512Mi")) == quantity("1.5Gi")',
    'quantity("1").sub(2) == quantity("-1") && sign(quantity("-1")) == -1',
    'quantity("1Ki").asInteger() == 1024 && !quantity("1.5").isInteger()',
    'isQuantity("40Gi") && !isQuantity("40GB") && !isQuantity("1K")',
    'device.attributes["gpu.nvidia.com"].productName == "NVIDIA-H100-80GB"',
    'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))',
    'device.attributes["gpu.nvidia.com"].cudaComputeCapability.major() >= 9',
    'semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))',
    'semver("v1.2", true) == semver("1.2.0") && semver("1.0.0+a") == semver("1.0.0+b")',
    'device.attributes["dra.net"].rdma',  # a qualified name keeps its own domain
    'device.driver == "gpu.nvidia.com"',
    '!has(device.attributes["other.example.com"].x)',  # unknown domain reads as {}
    '!has(device.attributes["gpu.nvidia.com"].rdma)',  # ...and the driver's domain has no rdma
    'device.attributes["gpu.nvidia.com"].index < 0.5',  # cross-type numeric comparison
    'device.attributes["gpu.nvidia.com"].productName != 1',  # heterogeneous equality: no error
    'cel.bind(gpu, device.attributes["gpu.nvidia.com"], gpu.productName.startsWith("NVIDIA") && gpu.index == 0)',
    'device.attributes["gpu.nvidia.com"].?numa.orValue(0) == 0',
])
def test_selects(expression):
    assert matches(expression) is True


@pytest.mark.parametrize("expression", [
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("81Gi")) >= 0',
    'device.attributes["gpu.nvidia.com"].driverVersion.isLessThan(semver("550.54.15"))',
    'device.driver == "gpu.amd.com"',
    'has(device.attributes["other.example.com"].x)',
])
def test_rejects(expression):
    assert matches(expression) is False


@pytest.mark.parametrize("expression, fragment", [
    ("1 +", "Syntax error"),
    ("", "empty"),
    ("device.driver", "must evaluate to bool, not string"),
    ('device.capacity["gpu.nvidia.com"].memory', "must evaluate to bool"),
    ("device.driver == 1", "no matching overload"),
    ('"a".compareTo("b") == 0', "no matching overload"),
    ('quantity("1") < quantity("2")', "no matching overload"),  # use compareTo/isLessThan
    ('quantity("1").sign() == 1', "undeclared reference to 'sign'"),  # sign() is global
    ("foo == 1", "undeclared reference to 'foo'"),
])
def test_compile_errors(expression, fragment):
    with pytest.raises(CelCompileError) as e:
        compile_selector(expression)
    assert fragment in str(e.value)


@pytest.mark.parametrize("expression, fragment", [
    ('device.attributes["gpu.nvidia.com"].missing == 1', "no such key: missing"),
    ('device.attributes["other.example.com"].x', "no such key: x"),
    ('device.attributes["gpu.nvidia.com"].productName', "could not be converted to bool"),
    ('device.attributes["gpu.nvidia.com"].productName < 1', "No matching overloads"),
    ('quantity("40GB").isInteger()', "regular expression"),
    ('quantity("1.5").asInteger() == 1', "cannot convert value to integer"),
    ('semver("550.54").major() == 550', "550.54"),
])
def test_eval_errors(expression, fragment):
    with pytest.raises(CelEvalError) as e:
        matches(expression)
    assert fragment in str(e.value)


def test_errors_are_absorbed_like_in_kubernetes():
    assert matches('device.attributes["gpu.nvidia.com"].missing || true')
    assert not matches('quantity("bogus").isInteger() && false')


@pytest.mark.parametrize("device, fragment", [
    ({**H100, "attributes": {"v": {"version": "535.104.05"}}}, "parse semantic version"),
    ({**H100, "attributes": {"v": {"int": 1, "string": "x"}}}, "exactly one"),
    ({**H100, "attributes": {"v": {"int": "1"}}}, "not a int"),
    ({**H100, "capacity": {"memory": {"value": "80GB"}}}, "capacity memory"),
    ({**H100, "capacity": {"memory": {}}}, "capacity memory"),
])
def test_invalid_device_data_fails_every_selector(device, fragment):
    with pytest.raises(CelEvalError) as e:
        matches("true", device)
    assert fragment in str(e.value)


def test_capacity_in_yaml_number_and_padded_forms():
    device = {"driver": "d", "capacity": {"a": {"value": 8}, "b": {"value": 2.5}, "c": {"value": " 1Gi "}}}
    assert matches('device.capacity["d"].a == quantity("8") && device.capacity["d"].b == quantity("2500m")', device)
    assert matches('device.capacity["d"].c == quantity("1Gi")', device)


def test_compiled_once_and_activations_shared_per_shape():
    expression = 'device.attributes["gpu.nvidia.com"].index == 0'
    assert compile_selector(expression) is compile_selector(expression)
    same_shape = {**H100, "name": "another", "count": 2}
    assert device_activation(H100) is device_activation(same_shape)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([
    "device", ".attributes", ".capacity", ".driver", '["gpu.nvidia.com"]', '["x"]', ".memory", ".productName",
    ".index", "quantity(", "semver(", '"1Gi"', '"1.2.3"', '"x"', ")", "(", ".compareTo(", ".isLessThan(",
    ".add(",
    ".asInteger()", ".major()", "1", "1.5", "-", "==", "<", "&&", "||", "!", "?", ":", "[", "]", "{", "}", ",",
    "has(", "size(", "true", "null", "1u", "b'x'", "cel.bind(", "x", ".?", ".exists(", "e", "sign(",
    "9223372036854775807",
]), max_size=12).map("".join) | st.text(max_size=30))
def test_only_cel_errors_escape(expression):
    try:
        matches(expression)
    except CelError:
        pass


# --- Part 2: differential test against k8s.io/dynamic-resource-allocation/cel ---

def _outcome(compile_and_eval) -> dict:
    try:
        return {"result": compile_and_eval()}
    except CelCompileError as e:
        return {"error": "compile", "message": str(e)}
    except CelEvalError as e:
        return {"error": "runtime", "message": str(e)}


@pytest.fixture(scope="module")
def corpus() -> dict:
    data = yaml.safe_load(CORPUS.read_text())
    assert len(data["cases"]) >= 200
    return data


@pytest.fixture(scope="module")
def kubernetes_outcomes(corpus) -> dict[str, dict]:
    build = subprocess.run([str(ROOT / "hack" / "build-go-tool.sh"), "dracel"], capture_output=True, text=True)
    if build.returncode != 0:
        pytest.fail(f"hack/build-go-tool.sh dracel failed (exit {build.returncode}):\n{build.stderr}", pytrace=False)
    tool = build.stdout.strip().splitlines()[-1]
    devices = corpus["devices"]
    request = {"cases": [{"id": c["id"], "expression": c["expression"], "device": devices[c["device"]]}
                         for c in corpus["cases"]]}
    run = subprocess.run([tool], input=json.dumps(request), capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        pytest.fail(f"{tool} failed (exit {run.returncode}):\n{run.stderr}", pytrace=False)
    outcomes = {o["id"]: o for o in map(json.loads, run.stdout.splitlines())}
    assert len(outcomes) == len(corpus["cases"])
    return outcomes


def _verdict(outcome: dict) -> tuple:
    return ("result", outcome["result"]) if "result" in outcome else ("error", outcome["error"])


def test_agrees_with_kubernetes(corpus, kubernetes_outcomes):
    devices = corpus["devices"]
    disagreements = []
    for case in corpus["cases"]:
        ours = _outcome(lambda case=case: compile_selector(case["expression"]).matches(
            device_activation(devices[case["device"]])))
        theirs = kubernetes_outcomes[case["id"]]
        same = _verdict(ours) == _verdict(theirs)
        if "divergence" in case:
            # Documented differences must still be there; if one went away,
            # drop its mark in gen_corpus.py and the docs.
            if same:
                disagreements.append(f"{case['id']}: documented divergence no longer diverges: "
                                     f"{case['divergence']}\n    expression: {case['expression']}")
            continue
        if not same:
            disagreements.append(
                f"{case['id']} on device {case['device']!r}\n    expression: {case['expression']}\n"
                f"    kubernetes: {json.dumps(theirs)}\n    devicecel:  {json.dumps(ours)}")
    assert not disagreements, f"{len(disagreements)} of {len(corpus['cases'])} cases disagree:\n" + "\n".join(
        disagreements)
