"""The admission policies' CEL (security/admission.yaml), compiled and run with CEL-C++
as devicecel uses it, for the identities they name (#48 finding 2). make e2e runs them
on the real API server (e2e/tests/test_security.py)."""

from __future__ import annotations

import pytest
import yaml
from builders import ROOT
from cel_expr_python import cel
from cel_expr_python.ext import ext_strings

DOCS = [d for d in yaml.safe_load_all((ROOT / "security" / "admission.yaml").read_text()) if d]
SHIPPED = next(d for d in DOCS if d["kind"] == "ConfigMap")["data"]["controllers"]
PROVIDER = "system:serviceaccount:crossplane-system:crossplane-contrib-provider-kubernetes-"


def policy(name: str) -> dict:
    return next(d for d in DOCS if d["kind"] == "ValidatingAdmissionPolicy"
                and d["metadata"]["name"] == name)


def is_controller(name: str, controllers: str, username: str) -> bool:
    (variable,) = [v for v in policy(name)["spec"]["variables"] if v["name"] == "controller"]
    env = cel.NewEnv(variables={"params.data.controllers": cel.Type.STRING,
                                "request.userInfo.username": cel.Type.STRING},
                     extensions=[ext_strings.ExtStrings(2)])
    return env.compile(variable["expression"]).eval(env.Activation({
        "params.data.controllers": controllers,
        "request.userInfo.username": username})).value()


@pytest.mark.parametrize("name", ["modelplane-controller-only", "modelplane-provider-kinds"])
@pytest.mark.parametrize("username, passes", [
    ("system:serviceaccount:crossplane-system:crossplane", True),
    (PROVIDER + "9a8b7c6d5e4f", True),                       # any revision of the provider
    (PROVIDER[:-1], False),                                   # the prefix without its dash
    ("system:serviceaccount:crossplane-system:crossplane-rbac-manager", False),
    ("system:serviceaccount:team-a:tenant", False),
    ("system:serviceaccount:team-a:crossplane-contrib-provider-kubernetes-x", False),
    ("broad-editor", False),
    ("", False),
])
def test_the_shipped_controllers_are_crossplane_and_any_revision_of_the_provider(
        name, username, passes):
    assert is_controller(name, SHIPPED, username) is passes


def test_a_controller_entry_is_exact_unless_it_ends_in_a_star():
    assert is_controller("modelplane-provider-kinds", " admin , other", "admin")
    assert not is_controller("modelplane-provider-kinds", "admin", "admin2")
    assert is_controller("modelplane-provider-kinds", "admin*", "admin2")
    assert not is_controller("modelplane-provider-kinds", "*x", "admin")


def test_every_provider_kubernetes_kind_and_its_status_and_deletes_are_the_platforms():
    rules = policy("modelplane-provider-kinds")["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [{"apiGroups": ["kubernetes.m.crossplane.io"], "apiVersions": ["*"],
                      "operations": ["CREATE", "UPDATE", "DELETE"],
                      "resources": ["*", "*/status"]}]
    # No exception for a namespaced ProviderConfig, whatever it names.
    (validation,) = policy("modelplane-provider-kinds")["spec"]["validations"]
    assert validation["expression"] == "variables.controller || variables.kubernetes"


@pytest.mark.parametrize("username, passes", [
    ("system:serviceaccount:kube-system:generic-garbage-collector", True),
    ("system:serviceaccount:kube-system:namespace-controller", True),
    ("system:kube-controller-manager", True),
    ("system:serviceaccount:kube-systemx:gc", False),
    ("system:serviceaccount:team-a:kube-system", False),
])
def test_kubernetes_own_controllers_may_collect_and_delete_objects(username, passes):
    (variable,) = [v for v in policy("modelplane-provider-kinds")["spec"]["variables"]
                   if v["name"] == "kubernetes"]
    env = cel.NewEnv(variables={"request.userInfo.username": cel.Type.STRING})
    assert env.compile(variable["expression"]).eval(env.Activation({
        "request.userInfo.username": username})).value() is passes
