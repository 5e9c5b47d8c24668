"""LeaderWorkerSet's manager (the chart a serving stack installs) as a process: its config.

The chart starts `/manager --config=/controller_manager_config.yaml`, the
ConfigMap mounted there by subPath, and mounts the Secret `lws-webhook-server-cert`
at `/tmp/k8s-webhook-server/serving-certs`, the manager's *default*
`webhook.certDir`. Its cert rotator fills the Secret after the pod starts, the
kubelet updates the volume, and the rotator waits for `tls.crt` in certDir before
it sets up the controllers and webhooks.

A default is a path the program computes, which rewrite_paths cannot see, and the
processes share the root mount namespace: every cluster's manager would read
(and wait on) the one /tmp/k8s-webhook-server/serving-certs of the machine. So the
manager gets a copy of its config, written in the container's directory, with
`webhook.certDir` set to where that directory is for this container: the
host path of the volume mounted there (refresh_volumes keeps it in step with the
Secret), or a directory of the container's own when nothing is mounted there (in
a pod: its private /tmp, where no certificate ever appears either).

What else it reads from the pod needs nothing: the API server through
`KUBECONFIG` (apiaccess.py; controller-runtime reads it before in-cluster
config); its namespace from /var/run/secrets/kubernetes.io/serviceaccount/namespace,
which the host does not have, so the chart's `lws-system` (utils.GetOperatorNamespace's
default: a host with that file would move every manager's lease and Secret);
health (:8081), webhook (:9443) and metrics (:8443) listen in the pod's network
namespace, the metrics server on a self-signed certificate since nothing is under
its TempDir (the runner gives each container a TMPDIR of its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from e2e.controlplane.pods import podspec

# sigs.k8s.io/lws api/config/v1alpha1/defaults.go (DefaultWebhookCertDir).
DEFAULT_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"
CONFIG_FLAGS = ("--config", "-config")  # Go's flag package takes either
CONFIG_FILE = "lws-manager-config.yaml"  # the translated copy, in the container's directory
EMPTY_CONFIG = {"apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration"}


class LwsConfigError(RuntimeError):
    pass


def _config_arg(argv: Sequence[str]) -> tuple[int, int, str] | None:
    """(first index, last index, value) of the --config argument, or None."""
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in CONFIG_FLAGS:
            if eq:
                return i, i, value
            if i + 1 >= len(argv):
                raise LwsConfigError(f"{flag} without a value")
            return i, i + 1, argv[i + 1]
    return None


def translate(argv: Sequence[str], mounts: Sequence[tuple[str, Path]],
              cwd: Path) -> tuple[list[str], str]:
    """The manager's argv (paths under its mounts already rewritten) with --config
    naming the translated copy; and a note saying where certDir went."""
    found = _config_arg(argv)
    if found is None:
        config: dict = dict(EMPTY_CONFIG)
        head, tail = list(argv), []
    else:
        first, last, value = found
        path = Path(value)
        if not path.is_file():
            raise LwsConfigError(f"the manager's config {value} is not a file of the pod's")
        config = yaml.safe_load(path.read_text()) or dict(EMPTY_CONFIG)
        head, tail = list(argv[:first]), list(argv[last + 1:])
    webhook = config.setdefault("webhook", {})
    wanted = webhook.get("certDir") or DEFAULT_CERT_DIR
    (host,) = podspec.rewrite_paths([wanted], mounts)
    if host == wanted:  # not under a mount: the container's own, empty
        host = str(cwd / wanted.lstrip("/"))
        Path(host).mkdir(parents=True, exist_ok=True)
    webhook["certDir"] = host
    cwd.mkdir(parents=True, exist_ok=True)
    out = cwd / CONFIG_FILE
    out.write_text(yaml.safe_dump(config, sort_keys=False))
    return [*head, f"--config={out}", *tail], f"webhook.certDir {wanted} -> {host}"
