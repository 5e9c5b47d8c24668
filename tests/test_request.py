"""The request view handlers read (function/kit/request.py): the same answers from a
decoded RunFunctionRequest and from the serialized one the server reads."""

from __future__ import annotations

import pytest
from builders import request

from function.kit import wire
from function.kit.request import Request, decode

XR = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
      "metadata": {"name": "r", "labels": {"b": "2", "a": "1"}}, "spec": {"count": 8}}
CLUSTER = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
           "metadata": {"name": "c"}, "spec": {"nodePools": [{"name": "p", "nodes": 2}]}}


def views():
    req = request(XR, required={"clusters": [CLUSTER], "none": []},
                  observed={"b": {"kind": "Deployment"}, "a": {"kind": "Service"},
                            "c": {"metadata": {"name": "kindless"}}})
    return [Request(req), Request(wire.SerializedRequest.FromString(req.SerializeToString()))]


@pytest.mark.parametrize("view", views(), ids=["decoded", "serialized"])
def test_a_view_reads_the_request_as_plain_python(view):
    assert view.composite == XR and isinstance(view.composite["spec"]["count"], int)
    assert list(view.observed()) == ["a", "b", "c"]
    assert list(view.observed("Service")) == ["a"]
    assert view.resolved("none") and not view.resolved("missing")
    assert view.required("clusters") == [CLUSTER] and view.required("missing") == []
    assert [decode(i) for i in view.required_items("clusters")] == [CLUSTER]


@pytest.mark.parametrize("view", views(), ids=["decoded", "serialized"])
def test_composite_parts_are_bytes_and_absent_parts_empty(view):
    assert view.composite_part("spec") and view.composite_part("metadata", "labels")
    assert view.composite_part("metadata", "namespace") == b""
    assert view.composite_part("spec", "count", "deeper") == b""
    # Reading an absent part inserts nothing.
    assert "namespace" not in view.composite["metadata"]
    assert "namespace" not in view.message.observed.composite.resource.fields["metadata"] \
        .struct_value.fields
