#!/usr/bin/env python3
"""Generate tests/cel/corpus.yaml: DRA selector expressions x devices.

The corpus is input only, with no expected results. tests/test_devicecel.py
runs every case through function/contract/devicecel.py and through the Kubernetes DRA
CEL library (tools/dracel) and requires the two to agree. Cases marked
``divergence`` are known, documented differences, and the test requires
them to still differ.

Deterministic: run ``python tests/cel/gen_corpus.py`` and commit the output.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import yaml

OUT = Path(__file__).with_name("corpus.yaml")
NV = "gpu.nvidia.com"

# Devices in the InferenceCluster API shape (name/claim/count etc. are not
# seen by CEL but keep the shape realistic).
DEVICES = {
    "h100": {
        "name": "gpu", "claim": "DRA", "driver": NV, "deviceClassName": NV, "count": 8,
        "attributes": {
            "productName": {"string": "NVIDIA-H100-80GB"},
            "driverVersion": {"version": "550.54.15"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "index": {"int": 0},
            "mig": {"bool": False},
            "dra.net/rdma": {"bool": True},
            "dra.net/numaNode": {"int": 1},
        },
        "capacity": {"memory": {"value": "80Gi"}, "dra.net/bandwidth": {"value": "400G"}},
    },
    "a100": {
        "name": "gpu", "claim": "DRA", "driver": NV, "deviceClassName": NV, "count": 4,
        "attributes": {
            "productName": {"string": "NVIDIA-A100-SXM4-40GB"},
            "driverVersion": {"version": "535.104.5"},
            "cudaComputeCapability": {"version": "8.0.0"},
            "index": {"int": 3},
            "mig": {"bool": True},
        },
        "capacity": {"memory": {"value": "40Gi"}, "multiprocessors": {"value": 108}},
    },
    "mi300x": {
        "name": "gpu", "claim": "Synthetic", "driver": "gpu.amd.com", "count": 8,
        "attributes": {
            "productName": {"string": "AMD-Instinct-MI300X"},
            "driverVersion": {"version": "6.8.5-rc.2+build.77"},
            "family": {"string": "gfx942"},
        },
        "capacity": {"memory": {"value": "192Gi"}, "power": {"value": "750"}},
    },
    # Quantities in every notation, as published capacity.
    "zoo": {
        "name": "zoo", "claim": "Synthetic", "driver": "example.com",
        "attributes": {
            "pre": {"version": "1.0.0-rc.1"},
            "build": {"version": "1.0.0+sha.5114f85"},
            "neg": {"int": -7},
            "big": {"int": 9223372036854775807},
            "empty": {"string": ""},
            "other.example.com/flag": {"bool": False},
        },
        "capacity": {
            "nano": {"value": "1n"}, "micro": {"value": "250u"}, "milli": {"value": "500m"},
            "plain": {"value": "3"}, "kilo": {"value": "1.5k"}, "mega": {"value": "2M"},
            "giga": {"value": "1G"}, "tera": {"value": "1T"}, "peta": {"value": "1P"},
            "exa": {"value": "1E"}, "kibi": {"value": "1Ki"}, "mebi": {"value": "1Mi"},
            "gibi": {"value": "1Gi"}, "tebi": {"value": "1Ti"}, "pebi": {"value": "1Pi"},
            "exbi": {"value": "1Ei"}, "exp": {"value": "1e3"}, "expneg": {"value": "5e-3"},
            "frac": {"value": "0.5"}, "subnano": {"value": "0.1n"}, "hugebin": {"value": "9Ei"},
            "int": {"value": 42}, "float": {"value": 2.5}, "negative": {"value": "-2Gi"},
            "spaced": {"value": " 10Mi "}, "zero": {"value": "0"},
        },
    },
    "plain": {"name": "cpu", "claim": "Synthetic", "driver": "cpu.example.com"},
    "badversion": {
        "name": "gpu", "claim": "DRA", "driver": NV,
        "attributes": {"productName": {"string": "X"}, "driverVersion": {"version": "535.104.05"}, "cudaVersion": {"version": "12.4"}},
    },
    "badquantity": {
        "name": "gpu", "claim": "DRA", "driver": NV, "capacity": {"memory": {"value": "80GB"}},
    },
}

cases: list[dict] = []


def add(group: str, expression: str, devices=("h100",), divergence: str | None = None) -> None:
    for d in devices:
        case = {"id": f"{group}-{len(cases):03d}", "device": d, "expression": expression}
        if divergence:
            case["divergence"] = divergence
        cases.append(case)


def lit(s: str) -> str:
    return json.dumps(s)  # a CEL string literal


A = f'device.attributes["{NV}"]'
C = f'device.capacity["{NV}"]'
Z = 'device.capacity["example.com"]'

# --- The selectors of the brief -------------------------------------------
add("brief", f'{C}.memory.compareTo(quantity("40Gi")) >= 0', ("h100", "a100", "mi300x", "plain"))
add("brief", f'{A}.productName == "NVIDIA-H100-80GB"', ("h100", "a100", "mi300x"))
add("brief", f'{A}.driverVersion.isGreaterThan(semver("550.0.0"))', ("h100", "a100", "mi300x"))
add("brief", 'device.attributes["dra.net"].rdma', ("h100", "a100"))
add("brief", 'device.driver == "gpu.nvidia.com"', ("h100", "mi300x", "plain"))

# --- Quantity parsing in every suffix: compare each against neighbours ------
QUANTITIES = [
    "1n", "999n", "1u", "1m", "1", "1.", ".5", "0.5", "+1", "-1", "1k", "999", "1000",
    "1M", "1G", "1T", "1P", "1E", "1Ki", "1024", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei",
    "1e3", "1E3", "1e+3", "1e-3", "1.5", "1500m", "1.5k", "2.5e2", "0.5Gi", "512Mi",
    "-1.5Gi", "100Mi", "104857600", "0.1n", "1.5n", "0.000000001", "9Ei", "8Ei",
    "9223372036854775807", "10E", "0", "-0", "0.0", "1e0", "1.0000000001", "123456789012345678901234567890",
]
for a, b in zip(QUANTITIES, QUANTITIES[1:]):
    add("qcmp", f"quantity({lit(a)}).isLessThan(quantity({lit(b)}))")
    add("qcmp", f"quantity({lit(a)}).isGreaterThan(quantity({lit(b)}))")
rng = random.Random(20250101)
for a, b in rng.sample(list(itertools.combinations(QUANTITIES, 2)), 30):
    add("qeq", f"quantity({lit(a)}) == quantity({lit(b)})")
    add("qcmpto", f"quantity({lit(a)}).compareTo(quantity({lit(b)})) == {rng.choice([-1, 0, 1])}")
for a, b in [("1k", "1000"), ("1Ki", "1024"), ("1e3", "1k"), ("1500m", "1.5"), ("1Gi", "1073741824"),
             ("0.5Gi", "512Mi"), ("0.1n", "1n"), ("1.5n", "2n"), ("9Ei", "9223372036854775807"),
             ("8Ei", "9223372036854775807"), ("-0", "0"), ("1.", "1"), ("+1", "1")]:
    add("qeq-hand", f"quantity({lit(a)}) == quantity({lit(b)})")

# --- isQuantity: the grammar -----------------------------------------------
for s in ["1", "1Ki", "1ki", "1K", "1k", "1e3", "1E3", "1e", "1E", "1Ei", "1e+3", "1e-3", "1.5.5",
          "", ".", "+", "-", " 1", "1 ", "1e3k", "Infinity", "NaN", "1_000", "0x10", "--1",
          "1m5", "1.G", "1.5Gi", "1ii", "1Gii", "abc", "1e3.5", "5eE", "1n", "1u", "1µ"]:
    add("isq", f"isQuantity({lit(s)})")
add("qbad", 'quantity("1K").isInteger()')
add("qbad", 'quantity("1K").isInteger() || true')
add("qbad", 'isQuantity("1K") && quantity("1K").isInteger()')

# --- Quantity methods -------------------------------------------------------
for expr in [
    'quantity("1Ki").asInteger() == 1024', 'quantity("1.5").isInteger()', 'quantity("1.5").asInteger() == 1',
    'quantity("1500m").isInteger()', 'quantity("1500m").asInteger() == 1', 'quantity("1Ei").asInteger() == 1152921504606846976',
    'quantity("9Ei").isInteger()', 'quantity("10E").isInteger()', 'quantity("10E").asInteger() > 0',
    'quantity("-2k").asInteger() == -2000', 'quantity("1.5").asApproximateFloat() == 1.5',
    'quantity("1Gi").asApproximateFloat() == 1073741824.0', 'quantity("100m").asApproximateFloat() > 0.09',
    'quantity("1n").asApproximateFloat() < 0.000001', 'quantity("2.5e2").asApproximateFloat() == 250.0',
    'sign(quantity("-1")) == -1', 'sign(quantity("0")) == 0', 'sign(quantity("5n")) == 1', 'sign(quantity("-0")) == 0',
    'quantity("1").sign() == 1', 'sign(quantity("1").sub(2)) == -1', 'sign(quantity("-1n").add(quantity("1n"))) == 0',
    'quantity("1Gi").add(quantity("1Gi")) == quantity("2Gi")', 'quantity("1Gi").add(1) == quantity("1073741825")',
    'quantity("1").sub(quantity("1500m")) == quantity("-0.5")', 'quantity("1").sub(2).sign() == -1',
    'quantity("1.5").add(quantity("0.5")).isInteger()', 'quantity("9Ei").add(quantity("9Ei")).isGreaterThan(quantity("9Ei"))',
    'quantity("1n").add(quantity("1n")) == quantity("2n")', 'quantity("1").add(1.5) == quantity("2.5")',
    'quantity("1").add("1") == quantity("2")', 'quantity("1") == 1', 'quantity("1") < quantity("2")',
    'quantity("1").compareTo(1) == 0', 'quantity("1").compareTo(semver("1.0.0")) == 0',
    f'{C}.memory.add(quantity("16Gi")).compareTo(quantity("96Gi")) == 0',
    f'{C}.memory.asInteger() == 85899345920', f'{C}.memory.isGreaterThan(quantity("79.9Gi"))',
    f'{C}.memory.asApproximateFloat() > 80000000000.0',
]:
    add("qfn", expr)

# --- Published capacity in every notation ------------------------------------
ZOO = DEVICES["zoo"]["capacity"]
for name in ZOO:
    add("zoo", f'{Z}.{name}.isGreaterThan(quantity("1"))', ("zoo",))
    add("zoo", f'{Z}.{name}.isInteger()', ("zoo",))
for a, b in rng.sample(list(itertools.combinations(ZOO, 2)), 25):
    add("zoo-pair", f"{Z}.{a}.compareTo({Z}.{b}) < 0", ("zoo",))
add("zoo", f'{Z}.kilo == quantity("1500")', ("zoo",))
add("zoo", f'{Z}.subnano == quantity("1n")', ("zoo",))
add("zoo", f'{Z}.hugebin.asInteger() == 9223372036854775807', ("zoo",))
add("zoo", f'{Z}.spaced == quantity("10Mi")', ("zoo",))
add("zoo", f'{Z}.float == quantity("2500m")', ("zoo",))
add("zoo", f'{Z}.int.asInteger() == 42', ("zoo",))
add("zoo", f'{Z}.zero.sign() == 0', ("zoo",))
add("zoo", f'sign({Z}.zero) == 0 && sign({Z}.negative) == -1', ("zoo",))

# --- Semver -----------------------------------------------------------------
for s in ["1.2.3", "v1.2.3", "1.2", "01.2.3", "1.2.3-", "1.2.3+", "1.2.3-alpha..1", "1.2.3-01", "1.2.3+01",
          "1.2.3-a+b.c", " 1.2.3", "1.2.3.4", "", "1.2.3-rc.1", "0.0.0", "1.2.3-0a", "99999999999.0.0",
          "18446744073709551616.0.0", "1.2.3-rc.18446744073709551616"]:
    add("issemver", f"isSemver({lit(s)})")
    add("issemver-norm", f"isSemver({lit(s)}, true)")
for expr in [
    'semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3',
    'semver("v1.2", true).minor() == 2', 'semver("01.02.03", true) == semver("1.2.3")', 'semver("1", true) == semver("1.0.0")',
    'semver("v1.2-rc.1", true).major() == 1', 'semver("1.2.3", false).patch() == 3', 'semver("v1.2.3").major() == 1',
    'semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))', 'semver("1.0.0-alpha.1").isLessThan(semver("1.0.0-alpha.beta"))',
    'semver("1.0.0-beta.2").isLessThan(semver("1.0.0-beta.11"))', 'semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))',
    'semver("1.0.0+a") == semver("1.0.0+b")', 'semver("1.0.0+a").compareTo(semver("1.0.0")) == 0',
    'semver("2.0.0").compareTo(semver("10.0.0")) == -1', 'semver("1.10.0").isGreaterThan(semver("1.9.9"))',
    'semver("1.2.3") == semver("1.2.3")', 'semver("1.2.3") < semver("1.2.4")', 'semver("1.2.3").compareTo(quantity("1")) == 0',
    'semver("1.2.3") == "1.2.3"', 'semver("bogus").major() == 0', 'semver("bogus").major() == 0 || true',
    f'{A}.driverVersion.major() >= 550', f'{A}.driverVersion.compareTo(semver("550.54.15")) == 0',
    f'{A}.cudaComputeCapability.isGreaterThan(semver("8.9.0"))', f'{A}.cudaComputeCapability.minor() == 0',
    f'{A}.driverVersion == semver("550.54.15")', f'{A}.driverVersion.isLessThan(semver("v550.60", true))',
    f'{A}.productName.isGreaterThan(semver("1.0.0"))', f'{A}.driverVersion > semver("1.0.0")',
]:
    add("semver", expr, ("h100", "a100") if NV in expr else ("h100",))
add("semver", 'device.attributes["gpu.amd.com"].driverVersion.isLessThan(semver("6.8.5"))', ("mi300x",))
add("semver", 'device.attributes["gpu.amd.com"].driverVersion == semver("6.8.5-rc.2")', ("mi300x",))
add("semver", 'device.attributes["example.com"].pre.isLessThan(semver("1.0.0"))', ("zoo",))
add("semver", 'device.attributes["example.com"].build == semver("1.0.0")', ("zoo",))

# --- Attributes, domains, missing names ----------------------------------------
for expr in [
    f'{A}.index == 0', f'{A}.index < 1', f'{A}.index == 0.0', f'{A}.index < 0.5', f'{A}.mig', f'!{A}.mig',
    f'{A}.productName.startsWith("NVIDIA")', f'{A}.productName.contains("H100")', f'{A}.productName.matches("^NVIDIA-[AH]100")',
    f'{A}.productName.lowerAscii() == "nvidia-h100-80gb"', f'{A}.productName.split("-").size() == 3',
    f'{A}.productName.endsWith("80GB") && {A}.productName.size() == 16',
    f'{A}.productName.substring(7, 11) == "H100"', f'{A}.productName.indexOf("H") == 7',
    f'{A}.productName.replace("-", " ") == "NVIDIA H100 80GB"',
    f'{A}.missing == 1', f'has({A}.missing)', f'has({A}.index)', f'!has({A}.missing) || {A}.missing',
    f'{A}.?missing.orValue(7) == 7', f'{A}.?index.orValue(7) == 0', f'"index" in {A}', f'"missing" in {A}',
    f'{A}.exists(k, k == "productName")', f'{A}.size() >= 5', f'{A}["productName"] == "NVIDIA-H100-80GB"',
    f'cel.bind(gpu, {A}, gpu.productName.startsWith("NVIDIA") && gpu.index == 0)',
    'device.attributes["dra.net"].rdma == true', 'device.attributes["dra.net"].numaNode == 1',
    'device.capacity["dra.net"].bandwidth.isGreaterThan(quantity("100G"))',
    f'{A}.rdma', f'has({A}.rdma)', f'{A}["dra.net/rdma"]',
    'device.attributes["unknown.example.com"].anything', 'has(device.attributes["unknown.example.com"].anything)',
    'device.attributes["unknown.example.com"].size() == 0', '"x" in device.attributes["unknown.example.com"]',
    'device.capacity["unknown.example.com"].memory.isInteger()', 'has(device.capacity["unknown.example.com"].memory)',
    '!has(device.attributes["a.example.com"].x) && !has(device.attributes["b.example.com"].y)',
    'has(device.attributes["a.example.com"].x) || has(device.capacity["b.example.com"].y) || device.driver == "gpu.nvidia.com"',
    'device.attributes["unknown.example.com"].?anything.orValue(true)',
    'device.attributes.exists(d, d == "dra.net")', '"dra.net" in device.attributes', '"unknown.example.com" in device.attributes',
    'device.attributes.size() == 2', 'device.capacity.exists(d, d == "gpu.nvidia.com")',
    f'{A}.productName == 1', f'{A}.productName < 1', f'{A}.index == "0"', f'{A}.index > "a"', f'{A}.productName.compareTo("x") == 0',
    f'{A}.index + 1 == 1', f'{A}.productName + 1 == "x"', f'{A}.mig && {A}.productName', f'{A}.productName || true',
    f'{A}.productName.size() > 0 && {A}.mig == false',
    f'{A}.index.compareTo(0) == 0', f'{C}.memory.compareTo("40Gi") >= 0', f'{C}.memory == 80', f'{C}.memory > quantity("1")',
    f'{C}.memory == quantity("80Gi")', f'{C}.memory.asInteger() > 1.5', f'{C}.memory.asApproximateFloat() > 1',
    f'{C}.memory.asApproximateFloat() >= 85899345920', f'{A}.index < 1u', f'{A}.index >= 0 && {A}.index <= 7',
    'device.allowMultipleAllocations == false',
]:
    add("attr", expr, ("h100", "a100", "plain") if ("unknown" in expr or "dra.net" in expr) else ("h100", "a100"))
for expr in [
    'device.attributes["example.com"].neg < 0', 'device.attributes["example.com"].big + 1 > 0',
    'device.attributes["example.com"].big == 9223372036854775807', 'device.attributes["example.com"].empty == ""',
    'device.attributes["other.example.com"].flag == false', 'device.attributes["example.com"].flag',
    'device.attributes["example.com"].size() == 5',
    'has(device.capacity["other.example.com"].flag)', 'device.capacity["other.example.com"].size() == 0',
    'has(device.attributes["example.com"].kibi)', 'device.attributes.foo.size() == 0', 'has(device.attributes.foo)',
    'device.attributes["x.example.com"].a || device.attributes["y.example.com"].b || true',
]:
    add("zoo-attr", expr, ("zoo",))

# --- Driver checks ------------------------------------------------------------
for expr in ['device.driver == "gpu.nvidia.com"', 'device.driver.endsWith(".nvidia.com")', 'device.driver in ["gpu.amd.com", "gpu.nvidia.com"]',
             'device.driver.matches("^gpu\\\\.")', 'device.driver != "cpu.example.com"', 'device.driver == 1', 'device.driver.size() > 0']:
    add("driver", expr, ("h100", "mi300x", "plain"))

# --- Combinators, error absorption, non-bool results, syntax -----------------------
for expr in [
    'true', 'false', '!true', 'true && false', 'true || false', 'true ? false : true', '1 == 1', '1 < 1.5', '1.5 > 1 && 2u > 1',
    '1u < 2', '1 == 1.0', '1 == 1u', 'dyn(1) == dyn("a")', '[1, 2, 3].exists(x, x == 2)', '[1, 2, 3].all(x, x > 0)',
    '[1, 2, 3].map(x, x * 2) == [2, 4, 6]', '{"a": 1}.all(k, k == "a")', '[1, 2].filter(x, x > 1).size() == 1',
    'size("abc") == 3', '"abc".size() == 3', '"a" + "b" == "ab"', 'int("12") == 12', 'string(12) == "12"', 'double("1.5") == 1.5',
    '1 / 0 == 1', '1 % 0 == 1', '9223372036854775807 + 1 > 0', '-9223372036854775808 - 1 < 0',
    '[1, 2][5] == 1', '{"a": 1}["b"] == 1', 'false && (1 / 0 == 1)', 'true || (1 / 0 == 1)', '(1 / 0 == 1) || true',
    '(1 / 0 == 1) && false', '(1 / 0 == 1) ? true : false', 'cel.bind(x, 2, x * x == 4)', '[1].exists(x, 1 / 0 == 1) || true',
    'has({"a": 1}.a)', 'type(1) == int', 'optional.of(1).hasValue()', 'optional.none().orValue(true)',
    '"abc".charAt(1) == "b"', '"a,b".split(",") == ["a", "b"]', '["a", "b"].join("-") == "a-b"', '" x ".trim() == "x"',
    '"%d GPUs".format([8]) == "8 GPUs"', 'strings.quote("a") == "\\"a\\""', '"ab".reverse() == "ba"',
    'timestamp("2024-01-01T00:00:00Z") < timestamp("2025-01-01T00:00:00Z")', 'duration("1h") > duration("30m")',
    '1', '"yes"', 'null', 'quantity("1")', 'semver("1.0.0")', '[true]', 'device.driver', f'{A}', f'{A}.index', f'{A}.productName',
    f'{C}.memory', 'device', 'device.foo', 'foo', 'foo == 1', 'size(1) == 1', 'nosuchfunc(1)',
    '1 +', '', '   ', 'device.attributes[', '&& true', '"unterminated', 'a b', '1 = 1', 'device.attributes["x"].y ==',
    '[1, "a"].size() == 2', '{"a": 1, 2: "b"}.size() == 2',
    '"abc".find("b") == "b"', 'sets.contains([1, 2], [1])', '[3, 1, 2].sort() == [1, 2, 3]', '[1, 2].sum() == 3',
    'isURL("https://example.com")', 'ip("10.0.0.1").family() == 4', 'cidr("10.0.0.0/8").containsIP("10.1.2.3")',
    'format.dns1123Label().validate("abc").hasValue() == false', 'lists.range(3).size() == 3', 'math.greatest(1, 2) == 2',
    'int("x") == 1', 'double("x") == 1.0', 'uint("-1") == 1u', 'duration("x") > duration("1h")',
    'timestamp("bad") < timestamp("2024-01-01T00:00:00Z")', '"a".matches("[")', 'device.driver.matches("[")',
    'quantity("1000m").isInteger()', 'quantity("1.0").asInteger() == 1', 'quantity("0.3").asApproximateFloat() == 0.3',
]:
    add("misc", expr)

# Invalid device data fails every evaluation, but compile errors come first.
add("plain", 'has(device.attributes["cpu.example.com"].x)', ("plain",))
add("plain", 'device.attributes["cpu.example.com"].size() == 0 && device.attributes.size() == 0', ("plain",))
for expr in ['true', f'{A}.productName == "X"', 'device.driver == "gpu.nvidia.com"', '1 +']:
    add("baddevice", expr, ("badversion", "badquantity"))


# --- Known, documented divergences (the test requires them to still differ) ---------------
_NOT_DECLARED = "a Kubernetes CEL library that function/contract/devicecel.py does not declare"
_REPRESENTATION = ("Kubernetes answers isInteger/asInteger from the Quantity's internal form (false for values "
                   "stored as inf.Dec, e.g. Pi/Ei or capped ones, and for a negative scale such as 1000m); "
                   "devicecel answers from the value")
_FOLDED = ("category only: cel-go folds constant type conversions when planning the program, so Kubernetes "
           "reports a compile error; devicecel an evaluation error")
_LITERALS = ("category only: Kubernetes validates regex/duration/timestamp literals at compile time; "
             "devicecel reports them at evaluation")
_ENUMERATED = ("a domain read as {} (see devicecel) becomes visible when device.attributes itself is "
               "enumerated (size, in, exists) in an expression that also errs on that domain")
DIVERGENCES = {
    '[1, "a"].size() == 2': "CEL-C++ has no HomogeneousAggregateLiterals check",
    '{"a": 1, 2: "b"}.size() == 2': "CEL-C++ has no HomogeneousAggregateLiterals check",
    '"abc".find("b") == "b"': _NOT_DECLARED,
    'sets.contains([1, 2], [1])': _NOT_DECLARED,
    '[3, 1, 2].sort() == [1, 2, 3]': _NOT_DECLARED,
    '[1, 2].sum() == 3': _NOT_DECLARED,
    'isURL("https://example.com")': _NOT_DECLARED,
    'ip("10.0.0.1").family() == 4': _NOT_DECLARED,
    'cidr("10.0.0.0/8").containsIP("10.1.2.3")': _NOT_DECLARED,
    'format.dns1123Label().validate("abc").hasValue() == false': _NOT_DECLARED,
    'lists.range(3).size() == 3': _NOT_DECLARED,
    'int("x") == 1': _FOLDED,
    'double("x") == 1.0': _FOLDED,
    'uint("-1") == 1u': _FOLDED,
    'duration("x") > duration("1h")': _LITERALS,
    'timestamp("bad") < timestamp("2024-01-01T00:00:00Z")': _LITERALS,
    '"a".matches("[")': _LITERALS,
    'device.driver.matches("[")': _LITERALS,
    'quantity("1Ei").asInteger() == 1152921504606846976': _REPRESENTATION,
    'quantity("9Ei").isInteger()': _REPRESENTATION,
    'quantity("1.5").add(quantity("0.5")).isInteger()': _REPRESENTATION,
    'quantity("1000m").isInteger()': _REPRESENTATION,
    'quantity("1.0").asInteger() == 1': _REPRESENTATION,
    f'{Z}.pebi.isInteger()': _REPRESENTATION,
    f'{Z}.exbi.isInteger()': _REPRESENTATION,
    f'{Z}.hugebin.isInteger()': _REPRESENTATION,
    f'{Z}.hugebin.asInteger() == 9223372036854775807': _REPRESENTATION,
    'quantity("0.3").asApproximateFloat() == 0.3':
        "Kubernetes computes 3 * 10^-1 in float64 (0.30000000000000004); devicecel rounds correctly",
    'device.attributes.exists(d, d == "unknown.example.com") != has(device.attributes["unknown.example.com"].x)':
        _ENUMERATED,
    'device.attributes["cpu.example.com"].size() == 0 && device.attributes.size() == 0': _ENUMERATED,
    'has(device.attributes.foo)': ("Kubernetes' domain map claims every key, so has() on a domain is always true; "
                                   "devicecel answers whether the domain is published"),
}
add("divergence", 'device.attributes.exists(d, d == "unknown.example.com") != has(device.attributes["unknown.example.com"].x)',
    ("a100",))
for c in cases:
    if c["expression"] in DIVERGENCES:
        c["divergence"] = DIVERGENCES[c["expression"]]
assert all(any(c["expression"] == e for c in cases) for e in DIVERGENCES), "a divergence names no case"


def main() -> None:
    header = ("# Generated by tests/cel/gen_corpus.py; do not edit, re-run it.\n"
              "# DRA selector expressions x devices (InferenceCluster API shape), checked by\n"
              "# tests/test_devicecel.py against k8s.io/dynamic-resource-allocation/cel.\n")
    OUT.write_text(header + yaml.safe_dump({"devices": DEVICES, "cases": cases}, sort_keys=False, width=200,
                                           allow_unicode=True))
    print(f"wrote {OUT} with {len(cases)} cases")


if __name__ == "__main__":
    main()
