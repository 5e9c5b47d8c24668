"""`python -m e2e.controlplane.pods`: one cluster's supervisor (supervisor.py) on its API server.

Watches the cluster's pods through the kubernetes client (a watch, re-opened
when the server ends it), writes readiness through the pods' status
subresource, and reads ConfigMaps and Secrets for pod env and volumes.
Runs until SIGTERM, then stops every pod it started and its bridge stays for
the harness to remove (`make cluster-down`).
"""

from __future__ import annotations

import argparse
import datetime
import logging
import queue
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from e2e.controlplane.pods import apiaccess, netns, podspec, supervisor
from e2e.controlplane.pods.runner import Binaries, PodRunner
from e2e.controlplane.pods.translate import Settings
from function.contract.validation import condition_of

TICK = 0.5          # seconds between supervisor ticks
WATCH_TIMEOUT = 300  # seconds a watch stays open before it is re-opened


class KubeApi:
    def __init__(self, kubeconfig: str) -> None:
        self.api = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self.api)

    def plain(self, obj: Any) -> dict[str, Any]:
        return self.api.sanitize_for_serialization(obj)

    def set_ready(self, pod: Mapping[str, Any], ready: bool, message: str) -> None:
        meta = pod["metadata"]
        current = self.plain(self.core.read_namespaced_pod_status(meta["name"], meta["namespace"]))
        if (current.get("metadata") or {}).get("uid") != meta.get("uid"):
            return  # another pod of the same name: not ours to write
        status = supervisor.ready_status(current, ready, message,
                                         datetime.datetime.now(datetime.UTC))
        self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"],
                                              {"status": status})

    def node_ready(self, name: str) -> bool:
        node = self.plain(self.core.read_node_status(name))
        return (condition_of(node, "Ready") or {}).get("status") == "True"

    def lookup(self, kind: str, namespace: str, name: str) -> Mapping[str, str] | None:
        try:
            if kind == "ConfigMap":
                return self.plain(self.core.read_namespaced_config_map(name, namespace)).get(
                    "data") or {}
            return podspec.decode_secret(self.plain(self.core.read_namespaced_secret(name,
                                                                                      namespace)))
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def token(self, namespace: str, account: str, pod: str, uid: str) -> str:
        """A token of the pod's ServiceAccount bound to the pod (TokenRequest)."""
        body = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=[], expiration_seconds=apiaccess.TOKEN_SECONDS,
            bound_object_ref=client.V1BoundObjectReference(
                api_version="v1", kind="Pod", name=pod, uid=uid)))
        return self.core.create_namespaced_service_account_token(account, namespace,
                                                                 body).status.token

    def pods(self) -> list[dict[str, Any]]:
        return [self.plain(p) for p in self.core.list_pod_for_all_namespaces().items]

    def watch(self, events: queue.Queue, done: threading.Event) -> None:
        """Feed (type, pod) events into `events` until `done`, re-opening the watch."""
        while not done.is_set():
            try:
                w = watch.Watch()
                for ev in w.stream(self.core.list_pod_for_all_namespaces,
                                   timeout_seconds=WATCH_TIMEOUT):
                    events.put((ev["type"], self.plain(ev["object"])))
                    if done.is_set():
                        w.stop()
            except Exception as exc:  # noqa: BLE001 - re-open after a pause
                logging.getLogger("pods").warning("watch ended: %s", exc)
                done.wait(1.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m e2e.controlplane.pods")
    p.add_argument("--cluster", required=True)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--cidr", required=True, help="the cluster's pod CIDR (kwok's --cidr)")
    p.add_argument("--state-dir", required=True, type=Path)
    p.add_argument("--inference-sim", required=True)
    p.add_argument("--epp", required=True)
    p.add_argument("--pd-sidecar", required=True)
    p.add_argument("--lws-manager", required=True)
    p.add_argument("--time-to-first-token", default="0s")
    p.add_argument("--inter-token-latency", default="0s")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    kube = KubeApi(args.kubeconfig)
    network, bridge = netns.Network(), netns.Bridge.for_cluster(args.cluster, args.cidr)
    network.ensure_bridge(bridge)
    # Pods reach the API server through a relay on the bridge's address (apiaccess.py).
    host, port, ca = apiaccess.api_server(Path(args.kubeconfig))
    relay = apiaccess.Relay((str(bridge.address), apiaccess.RELAY_PORT), (host, port))
    access = apiaccess.PodAccess(f"https://{bridge.address}:{apiaccess.RELAY_PORT}", ca,
                                 kube.token)
    runner = PodRunner(args.cluster, Binaries(args.inference_sim, args.epp, args.pd_sidecar,
                                                 args.lws_manager),
                       args.state_dir, kube.lookup, network=network, bridge=bridge,
                       settings=Settings(time_to_first_token=args.time_to_first_token,
                                         inter_token_latency=args.inter_token_latency),
                       api_access=access)
    sup = supervisor.Supervisor(runner, kube)
    live = [PodRunner.pod_key(pod) for pod in kube.pods()]
    for name in supervisor.stale_namespaces(args.cluster, live, netns.list_namespaces()):
        network.remove_pod(name)

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    events: queue.Queue = queue.Queue()
    threading.Thread(target=kube.watch, args=(events, done), daemon=True).start()
    try:
        while not done.is_set():
            try:
                kind, pod = events.get(timeout=TICK)
                sup.observe(kind, pod)
                while True:
                    kind, pod = events.get_nowait()
                    sup.observe(kind, pod)
            except queue.Empty:
                pass
            sup.tick()
    finally:
        sup.stop_all()
        relay.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
