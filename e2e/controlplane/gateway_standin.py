"""A stand-in for an InferencePool-aware Gateway implementation: InferencePool status only.

The local control plane's Gateway implementation is Envoy Gateway's controller
(e2e/controlplane/envoy_gateway.py): it writes GatewayClass, Gateway and HTTPRoute
status. It does not support InferencePool (Envoy Gateway v1.9 has no InferencePool
code; that is Envoy AI Gateway's, which the Go module proxy does not serve, and the
Inference Extension's own endpoint picker writes no pool status), so nothing real
would ever accept a pool here. This stand-in writes that one status and nothing else,
and routes no traffic:

* InferencePool: a status.parents[] entry (controllerName modelplane.ai/gateway-stand-in)
  with Accepted=True and ResolvedRefs=True per existing Gateway of the routes that
  reference the pool (or every Gateway on the cluster when no route references it yet).

Level-triggered: any watch event schedules a full resync of the cluster, and
a resync runs at least every RESYNC seconds. Errors (an API server restarting,
a CRD not installed yet) end the watch, which re-lists after a bounded backoff.

    python -m e2e.controlplane.gateway_standin NAME=KUBECONFIG [NAME=KUBECONFIG ...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

CONTROLLER = "modelplane.ai/gateway-stand-in"
GW_GROUP = "gateway.networking.k8s.io"
POOL_GROUP = "inference.networking.k8s.io"
RESYNC = 30.0
BACKOFF_MAX = 5.0

KINDS = {  # name: (group, version, plural, namespaced); only inferencepools is written
    "gateways": (GW_GROUP, "v1", "gateways", True),
    "httproutes": (GW_GROUP, "v1", "httproutes", True),
    "inferencepools": (POOL_GROUP, "v1", "inferencepools", True),
}

SINGULAR = {"gateways": "Gateway", "httproutes": "HTTPRoute", "inferencepools": "InferencePool"}

log = logging.getLogger("gateway-stand-in")


# ---- pure status computation -------------------------------------------------

def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(ctype: str, status: str, reason: str, message: str, generation: int | None,
              now: str) -> dict:
    c = {"type": ctype, "status": status, "reason": reason, "message": message,
         "lastTransitionTime": now}
    if generation is not None:
        c["observedGeneration"] = generation
    return c


def merge_conditions(old: Iterable[Mapping[str, Any]] | None,
                     new: Iterable[Mapping[str, Any]]) -> list[dict]:
    """New conditions, keeping an old lastTransitionTime when the status did not change."""
    before = {c.get("type"): c for c in old or [] if isinstance(c, Mapping)}
    out = []
    for c in new:
        c = dict(c)
        prev = before.get(c["type"])
        if prev is not None and prev.get("status") == c["status"] \
                and prev.get("lastTransitionTime"):
            c["lastTransitionTime"] = prev["lastTransitionTime"]
        out.append(c)
    return out


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _gen(obj: Mapping[str, Any]) -> int | None:
    return _meta(obj).get("generation")


def parent_gateway(ref: Mapping[str, Any], route_namespace: str) -> tuple[str, str] | None:
    """(namespace, name) of the Gateway a parentRef names, or None for other kinds."""
    if (ref.get("group") or GW_GROUP) != GW_GROUP or (ref.get("kind") or "Gateway") != "Gateway":
        return None
    return ref.get("namespace") or route_namespace, ref["name"]


def _parent_entry(ref: Mapping[str, Any], generation: int | None, old: Mapping | None,
                  now: str, what: str) -> dict:
    return {
        "parentRef": dict(ref),
        "controllerName": CONTROLLER,
        "conditions": merge_conditions((old or {}).get("conditions"), [
            condition("Accepted", "True", "Accepted", f"{what} accepted by the gateway stand-in",
                      generation, now),
            condition("ResolvedRefs", "True", "ResolvedRefs", "all references resolved",
                      generation, now)]),
    }


def _references_pool(route: Mapping[str, Any], pool: Mapping[str, Any]) -> bool:
    if _meta(route).get("namespace") != _meta(pool).get("namespace"):
        return False
    name = _meta(pool).get("name")
    for rule in (route.get("spec") or {}).get("rules") or []:
        for b in rule.get("backendRefs") or []:
            if b.get("group") == POOL_GROUP and b.get("kind") == "InferencePool" \
                    and b.get("name") == name and (b.get("namespace") in (None, _meta(pool).get("namespace"))):
                return True
    return False


def pool_status(pool: Mapping[str, Any], routes: Iterable[Mapping[str, Any]],
                gateways: set[tuple[str, str]], now: str) -> dict:
    ns = _meta(pool).get("namespace") or ""
    targets: list[tuple[str, str]] = []
    for r in routes:
        if not _references_pool(r, pool):
            continue
        rns = _meta(r).get("namespace") or ""
        for ref in (r.get("spec") or {}).get("parentRefs") or []:
            gw = parent_gateway(ref, rns)
            if gw is not None and gw in gateways and gw not in targets:
                targets.append(gw)
    if not targets:
        targets = sorted(gateways)
    old = pool.get("status") or {}
    ours_before = {((p.get("parentRef") or {}).get("namespace") or ns,
                    (p.get("parentRef") or {}).get("name")): p
                   for p in old.get("parents") or [] if p.get("controllerName") == CONTROLLER}
    parents = [p for p in old.get("parents") or [] if p.get("controllerName") != CONTROLLER]
    for gns, gname in targets:
        ref = {"group": GW_GROUP, "kind": "Gateway", "namespace": gns, "name": gname}
        parents.append(_parent_entry(ref, _gen(pool), ours_before.get((gns, gname)), now, "pool"))
    status = dict(old)
    status["parents"] = parents
    return status


def desired(objects: Mapping[str, list[dict]], now: str) -> list[tuple[str, dict, dict]]:
    """Every (kind, InferencePool, new status) whose status differs from what it holds."""
    gw_keys = {(_meta(g).get("namespace"), _meta(g).get("name"))
               for g in objects.get("gateways", [])}
    if not gw_keys:
        return []
    routes = objects.get("httproutes", [])
    out = []
    for p in objects.get("inferencepools", []):
        status = pool_status(p, routes, gw_keys, now)
        if status != (p.get("status") or {}):
            out.append(("inferencepools", p, status))
    return out


# ---- the process ----------------------------------------------------------------

class ClusterWriter:
    """One cluster: a watch thread per kind, one resync thread."""

    def __init__(self, name: str, kubeconfig: str, stop: threading.Event) -> None:
        from kubernetes import client, config

        self.name = name
        self.stop = stop
        self.trigger = threading.Event()
        api_client = config.new_client_from_config(config_file=kubeconfig)
        self.api = client.CustomObjectsApi(api_client)

    def _list(self, kind: str) -> dict:
        group, version, plural, _ = KINDS[kind]
        return self.api.list_cluster_custom_object(group, version, plural, _request_timeout=30)

    def _sleep(self, seconds: float) -> None:
        self.stop.wait(seconds)

    def watch(self, kind: str) -> None:
        from kubernetes import watch

        group, version, plural, _ = KINDS[kind]
        backoff = 0.5
        while not self.stop.is_set():
            try:
                listed = self._list(kind)
                self.trigger.set()
                rv = (listed.get("metadata") or {}).get("resourceVersion")
                w = watch.Watch()
                for _event in w.stream(self.api.list_cluster_custom_object, group, version,
                                       plural, resource_version=rv, timeout_seconds=60,
                                       _request_timeout=90):
                    self.trigger.set()
                    if self.stop.is_set():
                        w.stop()
                        break
                backoff = 0.5
            except Exception as exc:  # noqa: BLE001 - re-list after any failure
                log.info("[%s] watch %s ended: %s; re-listing in %.1fs", self.name, kind,
                         _short(exc), backoff)
                self._sleep(backoff)
                backoff = min(BACKOFF_MAX, backoff * 2)

    def resync_loop(self) -> None:
        backoff = 0.5
        while not self.stop.is_set():
            self.trigger.wait(RESYNC)
            if self.stop.is_set():
                return
            self.trigger.clear()
            try:
                self.resync()
                backoff = 0.5
            except Exception as exc:  # noqa: BLE001 - retry after any failure
                log.info("[%s] resync failed: %s; retrying in %.1fs", self.name, _short(exc),
                         backoff)
                self._sleep(backoff)
                backoff = min(BACKOFF_MAX, backoff * 2)
                self.trigger.set()

    def resync(self) -> None:
        from kubernetes.client.exceptions import ApiException

        objects: dict[str, list[dict]] = {}
        for kind in KINDS:
            try:
                objects[kind] = self._list(kind).get("items") or []
            except ApiException as exc:
                if exc.status == 404:      # that CRD is not installed (yet)
                    objects[kind] = []
                    continue
                raise
        for kind, obj, status in desired(objects, now_rfc3339()):
            group, version, plural, namespaced = KINDS[kind]
            meta = _meta(obj)
            body = {"status": status}
            try:
                if namespaced:
                    self.api.patch_namespaced_custom_object_status(
                        group, version, meta["namespace"], plural, meta["name"], body,
                        _request_timeout=30)
                else:
                    self.api.patch_cluster_custom_object_status(
                        group, version, plural, meta["name"], body, _request_timeout=30)
                log.info("[%s] wrote status of %s %s%s", self.name, SINGULAR[kind],
                         f"{meta.get('namespace')}/" if namespaced else "", meta["name"])
            except ApiException as exc:
                if exc.status in (404, 409):  # gone or changed: the next resync sees it
                    self.trigger.set()
                    continue
                raise


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def run(clusters: Mapping[str, str], stop: threading.Event | None = None,
        on_ready: Callable[[], None] | None = None) -> None:
    stop = stop or threading.Event()
    threads = []
    for name, kubeconfig in clusters.items():
        w = ClusterWriter(name, kubeconfig, stop)
        threads.append(threading.Thread(target=w.resync_loop, name=f"{name}-resync",
                                        daemon=True))
        for kind in KINDS:
            threads.append(threading.Thread(target=w.watch, args=(kind,),
                                            name=f"{name}-{kind}", daemon=True))
    for t in threads:
        t.start()
    log.info("gateway stand-in (InferencePool status only, no traffic) watching %s", ", ".join(clusters))
    if on_ready:
        on_ready()
    stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.controlplane.gateway_standin",
        description="A stand-in for an InferencePool-aware Gateway implementation: writes "
                    "InferencePool status (Accepted/ResolvedRefs) and routes nothing.")
    parser.add_argument("clusters", nargs="+", metavar="NAME=KUBECONFIG")
    args = parser.parse_args(argv)
    clusters = {}
    for item in args.clusters:
        name, _, path = item.partition("=")
        if not name or not path:
            parser.error(f"expected NAME=KUBECONFIG, got {item!r}")
        clusters[name] = path
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s %(name)s %(message)s")
    # The client's own retries while an API server is down: our watch loop reports those.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    run(clusters, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["desired", "pool_status", "merge_conditions", "main", "run"]
