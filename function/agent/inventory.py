"""The inventory reporter: a workload cluster's Nodes, reported where the fleet can read them.

The control plane cannot list a remote cluster's Nodes through Crossplane:
provider-kubernetes observes one named object per `Object`, never a list. So
each remote cluster runs this small loop (the InferenceCluster function
composes it there as a Deployment of the project's own image, with a
ServiceAccount that may only list Nodes, ResourceSlices, DeviceClasses and
ResourceClaims and write one ConfigMap): every
`interval` it lists the Nodes that carry modelplane.ai/pool, and the DRA
ResourceSlices, DeviceClasses and ResourceClaims, reduces them to the inventory
report (contract/inventory_report.py, contract/published.py and
contract/allocated.py, the same reductions the function applies to the
control-plane cluster's own) and writes it to the
ConfigMap modelplane-system/modelplane-inventory. The InferenceCluster reads
it back through an observe-only provider-kubernetes Object; the report's
`observedAt` is its heartbeat, so a reporter that stops is noticed as a stale
report, and the cluster falls back to its declared nodes.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from function.contract.allocated import held, taken
from function.contract.api import DRA_API_VERSION, LABEL_POOL
from function.contract.inventory_report import REPORT_KEY, REPORT_NAME, NodeGroup, render, summarize
from function.contract.published import pool_devices

log = logging.getLogger("inventory")
PAGE = 500  # Nodes per list call: a large cluster is listed in pages


def _pages(fetch: Callable[[str | None], dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """The pages of a list the API serves in pages: `fetch(token)` is one page."""
    token = None
    while True:
        page = fetch(token)
        yield page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return


def _all_pages(fetch: Callable[[str | None], dict[str, Any]]) -> list[dict[str, Any]]:
    """Every item of a list the API serves in pages."""
    return [item for page in _pages(fetch) for item in page]


def list_nodes(core: Any) -> list[dict[str, Any]]:
    """Every Node with the pool label, as the API returns them (plain JSON)."""
    return _all_pages(lambda token: json.loads(core.list_node(
        label_selector=LABEL_POOL, limit=PAGE, _continue=token, _preload_content=False).data))


def _dra_pages(custom: Any, plural: str) -> Iterator[list[dict[str, Any]]]:
    """ResourceSlices, DeviceClasses or ResourceClaims (resource.k8s.io/v1, every
    namespace), paged like Nodes. Listed as plain JSON through the generic API:
    the client's typed models would drop fields newer than the client."""
    group, version = DRA_API_VERSION.split("/")
    return _pages(lambda token: custom.list_cluster_custom_object(
        group, version, plural, limit=PAGE, _continue=token))


def list_dra(custom: Any, plural: str) -> list[dict[str, Any]]:
    """Every ResourceSlice or DeviceClass."""
    return [item for page in _dra_pages(custom, plural) for item in page]


def held_devices(custom: Any) -> list[tuple[str, str, str, str]]:
    """The devices other claims hold, reduced page by page: a cluster of
    thousands of claims is never all in memory."""
    return [d for page in _dra_pages(custom, "resourceclaims") for d in held(page)]


def write(core: Any, namespace: str, report: str) -> None:
    """Create or replace the report ConfigMap."""
    from kubernetes.client.exceptions import ApiException

    body = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": REPORT_NAME, "namespace": namespace,
                         "labels": {"app.kubernetes.io/name": REPORT_NAME}},
            "data": {REPORT_KEY: report}}
    try:
        core.replace_namespaced_config_map(REPORT_NAME, namespace, body)
    except ApiException as exc:
        if exc.status != 404:
            raise
        core.create_namespaced_config_map(namespace, body)


def report_once(core: Any, custom: Any, namespace: str,
                now: Callable[[], datetime.datetime]) -> dict[str, tuple[NodeGroup, ...]]:
    nodes = list_nodes(core)
    pools = summarize(nodes)
    slices = list_dra(custom, "resourceslices")
    found = pool_devices(nodes, slices, list_dra(custom, "deviceclasses"))
    others = taken(nodes, slices, held_devices(custom))
    write(core, namespace, render(pools, now(), found.devices, found.notes, others,
                                  found.drivers, found.classes))
    return pools


def run(kubeconfig: str | None, namespace: str, interval: float, once: bool) -> int:
    from kubernetes import client, config

    # client-go's order (controller-runtime's GetConfig): the flag, then $KUBECONFIG,
    # then the pod's own service account.
    kubeconfig = kubeconfig or os.environ.get("KUBECONFIG")
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig)
    else:
        config.load_incluster_config()
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    failures = 0
    while not stop.is_set():
        try:
            pools = report_once(core, custom, namespace,
                                lambda: datetime.datetime.now(datetime.UTC))
            failures = 0
            log.info("reported %d pools: %s", len(pools),
                     ", ".join(f"{p}={sum(g.nodes for g in gs)}" for p, gs in pools.items()))
            if once:
                return 0
        except Exception as exc:  # noqa: BLE001 - a reporter keeps reporting
            failures += 1
            log.warning("report failed (%d in a row): %s", failures, exc)
            if once:
                return 1
        # Back off on repeated failures, never beyond four intervals: a report
        # older than the cluster's staleAfterSeconds stops counting anyway.
        stop.wait(interval * min(4, 1 + failures))
    return 0
