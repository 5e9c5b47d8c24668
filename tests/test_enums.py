"""The API's enums: one name per concept (function/contract/enums.py), every generated copy
alike, and the serving table's names the generated ones; the group and kinds the code
names (function/contract/api.py) are the XRDs'."""

from enum import StrEnum

import pytest
from builders import ROOT, load_one

from function.contract import api, enums, serving
from function.contract.models import (
    inferencecluster,
    inferencequota,
    modelcache,
    modeldeployment,
    modelreplica,
)

MODELS = (inferencecluster, modeldeployment, modelreplica, modelcache, inferencequota)


@pytest.mark.parametrize("name", enums.__all__)
def test_every_generated_copy_of_an_enum_has_the_same_values(name):
    chosen = getattr(enums, name)
    copies = [getattr(m, name) for m in MODELS if hasattr(m, name)]
    assert copies and all(list(c) == list(chosen) for c in copies)


def test_every_generated_enum_has_a_name_in_enums():
    generated = {n for m in MODELS for n, v in vars(m).items()
                 if isinstance(v, type) and issubclass(v, StrEnum) and v is not StrEnum}
    assert generated == set(enums.__all__)


def test_the_serving_enums_are_the_tables():
    assert list(enums.ServingMode) == list(serving.MODES)
    assert serving.DEFAULT_MODE == enums.ServingMode.UNIFIED
    assert list(enums.Router) == list(serving.ALL_ROUTERS)
    assert list(enums.EnginePhase) == list(serving.PHASES)
    assert list(enums.KvConnector) == list(serving.KV_CONNECTORS)


def test_the_group_and_kinds_the_code_names_are_the_xrds():
    xrds = {load_one(ROOT / "apis" / folder / "definition.yaml")["spec"]["names"]["kind"]: folder
            for folder in ("inferencecluster", "modeldeployment", "modelreplica", "modelcache",
                           "inferencequota")}
    assert set(xrds) == {api.KIND_INFERENCE_CLUSTER, api.KIND_MODEL_DEPLOYMENT, api.KIND_MODEL_REPLICA,
                         api.KIND_MODEL_CACHE, api.KIND_INFERENCE_QUOTA}
    for folder in xrds.values():
        spec = load_one(ROOT / "apis" / folder / "definition.yaml")["spec"]
        assert (spec["group"], spec["versions"][0]["name"]) == (api.GROUP, api.VERSION)
