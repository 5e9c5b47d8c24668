"""The arithmetic of `make bench-traffic` (benchmarks/traffic/): percentiles, the
latency the gateway adds, the prefix-affinity rate, and the client's address guard.
The live part needs a control plane and runs only as `make bench-traffic`."""

from __future__ import annotations

import contextlib
import http.server
import json
import random
import threading
from collections.abc import Iterator

import pytest

from benchmarks.traffic import client, deployments, measure, report, stats


def test_percentiles_interpolate_between_the_closest_ranks():
    assert stats.percentile([3.0], 99) == 3.0
    assert stats.percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5          # unsorted input
    assert stats.percentile([1.0, 2.0, 3.0, 4.0], 0) == 1.0
    assert stats.percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0
    values = [float(v) for v in range(1, 101)]
    assert stats.percentile(values, 50) == pytest.approx(50.5)
    assert stats.percentile(values, 99) == pytest.approx(99.01)
    # One slow request in a hundred moves p99 but not p50.
    assert stats.percentile([1.0] * 99 + [100.0], 50) == 1.0
    assert stats.percentile([1.0] * 99 + [100.0], 99) == pytest.approx(1.99)


def test_percentiles_refuse_nothing_and_out_of_range():
    with pytest.raises(ValueError):
        stats.percentile([], 50)
    with pytest.raises(ValueError):
        stats.percentile([1.0], 101)


def test_added_latency_is_through_minus_direct_pair_by_pair():
    assert stats.added([3.0, 5.0, 4.0], [1.0, 1.5, 4.0]) == [2.0, 3.5, 0.0]
    with pytest.raises(ValueError):
        stats.added([1.0, 2.0], [1.0])


def test_a_latency_row_is_in_milliseconds_and_takes_percentiles_of_the_differences():
    direct = [0.001] * 99 + [0.010]          # one slow direct request
    through = [0.003] * 100
    row = stats.latency_row("Unified", through, direct)
    assert row.pairs == 100
    assert row.direct_p50 == pytest.approx(1.0) and row.through_p50 == pytest.approx(3.0)
    assert row.added_p50 == pytest.approx(2.0)
    # The paired difference's p99 is not p99(through) - p99(direct): the slow direct
    # request made one pair's difference negative, and the rest are all 2 ms.
    assert row.added_p99 == pytest.approx(2.0)
    assert row.through_p99 - row.direct_p99 == pytest.approx(3.0 - 1.09)


def test_the_affinity_rate_counts_the_requests_after_each_groups_first():
    a = stats.affinity([["p1", "p1", "p1", "p2"],     # 2 of 3 followers on p1
                        ["p3", "p3"],                  # 1 of 1 on p3
                        ["p2"],                        # a group of one: no follower
                        []], copies=4)                 # nothing sent: not a group
    assert (a.groups, a.followers, a.on_first) == (3, 4, 3)
    assert a.rate == pytest.approx(0.75)
    assert a.random == pytest.approx(0.25)


def test_random_choice_lands_near_one_over_n():
    rng = random.Random(7)
    pods = ["a", "b", "c", "d"]
    groups = [[rng.choice(pods) for _ in range(8)] for _ in range(2000)]
    a = stats.affinity(groups, copies=4)
    assert a.followers == 2000 * 7
    assert abs(a.rate - a.random) < 0.02


def test_throughput_is_requests_over_seconds():
    t = stats.Throughput("x", 4, 1000, 2.0, 0, 900, 3.0, 1)
    assert t.direct_rps == pytest.approx(500.0) and t.through_rps == pytest.approx(300.0)


def test_the_report_has_a_row_per_mode_and_both_affinity_rates():
    res = report.Results(
        latency=[stats.latency_row("Unified (eu-west-1)", [0.002, 0.004], [0.001, 0.001])],
        throughput=[stats.Throughput("Unified (eu-west-1)", 4, 100, 1.0, 0, 50, 1.0, 0)],
        affinity=stats.affinity([["a", "a", "a"]], 4),
        control=stats.affinity([["a", "b", "c"]], 4))
    out = report.render(res)
    assert "| Unified (eu-west-1) | 2 | 1.00 | 1.00 | 3.00 | 3.98 | **2.00** | **2.98** |" in out
    assert "| Unified (eu-west-1) | 4 | 100 | 100 | 50 | 50 | 0.50 | 0 |" in out
    assert "| shared long prefix | 1 | 2 | 2 | **1.00** | 0.25 |" in out
    assert "| nothing shared (control) | 1 | 2 | 0 | **0.00** | 0.25 |" in out


@pytest.mark.parametrize("url", ["http://10.0.0.1:8000", "http://192.168.1.5", "http://8.8.8.8/x",
                                 "http://10.128.0.1:8000"])
def test_the_client_dials_only_loopback_and_harness_pods(url):
    with pytest.raises(AssertionError, match="neither loopback nor a harness pod"):
        client.Client(url)


def test_the_client_keeps_a_gateway_urls_path_prefix():
    c = client.Client("http://127.0.0.2:8000/bench-traffic/front", {"x-a": "1"})
    assert (c.host, c.port, c.prefix) == ("127.0.0.2", 8000, "/bench-traffic/front")
    assert c.headers["x-a"] == "1" and c.conn is None        # nothing dialled yet
    pod = client.Client("http://10.65.0.7:8200")
    assert (pod.host, pod.port, pod.prefix) == ("10.65.0.7", 8200, "")


def test_engine_containers_get_pod_name_from_the_downward_api():
    md = deployments.example("throughput-epp.yaml", "picked")
    (engine,) = md["spec"]["template"]["spec"]["engines"]
    (c,) = engine["members"][0]["template"]["spec"]["containers"]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in c["env"]
    assert all(e["name"] != "HF_TOKEN" for e in c["env"])
    assert md["metadata"] == {"name": "picked", "namespace": deployments.NS}


class _Engine(http.server.BaseHTTPRequestHandler):
    """A stand-in engine on 127.0.0.1: answers every POST 200 over keep-alive and names
    itself in x-inference-pod, as the simulator does with POD_NAME set."""

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.prompts.append(json.loads(body)["prompt"])
        out = b'{"choices": [{"text": "ok"}]}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.send_header(client.POD_HEADER, self.server.pod)
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def engine(pod: str) -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    server.pod, server.prompts, server.connections, server.daemon_threads = pod, [], 0, True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_the_measurements_run_against_local_engines_and_count_every_answer():
    with engine("a") as a, engine("b") as b:
        url_a, url_b = (f"http://127.0.0.1:{s.server_address[1]}" for s in (a, b))
        through, direct = client.Target([url_a]), client.Target([url_a, url_b])
        row = measure.measure_latency("local", "m", through, direct, pairs=10, warmup=2)
        assert row.pairs == 10 and row.direct_p50 > 0 and row.through_p50 > 0
        assert (through.tally.ok, direct.tally.ok) == (12, 12)
        assert len(a.prompts) == 12 + 6 and len(b.prompts) == 6     # direct: round robin
        assert (a.connections, b.connections) == (2, 1)                # kept alive
        tp = measure.measure_throughput("local", "m", through, direct, total=40, concurrency=4,
                                        cap_seconds=30)
        assert (tp.direct_requests, tp.through_requests, tp.direct_errors, tp.through_errors) == \
            (40, 40, 0, 0)
        assert tp.direct_rps > 0 and tp.through_rps > 0
        # The pod that served is the engine's own answer; one engine takes every group.
        aff, seen = measure.measure_affinity(client.Target([url_b]), groups=3, per_group=4,
                                             copies=2, shared=True)
        assert (aff.groups, aff.followers, aff.on_first, aff.rate) == (3, 9, 9, 1.0)
        assert seen == {"b": 12}
        shared = b.prompts[-12:]
        assert len({p.split(" ")[0] for p in shared}) == 3                 # a prefix per group
        assert all(p.startswith(shared[0].rsplit(" ", 8)[0]) for p in shared[:4])
