"""The pure parts of `make bench-live` (benchmarks/live/): the fleet and deployments
it applies, what converged means, the /proc reader, the reconcile counters and the
tables. The live part needs a control plane and runs only as `make bench-live`."""

from __future__ import annotations

import copy

import pytest
import yaml

from benchmarks.live import metrics, plan, procstat, report, run
from e2e.controlplane import fleet as harness_fleet
from e2e.controlplane.pods import images
from function.contract.models.inferencecluster import InferenceCluster
from function.contract.models.modeldeployment import ModelDeployment

# ---- the deployments -------------------------------------------------------------


def _containers(md):
    for engine in md["spec"]["template"]["spec"]["engines"]:
        for member in engine["members"]:
            yield from member["template"]["spec"]["containers"]


def test_the_same_seed_gives_byte_identical_deployments_and_another_seed_other_replicas():
    assert yaml.safe_dump_all(plan.deployments(20, seed=7)) == \
        yaml.safe_dump_all(plan.deployments(20, seed=7))
    counts = [md["spec"]["replicas"] for md in plan.deployments(20, seed=7)]
    assert counts != [md["spec"]["replicas"] for md in plan.deployments(20, seed=8)]


def test_deployments_alternate_unified_and_prefill_decode_with_one_to_three_replicas():
    mds = plan.deployments(30)
    assert [plan.mode_of(md) for md in mds[:4]] == [plan.UNIFIED, plan.PD, plan.UNIFIED, plan.PD]
    assert {md["spec"]["replicas"] for md in mds} == {1, 2, 3}
    names = [md["metadata"]["name"] for md in mds]
    assert len(set(names)) == len(names)
    assert all(harness_fleet.dns_label(n) == n for n in names)
    assert {md["metadata"]["namespace"] for md in mds} == {plan.NS}


def test_every_pod_stays_kwok_only_the_engines_and_what_the_function_adds():
    originals = [c["image"] for md in (plan._load_example(plan.UNIFIED),
                                       plan._load_example(plan.PD)) for c in _containers(md)]
    assert all(images.role(i) is not None for i in originals)   # the examples would run
    for md in plan.deployments(4):
        for c in _containers(md):
            assert images.role(c["image"]) is None, c["image"]
            assert c["image"].endswith(":v0.10.1.1")
    for image in plan.FUNCTION_ENV.values():
        assert images.role(image) is None
    # The function reads exactly these variables (and accepts the images).
    from function.composer.routing import serving_config
    cfg = serving_config.load(plan.FUNCTION_ENV)
    assert (cfg.epp_image, cfg.sidecar_image) == (plan.FUNCTION_ENV["MODELPLANE_EPP_IMAGE"],
                                                  plan.FUNCTION_ENV["MODELPLANE_ROUTING_SIDECAR_IMAGE"])


def test_deployments_are_valid_ask_for_the_fleets_gpu_and_read_no_secret():
    for md in plan.deployments(2):
        ModelDeployment.model_validate({"spec": md["spec"]})
        cels = [s["cel"] for e in md["spec"]["template"]["spec"]["engines"] for m in e["members"]
                for d in m["nodeSelector"]["devices"] for s in d.get("selectors") or []]
        assert any(plan.GPU_PRODUCT in c for c in cels)
        assert not any("NVIDIA-L4" in c for c in cels)
        assert not any(e.get("name") == "HF_TOKEN" for c in _containers(md)
                       for e in c.get("env") or [])


def test_gpus_per_replica_counts_copies_and_members():
    uni, pd = plan.deployments(2)
    assert plan.gpus_per_replica(uni) == 1
    assert plan.gpus_per_replica(pd) == 2 + 2 * 2     # prefill 2 GPUs; decode 2 copies of 2


def test_nodes_hold_every_replica_after_day_2_with_headroom_and_one_of_each_on_one_cluster():
    uni, pd = plan.deployments(2)
    uni["spec"]["replicas"], pd["spec"]["replicas"] = 3, 3
    # After day 2: 4 x 1 + 4 x 6 = 28 GPUs; x1.5 on the one cluster left once the
    # other is lost = 42 -> 6 nodes; one of each on one cluster: 7 x 1.5 = 10.5 -> 2.
    assert plan.gpu_nodes_per_cluster([uni, pd], clusters=2) == 6
    # Over 10 clusters the share is small (28 x 1.5 / 9 = 4.7 GPUs, one node); one of
    # each on one cluster still needs 2.
    assert plan.gpu_nodes_per_cluster([uni, pd], clusters=10, minimum=1) == 2
    assert plan.gpu_nodes_per_cluster([uni], clusters=10, minimum=1) == 1


def test_day_2_scales_every_deployment_by_one_without_touching_the_first_wave():
    mds = plan.deployments(3)
    before = copy.deepcopy(mds)
    day2 = plan.scaled(mds)
    assert [m["spec"]["replicas"] for m in day2] == [m["spec"]["replicas"] + 1 for m in mds]
    assert mds == before


def test_the_last_wave_loses_the_remote_cluster_holding_the_most_replicas():
    clusters = plan.cluster_names(4)
    assert plan.cluster_to_lose({"live-0": 9, "live-2": 3, "live-3": 4}, clusters) == "live-3"
    # The control plane's own is never lost; among equals the first by name.
    assert plan.cluster_to_lose({"live-0": 9, "live-1": 2, "live-3": 2}, clusters) == "live-1"
    assert plan.cluster_to_lose({}, clusters) == "live-1"
    with pytest.raises(ValueError):
        plan.cluster_to_lose({"live-0": 1}, plan.cluster_names(1))


# ---- the fleet -------------------------------------------------------------------


def test_the_fleet_is_the_control_plane_and_remote_clusters_of_8_gpu_nodes(tmp_path):
    docs = plan.fleet(clusters=3, gpu_nodes=4)
    for ic in docs:
        InferenceCluster.model_validate({"spec": ic["spec"]})
    plan.write_fleet(docs, tmp_path)
    planned = harness_fleet.plan_fleet(harness_fleet.load_fleet(tmp_path))
    assert [(c.name, c.remote) for c in planned.clusters.values()] == \
        [("control-plane", False), ("live-1", True), ("live-2", True)]
    assert planned.cluster_of("live-0").name == "control-plane"
    remote = planned.clusters["live-2"]
    nodes = [m for m in remote.manifests if m["kind"] == "Node"]
    pools = [n["metadata"]["labels"][harness_fleet.POOL_LABEL] for n in nodes]
    assert pools.count("h100-8x") == 4 and pools.count("cpu") == 1
    slices = [m for m in remote.manifests if m["kind"] == "ResourceSlice"]
    assert sum(len(s["spec"]["devices"]) for s in slices) == 4 * plan.GPUS_PER_NODE


def test_a_fleet_needs_a_cluster_and_a_node():
    with pytest.raises(ValueError):
        plan.fleet(0, 1)
    with pytest.raises(ValueError):
        plan.fleet(1, 0)


# ---- converged -------------------------------------------------------------------


def _md(ready: str, desired: int, ready_n: int) -> dict:
    return {"status": {"conditions": [{"type": "Ready", "status": ready}],
                       "replicas": {"desired": desired, "scheduled": desired, "ready": ready_n}}}


def test_converged_means_ready_with_every_replica_asked_for_serving():
    assert plan.converged(_md("True", 2, 2), 2)
    assert not plan.converged(_md("False", 2, 2), 2)
    assert not plan.converged(_md("True", 2, 1), 2)
    assert not plan.converged(None, 1)
    assert not plan.converged({"status": {}}, 1)


def test_right_after_a_scale_the_old_ready_status_is_not_converged():
    # Ready=True and 2/2 still describe spec.replicas 2 until the function has run.
    assert not plan.converged(_md("True", 2, 2), 3)
    assert plan.converged(_md("True", 3, 3), 3)
    # A status about another spec is never taken for this one, even when the counts
    # of ready replicas happen to agree.
    assert not plan.converged(_md("True", 3, 2), 2)


# ---- /proc -------------------------------------------------------------------------

STAT = ("4242 (kube-apiserver) S 1 4242 4242 0 -1 4194560 100 0 0 0 "
        "250 50 7 3 20 0 12 0 1000 2000000 5000 18446744073709551615")


def _status(hwm: int, rss: int) -> str:
    return f"Name:\tx\nState:\tS (sleeping)\nVmPeak:\t 999999 kB\nVmHWM:\t {hwm} kB\n" \
           f"VmRSS:\t {rss} kB\nThreads:\t12\n"


def test_cpu_seconds_are_utime_plus_stime_in_clock_ticks():
    assert procstat.parse_stat(STAT, ticks=100) == pytest.approx(3.0)       # 250 + 50 ticks
    # Not the children's cutime/cstime (fields 16, 17: 7 and 3).
    assert procstat.parse_stat(STAT, ticks=50) == pytest.approx(6.0)


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields():
    odd = STAT.replace("(kube-apiserver)", "(a) b (c))")
    assert procstat.parse_stat(odd, ticks=100) == pytest.approx(3.0)


def test_peak_rss_is_vmhwm_and_absent_fields_read_as_zero():
    assert procstat.parse_status(_status(2048, 1024)) == (2048, 1024)
    assert procstat.parse_status("Name:\tkthreadd\nState:\tS\n") == (0, 0)


def test_a_group_sums_its_live_members_and_skips_the_gone(tmp_path):
    for pid, (utime, hwm) in {10: (100, 1000), 11: (300, 500)}.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(STAT.replace(" 250 50 ", f" {utime} 0 "))
        (tmp_path / str(pid) / "status").write_text(_status(hwm, hwm // 2))
    u = procstat.read_group([10, 11, 12], root=tmp_path, ticks=100)   # 12 is gone
    assert u == procstat.Usage(cpu_seconds=4.0, peak_rss_kib=1500, rss_kib=750, processes=2)
    snap = procstat.snapshot({"etcd": 10, "function": None}, lambda pid: [pid],
                             root=tmp_path, ticks=100)
    assert set(snap) == {"etcd"}                                        # stopped: left out


def test_cpu_between_snapshots_counts_a_new_component_from_zero_and_is_never_negative():
    before = {"etcd": procstat.Usage(10.0), "pods:x": procstat.Usage(5.0)}
    after = {"etcd": procstat.Usage(12.5), "pods:x": procstat.Usage(4.0),
             "inventory:y": procstat.Usage(1.0)}
    assert procstat.cpu_between(before, after) == {"etcd": 2.5, "pods:x": 0.0,
                                                   "inventory:y": 1.0}
    assert procstat.kind("apiserver:live-1") == "apiserver"
    assert procstat.kind("function") == "function"


# ---- reconcile counters ----------------------------------------------------------

EXPOSITION = """\
# HELP controller_runtime_reconcile_total Total number of reconciliations per controller
# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{controller="composite/modeldeployments.modelplane.ai",result="success"} 40
controller_runtime_reconcile_total{controller="composite/modeldeployments.modelplane.ai",result="requeue_after"} 12
controller_runtime_reconcile_total{controller="composite/modelreplicas.modelplane.ai",result="error"} 3
controller_runtime_reconcile_errors_total{controller="composite/modelreplicas.modelplane.ai"} 3
function_run_function_request_total{function_name="function-model-serving",grpc_code="OK"} 7.5e+01
"""


def test_reconciles_are_summed_per_controller_over_results():
    got = metrics.counter_by(EXPOSITION, metrics.RECONCILES, "controller")
    assert got == {"composite/modeldeployments.modelplane.ai": 52.0,
                   "composite/modelreplicas.modelplane.ai": 3.0}
    assert metrics.counter_by(EXPOSITION, metrics.FUNCTION_CALLS, "function_name") == \
        {"function-model-serving": 75.0}
    assert metrics.counter_by("", metrics.RECONCILES, "controller") == {}


CIRCUIT_EXPOSITION = """\
circuit_breaker_opens_total{controller="composite/modelreplicas.modelplane.ai"} 7
circuit_breaker_opens_total{controller="composite/other.example.org"} 1
circuit_breaker_events_total{controller="composite/modelreplicas.modelplane.ai",result="Allowed"} 500
circuit_breaker_events_total{controller="composite/modelreplicas.modelplane.ai",result="Dropped"} 120
circuit_breaker_events_total{controller="composite/modelreplicas.modelplane.ai",result="HalfOpenAllowed"} 4
circuit_breaker_events_total{controller="composite/modeldeployments.modelplane.ai",result="Allowed"} 80
"""


def test_the_watch_circuit_breaker_is_counted_per_controller_of_ours_and_outcome():
    mr, md = "composite/modelreplicas.modelplane.ai", "composite/modeldeployments.modelplane.ai"
    assert metrics.circuits(CIRCUIT_EXPOSITION) == {
        f"{mr} opened": 7.0, f"{mr} Allowed": 500.0, f"{mr} Dropped": 120.0,
        f"{mr} HalfOpenAllowed": 4.0, f"{md} Allowed": 80.0}
    wave = report.Wave("apply", 1, {"d0": 1.0}, 300, circuits=metrics.circuits(CIRCUIT_EXPOSITION))
    rows = report.reconcile_rows([wave])
    assert f"| {mr}: watch circuit opened; events dropped of all | 7; 120 of 624 |" in rows
    assert f"| {md}: watch circuit opened; events dropped of all | 0; 0 of 80 |" in rows


API_EXPOSITION = """\
apiserver_request_total{code="200",resource="objects",subresource="",verb="APPLY"} 90
apiserver_request_total{code="409",resource="objects",subresource="",verb="APPLY"} 10
apiserver_request_total{code="200",resource="objects",subresource="status",verb="PUT"} 40
apiserver_request_duration_seconds_sum{resource="objects",subresource="",verb="APPLY"} 2.5
apiserver_request_duration_seconds_count{resource="objects",subresource="",verb="APPLY"} 100
"""


def test_api_server_requests_are_summed_per_verb_resource_and_subresource():
    got = metrics.counter_by_labels(API_EXPOSITION, metrics.API_REQUESTS, metrics.API_LABELS)
    assert got == {"APPLY objects": 100.0, "PUT objects status": 40.0}
    assert metrics.counter_by_labels(API_EXPOSITION, metrics.API_SECONDS, metrics.API_LABELS) \
        == {"APPLY objects": 2.5}


def test_watches_and_other_long_running_requests_are_left_out_of_the_breakdown():
    got = metrics.short_requests({"APPLY objects": 3.0, "WATCH pods": 300.0,
                                  "CONNECT pods exec": 9.0, "GET pods": 0.0})
    assert got == {"APPLY objects": 3.0}


def test_a_delta_is_what_a_counter_grew_by_and_a_reset_counts_from_zero():
    assert metrics.delta({"a": 10.0, "b": 50.0}, {"a": 25.0, "b": 4.0, "c": 2.0}) == \
        {"a": 15.0, "b": 4.0, "c": 2.0}


def test_only_loopback_metrics_are_read():
    with pytest.raises(ValueError):
        metrics.scrape("http://example.com:8080/metrics")


# ---- the tables ------------------------------------------------------------------


def _results() -> report.Results:
    first = report.Wave("apply", 6, {f"d{i}": float(s) for i, s in enumerate([10, 20, 30, 40])},
                        300, cpu={"function": 4.0, "apiserver:live-0": 10.0,
                                  "apiserver:live-1": 6.0},
                        reconciles={"composite/modeldeployments.modelplane.ai": 20.0},
                        function_calls=30.0, function_seconds=1.5,
                        composites={"composite/modeldeployments.modelplane.ai": 4},
                        api_requests={"APPLY objects": 100.0, "GET modelreplicas": 50.0},
                        api_seconds={"APPLY objects": 2.5, "GET modelreplicas": 0.5})
    second = report.Wave("day-2", 10, {"d0": 5.0, "d1": None, "d2": 7.0, "d3": 9.0}, 300,
                         cpu={"function": 1.0, "apiserver:live-0": 2.0, "apiserver:live-1": 1.0})
    peak = {n: procstat.Usage(0.0, kib, kib, 1) for n, kib in
            {"function": 200 * 1024, "apiserver:live-0": 400 * 1024,
             "apiserver:live-1": 300 * 1024}.items()}
    return report.Results(clusters=2, gpu_nodes=3, deployments=4, startup_seconds=70.0,
                          waves=[first, second], peak=peak)


def test_a_wave_row_gives_all_p50_p95_over_the_converged_and_counts_the_missing():
    first, second = _results().waves
    assert first.all_seconds == 40.0
    row = report.wave_rows([first])[2]
    assert row == "| apply | 4 | 6 | 4/4 | **40.0** | 25.0 | 38.5 | 40.0 |"
    assert second.missing == ["d1"] and second.all_seconds is None
    assert report.wave_rows([second])[2] == "| day-2 | 4 | 10 | 3/4 | **—** | 7.0 | 8.8 | 9.0 |"


def test_the_report_names_reconciles_per_composite_and_the_functions_share_of_cpu():
    text = report.render(_results())
    assert "| composite/modeldeployments.modelplane.ai | 20 (5.0) | 0 |" in text
    assert "| RunFunction calls (Crossplane's count) | 30 | — |" in text
    assert "| RunFunction mean latency (ms, Crossplane's clock) | 50 | — |" in text
    # Busiest first; per kind, the API servers together: 19 of 24 CPU seconds.
    assert text.index("| apiserver:live-0 |") < text.index("| function |")
    assert "| apiserver | 2 | 16.0 | 3.0 | 79% | 700 |" in text
    assert "share of the control plane's CPU: **21%**" in text        # 5 of 24
    assert "| **total** | 3 | 20.0 | 4.0 | 100% | 900 |" in text


def test_the_report_ranks_the_api_servers_requests_by_the_seconds_answering_them():
    text = report.render(_results())
    assert text.index("| APPLY objects | 100 (2.5) | 0 (0.0) |") < \
        text.index("| GET modelreplicas | 50 (0.5) | 0 (0.0) |")
    assert "| **all requests** | 150 (3.0) | 0 (0.0) |" in text
    assert report.api_rows([_results().waves[1]]) == []


def test_top_folds_the_quiet_processes_into_one_row():
    text = report.render(_results(), top=1)
    assert "| (2 more) | 10.0 | 2.0 | 500 |" in text


def test_a_waves_apply_is_one_kubectl_apply_given_time_for_every_deployment():
    calls = []

    class FakeControlPlane:
        def kubectl(self, *args, input=None, cluster=None, timeout=120.0):
            calls.append((args, input.count("kind: ModelDeployment"), timeout))

    docs = plan.deployments(100, 36)
    run.Live(FakeControlPlane(), print).apply(docs)
    assert calls == [(("apply", "-f", "-"), 100, run.apply_timeout(100))]
    assert run.apply_timeout(100) > run.apply_timeout(10) > 120


def test_a_wave_follows_only_one_that_converged_with_time_left():
    res = report.Results()
    done = report.Wave("apply", 1, {"d0": 3.0}, 300)
    short = report.Wave("apply", 1, {"d0": None}, 300)
    assert run._go_on(res, done, "day-2", left=120) and res.notes == []
    assert not run._go_on(res, short, "day-2", left=120)
    assert not run._go_on(res, done, "day-2", left=10)
    assert res.notes == ["the day-2 wave was skipped: not every deployment converged in the apply wave",
                         "the day-2 wave was skipped: the time budget is spent"]


def test_a_fleet_without_a_remote_cluster_runs_no_lost_cluster_wave():
    assert run.waves_possible(3, clusters=6) == 3
    assert run.waves_possible(3, clusters=1) == 2
    assert run.waves_possible(1, clusters=1) == 1


def test_a_deployment_that_lost_a_cluster_converges_once_none_of_its_placements_is_there():
    md = {"status": {"placements": [{"cluster": "live-0"}, {"cluster": "live-3"}]}}
    assert plan.placed_on(md) == {"live-0", "live-3"}
    assert plan.placed_on(None) == set() and plan.placed_on({"status": {}}) == set()


def test_a_lost_clusters_wave_says_when_its_last_replica_was_gone():
    lost = report.Wave("live-1 lost", 2, {"d0": 40.0}, 300, lost_cluster="live-1",
                       cleanup_seconds=95.5)
    stuck = report.Wave("live-2 lost", 2, {"d0": 40.0}, 300, lost_cluster="live-2")
    text = report.render(report.Results(waves=[lost, stuck]))
    assert "live-1 lost: the last of its ModelReplicas was deleted 95.5 s after the " \
           "InferenceCluster." in text
    assert "live-2 lost: the last of its ModelReplicas was deleted — some were still " \
           "there at the deadline." in text
