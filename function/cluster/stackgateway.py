"""The Gateway a cluster's stack composes or observes (spec.stack.gateway): the one
spec.gateway names, where every replica's HTTPRoute attaches and whose Accepted is
what makes a route count (contract/stack.py's StackGateway).

* Managed (remote clusters): its namespace at once, and the Gateway itself in the
  Gateways' tier: once every Object of the Managed components is Ready (the Gateway
  API CRDs are served and the controllers run). Both are provider-kubernetes Objects
  with the stack's policies (nothing is deleted). The Gateway is of class
  `gatewayClassName`, with one HTTP listener on `port` (default the port of
  spec.gateway.address, else 80) admitting routes from every namespace: the
  replicas' HTTPRoutes live in their own namespaces. Its Object is Ready when the
  class's controller has Accepted its current generation. Where the stack installs
  Envoy Gateway too (envoyGateway Managed), the same tier composes the GatewayClass
  `gatewayClassName` of Envoy Gateway's controller (labelled Envoy Gateway's: it
  comes with the controller, and installing it is the stack role's); else the class
  is the platform's.
* External: an observe-only Object of it on a remote cluster, a required resource on
  the control-plane cluster; Observed when it is Accepted.

Its status entry says what its Accepted condition says: Pending (no controller has
taken it yet) is Progressing; Accepted=False for any other reason is Failed.
"""

from __future__ import annotations

import functools
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from function.cluster import reporter, stackenvoy, stackstatus
from function.cluster.stack import KEEP, Declared, is_ready, rendered, stack_object
from function.contract.enums import StackMode, StackPhase
from function.contract.records import Cluster, Gateway
from function.contract.stack import ENVOY_GATEWAY, GATEWAY, LABEL_COMPONENT
from function.contract.validation import condition_of

NAMESPACE_KEY = f"stack-{GATEWAY.field}-namespace"
GATEWAY_KEY = f"stack-{GATEWAY.field}-gateway"
CLASS_KEY = f"stack-{GATEWAY.field}-class"
CLASS_KIND = "GatewayClass"
PROBE_KEY = f"stack-{GATEWAY.field}-probe"
READ_BACK = frozenset({GATEWAY_KEY, PROBE_KEY})  # whose observed Gateway the entry reads
REQUIRE = f"stack-{GATEWAY.field}"  # the control-plane cluster's, as a required resource
LISTENER = "http"
# The Gateway's controller has taken its current spec.
ACCEPTED = ("object.status.conditions.exists(c, c.type == 'Accepted' && c.status == 'True'"
            " && c.observedGeneration == object.metadata.generation)")
PENDING = "Pending"  # Gateway API's reason while no controller has reconciled it


@dataclass(frozen=True)
class Settings:
    """spec.stack.gateway, with the Gateway spec.gateway names."""

    mode: StackMode
    gateway: Gateway
    class_name: str = ""
    port: int = GATEWAY.default_port
    # The controller of the GatewayClass the stack composes (Envoy Gateway's, where it
    # installs Envoy Gateway); "": the class is the platform's.
    class_controller: str = ""

    @property
    def managed(self) -> bool:
        return self.mode == StackMode.MANAGED

    @property
    def named(self) -> str:
        return f"{self.gateway.namespace}/{self.gateway.name}"


def address_port(gateway: Gateway) -> int | None:
    """The port spec.gateway.address names, if it names one."""
    try:
        return urllib.parse.urlsplit(gateway.url).port if gateway.url else None
    except ValueError:  # admission's pattern lets "host:99999" through
        return None


def declared(spec: Mapping[str, Any], cluster: Cluster,
             components: Sequence[Declared] | None) -> Settings | None:
    """spec.stack.gateway, or None (none declared, or spec.gateway names no Gateway:
    contract.stack.spec_errors refuses that before anything is composed). `components`:
    the stack's (stack.declared), which say whether it installs Envoy Gateway."""
    entry = (spec.get("stack") or {}).get(GATEWAY.field)
    if not isinstance(entry, Mapping) or cluster.gateway is None:
        return None
    port = entry.get("port") or address_port(cluster.gateway) or GATEWAY.default_port
    mode = StackMode(entry["mode"])
    installs_envoy = any(d.component == ENVOY_GATEWAY and d.managed for d in components or ())
    return Settings(mode, cluster.gateway, str(entry.get("gatewayClassName") or ""), int(port),
                    controller_name() if installs_envoy and mode == StackMode.MANAGED else "")


@functools.cache
def controller_name() -> str:
    """The controller this release's Envoy Gateway serves GatewayClasses of: the one its
    chart's configuration names (gateway.controllerName)."""
    for m in rendered(ENVOY_GATEWAY.field).objects:
        if m.manifest.get("kind") == "ConfigMap" \
                and m.manifest["metadata"]["name"] == stackenvoy.CONFIG_MAP:
            config = stackenvoy.config_of(m.manifest) or {}
            return str(config["gateway"]["controllerName"])
    raise LookupError(f"{ENVOY_GATEWAY.field}'s rendering has no {stackenvoy.CONFIG_MAP}")


def manifests(s: Settings) -> tuple[dict[str, Any], dict[str, Any]]:
    """Its Namespace and the Gateway, labelled as the stack's other objects."""
    labels = {**reporter.PART_OF, LABEL_COMPONENT: GATEWAY.field}
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": s.gateway.namespace, "labels": dict(labels)}}
    gateway = {
        "apiVersion": GATEWAY.api_version, "kind": GATEWAY.kind,
        "metadata": {"name": s.gateway.name, "namespace": s.gateway.namespace,
                     "labels": dict(labels)},
        "spec": {"gatewayClassName": s.class_name, "listeners": [{
            "name": LISTENER, "protocol": "HTTP", "port": s.port,
            "allowedRoutes": {"namespaces": {"from": "All"}}}]},
    }
    return namespace, gateway


def gateway_class(s: Settings) -> dict[str, Any]:
    """The GatewayClass the Gateway names, of `class_controller`."""
    labels = {**reporter.PART_OF, LABEL_COMPONENT: ENVOY_GATEWAY.field}
    return {"apiVersion": GATEWAY.api_version, "kind": CLASS_KIND,
            "metadata": {"name": s.class_name, "labels": labels},
            "spec": {"controllerName": s.class_controller}}


def _object(cluster: Cluster, manifest: dict[str, Any], policies: list[str],
            accepted: bool, tag: str = GATEWAY.field) -> dict[str, Any]:
    # Tagged apart from the components' Objects: a Gateway in lws-system must not share
    # its Namespace's Object with LeaderWorkerSet's chart.
    ready_when = {"policy": "DeriveFromCelQuery", "celQuery": ACCEPTED} if accepted \
        else {"policy": "SuccessfulCreate"}
    return stack_object(cluster, GATEWAY.field, manifest, policies, ready_when, tag)


def objects(cluster: Cluster, s: Settings, components_ready: bool,
            observed: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Its Objects on a remote cluster, by key. `components_ready`: every Object of the
    Managed components is Ready (the Gateways' tier may begin); once composed, the
    Gateway stays composed."""
    namespace, gateway = manifests(s)
    if not s.managed:
        probe = {k: gateway[k] for k in ("apiVersion", "kind")}
        probe["metadata"] = {k: gateway["metadata"][k] for k in ("name", "namespace")}
        return {PROBE_KEY: _object(cluster, probe, ["Observe"], True, tag="gateway-probe")}
    out = {NAMESPACE_KEY: _object(cluster, namespace, KEEP, False)}
    if components_ready or GATEWAY_KEY in observed:
        out[GATEWAY_KEY] = _object(cluster, gateway, KEEP, True)
    if s.class_controller and (components_ready or CLASS_KEY in observed):
        # Ready once it exists: the Gateway's Accepted is what says its controller took
        # it (Envoy Gateway v1.9 may rewrite a class's Accepted to Pending at start-up).
        out[CLASS_KEY] = _object(cluster, gateway_class(s), KEEP, False)
    return out


def _observed_gateway(obj: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The Gateway an Object observed (its status.atProvider.manifest)."""
    found = (((obj or {}).get("status") or {}).get("atProvider") or {}).get("manifest")
    return found if isinstance(found, Mapping) and found else None


def judge(s: Settings, gateway: Mapping[str, Any]) -> tuple[StackPhase, str, str]:
    """A Gateway as observed: Accepted (for its current spec), waiting for a
    controller, or refused by it."""
    accepted = condition_of(gateway, "Accepted") or {}
    generation = (gateway.get("metadata") or {}).get("generation")
    current = generation is None or accepted.get("observedGeneration") in (None, generation)
    ready = StackPhase.INSTALLED if s.managed else StackPhase.OBSERVED
    if accepted.get("status") == "True" and current:
        return ready, "Accepted", f"Gateway {s.named} is Accepted"
    said = f"{accepted.get('reason') or PENDING}: {accepted.get('message') or 'no controller yet'}"
    if accepted.get("status") == "False" and accepted.get("reason") != PENDING:
        return (StackPhase.FAILED, "NotAccepted",
                f"Gateway {s.named} is not Accepted ({said}): check its class and listeners")
    return (StackPhase.PROGRESSING, "NotAccepted",
            f"Gateway {s.named} is not Accepted yet ({said})")


def _said(s: Settings, phase: StackPhase, reason: str, message: str) -> dict[str, Any]:
    return stackstatus.entry(GATEWAY.field, rendered(GATEWAY.version_of).version, s.mode,
                             phase, reason, message)


def local_entry(s: Settings, gateway: Mapping[str, Any] | None) -> dict[str, Any]:
    """Its status.stack.components entry on the control-plane cluster: `gateway` as
    required, {} when it does not exist, None when not resolved yet."""
    if gateway is None:
        return _said(s, StackPhase.PROGRESSING, "NotObservedYet",
                     f"Gateway {s.named} is not observed yet")
    if not gateway:
        return _said(s, StackPhase.FAILED, "NotFound", f"Gateway {s.named} does not exist on "
                     "the control-plane cluster: create it, of a class whose controller runs")
    return _said(s, *judge(s, gateway))


def remote_entry(s: Settings, composed: Mapping[str, Any],
                 observed: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Its status.stack.components entry on a remote cluster, from its Objects."""
    key = GATEWAY_KEY if s.managed else PROBE_KEY
    for k in (NAMESPACE_KEY, CLASS_KEY, key) if s.managed else (key,):
        synced = condition_of(observed.get(k), "Synced")
        if is_ready(observed.get(k)) or synced is None or synced.get("status") != "False":
            continue
        if not s.managed:
            return _said(s, StackPhase.FAILED, "NotFound",
                         f"Gateway {s.named} is not observed on the cluster "
                         f"({synced.get('message')}): create it or mark stack.gateway Managed")
        return _said(s, StackPhase.FAILED, str(synced.get("reason") or "NotSynced"),
                     f"{k.removeprefix('stack-')}: {synced.get('message') or 'not synced'}")
    if key not in composed:
        return _said(s, StackPhase.PROGRESSING, "Waiting",
                     f"Gateway {s.named} waits for the stack's components to be Ready")
    if is_ready(observed.get(key)):
        return _said(s, StackPhase.INSTALLED if s.managed else StackPhase.OBSERVED,
                     "Accepted", f"Gateway {s.named} is Accepted")
    gateway = _observed_gateway(observed.get(key))
    if gateway is None:
        return _said(s, StackPhase.PROGRESSING, "NotObservedYet",
                     f"Gateway {s.named} is not observed yet")
    phase, reason, message = judge(s, gateway)
    if phase != StackPhase.FAILED:  # Accepted, but its Object has not said Ready yet
        phase = StackPhase.PROGRESSING
    return _said(s, phase, reason, message)
