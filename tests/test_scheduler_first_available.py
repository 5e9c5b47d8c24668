"""Fungible devices in priority order (DRA firstAvailable), issue #9."""

from __future__ import annotations

import copy

from builders import EXAMPLES, composite, desired, load, load_one, request
from composer_support import as_composed, compose

from function.contract.api import REQUIRE_CLUSTERS, REQUIRE_REPLICAS
from function.runtime.fn import run_function

FLEET = load(EXAMPLES / "fleet")
FUNGIBLE = load_one(EXAMPLES / "deployments" / "fungible-gpus.yaml")


def schedule(md, fleet=FLEET):
    rsp = run_function(request(md, required={REQUIRE_CLUSTERS: fleet, REQUIRE_REPLICAS: []}))
    placed = {}
    for mr in desired(rsp).values():
        member = mr["spec"]["engines"][0]["members"][0]
        (req,) = member["deviceRequests"]
        placed[int(mr["metadata"]["labels"]["modelplane.ai/replica-index"])] = (
            mr["spec"]["clusterName"], member["nodePoolName"], req.get("alternative"))
    return rsp, placed


def test_the_first_alternative_is_used_fleet_wide_before_any_replica_falls_back():
    _, placed = schedule(FUNGIBLE)
    assert placed == {0: ("us-central-batch", "h200-8x-rdma", "h200"),
                      1: ("us-central-batch", "h200-8x-rdma", "h200"),
                      2: ("eu-west-1", "h100-8x-rdma", "h100")}


def test_when_the_first_alternative_fits_nowhere_every_replica_falls_back_and_spreads():
    md = copy.deepcopy(FUNGIBLE)
    md["spec"]["template"]["spec"]["tolerations"] = []  # the H200 cluster is now off limits
    md["spec"]["replicas"] = 2
    _, placed = schedule(md)
    assert placed == {0: ("eu-west-1", "h100-8x-rdma", "h100"),
                      1: ("us-east-1", "h100-8x", "h100")}


def test_the_replica_records_the_alternative_with_its_count_and_selectors():
    rsp, _ = schedule(FUNGIBLE)
    fallback = next(mr for mr in desired(rsp).values()
                    if mr["metadata"]["labels"]["modelplane.ai/replica-index"] == "2")
    (req,) = fallback["spec"]["engines"][0]["members"][0]["deviceRequests"]
    h100 = FUNGIBLE["spec"]["template"]["spec"]["engines"][0]["members"][0]["nodeSelector"][
        "devices"][0]["firstAvailable"][1]
    assert req["alternative"] == "h100"
    assert req["count"] == h100["count"] and req["selectors"] == h100["selectors"]
    assert req["deviceClassName"] == "gpu.nvidia.com"


def test_status_says_which_alternative_each_replica_got():
    rsp, _ = schedule(FUNGIBLE)
    got = {p["index"]: p.get("alternatives") for p in composite(rsp)["status"]["placements"]}
    assert got == {0: {"vllm/gpu": "h200"}, 1: {"vllm/gpu": "h200"}, 2: {"vllm/gpu": "h100"}}


def test_the_claim_template_asks_for_exactly_the_chosen_alternative():
    rsp, _ = schedule(FUNGIBLE)
    mr = next(mr for mr in desired(rsp).values()
              if mr["metadata"]["labels"]["modelplane.ai/replica-index"] == "2")
    rct = compose(as_composed(mr)).one("ResourceClaimTemplate")
    (req,) = rct["spec"]["spec"]["devices"]["requests"]
    assert req["exactly"]["count"] == 8
    assert [s["cel"]["expression"] for s in req["exactly"]["selectors"]] == [
        'device.attributes["gpu.nvidia.com"].productName == "NVIDIA-H100-80GB"',
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0']


def test_when_no_alternative_fits_the_reason_says_why_per_cluster():
    md = copy.deepcopy(FUNGIBLE)
    md["spec"]["replicas"] = 10  # the fleet has 2 H200 nodes and 4 + 2 H100 nodes
    rsp, placed = schedule(md)
    assert sorted(alt for _, _, alt in placed.values()) == ["h100"] * 6 + ["h200"] * 2
    unscheduled = composite(rsp)["status"]["unscheduled"]
    assert [u["index"] for u in unscheduled] == [8, 9]
    assert unscheduled[0]["reason"].startswith("0/3 clusters fit replica 8: ")
    assert ('1 has no node of pool "h100-8x-rdma" with 8 gpu free (a pod needs them on one '
            "node; the most free on one is 0 gpu)") in unscheduled[0]["reason"]
