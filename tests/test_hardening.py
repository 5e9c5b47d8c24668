"""Hardening: what users cannot express, and what never leaks."""

from __future__ import annotations

import copy
import json

import pytest
from builders import EXAMPLES, load_one, request
from composer_support import compose, container, replica, standalone, template

from function.contract.api import REQUIRE_CLUSTERS, REQUIRE_REPLICAS
from function.kit import structs
from function.runtime import fn

SECRET = "hf_s3cr3t-T0KEN-value"


def dangerous_template() -> dict:
    """A template that tries privileged, host network, host paths and extra containers."""
    t = template(env=[{"name": "HF_TOKEN", "value": SECRET}],
                 securityContext={"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
                 volumeMounts=[{"name": "host", "mountPath": "/host"}])
    t["spec"].update({"hostNetwork": True, "hostPID": True, "hostIPC": True,
                      "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
                      "serviceAccountName": "cluster-admin",
                      "initContainers": [container(name="sneaky")]})
    return t


def test_the_curated_template_cannot_express_privileged_pods_host_access_or_host_paths():
    out = compose(replica(standalone(template=dangerous_template())))
    text = json.dumps(out.manifests())
    for forbidden in ("privileged", "SYS_ADMIN", "hostNetwork", "hostPID", "hostIPC",
                      "hostPath", "cluster-admin", "sneaky", '"/host"'):
        assert forbidden not in text, forbidden


@pytest.mark.parametrize("where", ["template-labels", "pod-labels", "pod-annotations"])
def test_reserved_label_prefixes_cannot_be_set_by_users(where):
    md = load_one(EXAMPLES / "deployments" / "single-gpu.yaml")
    spec = md["spec"]["template"]
    if where == "template-labels":
        spec.setdefault("metadata", {})["labels"] = {"modelplane.ai/cluster": "forged"}
    else:
        meta = spec["spec"]["engines"][0]["members"][0]["template"].setdefault("metadata", {})
        meta["labels" if where == "pod-labels" else "annotations"] = {"modelplane.ai/pool": "x"}
    rsp = fn.run_function(request(md))
    (fatal,) = [r.message for r in rsp.results if r.severity == 1]
    assert "keys under modelplane.ai/ are reserved" in fatal


def test_secret_values_never_appear_in_results_or_conditions():
    md = load_one(EXAMPLES / "deployments" / "single-gpu.yaml")
    container_ = md["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"][
        "containers"][0]
    container_["env"] = [{"name": "HF_TOKEN", "value": SECRET}]
    fleet = [load_one(EXAMPLES / "fleet" / "us-east-1.yaml")]
    cases = [md]
    broken = copy.deepcopy(md)  # an invalid spec: the error must name the rule, not the value
    broken["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"][
        "containers"][0]["env"][0]["valueFrom"] = {"secretKeyRef": {"name": "s", "key": SECRET}}
    cases.append(broken)
    for case in cases:
        rsp = fn.run_function(request(case, required={REQUIRE_CLUSTERS: fleet,
                                                      REQUIRE_REPLICAS: []}))
        said = [r.message for r in rsp.results] + [c.message for c in rsp.conditions]
        assert said and not any(SECRET in m for m in said), said
    composed = compose(replica(standalone(template=dangerous_template())))
    said = [r.message for r in composed.rsp.results] + [c.message for c in
                                                        composed.rsp.conditions]
    assert not any(SECRET in m for m in said)


def test_every_composed_name_is_a_dns_label_of_at_most_63_characters():
    long_name = "a" * 40 + "-" + "b" * 22
    out = compose(replica(standalone(name="e" * 63), name=long_name, namespace="n" * 63))
    for manifest in out.manifests().values():
        name = manifest["metadata"]["name"]
        assert len(name) <= 63 and name == name.lower() and not name.startswith("-"), name


def test_unknown_fields_are_pruned_as_the_api_server_would_never_passed_on():
    """Found by `make fuzz`: `crossplane render` does not prune, the API server does."""
    md = load_one(EXAMPLES / "deployments" / "single-gpu.yaml")
    engine_container = md["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"][
        "spec"]["containers"][0]
    engine_container["resources"] = {"requests": {"cpu": "4"}, "": "x"}
    engine_container["securityContext"] = {"privileged": True}
    fleet = [load_one(EXAMPLES / "fleet" / "us-east-1.yaml")]
    rsp = fn.run_function(request(md, required={REQUIRE_CLUSTERS: fleet, REQUIRE_REPLICAS: []}))
    replicas = [structs.to_dict(r.resource) for r in rsp.desired.resources.values()]
    assert replicas
    for mr in replicas:
        container = mr["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]
        assert container["resources"] == {"requests": {"cpu": "4"}}
        assert "securityContext" not in container
