"""The function re-checks every XRD rule, worded as the XRD words it."""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml
from builders import ROOT

from function.contract import rules, validation
from function.contract.models.inferencequota import InferenceQuota
from function.contract.models.modelcache import ModelCache
from function.contract.models.modeldeployment import ModelDeployment
from function.contract.models.modelreplica import ModelReplica

INVALID = sorted((ROOT / "tests" / "invalid").glob("m[dr]-*.yaml"))
# Rules the function re-checks (CEL rules of the engine shape); schema bounds are
# the generated models' job and are covered by test_schema_bounds_are_checked_too.
RULE_MESSAGES = [
    "serving mode PrefillDecode routes through router EndpointPicker only",
    "serving mode PrefillDecode needs exactly two engines",
    "engine phase is only allowed under serving mode PrefillDecode",
    "members must be exactly one Standalone, or one Leader and one Worker",
    "worker.nodes is set on the Worker member, and only there",
    "at least one member of every engine must request devices",
    "recoveryPolicy applies to gang engines",
    "rollout.partition applies to gang engines only",
    "has selectors or firstAvailable alternatives, not both",
    "kvConnector applies to serving mode PrefillDecode only",
    "a toleration with operator Exists must not set a value",
    "a toleration without a key must use operator Exists",
    "an env var sets value or valueFrom, not both",
    "valueFrom needs exactly one of secretKeyRef, configMapKeyRef, fieldRef",
    "keys must be qualified names",
    "keys under modelplane.ai/ are reserved",
    "a DRA device request needs a deviceClassName",
    "mountPath must not contain '.' or '..' segments",
]


def expect(path: pathlib.Path) -> str:
    return re.match(r"# expect: (.*)", path.read_text()).group(1)


def engine_spec(doc):
    spec = doc.get("spec") or {}
    return (spec.get("template") or {}).get("spec") or {} if doc["kind"] == "ModelDeployment" \
        else spec


@pytest.mark.parametrize("path", [p for p in INVALID
                                  if any(m in expect(p) for m in RULE_MESSAGES)],
                         ids=lambda p: p.stem)
def test_the_function_rejects_what_the_xrd_rejects(path):
    doc = yaml.safe_load(path.read_text().split("\n", 2)[2])
    message = next(m for m in RULE_MESSAGES if m in expect(path))
    errors = rules.engine_errors(engine_spec(doc)) + rules.template_metadata_errors(
        validation.dig(doc, "spec", "template", "metadata"))
    assert any(message in e for e in errors), message


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_schema_bounds_are_checked_too(path):
    """Every invalid ModelDeployment/ModelReplica is refused by the function somehow."""
    doc = yaml.safe_load(path.read_text().split("\n", 2)[2])
    if "status" in path.stem:
        pytest.skip("status is written by the function, never read from users")
    if path.stem in ("md-container-privileged", "md-pod-host-network"):
        pytest.skip("unknown fields are pruned by the API server; the composer never "
                    "passes them on (tests/test_hardening.py)")
    model = ModelDeployment if doc["kind"] == "ModelDeployment" else ModelReplica
    errors = validation.spec_errors(model, doc, engine_spec(doc))
    if doc["kind"] == "ModelDeployment" and "autoscaling" in doc["spec"]:
        # Checked on its own, into the Autoscaling condition (tests/test_autoscaling.py).
        errors += rules.autoscaling_errors(doc["spec"]["autoscaling"])
    assert errors, f"{path.name} passes the function's checks"


AUTOSCALING_RULES = [p for p in INVALID if p.stem.startswith("md-autoscaling-")
                     and ": Invalid value: " in expect(p) and "in body" not in expect(p)]


@pytest.mark.parametrize("path", AUTOSCALING_RULES, ids=lambda p: p.stem)
def test_the_function_words_every_autoscaling_rule_as_the_xrd_does(path):
    doc = yaml.safe_load(path.read_text().split("\n", 2)[2])
    message = expect(path).split(": Invalid value: ", 1)[1]
    assert any(message in e for e in rules.autoscaling_errors(doc["spec"]["autoscaling"])), \
        message


# The kinds whose rules are checked whole: (schema model, rule checks) by file prefix.
WHOLE = {"mc": (ModelCache, rules.cache_errors), "iq": (InferenceQuota, rules.quota_errors)}
WHOLE_CASES = sorted(p for prefix in WHOLE for p in (ROOT / "tests" / "invalid").glob(f"{prefix}-*.yaml"))


@pytest.mark.parametrize("path", WHOLE_CASES, ids=lambda p: p.stem)
def test_the_function_refuses_every_invalid_cache_and_quota_as_the_xrd_words_it(path):
    model, check = WHOLE[path.stem.split("-", 1)[0]]
    doc = yaml.safe_load(path.read_text().split("\n", 2)[2])
    errors = validation.model_errors(model, doc) or check(doc["spec"])
    assert errors, f"{path.name} passes the function's checks"
    wording = expect(path)
    if not wording.startswith("spec."):  # a CEL rule's message: the same sentence
        assert any(wording in e for e in errors), (wording, errors)


def _messages(node) -> list[str]:
    if isinstance(node, dict):
        return [r["message"] for r in node.get("x-kubernetes-validations") or []] + [
            m for v in node.values() for m in _messages(v)]
    if isinstance(node, list):
        return [m for v in node for m in _messages(v)]
    return []


@pytest.mark.parametrize("kind", ["modeldeployment", "modelreplica"])
def test_the_xrds_serving_rules_come_from_the_modes_table(kind):
    """One table (function/contract/serving.py) says what each mode allows; the XRD and the
    function word every serving rule alike, and the function checks each of them."""
    from function.contract import serving

    xrd = yaml.safe_load((ROOT / "apis" / kind / "definition.yaml").read_text())
    schema = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    expected = {serving.phase_only_message(), serving.kv_connector_message(),
                *(serving.phases_message(serving.MODES[m]) for m in serving.PHASED_MODES),
                *(serving.router_message(m) for m in serving.restricted_routers()
                  if serving.ROUTER_CHOICE)}
    assert {m for m in _messages(schema) if "serving mode" in m} == expected
    assert all(any(r in m for r in RULE_MESSAGES) for m in expected)
    assert _property(schema, "mode")["enum"] == list(serving.MODES)
    assert _property(schema, "phase")["enum"] == list(serving.PHASES)


def _property(node, name: str) -> dict:
    """The first property schema called `name`, depth first."""
    if isinstance(node, dict):
        if name in (node.get("properties") or {}):
            return node["properties"][name]
        found = [_property(v, name) for v in node.values()]
    elif isinstance(node, list):
        found = [_property(v, name) for v in node]
    else:
        return {}
    return next((f for f in found if f), {})
