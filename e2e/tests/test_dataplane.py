"""Each cluster's gateway carries real HTTP: Envoy Gateway's Envoy, on the cluster's own
loopback address, routes through an HTTPRoute to an Envoy Gateway Backend on loopback
where this test serves (Python's http.server on 127.0.0.1, started and stopped here).

Per cluster, a route on its Gateway sends /dataplane/<cluster> to a server that answers
with the cluster's name; every cluster's URL answers its own path with its own server
and 404 to every other cluster's path. Requests go to loopback only, a bounded number
of them: at most one a second per route while it is being programmed (for ROUTED
seconds), then one per (URL, path) pair.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from live import IC, SETTLE, apply_docs, condition, ensure_namespace, get, is_true, items

from e2e.controlplane import dataplane
from e2e.controlplane.core import ControlPlane

NS = "e2e-dataplane"
ROUTED = 60            # seconds for a new route to answer through the gateway
GW_API = "gateway.networking.k8s.io"
BACKEND = "backends.gateway.envoyproxy.io"
ROUTE = "httproutes.gateway.networking.k8s.io"
# No proxy from the environment: requests go straight to loopback.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = f"{self.server.answer} {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def serving(answer: str) -> Iterator[int]:
    """An HTTP server on 127.0.0.1 that answers `answer <path>`; its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    server.answer = answer
    thread = threading.Thread(target=server.serve_forever, name=f"answer-{answer}", daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def fetch(url: str) -> tuple[int, str]:
    assert url.startswith("http://127."), url          # loopback only
    try:
        with OPENER.open(url, timeout=3) as rsp:
            return rsp.status, rsp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def route_docs(ic: str, gw: dict, port: int) -> list[dict]:
    return [
        {"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "Backend",
         "metadata": {"name": f"answer-{ic}", "namespace": NS},
         "spec": {"endpoints": [{"ip": {"address": "127.0.0.1", "port": port}}]}},
        {"apiVersion": f"{GW_API}/v1", "kind": "HTTPRoute",
         "metadata": {"name": f"answer-{ic}", "namespace": NS},
         "spec": {"parentRefs": [{"group": GW_API, "kind": "Gateway", "name": gw["name"],
                                  "namespace": gw["namespace"]}],
                  "rules": [{"matches": [{"path": {"type": "PathPrefix",
                                                   "value": f"/dataplane/{ic}"}}],
                             "backendRefs": [{"group": "gateway.envoyproxy.io",
                                              "kind": "Backend", "name": f"answer-{ic}",
                                              "port": port}]}]}},
    ]


@pytest.fixture
def gateways(cp: ControlPlane) -> dict[str, dict]:
    gws = cp.gateways
    assert gws, "the control plane planned no local gateway"
    return gws


def test_every_gateway_is_programmed_at_its_clusters_own_address(cp, gateways):
    """What make cluster says: each InferenceCluster's spec.gateway.address is its
    local URL, and Envoy Gateway reports the Gateway Programmed at that address."""
    ics = {ic["metadata"]["name"]: ic for ic in items(cp, IC)}
    assert set(gateways) == set(ics)
    assert len({g["address"] for g in gateways.values()}) == len(gateways)
    for name, g in gateways.items():
        assert ics[name]["spec"]["gateway"]["address"] == g["url"] == \
            f"http://{g['address']}:{g['port']}"
        gw = get(cp, f"gateways.{GW_API}", g["name"], g["namespace"], cluster=name)
        assert is_true(gw, "Accepted"), condition(gw, "Accepted")
        assert is_true(gw, "Programmed"), condition(gw, "Programmed")
        assert gw["status"]["addresses"] == [{"type": "IPAddress", "value": g["address"]}]
        assert [lis["port"] for lis in gw["spec"]["listeners"]] == [g["port"]]
        status, _ = fetch(f"http://{g['address']}:{dataplane.READY_PORT}/ready")
        assert status == 200


def test_each_clusters_url_reaches_its_own_route_only(cp, gateways, timings):
    with contextlib.ExitStack() as stack:
        ports = {ic: stack.enter_context(serving(ic)) for ic in gateways}
        t0 = time.monotonic()
        for ic, g in gateways.items():
            ensure_namespace(cp, NS, cluster=ic)
            apply_docs(cp, route_docs(ic, g, ports[ic]), cluster=ic)
        stack.callback(_cleanup, cp, gateways)

        # Each route answers through its own gateway once Envoy has it.
        took = {}
        for ic, g in gateways.items():
            url = f"{g['url']}/dataplane/{ic}/hello"
            deadline = time.monotonic() + ROUTED
            last = None
            while time.monotonic() < deadline:
                last = fetch(url)
                if last[0] == 200:
                    break
                time.sleep(1)
            assert last == (200, f"{ic} /dataplane/{ic}/hello"), (url, last, _route_status(
                cp, ic))
            took[ic] = round(time.monotonic() - t0, 1)

        timings["dataplane: routes applied to answering through every gateway (s)"] = \
            max(took.values())

        # Every URL answers only its own cluster's path: another cluster's is not routed.
        for ic, g in gateways.items():
            for other in gateways:
                status, body = fetch(f"{g['url']}/dataplane/{other}/hello")
                if other == ic:
                    assert (status, body) == (200, f"{ic} /dataplane/{ic}/hello")
                else:
                    assert status == 404, (ic, other, status, body)
        # The route is Accepted with its Backend resolved, on its cluster only.
        for ic in gateways:
            route = get(cp, ROUTE, f"answer-{ic}", NS, cluster=ic)
            [parent] = route["status"]["parents"]
            conds = {c["type"]: c["status"] for c in parent["conditions"]}
            assert conds["Accepted"] == conds["ResolvedRefs"] == "True", parent


def _route_status(cp: ControlPlane, ic: str) -> object:
    route = get(cp, ROUTE, f"answer-{ic}", NS, cluster=ic) or {}
    return (route.get("status") or {}).get("parents")


def _cleanup(cp: ControlPlane, gateways: dict) -> None:
    for ic in gateways:
        cp.kubectl("delete", "namespace", NS, "--ignore-not-found", f"--timeout={SETTLE}s",
                   cluster=ic, timeout=SETTLE + 30)
