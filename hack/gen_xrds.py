"""Generate the XRDs in apis/ from one set of schema fragments.

ModelDeployment and ModelReplica share the engine, member and pod template
shapes; writing them once here keeps the two XRDs from drifting apart. Every
string, list and map carries a bound so the API server's CEL cost estimate
stays within budget, and every contract rule is a schema bound or an
x-kubernetes-validations rule with a message a user can act on.

Run `python hack/gen_xrds.py` (or `make generate`); tests/test_xrds.py
fails when apis/ is stale.
"""

from __future__ import annotations

import copy
import pathlib
import sys

import yaml
from generated import write_or_check

GROUP = "modelplane.ai"
VERSION = "v1alpha1"
ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the serving modes' table: function/contract/serving.py

from function.composer import podsecurity  # noqa: E402
from function.contract import cost, destinations, serving  # noqa: E402
from function.contract import stack as stack_table  # noqa: E402
from function.contract.rules import (  # noqa: E402
    COMPUTE_RESOURCES,
    HUGEPAGES_PREFIX,
    QUOTA_SELECTS,
    RESOURCES_MESSAGE,
)


def dependency_name(package: str) -> str:
    """The name Crossplane's package manager gives a package it installs as a
    dependency: its repository path without the registry host, made a DNS
    label (crossplane-runtime's xpkg.ToDNSLabel of RepositoryStr()), so
    `xpkg.crossplane.io/modelplane/function-model-serving` is
    `modelplane-function-model-serving`."""
    first, _, rest = package.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        package = rest  # the registry host
    out = []
    for i, ch in enumerate(package[:63]):
        if ch.isascii() and (ch.islower() or ch.isdigit()):
            out.append(ch)
        elif ch in "./:-" and i not in (0, 62, len(package) - 1):
            out.append("-")
    return "".join(out).strip("-")


def function_name() -> str:
    """What the Compositions call: the Function the Configuration depends on,
    under the name the package manager installs it with. Users install the
    Configuration alone; dependency resolution brings the Function."""
    meta = yaml.safe_load((ROOT / "crossplane.yaml").read_text())
    (fn,) = [d for d in meta["spec"]["dependsOn"] if d.get("kind") == "Function"]
    return dependency_name(fn["package"])


FUNCTION = function_name()

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# A qualified name as Kubernetes uses for label keys: optional DNS subdomain
# prefix, then a name segment.
QUALIFIED_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
RESERVED_PREFIX = "modelplane.ai/"


def cel_regex(pattern: str) -> str:
    """A regex as a CEL raw string literal: in a plain CEL string `\\.` is an invalid
    escape and the rule fails to compile."""
    assert "'" not in pattern
    return "r'" + pattern + "'"


# --- primitive helpers --------------------------------------------------------


def string(max_length: int, description: str = "", *, pattern: str | None = None,
           enum: tuple[str, list[str]] | None = None, default: str | None = None,
           min_length: int | None = None) -> dict:
    """`enum` is (title, values): the title names the generated model's enum
    (function/contract/models/), which the code uses instead of spelling the values."""
    s: dict = {"type": "string"}
    if enum:
        s["title"] = enum[0]
    if description:
        s["description"] = description
    if enum:
        s["enum"] = list(enum[1])  # a copy: a shared list dumps as a YAML anchor
    else:
        s["maxLength"] = max_length
    if min_length is not None:
        s["minLength"] = min_length
    if pattern:
        s["pattern"] = pattern
    if default is not None:
        s["default"] = default
    return s


def integer(minimum: int, maximum: int, description: str = "",
            default: int | None = None, fmt: str = "int32") -> dict:
    s: dict = {"type": "integer", "format": fmt, "minimum": minimum, "maximum": maximum}
    if description:
        s["description"] = description
    if default is not None:
        s["default"] = default
    return s


def obj(properties: dict, description: str = "", *, required: list[str] | None = None,
        rules: list[tuple[str, str]] | None = None) -> dict:
    s: dict = {"type": "object"}
    if description:
        s["description"] = description
    if required:
        s["required"] = required
    s["properties"] = properties
    if rules:
        s["x-kubernetes-validations"] = [{"rule": r, "message": m} for r, m in rules]
    return s


def array(items: dict, max_items: int, description: str = "", *, min_items: int | None = None,
          map_keys: list[str] | None = None, rules: list[tuple[str, str]] | None = None) -> dict:
    s: dict = {"type": "array"}
    if description:
        s["description"] = description
    s["maxItems"] = max_items
    if min_items is not None:
        s["minItems"] = min_items
    if map_keys:
        # The API server refuses a CRD whose list-map key is neither required nor
        # defaulted (Crossplane then never establishes it): fail here instead.
        loose = [k for k in map_keys if k not in (items.get("required") or ())
                 and "default" not in (items.get("properties") or {}).get(k, {})]
        if loose:
            raise ValueError(f"list-map keys {loose} must be required or defaulted")
        s["x-kubernetes-list-type"] = "map"
        s["x-kubernetes-list-map-keys"] = map_keys
    s["items"] = items
    if rules:
        s["x-kubernetes-validations"] = [{"rule": r, "message": m} for r, m in rules]
    return s


def with_rules(schema: dict, rules: list[tuple[str, str]]) -> dict:
    """A schema with x-kubernetes-validations rules (for kinds whose helper takes none)."""
    return {**schema, "x-kubernetes-validations": [{"rule": r, "message": m}
                                                   for r, m in rules]}


def string_map(max_properties: int, description: str, *, value_max: int = 1024,
               reserved: bool = False) -> dict:
    """A map of Kubernetes label/annotation-style keys to strings."""
    s: dict = {
        "type": "object",
        "description": description,
        "maxProperties": max_properties,
        "additionalProperties": {"type": "string", "maxLength": value_max},
    }
    rules = [("self.all(k, size(k) <= 317 && k.matches(" + cel_regex(QUALIFIED_NAME) + "))",
              "keys must be qualified names (an optional DNS prefix and '/', then a name of "
              "letters, digits, '-', '_' and '.')")]
    if reserved:
        rules.append((f"self.all(k, !k.startsWith('{RESERVED_PREFIX}'))",
                      f"keys under {RESERVED_PREFIX} are reserved for modelplane itself"))
    s["x-kubernetes-validations"] = [{"rule": r, "message": m} for r, m in rules]
    return s


def metadata(what: str) -> dict:
    return obj({
        "labels": string_map(64, f"Labels copied to every {what}.", value_max=63, reserved=True),
        "annotations": string_map(64, f"Annotations copied to every {what}.", value_max=4096,
                                  reserved=True),
    }, f"Labels and annotations for every {what}. Keys under {RESERVED_PREFIX} are reserved.")


# --- enums named once: (title, values) ----------------------------------------

TAINT_EFFECT = ("TaintEffect", ["NoSchedule", "PreferNoSchedule", "NoExecute"])
DEVICE_CLAIM = ("DeviceClaim", ["DRA", "Synthetic"])
SERVING_MODE = ("ServingMode", list(serving.MODES))
ROUTER = ("Router", list(serving.ALL_ROUTERS))
ENGINE_PHASE = ("EnginePhase", list(serving.PHASES))
KV_CONNECTOR = ("KvConnector", list(serving.KV_CONNECTORS))
MODEL_SOURCE = ("ModelSource", ["HuggingFace", "URI"])
HYDRATION = ("Hydration", ["Eager", "OnDemand"])
CACHE_PHASE = ("CachePhase", ["Pending", "Hydrating", "Ready", "Failed"])
# Pod Security Admission's level names, spelled as its namespace label spells them.
POD_SECURITY_LEVEL = ("PodSecurityLevel", ["restricted", "baseline", "privileged"])

# --- shared API fragments -----------------------------------------------------

TOLERATION = obj({
    "key": string(253, "The taint key to tolerate; empty with operator Exists tolerates every taint.",
                  pattern=QUALIFIED_NAME),
    "operator": string(0, "Equal (default) matches key and value; Exists matches any value.",
                       enum=("TolerationOperator", ["Equal", "Exists"]), default="Equal"),
    "value": string(63, "The taint value to match with operator Equal."),
    "effect": string(0, "The taint effect to tolerate; empty tolerates every effect.",
                     enum=TAINT_EFFECT),
}, "Tolerates an InferenceCluster taint, shaped like a Kubernetes toleration.", rules=[
    ("!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
     "a toleration with operator Exists must not set a value"),
    ("has(self.key) && self.key != '' || (has(self.operator) && self.operator == 'Exists')",
     "a toleration without a key must use operator Exists (it then tolerates every taint)"),
])


def taint(description: str) -> dict:
    return obj({
        "key": string(253, "The taint key.", pattern=QUALIFIED_NAME, min_length=1),
        "value": string(63, "The taint value."),
        "effect": string(0, "NoSchedule keeps new replicas away; NoExecute also drains existing "
                         "replicas, which are re-placed elsewhere; PreferNoSchedule is advisory.",
                         enum=TAINT_EFFECT),
    }, description, required=["key", "effect"])


SELECTOR = obj({
    # The API server bounds the length only: to it the expression is a string.
    # Its CEL cost is Kubernetes DRA's to bound, which the function does
    # (function/contract/devicecel/cost.py, docs/security.md).
    "cel": string(2048, "A DRA CEL expression over `device.driver`, `device.attributes[domain]` "
                  "and `device.capacity[domain]`, with Kubernetes `quantity()` and `semver()`. "
                  "Its estimated worst-case cost must stay within Kubernetes DRA's limit of "
                  "1,000,000 (CELSelectorExpressionMaxCost); a costlier one is refused like an "
                  "invalid selector (a ModelDeployment keeps its existing replicas).",
                  min_length=1),
}, "One CEL selector; a device must satisfy every selector of its request.", required=["cel"])

ALTERNATIVE = obj({
    "name": string(63, "The alternative's name (a DNS label), recorded on the ModelReplica.",
                   pattern=DNS_LABEL),
    "count": integer(1, 128, "How many such devices each pod claims.", default=1),
    "selectors": array(SELECTOR, 8, "CEL selectors, ANDed."),
}, "One alternative of a request, as a DRA firstAvailable subrequest.", required=["name"])

DEVICE_REQUEST = obj({
    "name": string(63, "The request's name, unique within the member (a DNS label).",
                   pattern=DNS_LABEL),
    "count": integer(1, 128, "How many such devices each pod claims (exact requests).",
                     default=1),
    "selectors": array(SELECTOR, 8, "CEL selectors, ANDed."),
    "firstAvailable": array(ALTERNATIVE, 8, "Fungible devices in priority order (DRA "
                            "firstAvailable): the scheduler prefers, fleet-wide, the first "
                            "alternative that fits anywhere before falling back to the next. "
                            "Use instead of count and selectors.", map_keys=["name"]),
}, "Devices each pod of the member needs on one node.", required=["name"], rules=[
    ("!has(self.firstAvailable) || !has(self.selectors)",
     "a device request has selectors or firstAvailable alternatives, not both"),
    ("!has(self.firstAvailable) || size(self.firstAvailable) > 0",
     "firstAvailable needs at least one alternative"),
])

RESOLVED_DEVICE_REQUEST = obj({
    "name": string(63, "The request's name.", pattern=DNS_LABEL),
    "deviceClassName": string(253, "The DRA DeviceClass of the device the scheduler matched; "
                              "empty for a Synthetic device, which is never claimed.",
                              pattern="^(" + DNS_SUBDOMAIN[1:-1] + ")?$"),
    "claim": string(0, "DRA devices are claimed through a ResourceClaimTemplate; Synthetic "
                    "devices constrain placement only.", enum=DEVICE_CLAIM, default="DRA"),
    "count": integer(1, 128, "How many devices each pod claims.", default=1),
    "selectors": array(SELECTOR, 8, "CEL selectors carried to the ResourceClaimTemplate."),
    "alternative": string(63, "For a firstAvailable request: the alternative the scheduler "
                          "chose; count and selectors are that alternative's.",
                          pattern=DNS_LABEL),
}, "A device request resolved against the chosen pool.", required=["name", "count"], rules=[
    ("!has(self.claim) || self.claim != 'DRA' || (has(self.deviceClassName) && size(self.deviceClassName) > 0)",
     "a DRA device request needs a deviceClassName"),
])

ENV_VAR = obj({
    "name": string(256, "The variable's name.", pattern=ENV_NAME, min_length=1),
    "value": string(32768, "A literal value."),
    "valueFrom": obj({
        "secretKeyRef": obj({
            "name": string(253, "The Secret's name.", pattern=DNS_SUBDOMAIN),
            "key": string(253, "The key in the Secret.", min_length=1),
            "optional": {"type": "boolean"},
        }, "A key of a Secret in the pod's namespace.", required=["name", "key"]),
        "configMapKeyRef": obj({
            "name": string(253, "The ConfigMap's name.", pattern=DNS_SUBDOMAIN),
            "key": string(253, "The key in the ConfigMap.", min_length=1),
            "optional": {"type": "boolean"},
        }, "A key of a ConfigMap in the pod's namespace.", required=["name", "key"]),
        "fieldRef": obj({
            "apiVersion": string(64, "Version of the schema fieldPath is written in."),
            "fieldPath": string(256, "A pod field, e.g. status.podIP.", min_length=1),
        }, "A field of the pod.", required=["fieldPath"]),
    }, "Where the value comes from.", rules=[
        ("[has(self.secretKeyRef), has(self.configMapKeyRef), has(self.fieldRef)]"
         ".filter(x, x).size() == 1",
         "valueFrom needs exactly one of secretKeyRef, configMapKeyRef, fieldRef"),
    ]),
}, "An environment variable passed through to the engine unchanged.", required=["name"], rules=[
    ("!(has(self.value) && has(self.valueFrom))", "an env var sets value or valueFrom, not both"),
])

# A structural int-or-string must spell its anyOf exactly as [{type: integer},
# {type: string}]; value validations such as maxLength go beside it, not inside.
QUANTITY = {"anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True, "maxLength": 64}

def resource_list(what: str) -> dict:
    names = ", ".join(f"'{n}'" for n in COMPUTE_RESOURCES)
    return {"type": "object", "maxProperties": 8, "additionalProperties": QUANTITY,
            "description": f"{what}: cpu, memory, ephemeral-storage and hugepages-<size> only.",
            "x-kubernetes-validations": [{
                "rule": f"self.all(k, k in [{names}] || k.startsWith('{HUGEPAGES_PREFIX}'))",
                "message": RESOURCES_MESSAGE}]}


RESOURCES = obj({
    "requests": resource_list("Requests"),
    "limits": resource_list("Limits"),
}, "Compute resources of the engine container. Accelerators and every other device are "
   "claimed through DRA device requests, never here: an extended resource is refused.")

ENGINE_CONTAINER = obj({
    "name": string(0, "Always `engine`.", enum=("EngineContainerName", ["engine"])),
    "image": string(512, "The curated engine image.", min_length=1),
    "imagePullPolicy": string(0, "When to pull the image.",
                              enum=("ImagePullPolicy", ["Always", "IfNotPresent", "Never"])),
    "command": array(string(4096), 64, "The entrypoint, passed through verbatim."),
    "args": array(string(4096), 256, "The engine's flags, passed through verbatim: modelplane "
                  "never adds, removes or rewrites a flag."),
    "env": array(ENV_VAR, 128, "Environment variables, passed through.", map_keys=["name"]),
    "resources": RESOURCES,
}, "The engine container.", required=["name", "image"])

POD_TEMPLATE = obj({
    "metadata": obj({
        "labels": string_map(32, "Labels on the pods.", value_max=63, reserved=True),
        "annotations": string_map(32, "Annotations on the pods.", value_max=4096, reserved=True),
    }, "Pod labels and annotations; keys under modelplane.ai/ are reserved. What passes: "
       "keys without a prefix and without a dot, app.kubernetes.io/ ones, and the prefixes "
       "the cluster's spec.podSecurity.allowedMetadataPrefixes opens; every other key is "
       "dropped with a warning (docs/security.md)."),
    "spec": obj({
        "containers": array(ENGINE_CONTAINER, 1, "Exactly one container, named `engine`.",
                            min_items=1),
        "imagePullSecrets": array(obj({"name": string(253, "A Secret's name.",
                                                      pattern=DNS_SUBDOMAIN)},
                                      required=["name"]), 8, "Secrets for pulling the image."),
    }, "The curated pod spec: privileged settings, host access, volumes and securityContext "
       "are not expressible; the pods' security settings are the InferenceCluster's "
       "spec.podSecurity level.",
        required=["containers"]),
}, "A curated pod template.", required=["spec"])


# An absolute path without `..` segments or a trailing slash, where the cache mounts.
MOUNT_PATH = r"^(/[A-Za-z0-9._-]+)+$"
DEFAULT_MOUNT_PATH = "/mnt/models"

MODEL_CACHE_REF = obj({
    "name": string(63, "The ModelCache, in the deployment's namespace.", pattern=DNS_LABEL,
                   min_length=1),
    "mountPath": string(256, "Where the cache mounts, read-only, in every serving and worker "
                        "pod; `MODELPLANE_MODEL_PATH` in the engine's environment says the "
                        "same. Engine args stay yours: point them at this path.",
                        pattern=MOUNT_PATH, default=DEFAULT_MOUNT_PATH),
}, "Model weights staged once per cluster by a ModelCache: replicas are placed only where "
   "the cache can live, prefer clusters where it is Ready, and start their engines once it "
   "is Ready on their cluster.", required=["name"], rules=[
    ("!has(self.mountPath) || !self.mountPath.matches(" + cel_regex(r"(^|/)\.\.?(/|$)") + ")",
     "mountPath must not contain '.' or '..' segments"),
])


def member(resolved: bool) -> dict:
    props = {
        "role": string(0, "Standalone (the default) is a whole engine in one pod; Leader and "
                       "Worker form a gang across nodes.",
                       enum=("MemberRole", ["Standalone", "Leader", "Worker"]),
                       default="Standalone"),
        "worker": obj({
            "nodes": integer(1, 256, "Pods in the gang besides the leader (one per node)."),
        }, "Worker gang size; required for, and only for, role Worker.", required=["nodes"]),
        "nodeSelector": obj({
            "devices": array(DEVICE_REQUEST, 8, "Per-pod device requests.", map_keys=["name"]),
        }, "What each pod of this member needs on its node."),
        "template": POD_TEMPLATE,
    }
    required = ["template"]
    if resolved:
        props["nodePoolName"] = string(63, "The node pool of the chosen cluster this member runs on.",
                                       pattern=DNS_LABEL)
        props["deviceRequests"] = array(RESOLVED_DEVICE_REQUEST, 8,
                                        "The member's device requests resolved on its pool.",
                                        map_keys=["name"])
        required = ["template", "nodePoolName"]
    return obj(props, "One member of an engine.", required=required, rules=[
        ("(has(self.role) && self.role == 'Worker') == has(self.worker)",
         "worker.nodes is set on the Worker member, and only there"),
    ])


ROLLOUT = obj({
    "maxSurge": {**QUANTITY, "description": "Extra copies (or a percentage) during a rollout. "
                 "Each surge copy needs free devices of its own in the pool."},
    "maxUnavailable": {**QUANTITY, "description": "Copies (or a percentage) that may be down "
                       "during a rollout."},
    "partition": integer(0, 256, "Gang engines only: copies with an index below the partition "
                         "keep the old template (a staged rollout)."),
}, "How an engine's copies roll to a new template: a Deployment's RollingUpdate strategy, or a "
   "LeaderWorkerSet's rollingUpdateConfiguration.")


# The scheduler places each engine on one pool and counts its nodes there; a
# replica whose members named two would run where nothing counted it.
ONE_POOL = ("self.members.all(m, m.nodePoolName == self.members[0].nodePoolName)",
            "every member of an engine runs on one node pool (the scheduler places each engine on one pool)")


def engine(resolved: bool) -> dict:
    return obj({
        "name": string(63, "The engine's name, a DNS label unique in the deployment.",
                       pattern=DNS_LABEL),
        "copies": integer(1, 256, "Identical copies of the engine inside one replica; never "
                          "autoscaled.", default=1),
        "phase": string(0, serving.phase_description(), enum=ENGINE_PHASE),
        "recoveryPolicy": string(0, "Gang engines only. RecreateGroupOnPodRestart (the "
                                 "default): a restart of any pod recreates the whole gang. "
                                 "RecreateGroupAfterStart: only once the gang has started. "
                                 "None: pods restart alone.",
                                 enum=("RecoveryPolicy", ["RecreateGroupOnPodRestart",
                                                         "RecreateGroupAfterStart", "None"])),
        "restartGracePeriodSeconds": integer(0, 3600, "How long an engine pod may drain "
                                             "in-flight requests before it is killed on a "
                                             "restart or rollout (the pods' "
                                             "terminationGracePeriodSeconds)."),
        "rollout": ROLLOUT,
        "members": array(member(resolved), 2, "Exactly one Standalone member, or one Leader and "
                         "one Worker.", min_items=1, rules=[
                             ("size(self) == 1 ? (!has(self[0].role) || self[0].role == 'Standalone')"
                              " : (self.exists(m, has(m.role) && m.role == 'Leader') && "
                              "self.exists(m, has(m.role) && m.role == 'Worker'))",
                              "members must be exactly one Standalone, or one Leader and one Worker"),
                         ]),
    }, "One serving unit of a replica.", required=["name", "members"], rules=[
        ("self.members.exists(m, has(m.nodeSelector) && has(m.nodeSelector.devices) && "
         "size(m.nodeSelector.devices) > 0)",
         "at least one member of every engine must request devices in nodeSelector.devices"),
        ("!has(self.recoveryPolicy) || self.members.exists(m, has(m.role) && m.role == 'Leader')",
         "recoveryPolicy applies to gang engines (a Leader and a Worker) only"),
        ("!has(self.rollout) || !has(self.rollout.partition) || "
         "self.members.exists(m, has(m.role) && m.role == 'Leader')",
         "rollout.partition applies to gang engines only: a Deployment has no partition"),
        *([ONE_POOL] if resolved else []),
    ])


HOSTNAME = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

def quoted(names) -> str:
    return ", ".join(f"'{n}'" for n in names)


def mode_is(path: str, modes) -> str:
    """CEL: the serving mode at `path` (an object with an optional mode) is one of
    `modes`; an unset mode is the default one."""
    modes = list(modes)
    test = f"{path}.mode == '{modes[0]}'" if len(modes) == 1 else \
        f"{path}.mode in [{quoted(modes)}]"
    if serving.DEFAULT_MODE in modes:
        return f"!has({path}.mode) || {test}"
    return f"has({path}.mode) && {test}"


def router_rules() -> list[tuple[str, str]]:
    return [(f"!has(self.router) || !({mode_is('self', [m.name])}) || "
             f"self.router in [{quoted(m.routers)}]", serving.router_message(m))
            for m in serving.restricted_routers() if serving.ROUTER_CHOICE]


def router_field() -> dict:
    """Offered only when some mode has a choice (the table says)."""
    if not serving.ROUTER_CHOICE:
        return {}
    offered = " ".join(f"{r}: {serving.ROUTERS[r]}." for r in serving.ALL_ROUTERS)
    defaults = "; ".join(f"{m.name}: {m.default_router}" for m in serving.MODES.values())
    return {"router": string(0, f"How requests reach the serving pods. {offered} Unset: the "
                             f"mode's default ({defaults}).",
                             enum=ROUTER)}


SERVING = obj({
    "mode": string(0, serving.mode_description(), enum=SERVING_MODE,
                   default=serving.DEFAULT_MODE),
    **router_field(),
    "hostnames": array(string(253, "A DNS name, optionally with a leading '*.' wildcard.",
                              pattern=HOSTNAME, min_length=1), 16,
                       "Host names the replica's HTTPRoute answers for (HTTPRoute "
                       "spec.hostnames); unset means any host the gateway accepts."),
    "kvConnector": string(0, f"{' or '.join(serving.KV_MODES)} only: how the KV cache moves "
                          f"from prefill to decode. {serving.DEFAULT_KV_CONNECTOR} (the "
                          "default), lmcache or mooncake; configures the routing sidecar and "
                          "the engines' environment, never their flags.",
                          enum=KV_CONNECTOR),
}, "How the replica is served.", rules=[
    (f"!has(self.kvConnector) || ({mode_is('self', serving.KV_MODES)})",
     serving.kv_connector_message()),
    *router_rules(),
])


def phases_rule(m: serving.Mode) -> tuple[str, str]:
    engines = " && ".join(f"self.engines.exists(e, has(e.phase) && e.phase == '{p}')"
                          for p in m.phases)
    return (f"!has(self.serving) || !has(self.serving.mode) || self.serving.mode != '{m.name}' || "
            f"(size(self.engines) == {len(m.phases)} && {engines})", serving.phases_message(m))


ENGINE_RULES = [
    *(phases_rule(serving.MODES[name]) for name in serving.PHASED_MODES),
    (f"(has(self.serving) && {mode_is('self.serving', serving.PHASED_MODES)}) || "
     "self.engines.all(e, !has(e.phase))", serving.phase_only_message()),
]


def engines(resolved: bool) -> dict:
    return array(engine(resolved), 8, "The engines of every replica, keyed by name.",
                 min_items=1, map_keys=["name"])


CONDITIONS_NOTE = "Crossplane adds conditions; the function sets them with reasons."


# --- which namespaces may use a cluster (issue #33, finding 9) ----------------
# A metav1.LabelSelector over Namespaces, bounded; function/contract/selectors.py
# reads it and checks these rules again.
NAMESPACE_SELECTOR = obj({
    "matchLabels": string_map(16, "Namespace labels that must all match.", value_max=63),
    "matchExpressions": array(obj({
        "key": string(317, "The Namespace label key.", pattern=QUALIFIED_NAME, min_length=1),
        "operator": string(0, "In, NotIn, Exists or DoesNotExist.",
                           enum=("LabelSelectorOperator", ["In", "NotIn", "Exists",
                                                           "DoesNotExist"])),
        "values": array(string(63), 16, "The values, for In and NotIn only."),
    }, "A label requirement, as in a Kubernetes label selector.", required=["key", "operator"],
        rules=[("(self.operator in ['In', 'NotIn']) == (has(self.values) && size(self.values) > 0)",
                "operators In and NotIn need values, Exists and DoesNotExist take none")]),
        16, "Label requirements that must all hold."),
}, "Which namespaces may place replicas and stage ModelCaches on this cluster: those whose "
   "Namespace's labels this selector matches (matchLabels and matchExpressions, as a "
   "Kubernetes label selector; every Namespace carries kubernetes.io/metadata.name). Unset, "
   "or empty, admits every namespace. The scheduler places no new replica of another "
   "namespace here, whatever its tolerations, and the composer composes nothing new for one; "
   "replicas already here when the selector narrows stay as they are (like a NoSchedule "
   "taint), and so does a cache volume one of them uses: taint the cluster NoExecute to "
   "move them.")


# --- the serving stack (issue #35) --------------------------------------------
# One optional field per component of function/contract/stack.py's table.

STACK_MODE = ("StackMode", ["Managed", "External"])
STACK_PHASE = ("StackPhase", ["Installed", "Progressing", "Failed", "Observed"])


def _managed(c: stack_table.Component | stack_table.StackGateway, at: str = "self") -> str:
    return f"has({at}.{c.field}) && {at}.{c.field}.mode == 'Managed'"


# Where and how a Managed component's controller runs: the settings a platform changes
# in a controller's chart most (a mirror, placement off the accelerator nodes, its
# size), applied by the function to the Deployment the chart renders.
def titled(title: str, schema: dict) -> dict:
    """A schema whose generated model is named `title` (gen_models: --use-title-as-name)."""
    return {"title": title, **schema}


STACK_CONTROLLER = titled("StackController", obj({
    "image": string(512, "The controller's image, for a mirror of the registry; by default "
                    "the chart's at the release's pinned version. Keep the version: the "
                    "stack's CRDs are that version's.", min_length=1,
                    pattern=r"^[^\s]+$"),
    "replicas": integer(1, 5, "Replicas of the controller's Deployment (the chart's: 1). "
                        "More than one elect a leader."),
    "nodeSelector": string_map(16, "Node labels the controller's pods require, e.g. to keep "
                               "them on system nodes, off the accelerators.", value_max=63),
    "tolerations": array(
        {**TOLERATION, "description": "Tolerates a taint of the nodes the controller may run "
                                      "on, shaped like a Kubernetes toleration."},
        16, "Tolerations of the controller's pods."),
    "resources": obj({
        "requests": resource_list("Requests"),
        "limits": resource_list("Limits"),
    }, "Compute resources of the controller's container, in place of the chart's."),
}, "Overrides of the controller the stack installs: applied to its chart's Deployment; "
   "what is left out stays as the chart renders it. Only with mode Managed."))


def stack_component(c: stack_table.Component) -> dict:
    what = ("its CRDs, then its controller from the module's chart" if c.controllers
            else "its CRDs; the platform runs its controller" if c.installable
            else "nothing in this release")
    props: dict = {"mode": string(
        0, f"Managed: the stack installs {what} (manifests rendered when this release was "
        "built from the version hack/tools pins, through provider-kubernetes Objects, never "
        "deleted by the stack). External: the platform runs it; the stack observes that "
        f"the cluster serves {c.probe} ({c.probe_version}) and installs nothing.",
        enum=STACK_MODE)}
    rules = []
    if not c.installable:
        rules.append(("self.mode == 'External'",
                      f"this release does not install {c.title} (mode Managed): run it on the "
                      "cluster and mark it External"))
    if c.controllers:
        props["controller"] = STACK_CONTROLLER
        rules.append(("!has(self.controller) || self.mode == 'Managed'",
                      "controller overrides apply to the controller the stack installs: "
                      "mode Managed"))
    if c.field == "envoyGateway":
        props["backendAPI"] = {
            "type": "boolean", "default": True,
            "description": "Whether Envoy Gateway's Backend API is on (EnvoyGateway "
                           "extensionApis.enableBackend), as a front door needs: what a "
                           "Managed install configures; for External, the platform's word."}
    needs = f" It needs {', '.join(c.requires)} in the stack too." if c.requires else ""
    return obj(props, f"{c.title} ({c.module}).{needs}", required=["mode"], rules=rules)


GATEWAY = stack_table.GATEWAY


def stack_gateway() -> dict:
    """spec.stack.gateway: not a module's component (contract/stack.py's StackGateway)."""
    return titled("StackGatewaySettings", obj({
        "mode": string(
            0, "Managed: the stack composes the Gateway spec.gateway names, and its namespace, "
            "once every other component's objects are Ready (a provider-kubernetes Object, "
            "never deleted by the stack): of class gatewayClassName, one HTTP listener admitting "
            "routes from every namespace; Ready when that class's controller Accepts it. "
            "External: the platform made it; the stack observes that it exists and is Accepted.",
            enum=STACK_MODE),
        "gatewayClassName": string(253, "The GatewayClass of the Gateway the stack composes: the "
                                   "one the cluster's gateway implementation serves (Envoy "
                                   "Gateway's quickstart names it eg). Where the stack installs "
                                   "Envoy Gateway (envoyGateway Managed) it composes this class "
                                   "too, of Envoy Gateway's controller; otherwise it is the "
                                   "platform's. Required with mode Managed.",
                                   pattern=DNS_SUBDOMAIN, min_length=1),
        "port": integer(1, 65535, "Its HTTP listener's port; default the port of "
                        f"spec.gateway.address, else {GATEWAY.default_port}. Only with mode Managed."),
    }, f"The {GATEWAY.title} spec.gateway names, where every replica's HTTPRoute attaches: the "
       "last to be installed. It needs spec.gateway and " + ", ".join(GATEWAY.requires)
       + " in the stack.", required=["mode"], rules=[
        ("self.mode == 'External' || has(self.gatewayClassName)",
         "a Managed stack.gateway needs gatewayClassName: the GatewayClass of the cluster's "
         "gateway implementation"),
        ("self.mode == 'Managed' || (!has(self.gatewayClassName) && !has(self.port))",
         "stack.gateway's gatewayClassName and port shape the Gateway the stack composes: "
         "mode Managed"),
    ]))


DRA_DRIVER = stack_table.DRA_DRIVER


def stack_dra_driver() -> dict:
    """spec.stack.draDriver: observed only (contract/stack.py's StackDraDriver)."""
    return titled("StackDraDriverSettings", obj({
        "mode": string(
            0, "External: the platform runs the DRA driver of its accelerators (for NVIDIA "
            "GPUs, NVIDIA's DRA driver for GPUs); the stack observes, with the cluster's "
            "nodes, that every DeviceClass a pool's DRA device names exists and that each "
            "such device's driver publishes devices on the pool's nodes (ResourceSlices). "
            "This release installs no DRA driver: Managed is refused.", enum=STACK_MODE),
    }, f"The {DRA_DRIVER.title} publishing the node pools' devices, observed through the "
       "inventory (spec.inventory.source Observed).", required=["mode"], rules=[
        ("self.mode == 'External'",
         "this release does not install a DRA driver (mode Managed): install your "
         "accelerators' driver on the cluster and mark it External"),
    ]))


def stack_spec() -> dict:
    rules = [(f"!has(self.{c.field}) || has(self.{r})",
              f"stack.{c.field} needs stack.{r}: {c.title} works on its API")
             for c in stack_table.COMPONENTS for r in c.requires]
    rules += [(f"!has(self.{GATEWAY.field}) || has(self.{r})",
               f"stack.{GATEWAY.field} needs stack.{r}: a Gateway is of its API")
              for r in GATEWAY.requires]
    components = {c.field: stack_component(c) for c in stack_table.COMPONENTS}
    return titled("Stack", obj({**components, DRA_DRIVER.field: stack_dra_driver(),
                                GATEWAY.field: stack_gateway()},
               "The serving stack this cluster's workloads need, per component: installed by "
               "the stack (Managed) or run by the platform and observed (External). A "
               "component left out is neither installed nor checked. Versions are the "
               "release's own (status.stack.components[].version); the scheduler places no "
               "new replica on a cluster whose stack is not ready (condition StackReady). "
               "Left out, the cluster composes nothing for a stack.", rules=rules))


def stack_spec_rules() -> list[tuple[str, str]]:
    """Rules between spec.stack and the rest of the spec."""
    managed = " || ".join([f"({_managed(c, 'self.stack')})" for c in stack_table.COMPONENTS
                           if c.installable] + [f"({_managed(GATEWAY, 'self.stack')})"])
    return [
        (f"!has(self.stack) || !has(self.stack.{GATEWAY.field}) || has(self.gateway)",
         "stack.gateway composes or observes the Gateway spec.gateway names: set "
         "spec.gateway's name and namespace"),
        (f"has(self.providerConfigRef) || !has(self.stack) || !({managed})",
         "the control-plane cluster's stack (no providerConfigRef) only observes: mark every "
         "component External"),
        ("!has(self.stack) || !has(self.providerConfigRef) || !has(self.providerConfigRef.kind) "
         "|| self.providerConfigRef.kind == 'ClusterProviderConfig'",
         "a stack reaches its cluster through a ClusterProviderConfig: the cluster-scoped "
         "InferenceCluster's Objects cannot use a namespaced ProviderConfig"),
        (f"!has(self.stack) || !has(self.stack.{DRA_DRIVER.field}) || !has(self.inventory) "
         "|| !has(self.inventory.source) || self.inventory.source == 'Observed'",
         "stack.draDriver is observed with the cluster's nodes: spec.inventory.source "
         "Observed"),
        ("!has(self.frontDoor) || !self.frontDoor.enabled || !has(self.stack) "
         "|| !has(self.stack.envoyGateway) || !has(self.stack.envoyGateway.backendAPI) "
         "|| self.stack.envoyGateway.backendAPI",
         "a front door needs Envoy Gateway's Backend API: set stack.envoyGateway.backendAPI"),
    ]


STACK_STATUS = titled("StackStatus", obj({
    "components": array(titled("StackComponentStatus", obj({
        "name": string(32, "The component: its field in spec.stack."),
        "version": string(64, "The version this release installs (Managed) or was built "
                          "against (External), from its pinned Go module; for draDriver, "
                          "the DRA API it is observed through."),
        "mode": string(0, "spec.stack.<name>.mode.", enum=STACK_MODE),
        "phase": string(0, "Installed: every object the stack composes for it is Ready. "
                        "Observed: an External component's API is served (draDriver: "
                        "the pools' DeviceClasses exist and their drivers publish). "
                        "Progressing: "
                        "not yet (objects waiting on earlier ones, or not Ready yet). "
                        "Failed: an object failed, or an External component's API is "
                        "missing; the message says what to do.", enum=STACK_PHASE),
        "reason": string(64, "Why, in one CamelCase word."),
        "message": string(512, "What was seen, and what to do."),
    }, "One component of the stack.", required=["name", "mode", "phase"])), 8,
        "Per component, in install order.", map_keys=["name"]),
}, "The serving stack (spec.stack), per component; the StackReady condition sums it up."))


# --- the XRDs -------------------------------------------------------------


def inference_cluster() -> dict:
    attribute = obj({
        "string": string(64, "A string value."),
        "int": integer(-(2**53), 2**53, "An integer value.", fmt="int64"),
        "bool": {"type": "boolean", "description": "A boolean value."},
        "version": string(64, "A semantic version (semver 2.0)."),
    }, "One attribute value: exactly one of string, int, bool, version.", rules=[
        ("[has(self.string), has(self.int), has(self.bool), has(self.version)]"
         ".filter(x, x).size() == 1",
         "an attribute sets exactly one of string, int, bool, version"),
    ])
    device = obj({
        "name": string(63, "The device's name in the pool (a DNS label).", pattern=DNS_LABEL),
        "claim": string(0, "DRA devices are claimed by pods through ResourceClaims; Synthetic "
                        "devices only constrain placement (a NIC fabric, a CPU architecture) and "
                        "are never claimed.", enum=DEVICE_CLAIM, default="DRA"),
        "driver": string(63, "The DRA driver publishing the device; attribute and capacity names "
                         "without a domain belong to it.", pattern=DNS_SUBDOMAIN, min_length=1),
        "deviceClassName": string(253, "The DeviceClass pods claim it through (DRA only).",
                                  pattern=DNS_SUBDOMAIN),
        "count": integer(1, 128, "How many such devices each node offers.", default=1),
        "attributes": {
            "type": "object", "maxProperties": 32, "additionalProperties": attribute,
            "description": "Attributes as in a DRA ResourceSlice device. CEL reads "
                           "`device.attributes[\"<driver>\"].<name>` for a name without a domain.",
            "x-kubernetes-validations": [{
                "rule": "self.all(k, size(k) <= 127 && k.matches("
                        + cel_regex(QUALIFIED_NAME) + "))",
                "message": "attribute names are letters, digits, '-', '_' and '.', optionally under a DNS domain "
                           "('dra.net/rdma')"}],
        },
        "capacity": {
            "type": "object", "maxProperties": 16,
            "additionalProperties": obj({"value": QUANTITY}, "A capacity.", required=["value"]),
            "description": "Capacities as in a DRA ResourceSlice device (`{memory: {value: 80Gi}}`).",
            "x-kubernetes-validations": [{
                "rule": "self.all(k, size(k) <= 127 && k.matches("
                        + cel_regex(QUALIFIED_NAME) + "))",
                "message": "capacity names are letters, digits, '-', '_' and '.', optionally under a DNS domain"}],
        },
    }, "A device every node of the pool offers.", required=["name", "driver"], rules=[
        ("has(self.claim) && self.claim == 'Synthetic' || has(self.deviceClassName)",
         "a DRA device needs a deviceClassName"),
    ])
    pool = obj({
        "name": string(63, "The pool's name; nodes carry it as label modelplane.ai/pool.",
                       pattern=DNS_LABEL),
        "nodes": integer(0, 100000, "Schedulable nodes now (not an autoscaler ceiling)."),
        "taints": array(taint("A taint every node of the pool carries; pods placed on the pool "
                              "tolerate it."), 8, "Node taints of the pool's nodes."),
        "devices": array(device, 16, "Devices each node offers. A CPU-only pool may publish "
                         "Synthetic devices (or none: `[]`). Left out, the devices are the "
                         "ones the cluster publishes (status.nodePools[].publishedDevices).",
                         map_keys=["name"]),
        "costPerNodeHour": string(
            cost.MAX_LENGTH, "What one node of the pool costs per hour: a decimal of at most 6 "
            "digits and 4 decimals (\"2.48\", \"0\") in one currency for the whole fleet (the "
            "scheduler compares costs, it never converts them). Among the placements a "
            "deployment's placement strategy ranks equal, within one firstAvailable priority "
            "level, the scheduler takes the cheapest: this cost times each pod's share of its "
            "node (the share of the node's devices of its scarcest kind it claims: one GPU of "
            "eight is an eighth), summed over the replica's pods. Cost never outranks the "
            "strategy: a Spread deployment spreads and a Pack one packs as without prices, "
            "and a cluster where the deployment's ModelCache is Ready comes before a cheaper "
            "one. Unset means unknown: ranked after every priced pool. \"0\" marks nodes that "
            "cost nothing more to use (owned hardware).",
            pattern=cost.PATTERN),
    }, "A group of identical nodes.", required=["name", "nodes"])
    spec = obj({
        "providerConfigRef": obj({
            "name": string(253, "The provider-kubernetes config's name.", pattern=DNS_SUBDOMAIN),
            "kind": string(0, "ClusterProviderConfig (default) or ProviderConfig.",
                           enum=("ProviderConfigKind",
                                 ["ClusterProviderConfig", "ProviderConfig"]),
                           default="ClusterProviderConfig"),
        }, "How workloads reach the cluster; absent means the control-plane cluster itself.",
            required=["name"]),
        "gateway": obj({
            "name": string(253, "The Gateway's name.", pattern=DNS_SUBDOMAIN),
            "namespace": string(63, "The Gateway's namespace.", pattern=DNS_LABEL),
            "address": string(253, "Where clients reach the gateway: a host name or IP, "
                              "optionally with scheme and port (http://llm.eu.example.com).",
                              pattern=r"^(https?://)?[A-Za-z0-9.\-\[\]:]+$"),
        }, "The cluster-edge Gateway that HTTPRoutes attach to.", required=["name", "namespace"]),
        "clusterDomain": string(253, "The cluster's DNS domain (the kubelet's "
                                "--cluster-domain); default cluster.local. A front door "
                                "treats names under it as cluster-internal.",
                                pattern=DNS_SUBDOMAIN, min_length=1),
        "frontDoor": obj({
            "enabled": {"type": "boolean", "description": "Whether ModelServices may attach "
                        "their routes to this cluster's gateway (required: a cluster is "
                        "no front door unless its platform team says so)."},
            "namespaces": array(string(63, pattern=DNS_LABEL, min_length=1), 64,
                                "The namespaces whose ModelServices may use it; default "
                                "every namespace.", rules=[
                ("self.all(x, self.exists_one(y, x == y))", "namespaces must be unique")]),
            "allowedDestinations": obj({
                "cidrs": array(with_rules(string(49, min_length=3), [
                    ("isCIDR(self)", "a CIDR, e.g. 10.127.255.1/32")]), 32,
                    "Private addresses (loopback, RFC 1918, CGNAT, ULA...) its Envoy may "
                    "send to. Keep them narrow: 10.0.0.0/8 would open the cluster's API "
                    "server's Service address too."),
                "hostnames": array(string(253, pattern=HOSTNAME,
                                          min_length=1), 32,
                                   "Cluster-internal names (one label, localhost, *.svc, "
                                   "*.cluster.local or the cluster's own domain, "
                                   "*.internal, and any name whose last label is no "
                                   "public top-level domain, such as <service>.<namespace>) "
                                   "its Envoy may send to: exact, or `*.<suffix>` for every "
                                   "name under it."),
            }, "Exceptions to the default deny of private destinations for the "
               "ModelEndpoints routed here. Link-local and metadata addresses, and the API "
               "server's names, stay refused whatever this says."),
            "healthCheck": obj({
                "interval": string(32, "How often its Envoy checks each endpoint's "
                                   "healthPath (a Gateway API Duration); default 2s. An "
                                   "endpoint failing two checks in a row leaves rotation, "
                                   "one passing check brings it back.", pattern=DURATION),
            }, "How its Envoy checks the endpoints of the routes it carries. Apart from "
               "these checks, an endpoint whose requests fail (a refused or reset "
               "connection at once, three 502, 503 or 504 answers in a row, five 5xx) "
               "leaves rotation for 5 s, longer each time, and a failed request is "
               "retried on another endpoint before any byte reaches the client."),
        }, "Whether this cluster's gateway is a front door for ModelServices, for whom, "
           "and where its Envoy may send requests.", required=["enabled"]),
        "taints": array(taint("A cluster taint that replicas must tolerate."), 16,
                        "Cluster taints."),
        "storage": obj({
            "storageClassName": string(253, "A StorageClass on the cluster that provisions "
                                       "ReadWriteMany volumes.", pattern=DNS_SUBDOMAIN,
                                       min_length=1),
        }, "Where ModelCaches live on this cluster. A cluster without it cannot host a "
           "ModelCache, so replicas that use one are not placed here.",
            required=["storageClassName"]),
        "nodePools": array(pool, 32, "Node pools, keyed by name.", map_keys=["name"]),
        "namespaceSelector": NAMESPACE_SELECTOR,
        "inventory": obj({
            "source": string(0, "Observed (default): count the nodes the cluster reports as "
                             "Ready and schedulable, never more than declared, falling back "
                             "to the declared nodes while no fresh observation exists. "
                             "Declared: count `nodePools[].nodes` as written.",
                             enum=("InventorySource", ["Observed", "Declared"]),
                             default="Observed"),
            "staleAfterSeconds": integer(30, 86400, "An observation older than this no longer "
                                         "counts: the declared nodes do, and the "
                                         "CapacityObserved condition says why.", default=300),
        }, "Where the nodes the scheduler counts come from. The control-plane cluster is "
           "read directly; a remote cluster runs the inventory reporter (composed onto it "
           "through the providerConfigRef), whose report is read back."),
        "podSecurity": obj({
            "enforce": string(0, "The Pod Security Standards level (kubernetes.io/docs/concepts/"
                              "security/pod-security-standards) every pod composed on this "
                              "cluster meets, and the `pod-security.kubernetes.io/enforce` label "
                              "of the namespaces composed on a remote cluster. restricted "
                              "(default): runAsNonRoot, seccomp RuntimeDefault, no privilege "
                              "escalation, every capability dropped; an engine image must run "
                              "as a numeric non-root USER (the upstream vllm/vllm-openai image "
                              "runs as root and is refused by the kubelet). baseline: the same "
                              "but runAsNonRoot and the capability drop, for engine images that "
                              "run as root. privileged: nothing set on engine and cache pods, "
                              "for clusters whose injected sidecars need more than baseline "
                              "(a service mesh's init container). Changing it rolls every "
                              "engine on the cluster. Tenants cannot weaken it: the pod "
                              "template has no securityContext.",
                              enum=POD_SECURITY_LEVEL, default="restricted"),
            "allowedMetadataPrefixes": array(
                string(254, "A label and annotation key prefix, ending in '/'.",
                       pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/$",
                       min_length=2), 32,
                "The pod label and annotation prefixes tenants may set on pods composed "
                "here, besides plain keys (no prefix, no dot) and app.kubernetes.io/, which "
                "they always may; every other key of a pod template is dropped with a "
                "warning. Never one that asks the cluster for what only the platform grants "
                "(AppArmor, seccomp, Multus, Istio, Linkerd, Vault, CDI, CRI-O).",
                rules=[("self.all(p, " + " && ".join(
                    f"!p.startsWith('{d}')" for d in podsecurity.DENIED_PREFIXES) + ")",
                        "a prefix that asks the cluster for what only the platform grants "
                        "(AppArmor, seccomp, Multus, Istio, Linkerd, Vault, CDI, CRI-O) "
                        "cannot be opened to tenants")]),
        }, "Pod security on this cluster: owned by the platform team that writes the "
           "InferenceCluster."),
        "monitoring": obj({
            "podMonitor": obj({
                "labels": string_map(16, "Labels on the PodMonitor: what the Prometheus that "
                                     "should scrape it selects (its podMonitorSelector).",
                                     value_max=63),
                "interval": string(5, "How often each engine is scraped.",
                                   pattern=r"^[0-9]{1,4}(s|m)$", default="30s"),
            }, "Opt in: compose a Prometheus Operator PodMonitor (monitoring.coreos.com/v1) "
               "on this cluster that scrapes `/metrics` on port `http` of every serving "
               "engine pod (label modelplane.ai/serving), in every namespace, keeping the "
               "pod's modelplane.ai/deployment label as `modelplane_ai_deployment`, which "
               "the autoscaling queries select. It lives in modelplane-system on a remote "
               "cluster and in the function's inventory namespace (crossplane-system) on "
               "the control-plane cluster; the Prometheus Operator must run there."),
        }, "Engine metrics on this cluster."),
        "stack": stack_spec(),
    }, "A workload cluster: its node pools and the devices each node offers.",
        rules=stack_spec_rules())
    pool_status = obj({
        "name": string(63, "The pool's name."),
        "nodes": integer(0, 100000, "Nodes the scheduler counts: the observed schedulable "
                         "nodes while the observation is fresh (never more than declared), "
                         "else the declared nodes."),
        "declaredNodes": integer(0, 100000, "spec.nodePools[].nodes."),
        "readyNodes": integer(0, 100000, "Observed: the pool's nodes whose Ready condition is "
                              "True."),
        "schedulableNodes": integer(0, 100000, "Observed: Ready nodes that are not cordoned "
                                    "and carry no NoSchedule or NoExecute taint beyond the "
                                    "pool's own."),
        "observedAt": string(64, "When the observation was made (RFC 3339)."),
        "usedNodes": integer(0, 10000000, "Nodes on which ModelReplicas placed on the pool "
                             "hold devices."),
        "freeNodes": integer(0, 100000, "Nodes no ModelReplica holds a device of."),
        "devices": array(obj({
            "name": string(63, "spec.nodePools[].devices[].name."),
            "perNode": integer(0, 1000000, "Devices of this kind one node offers."),
            "total": integer(0, 100000000, "perNode times the nodes counted."),
            "used": integer(0, 100000000, "Devices the pods of the ModelReplicas placed on "
                            "the pool take (and, observed, claims this project did not "
                            "compose)."),
            "free": integer(0, 100000000, "total - used, never below 0."),
            "largestFree": integer(0, 1000000, "The most free on any one node: the largest "
                                   "single pod that still fits."),
        }, "One claimable device kind of the pool, as the scheduler counts it.",
            required=["name", "perNode", "total", "used", "free", "largestFree"]), 16,
            "Devices per kind: a pod takes the devices its DRA requests got from one node, "
            "and pods of any deployment share a node while its devices last.",
            map_keys=["name"]),
        "publishedDevices": array(device, 16, "Observed: the devices every Ready node of the "
                                  "pool publishes in the cluster's DRA ResourceSlices, each with "
                                  "the first DeviceClass that selects it. The scheduler counts "
                                  "them for a pool whose spec leaves `devices` out.",
                                  map_keys=["name"]),
        "takenDevices": array(obj({
            "node": string(253, "The node's name."),
            "devices": array(obj({
                "name": string(63, "The pool's device (spec.nodePools[].devices[].name, or "
                               "publishedDevices[].name when the spec leaves them out)."),
                "count": integer(1, 128, "How many of them other claims hold on the node."),
            }, "Devices of one kind held on the node.", required=["name", "count"]), 16,
                "By name.", map_keys=["name"]),
        }, "One node the pool counts and the devices other claims hold there.",
            required=["node", "devices"]), 256,
            "Observed, while CapacityObserved is True: the devices ResourceClaims this "
            "project did not compose have allocated on the pool's counted nodes (Ready, "
            "uncordoned, repelling none of its pods), one entry per node holding any, by "
            "node name. The scheduler starts each node's device count from them. At most "
            "256 nodes per pool (those holding most) and 1024 per cluster; the "
            "CapacityObserved message says when nodes were left out.",
            map_keys=["node"]),
    }, "Capacity of one pool.")
    status = obj({
        "nodes": integer(0, 10000000, "Nodes over all pools."),
        "freeNodes": integer(0, 10000000, "Free nodes over all pools."),
        "freeDevices": string(1024, "Free of total devices per pool and kind, as "
                              "`pool: free/total kind` (what `kubectl get ic` shows)."),
        "nodePools": array(pool_status, 32, "Per-pool capacity."),
        "stack": STACK_STATUS,
    }, "Capacity and readiness. " + CONDITIONS_NOTE)
    return xrd("InferenceCluster", "inferenceclusters", "Cluster", spec, status, ["ic"], [
        col("Nodes", "integer", ".status.nodes"),
        col("Free", "integer", ".status.freeNodes"),
        col("Free devices", "string", ".status.freeDevices"),
        col("Observed", "string", ".status.conditions[?(@.type=='CapacityObserved')].status"),
        condition_col("StackReady"),
        col("Gateway", "string", ".spec.gateway.address"),
    ], description="A workload cluster, written by the platform team.")


PLACEMENT = obj({
    "strategy": string(0, "How new replicas choose among the clusters that fit them. Spread "
                       "(the default): the cluster hosting fewest of this deployment's "
                       "replicas, so losing one cluster costs least. Pack: the cluster, and "
                       "within it the pool, with the fewest free devices that still fit (and "
                       "within a pool the fullest node), which keeps large free blocks for "
                       "multi-node gangs and whole-node engines. Replicas already placed "
                       "never move for the strategy alone; under Pack, once all of this "
                       "deployment's replicas are placed, the fewest of them move off one "
                       "cluster (each only to a place on another) when that lets another "
                       "ModelDeployment's next replica, which fits on no cluster, fit there.",
                       enum=("PlacementStrategy", ["Spread", "Pack"]),
                       default="Spread"),
}, "How the scheduler places replicas across the fleet.")


# --- autoscaling (issue #17) ---------------------------------------------------
# Kthena's AutoscalingPolicy meanings and defaults (volcano-sh/kthena
# pkg/apis/workload/v1alpha1/autoscalingpolicy_types.go), carried out by a KEDA
# ScaledObject whose HPA the function configures (function/scheduler/autoscaling.py).

ENGINE_METRIC = ("EngineMetric", ["queueDepth", "kvCacheUsage", "runningRequests",
                                  "timeToFirstTokenP90"])
SELECT_POLICY = ("SelectPolicy", ["Or", "And"])
DECIMAL = r"^([0-9]+(\.[0-9]+)?|\.[0-9]+)$"
# HPA bounds: stabilizationWindowSeconds 0..3600, a policy's periodSeconds 1..1800.
MAX_STABILIZATION, MAX_PERIOD = 3600, 1800


def stable_policy(direction: str, window_default: int) -> dict:
    """The title names the generated model (ScaleUpStable, ScaleDownStable): the two differ
    in their window's default."""
    return {"title": f"Scale{direction.capitalize()}Stable", **obj({
        "windowSeconds": integer(0, MAX_STABILIZATION,
                                 f"How long a scale-{direction} recommendation must hold before "
                                 "it is acted on (Kthena's stabilizationWindow; HPA's "
                                 "stabilizationWindowSeconds).", default=window_default),
        "instances": integer(1, 1000, "At most this many replicas added or removed per 15 s "
                             "period (Kthena's instances; at least 1, as HPA requires).",
                             default=1),
        "percent": integer(1, 1000, "At most this percentage of the current replicas per 15 s "
                           "period (Kthena's percent; at least 1, as HPA requires).",
                           default=100),
        "selectPolicy": string(0, "Or: either limit allows the step (the larger one applies); "
                               "And: both must allow it (the smaller one applies).",
                               enum=SELECT_POLICY, default="Or"),
    }, f"The stable scale-{direction} policy.")}


PANIC = obj({
    "thresholdPercent": integer(110, 1000, "Panic when a metric reaches this percentage of its "
                                "target (Kthena's panicThresholdPercent).", default=200),
    "windowSeconds": integer(1, MAX_PERIOD, "How fast a surge is answered: within this window "
                             "the replicas may grow to thresholdPercent of their count "
                             "(Kthena's panic period)."),
}, "Scale up fast on a sudden surge. HPA has no panic mode: this becomes one more scale-up "
   "policy with a short window (docs/autoscaling.md).", required=["windowSeconds"])

AUTOSCALING_METRIC = {"title": "AutoscalingMetric", **obj({
    "engineMetric": string(0, "A built-in engine metric, for vLLM and SGLang alike: queueDepth "
                           "(requests waiting, per replica), runningRequests (per replica), "
                           "kvCacheUsage (mean KV cache use, 0 to 1) or timeToFirstTokenP90 "
                           "(seconds).", enum=ENGINE_METRIC),
    "query": string(4096, "A raw PromQL query; its value divided by the replica count is held "
                    "at target. Every series selector in it must carry the matcher "
                    "namespace=\"<the deployment's namespace>\" (the function parses the "
                    "query and refuses one that could read another namespace's series).",
                    min_length=1),
    "target": string(32, "The value to hold, a decimal number above 0 (Kthena's targetValue).",
                     pattern=DECIMAL),
}, "A metric and the value to hold.", required=["target"], rules=[
    ("has(self.engineMetric) != has(self.query)",
     "a metric sets exactly one of engineMetric and query"),
    # The first check only (CEL cannot parse PromQL): the function checks every selector.
    ("!has(self.query) || self.query.contains('namespace=\"')",
     "a query selects its own namespace: every series selector carries "
     "namespace=\"<the deployment's namespace>\""),
    # Guarded by the pattern: double() of a non-number is an evaluation error, not a message.
    ("!self.target.matches(" + cel_regex(DECIMAL) + ") || double(self.target) > 0.0",
     "target must be above 0"),
])}

# Where KEDA queries is the platform's (#33 finding 10): tenants name a server the
# platform defines (function/scheduler/prometheus.py); `address` stays in the schema
# only so an old manifest is refused with a reason instead of pruned in silence.
PROMETHEUS = obj({
    "server": string(63, "The Prometheus server to query, by the name the platform team gives "
                     "it in the cluster-scoped EnvironmentConfig modelplane-autoscaling "
                     "(data.prometheusServers; docs/autoscaling.md). Unset: the one named "
                     "default.", pattern=DNS_LABEL, min_length=1),
    "address": string(2048, "Refused: where KEDA, with the platform's access, sends queries is "
                      "the platform's to choose. Name one of its servers in server."),
    "authSecret": obj({
        "name": string(253, "The Secret, in the deployment's namespace.",
                       pattern=DNS_SUBDOMAIN, min_length=1),
        "key": string(253, "The key holding a bearer token.", default="token",
                      pattern=r"^[-._a-zA-Z0-9]+$"),
    }, "A bearer token of your own for the server (not with a server the platform "
       "authenticates to itself).", required=["name"]),
}, "Which of the platform's Prometheus servers the engine metrics are queried from.", rules=[
    ("!has(self.address)", "prometheus.address is the platform's to choose: name one of its "
     "Prometheus servers in prometheus.server (docs/autoscaling.md)"),
])

AUTOSCALING = obj({
    "minReplicas": integer(1, 1000, "The fewest replicas the autoscaler keeps.", default=1),
    "maxReplicas": integer(1, 1000, "The most replicas the autoscaler asks for."),
    "metrics": array(AUTOSCALING_METRIC, 8, "The metrics to scale on; the one asking for the "
                     "most replicas wins.", min_items=1),
    "tolerancePercent": integer(0, 100, "No scaling while the replicas the metrics ask for are "
                                "within this percentage of the current count (Kthena's "
                                "tolerancePercent; HPA's tolerance).", default=10),
    "behavior": obj({
        "scaleUp": obj({
            "stable": stable_policy("up", 0),
            "panic": PANIC,
        }, "How replicas are added.", rules=[
            ("!has(self.panic) || !has(self.stable) || !has(self.stable.selectPolicy) "
             "|| self.stable.selectPolicy == 'Or'",
             "scaleUp.panic needs stable.selectPolicy Or: HPA applies one selectPolicy to every "
             "scale-up policy, and And would cap the panic policy by the stable ones"),
        ]),
        "scaleDown": obj({
            "stable": stable_policy("down", 300),
        }, "How replicas are removed."),
    }, "How fast the autoscaler moves (Kthena's behavior)."),
    "prometheus": PROMETHEUS,
}, "Scale spec.replicas on engine metrics through a KEDA ScaledObject. While set, the "
   "autoscaler writes spec.replicas through the scale subresource, between minReplicas and "
   "maxReplicas; removing it removes the ScaledObject and leaves spec.replicas as it stands.",
    required=["maxReplicas", "metrics"], rules=[
    ("self.minReplicas <= self.maxReplicas", "minReplicas must not exceed maxReplicas"),
])


def model_deployment() -> dict:
    template_spec = obj({
        "clusterSelector": obj({
            "matchLabels": string_map(16, "InferenceCluster labels that must all match.",
                                      value_max=63),
        }, "Which InferenceClusters may host replicas; unset means all."),
        "tolerations": array(TOLERATION, 16, "Tolerations of InferenceCluster taints."),
        "serving": SERVING,
        "modelCacheRef": MODEL_CACHE_REF,
        "placement": PLACEMENT,
        "engines": engines(False),
    }, "What every replica runs.", required=["engines"], rules=ENGINE_RULES)
    spec = obj({
        "replicas": integer(0, 1000, "Replicas to place across the fleet (the scale subresource).",
                            default=1),
        "template": obj({
            "metadata": metadata("ModelReplica"),
            "spec": template_spec,
        }, "The replica template.", required=["spec"]),
        "autoscaling": AUTOSCALING,
    }, "A model served across the fleet.", required=["template"])
    placement = obj({
        "name": string(63, "The ModelReplica's name."),
        "index": integer(0, 1000, "The replica index."),
        "cluster": string(253, "The InferenceCluster it runs on."),
        "pools": {"type": "object", "maxProperties": 8,
                  "additionalProperties": {"type": "string", "maxLength": 63},
                  "description": "The pool of each engine, by engine name."},
        "alternatives": {"type": "object", "maxProperties": 64,
                         "additionalProperties": {"type": "string", "maxLength": 63},
                         "description": "For firstAvailable device requests: the alternative "
                                        "each got, by `<engine>/<request>`."},
        "ready": {"type": "boolean", "description": "Whether the replica is Serving."},
        "endpoint": string(2048, "The replica's serving URL."),
    }, "Where one replica runs.")
    status = obj({
        "replicas": obj({
            "desired": integer(0, 1000, "spec.replicas."),
            "scheduled": integer(0, 1000, "Replicas placed on a cluster."),
            "ready": integer(0, 1000, "Replicas Serving."),
        }, "Replica counts."),
        "labelSelector": string(1024, "Selects this deployment's ModelReplicas (for the scale "
                                "subresource)."),
        "placements": array(placement, 1000, "One entry per placed replica."),
        "unscheduled": array(obj({
            "index": integer(0, 1000, "The replica index."),
            "reason": string(4096, "Why no cluster fits, per cluster, as kube-scheduler says it."),
            "clusters": array(obj({
                "name": string(253, "The InferenceCluster."),
                "reason": string(1024, "Why it cannot take the replica."),
            }, "One cluster's verdict."), 100,
                "What each cluster said, by name (the first 100; the reason counts them all)."),
        }, "A replica that could not be placed."), 1000, "Replicas without a cluster, with reasons."),
        "draining": array(string(253, "A ModelReplica's name."), 1000,
                          "ModelReplicas leaving the placement, kept while a ModelService "
                          "still routes to them. Written by the function; a replica's "
                          "composition checks that its deployment names it here or among "
                          "the placements."),
        "selectorsOverBudget": array(obj({
            "selector": string(64, "The selector's SHA-256, in hex."),
            "reason": string(512, "How its evaluation exceeded the budget."),
        }, "A device selector whose evaluation ran past its budget."), 16,
            "Device selectors of the spec whose evaluation ran past the function's budget "
            "(computing time or memory): refused without being evaluated again until they "
            "leave the spec. Written by the function."),
    }, "Placement and readiness. " + CONDITIONS_NOTE)
    return xrd("ModelDeployment", "modeldeployments", "Namespaced", spec, status, ["md"], [
        col("Desired", "integer", ".spec.replicas"),
        col("Scheduled", "integer", ".status.replicas.scheduled"),
        col("Ready", "integer", ".status.replicas.ready"),
    ], description="An ML team's model: engines, devices and replicas across the fleet.",
        scale={"specReplicasPath": ".spec.replicas",
               "statusReplicasPath": ".status.replicas.scheduled",
               "labelSelectorPath": ".status.labelSelector"})


def model_replica() -> dict:
    spec = obj({
        "clusterName": string(253, "The InferenceCluster this replica runs on.",
                              pattern=DNS_SUBDOMAIN, min_length=1),
        "serving": SERVING,
        "modelCacheRef": MODEL_CACHE_REF,
        "engines": engines(True),
    }, "One placed replica: the deployment's engines with their pools resolved.",
        required=["clusterName", "engines"], rules=ENGINE_RULES)
    status = obj({
        "phase": string(0, "Pending: nothing observed yet. Loading: created, not every pod "
                        "ready. Serving: every workload Available and the route accepted. "
                        "Failed: a workload reports failure.",
                        enum=("ReplicaPhase", ["Pending", "Loading", "Serving", "Failed"])),
        "endpoint": string(2048, "The serving URL on the cluster gateway."),
    }, "Serving state. " + CONDITIONS_NOTE)
    return xrd("ModelReplica", "modelreplicas", "Namespaced", spec, status, ["mr"], [
        col("Cluster", "string", ".spec.clusterName"),
        col("Phase", "string", ".status.phase"),
        col("Endpoint", "string", ".status.endpoint"),
    ], description="One replica of a ModelDeployment, placed on one cluster by the scheduler; "
                   "one written by hand composes nothing (docs/security.md).")


HF_REPO = r"^[A-Za-z0-9][-A-Za-z0-9_.]*(/[A-Za-z0-9][-A-Za-z0-9_.]*)?$"
URI_SCHEMES = ("s3", "gs", "hf", "oci")
URI = "^(" + "|".join(URI_SCHEMES) + r")://[^\s]+$"


def hugging_face(*, adapter: bool) -> dict:
    props = {
        "repo": string(96, "The Hugging Face repository (`Qwen/Qwen3-8B`).", pattern=HF_REPO,
                       min_length=1),
        "revision": string(255, "A branch, tag or commit. A branch is resolved to its commit "
                           "when a cluster starts hydrating and that commit is kept for "
                           "resumes; a commit pins every cluster to the same weights.",
                           default="main"),
    }
    if adapter:
        return obj(props, "A LoRA adapter on the Hugging Face Hub (the cache's auth Secret "
                   "is used).", required=["repo"])
    props["authSecret"] = obj({
        "name": string(253, "The Secret, in the cache's namespace.", pattern=DNS_SUBDOMAIN,
                       min_length=1),
        "key": string(253, "The key holding the token.", default="HF_TOKEN", min_length=1),
    }, "A Secret with a Hugging Face token, for gated or private repositories. Never copied: "
       "it must exist under this name in the cache's namespace on every cluster that stages "
       "the cache (synced by the platform); the cache observes it there.", required=["name"])
    props["sizeGiB"] = integer(1, 1048576, "The volume's size in GiB; the model (and its "
                               "adapters) must fit, or hydration fails and says so.")
    props["allowPatterns"] = array(string(256, min_length=1), 32,
                                   "Only files matching one of these glob patterns are staged "
                                   "(`*.safetensors`, `config.json`).")
    props["ignorePatterns"] = array(string(256, min_length=1), 32,
                                    "Files matching one of these glob patterns are skipped "
                                    "(`original/*`).")
    props["filename"] = string(255, "Stage this one file only (a GGUF model, say).",
                               min_length=1)
    return obj(props, "A model on the Hugging Face Hub.", required=["repo", "sizeGiB"], rules=[
        ("!has(self.filename) || (!has(self.allowPatterns) && !has(self.ignorePatterns))",
         "filename stages one file: it excludes allowPatterns and ignorePatterns"),
    ])


def model_uri(*, adapter: bool) -> dict:
    props = {
        "url": string(2048, "`s3://bucket/path`, `gs://bucket/path`, `hf://org/repo[:revision]` "
                      "or `oci://registry/repository:tag` (a model image whose files are "
                      "under /models).", pattern=URI, min_length=1),
    }
    if adapter:
        return obj(props, "A LoRA adapter at a URI (the cache's auth Secret is used).",
                   required=["url"])
    props["authSecret"] = obj({
        "name": string(253, "The Secret, in the cache's namespace.", pattern=DNS_SUBDOMAIN,
                       min_length=1),
    }, "A Secret whose every key becomes an environment variable of the downloader "
       "(`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `HF_TOKEN`...). Never copied: it must "
       "exist under this name in the cache's namespace on every cluster that stages the cache "
       "(synced by the platform); the cache observes it there.", required=["name"])
    props["sizeGiB"] = integer(1, 1048576, "The volume's size in GiB; the model (and its "
                               "adapters) must fit, or hydration fails and says so.")
    return obj(props, "A model at a URI.", required=["url", "sizeGiB"])


def model_cache() -> dict:
    source_rules = [
        ("self.source != 'HuggingFace' || (has(self.huggingFace) && !has(self.uri))",
         "source HuggingFace needs spec.huggingFace, and no spec.uri"),
        ("self.source != 'URI' || (has(self.uri) && !has(self.huggingFace))",
         "source URI needs spec.uri, and no spec.huggingFace"),
    ]
    adapter = obj({
        "name": string(63, "The adapter's name (a DNS label); it is staged under "
                       "`<mountPath>/adapters/<name>`.", pattern=DNS_LABEL),
        "huggingFace": hugging_face(adapter=True),
        "uri": model_uri(adapter=True),
    }, "A LoRA adapter staged beside the base model.", required=["name"], rules=[
        ("has(self.huggingFace) != has(self.uri)",
         "an adapter sets exactly one of huggingFace and uri"),
    ])
    spec = obj({
        "source": string(0, "Where the weights come from.", enum=MODEL_SOURCE),
        "huggingFace": hugging_face(adapter=False),
        "uri": model_uri(adapter=False),
        "adapters": array(adapter, 16, "LoRA adapters staged beside the base model.",
                          map_keys=["name"]),
        "clusterSelector": obj({
            "matchLabels": string_map(16, "InferenceCluster labels that must all match.",
                                      value_max=63),
        }, "The cache's footprint: which InferenceClusters may stage it; unset means all. "
           "Only clusters with spec.storage can."),
        "hydration": string(0, "Eager stages the weights on every cluster of the footprint "
                            "now; OnDemand only on clusters hosting a replica that uses the "
                            "cache, when the scheduler places it there.", enum=HYDRATION,
                            default="Eager"),
    }, "Model weights staged once per cluster on a ReadWriteMany volume.", required=["source"],
        rules=source_rules)
    cluster_status = obj({
        "name": string(253, "The InferenceCluster."),
        "phase": string(0, "Pending: the volume or the Secret is not there yet. Hydrating: the "
                        "download runs. Ready: the weights are complete. Failed: the download "
                        "gave up; reason and message say why.", enum=CACHE_PHASE),
        "reason": string(128, "Why, in one word."),
        "message": string(1024, "Why, for a person."),
        "claimName": string(63, "The PersistentVolumeClaim on that cluster, in the cache's "
                            "namespace."),
    }, "The cache on one cluster.")
    status = obj({
        "clusters": array(cluster_status, 1000, "One entry per cluster that stages the cache."),
        "readyClusters": integer(0, 1000, "Clusters where the cache is Ready."),
        "summary": string(64, "`<ready>/<clusters> Ready`."),
    }, "Hydration per cluster. " + CONDITIONS_NOTE)
    return xrd("ModelCache", "modelcaches", "Namespaced", spec, status, ["mc"], [
        col("Source", "string", ".spec.source"),
        col("Hydration", "string", ".spec.hydration"),
        col("Ready", "string", ".status.summary"),
    ], description="Model weights staged once per cluster, mounted read-only by the replicas "
                   "of every ModelDeployment that names it.")


def inference_quota() -> dict:
    limit = obj({
        "name": string(63, "The limit's name (a DNS label), as reasons and status name it.",
                       pattern=DNS_LABEL),
        "devices": integer(0, 1000000, "At most this many devices matching the selectors, "
                           "summed over every replica of the selected namespaces (count x "
                           "pods x copies)."),
        "selectors": array(SELECTOR, 8, "CEL selectors over the device, as a device request's "
                           "(ANDed); none counts every claimed device."),
    }, "A cap on the devices of one kind.", required=["name", "devices"])
    spec = obj({
        "default": {"type": "boolean", "description": "The default quota: it caps every "
                    "namespace that no other InferenceQuota selects, each namespace on its "
                    "own (each may hold what the limits say), so a tenant the platform has "
                    "not written a quota for is capped too. It selects no namespace itself: "
                    "set it without namespaces and namespaceSelector."},
        "namespaces": array(string(63, pattern=DNS_LABEL, min_length=1), 64,
                            "The namespaces this quota caps, by name."),
        "namespaceSelector": obj({
            "matchLabels": string_map(16, "Namespace labels that must all match.", value_max=63),
        }, "The namespaces this quota caps, by their labels."),
        "limits": array(limit, 16, "The device caps; each applies on its own.", min_items=1,
                        map_keys=["name"]),
        "maxReplicas": integer(0, 1000000, "At most this many ModelReplicas in the selected "
                               "namespaces together, across the fleet, whatever devices they "
                               "claim (none, Synthetic or DRA)."),
        "maxPods": integer(0, 10000000, "At most this many engine pods in the selected "
                           "namespaces together, across the fleet: per replica, every engine's "
                           "copies times its pods per copy (1, or 1 + worker.nodes for a "
                           "gang). The routing pods a replica adds (the endpoint picker) are "
                           "not counted."),
    }, "What the selected namespaces may hold across the fleet: devices per limit, "
       "replicas and pods. Every quota that selects a namespace applies to it.", rules=[
        ("(has(self.default) && self.default) != "
         "(has(self.namespaces) || has(self.namespaceSelector))", QUOTA_SELECTS),
        ("has(self.limits) || has(self.maxReplicas) || has(self.maxPods)",
         "a quota caps something: set limits, maxReplicas or maxPods"),
    ])
    status = obj({
        "limits": array(obj({
            "name": string(63, "The limit."),
            "used": integer(0, 100000000, "Devices the selected namespaces hold now."),
            "devices": integer(0, 1000000, "The limit."),
        }, "One limit's use."), 16, "Use per limit."),
        "replicas": integer(0, 100000000, "ModelReplicas the selected namespaces hold now "
                            "(reported when spec.maxReplicas is set)."),
        "pods": integer(0, 100000000, "Engine pods of those replicas (reported when "
                        "spec.maxPods is set)."),
        "summary": string(256, "`<limit>: <used>/<devices>`, then `replicas: <used>/<max>` "
                          "and `pods: <used>/<max>`, comma separated."),
    }, "Use per limit, replicas and pods. " + CONDITIONS_NOTE)
    return xrd("InferenceQuota", "inferencequotas", "Cluster", spec, status, ["iq"], [
        col("Limits", "string", ".status.summary"),
    ], description="Devices, replicas and pods a set of namespaces may hold across the "
                   "fleet, written by the platform team.")


# --- ModelEndpoint and ModelService: one URL for a model across the fleet ----

# Gateway API's Duration (GEP-2257): what HTTPRoute timeouts and Envoy Gateway's
# retry back-off accept.
DURATION = r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"
# An HTTP header name (RFC 7230 token), as Gateway API's HTTPHeaderName.
HEADER_NAME = r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$"
# A header value, or a model name (matched as the X-Gateway-Model-Name header's
# value): printable ASCII, no leading or trailing space. No control character (a
# line break would end the header and start another), nothing outside ASCII
# (look-alike names), nothing a hop trims (such a value would never match).
HEADER_VALUE = r"^[!-~]([ -~]*[!-~])?$"
PRINTABLE_NOTE = " Printable ASCII, no leading or trailing space."
# http(s)://host[:port][/path], no userinfo, query or fragment. The host is a
# DNS name or an IPv4 address; the function checks the same (contract/endpoints.py).
ENDPOINT_URL = (r"^https?://[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?"
                r"(/[^?#\s]*)?$")
# A JWKS the front door's Envoy fetches: an endpoint URL, https only (Envoy Gateway
# verifies it against the system CAs); at most 253 characters, as Envoy Gateway's CRD.
JWKS_URI = "^https" + ENDPOINT_URL[len("^https?"):]
MAX_JWT_PROVIDERS = 4
MAX_CLAIM_HEADERS = 8
REWRITE_PATH = r"^/[^?#\s]*$"
SERVICE_ROLE = ("ServiceRole", ["Primary", "Fallback"])
RULE_PATH_TYPE = ("RulePathType", ["PathPrefix", "Exact"])
RULE_HEADER_TYPE = ("RuleHeaderType", ["Exact", "RegularExpression"])
# A path under the service's prefix: segments of Gateway API's path characters,
# none starting with '.' (so no `.` or `..` segment), no trailing '/', no '%'
# (so no encoded '/'): what an HTTPRoute accepts once the prefix is in front.
RULE_PATH = r"^(/[-A-Za-z0-9_~!$&'()*+,;=:@][-A-Za-z0-9._~!$&'()*+,;=:@]*)+$"
MODEL_HEADER = "X-Gateway-Model-Name"  # function/composer/modelservice/objects.py
# An HTTPRoute holds 16 rules: one per rule match, and one for the service's own entries.
MAX_RULE_MATCHES = 15
SERVICE_ACTIVE = ("ServiceActive", ["Primary", "Fallback", "None"])


def header_not_reserved(field: str, allow: tuple[str, ...] = ()) -> tuple[str, str]:
    """A CEL rule on a header name field: none of destinations.RESERVED_HEADERS
    (but `allow`) nor a name under RESERVED_PREFIXES."""
    names = ", ".join(f"'{n}'" for n in sorted(destinations.RESERVED_HEADERS - set(allow)))
    prefixes = " || ".join(f"{field}.lowerAscii().startsWith('{p}')"
                           for p in destinations.RESERVED_PREFIXES)
    return (f"!({field}.lowerAscii() in [{names}] || {prefixes})",
            f"the header is reserved ({destinations.reserved_text()}): hop-by-hop headers "
            "are Envoy's, a replica is reached with spec.replica and a credential comes from "
            "a Secret (spec.auth)")


def url_rules(field: str = "spec.url") -> list[tuple[str, str]]:
    """What CEL can refuse of an endpoint URL's host (or of another URL the front door's
    Envoy fetches, named `field` in the messages) whatever an admin allows
    (destinations.NEVER), with the Kubernetes IP and CIDR libraries (in CRD rules
    since Kubernetes 1.31). The host is cut out with indexOf, substring and find,
    whose results the API server's cost estimate bounds by the URL's maxLength
    (url().getHostname()'s result it does not bound, so a rule using it is refused
    as too costly)."""
    host = "self.substring(self.indexOf('://') + 3).find('^[^:/]*').lowerAscii()"
    nets = " || ".join(f"cidr('{n}').containsIP({host})"
                       for n in ("0.0.0.0/8", "169.254.0.0/16", "224.0.0.0/3"))
    names = ", ".join(f"'{n}'" for n in destinations.NEVER_NAMES)
    prefix = destinations.NEVER_PREFIX
    return [
        (f"!isIP({host}) || !({nets})",
         f"{field} may not name a link-local (metadata service), unspecified, multicast or "
         "reserved address"),
        (f"isIP({host}) || !{host}.matches('(^|[.])([0-9]+|0x[0-9a-f]*)$')",
         "a host whose last label is numeric is read as an IPv4 number: write the address as "
         "four decimal octets"),
        (f"!({host} in [{names}] || {host} == '{prefix}' || {host}.startsWith('{prefix}.'))",
         f"{field} may not name the cluster's API server or a metadata service"),
    ]


def jwt_authentication() -> dict:
    """spec.authentication.jwt: Envoy Gateway's SecurityPolicy `jwt`, remote JWKS only."""
    claim = obj({
        "claim": string(253, "The claim (`sub`; a nested one as `org.team`); a string, "
                        "number or boolean." + PRINTABLE_NOTE, pattern=HEADER_VALUE,
                        min_length=1),
        "header": with_rules(string(256, "The request header it is copied to; not a reserved "
                                    "one.", pattern=HEADER_NAME, min_length=1),
                             [header_not_reserved("self")]),
    }, "A claim of a verified token, copied into a request header for the backends.",
        required=["claim", "header"])
    provider = obj({
        "name": string(63, "The provider's name, unique in the list.", pattern=DNS_LABEL,
                       min_length=1),
        "issuer": string(253, "The `iss` a token must carry (a URL or an email address). "
                         "Issuer, audiences or both must be set." + PRINTABLE_NOTE,
                         pattern=HEADER_VALUE, min_length=1),
        "audiences": array(string(253, min_length=1, pattern=HEADER_VALUE), 8,
                           "The `aud` values accepted (one is enough). Issuer, audiences or "
                           "both must be set."),
        "remoteJWKS": obj({
            "uri": with_rules(string(
                253, "Where the front door's Envoy fetches the signing keys: an `https://` URL "
                "verified against the system CAs. The same destinations as a ModelEndpoint's "
                "URL: never a link-local, metadata, unspecified or multicast address, nor the "
                "API server's names; a private address or a cluster-internal name only where "
                "the front door's InferenceCluster allows it "
                "(spec.frontDoor.allowedDestinations).", pattern=JWKS_URI, min_length=9),
                url_rules("remoteJWKS.uri")),
        }, "The provider's JSON Web Key Set.", required=["uri"]),
        "claimToHeaders": array(claim, MAX_CLAIM_HEADERS, "Claims copied into request "
                                "headers, for backends that need to know who called.",
                                rules=[("self.all(c, self.exists_one(o, o.header.lowerAscii() "
                                        "== c.header.lowerAscii()))",
                                        "claimToHeaders headers must be unique, whatever "
                                        "their case")]),
    }, "An identity provider whose tokens are accepted.", required=["name", "remoteJWKS"],
        rules=[("has(self.issuer) || (has(self.audiences) && size(self.audiences) > 0)",
                "a provider accepts the tokens of its issuer or for its audiences: set "
                "issuer, audiences or both, or any token its identity provider signs, for "
                "anyone, passes")])
    return obj({
        "providers": array(provider, MAX_JWT_PROVIDERS, "The identity providers; a token "
                           "any one of them verifies is accepted.", min_items=1,
                           map_keys=["name"]),
    }, "JWTs: a client sends `Authorization: Bearer <token>`; a request without a token "
       "one provider verifies (signature, expiry, issuer and audiences) is answered 401. The "
       "token goes no further than the front door: the route removes Authorization on its "
       "way to every endpoint (one with spec.auth gets its own credential instead).",
        required=["providers"])


def model_endpoint() -> dict:
    header = obj({
        "name": with_rules(string(256, "The header's name (an HTTP token); not a reserved "
                                  "one.", pattern=HEADER_NAME, min_length=1),
                           [header_not_reserved("self")]),
        "value": string(4096, "Its value. Not for secrets: it is stored in the route (use "
                        "spec.auth). Empty, or printable ASCII with no leading or trailing "
                        "space.", pattern="^(" + HEADER_VALUE[1:-1] + ")?$"),
    }, "A header the gateway sets on requests it sends to this endpoint.",
        required=["name", "value"])
    spec = obj({
        "url": with_rules(string(
            2048, "Where the endpoint answers: `http://` or `https://`, a host, an "
            "optional port and path; no query or fragment. "
            "An https endpoint is reached over TLS verified against the system "
            "CAs, with the host as SNI. Never a link-local, metadata, unspecified or "
            "multicast address, nor the API server's names; a private address (loopback, "
            "RFC 1918, CGNAT, ULA) or a cluster-internal name (one label, localhost, *.svc, "
            "*.cluster.local, *.internal) only where the front door's InferenceCluster "
            "allows it (spec.frontDoor.allowedDestinations), or a replica's at one of the "
            "fleet's gateways.", pattern=ENDPOINT_URL, min_length=8), url_rules()),
        "rewritePath": string(1024, "The path prefix that replaces the ModelService's own "
                              "prefix (`/<namespace>/<name>`) on requests sent here; default "
                              "the URL's path, or `/` when it has none.",
                              pattern=REWRITE_PATH),
        "requestHeaders": array(header, 8, "Headers the gateway sets on requests it sends to "
                                "this endpoint. Reserved, and refused: hop-by-hop headers, "
                                "Host, Authorization, `Proxy-*`, `x-modelplane-*`, "
                                "`x-envoy-*`.",
                                map_keys=["name"], rules=[
            ("self.all(h, self.exists_one(o, o.name.lowerAscii() == h.name.lowerAscii()))",
             "requestHeaders names must be unique, whatever their case")]),
        "replica": string(253, "The ModelReplica of this endpoint's namespace it reaches "
                          "through its cluster's gateway (the scheduler sets it): the route "
                          "sends the Host `<replica>.<namespace>.replica.modelplane.internal`, "
                          "which selects that replica there whatever the path, and the URL may "
                          "be one of the fleet's gateways however private its address. An "
                          "endpoint at a fleet gateway must name its replica.",
                          pattern=DNS_SUBDOMAIN, min_length=1),
        "healthPath": string(1024, "The path the front door's Envoy checks on this endpoint "
                             "(an HTTP GET answered 200 is healthy; the Host is the one it "
                             "sends requests with), at the interval its InferenceCluster "
                             "sets (spec.frontDoor.healthCheck). A replica's endpoint has "
                             "its engine's, `/health`. Without it the endpoint is judged "
                             "by its answers alone (outlier detection), as is every "
                             "endpoint of a route rule whose endpoints do not share one "
                             "health path.", pattern=REWRITE_PATH),
        "auth": obj({
            "secretRef": obj({
                "name": string(253, "A Secret of the endpoint's namespace whose key "
                               "`credential` holds the whole header value (`Bearer sk-...`).",
                               pattern=DNS_SUBDOMAIN, min_length=1),
            }, "The Secret Envoy Gateway reads the credential from (the function never "
               "reads it). On a remote front door the Secret must exist in the same "
               "namespace there.", required=["name"]),
            "header": with_rules(string(256, "The header the credential is set in; default "
                                        "Authorization. It replaces any the client sent.",
                                        pattern=HEADER_NAME, min_length=1),
                                 [header_not_reserved("self", allow=("authorization",))]),
        }, "The credential the gateway adds to requests it sends here, from a Secret: an "
           "Envoy Gateway HTTPRouteFilter's credentialInjection on this endpoint's "
           "backendRef only.", required=["secretRef"]),
    }, "One reachable, OpenAI-compatible backend: a replica's gateway or an external "
       "provider.", required=["url"], rules=[
        ("!has(self.replica) || (has(self.rewritePath) ? self.rewritePath == '/' : "
         "(!isURL(self.url) || url(self.url).getEscapedPath() in ['', '/']))",
         "a replica's endpoint reaches it at its cluster gateway's root: rewritePath '/'"),
        ("!has(self.auth) || !has(self.requestHeaders) || !self.requestHeaders.exists(h, "
         "h.name.lowerAscii() == (has(self.auth.header) ? self.auth.header : "
         "'Authorization').lowerAscii())",
         "the credential's header (spec.auth.header) is set from the Secret only, not in "
         "requestHeaders")])
    status = obj({}, "Whether the endpoint is usable. " + CONDITIONS_NOTE)
    return xrd("ModelEndpoint", "modelendpoints", "Namespaced", spec, status, ["me"], [
        col("URL", "string", ".spec.url"),
        condition_col("Valid"), condition_col("Ready"), AGE,
    ], description="One reachable backend for a model, selected by ModelServices by its "
                   "labels.")


SERVICE_ENTRY = {"title": "ServiceEntry", **obj({
    "weight": integer(0, 1000, "The entry's share of traffic, spread evenly over the "
                      "ModelEndpoints it selects, however many they are.", default=1),
    "selector": obj({
        "matchLabels": {**string_map(8, "ModelEndpoint labels that must all match.",
                                     value_max=63), "minProperties": 1},
    }, "Which ModelEndpoints of the ModelService's namespace this entry spreads over.",
        required=["matchLabels"]),
}, "A weighted set of ModelEndpoints.", required=["selector"])}


def entries_rule(what: str) -> tuple[str, str]:
    return ("self.exists(e, !has(e.weight) || e.weight > 0)",
            f"at least one {what} entry needs a weight above 0")


def service_rule() -> dict:
    header = obj({
        "name": with_rules(string(256, "The header's name (an HTTP token), matched whatever "
                                  "its case; not a reserved one.", pattern=HEADER_NAME,
                                  min_length=1), [header_not_reserved("self")]),
        "type": string(0, "Exact (default) or RegularExpression (RE2, Envoy's dialect, the "
                       "whole value).", enum=RULE_HEADER_TYPE, default="Exact"),
        "value": string(1024, "The value, or the regular expression." + PRINTABLE_NOTE,
                        min_length=1, pattern=HEADER_VALUE),
    }, "A request header the rule requires.", required=["name", "value"])
    match = obj({
        "path": obj({
            "type": string(0, "PathPrefix (default: the path and everything below it) or "
                           "Exact.", enum=RULE_PATH_TYPE, default="PathPrefix"),
            "value": string(512, "A path under the service's address, e.g. "
                            "`/v1/chat/completions` for `<address>/v1/chat/completions`.",
                            pattern=RULE_PATH, min_length=2),
        }, "The request path under the service's prefix `/<namespace>/<name>`; default "
           "any.", required=["value"]),
        "headers": array(header, 8, "Headers that must all match.", min_items=1, rules=[
            ("self.all(h, self.exists_one(o, o.name.lowerAscii() == h.name.lowerAscii()))",
             "a match names each header once, whatever its case")]),
    }, "A request the rule takes: the path AND every header.", rules=[
        ("has(self.path) || has(self.headers)",
         "a match needs a path or headers (a match of neither takes every request)")])
    return obj({
        "name": string(63, "The rule's name, unique in the service.", pattern=DNS_LABEL,
                       min_length=1),
        "matches": array(match, 8, "The requests the rule takes: any of these matches.",
                         min_items=1),
        "endpoints": array(copy.deepcopy(SERVICE_ENTRY), 4, "The rule's primary entries.",
                           min_items=1, rules=[entries_rule("primary")]),
        "fallback": array(copy.deepcopy(SERVICE_ENTRY), 4, "The rule's entries used only "
                          "while none of its primary entries has a valid ModelEndpoint. "
                          "Without a serving entry the rule's requests answer 500: they "
                          "never fall through to a later rule or the service's own entries "
                          "(list those here to fail over to them)."),
    }, "Requests matching this rule, and no earlier one, go to its own entries.",
        required=["name", "matches", "endpoints"])


def model_service() -> dict:
    spec = obj({
        "endpoints": array(copy.deepcopy(SERVICE_ENTRY), 16, "The primary entries: requests "
                           "no rule matches.", min_items=1, rules=[entries_rule("primary")]),
        "fallback": array(copy.deepcopy(SERVICE_ENTRY), 16, "Entries used only while no primary "
                          "entry has a valid ModelEndpoint."),
        "rules": array(service_rule(), 8, "Ordered rules, Kthena ModelRoute's: a request goes "
                       "to the first rule it matches, else to `endpoints` (and `fallback`). "
                       "Gateway API ranks matches by specificity (an Exact path, then the "
                       "longest path prefix, then the most headers; Envoy Gateway then the "
                       "most Exact headers) and keeps list order only among equals, so a later rule "
                       "that can take an earlier rule's "
                       "requests and is more specific is refused (`Routed=False`, "
                       "`RuleConflict`): put it first, or make the two disjoint (one header "
                       "with different Exact values).", rules=[
            ("self.all(x, self.exists_one(y, y.name == x.name))", "rule names must be unique"),
            (f"self.map(r, size(r.matches)).sum() <= {MAX_RULE_MATCHES}",
             f"the rules hold at most {MAX_RULE_MATCHES} matches in all (one HTTPRoute holds "
             "16 rules: one per match and one for the service's own entries)")]),
        "modelName": string(253, "The request's `model` this service answers to, matched on "
                            "the `X-Gateway-Model-Name` header that the Gateway API Inference "
                            "Extension's body-based router sets from the request body. Leave "
                            "unset without that router: every request under the address "
                            "matches." + PRINTABLE_NOTE, min_length=1, pattern=HEADER_VALUE),
        "loraAdapters": array(string(253, min_length=1, pattern=HEADER_VALUE), 16,
                              "More `model` names (LoRA adapters) this service answers to, "
                              "matched like modelName." + PRINTABLE_NOTE,
                              rules=[("self.all(x, self.exists_one(y, x == y))",
                                      "loraAdapters must be unique")]),
        "timeout": string(32, "The request timeout (a Gateway API Duration, `30s`, `5m`); "
                          "default none, so token streams are never cut.", pattern=DURATION),
        "retry": obj({
            "attempts": integer(1, 5, "How many times a failed request is retried."),
            "interval": string(32, "The back-off's base interval (a Gateway API Duration).",
                               pattern=DURATION),
        }, "Retries, by an Envoy Gateway BackendTrafficPolicy on the route.",
            required=["attempts"]),
        "gateway": obj({
            "clusterName": string(253, "The InferenceCluster whose spec.gateway the route "
                                  "attaches to.", pattern=DNS_SUBDOMAIN, min_length=1),
        }, "Which gateway fronts the service; default the one InferenceCluster labelled "
           "`modelplane.ai/front-door: \"true\"`. Either way the cluster must be admitted as "
           "a front door for this namespace (its spec.frontDoor)."),
        "authentication": obj({
            "jwt": jwt_authentication(),
            "apiKeys": obj({
                "secretRef": obj({
                    "name": string(253, "A Secret of the service's namespace: each key a "
                                   "client's name, each value its API key.",
                                   pattern=DNS_SUBDOMAIN, min_length=1),
                }, "Where the keys are (Envoy Gateway reads them; the function never does). "
                   "On a remote front door the Secret must exist in the same namespace "
                   "there.", required=["name"]),
            }, "API keys: a client sends `Authorization: Bearer <key>` (what OpenAI "
               "clients send); a request without a known key is answered 401, and the key "
               "is removed before the request goes on.", required=["secretRef"]),
        }, "Who may call the service: an Envoy Gateway SecurityPolicy on its route, with "
           "API keys or JWTs (one of them). Without it the service answers anyone who "
           "reaches the front door.", rules=[
            ("has(self.apiKeys) != has(self.jwt)",
             "set apiKeys or jwt, not both: clients send either in the Authorization header, "
             "and Envoy Gateway requires every method a SecurityPolicy sets to pass")]),
    }, "One OpenAI-compatible URL over weighted sets of ModelEndpoints.",
        required=["endpoints"],
        rules=[("!has(self.loraAdapters) || has(self.modelName)",
                "loraAdapters need modelName"),
               ("!has(self.modelName) || !has(self.rules) || self.rules.all(r, r.matches.all("
                "m, !has(m.headers) || m.headers.all(h, h.name.lowerAscii() != "
                f"'{MODEL_HEADER.lower()}' || ((!has(h.type) || h.type == 'Exact') && "
                "(h.value == self.modelName || (has(self.loraAdapters) && "
                "h.value in self.loraAdapters))))))",
                f"a rule matching {MODEL_HEADER} names modelName or one of loraAdapters "
                "exactly: the service answers only to those")])
    entry_status = obj({
        "role": string(0, "Primary or Fallback.", enum=SERVICE_ROLE),
        "index": integer(0, 15, "The entry's index in its endpoints or fallback list."),
        "weight": integer(0, 1000, "The entry's weight."),
        "endpoints": array(string(253), 1000, "The valid ModelEndpoints it selects now."),
    }, "One entry and the endpoints behind it.")
    rule_status = obj({
        "name": string(63, "The rule's name."),
        "active": string(0, "Which of its entries take its traffic now.", enum=SERVICE_ACTIVE),
        "entries": array(copy.deepcopy(entry_status), 8, "Its entries, primaries first."),
    }, "One rule and the endpoints behind it.")
    status = obj({
        "address": string(2048, "The service's URL: `<front-door address>/<namespace>/<name>`; "
                          "an OpenAI client uses `<address>/v1`."),
        "active": string(0, "Which entries take traffic now.", enum=SERVICE_ACTIVE),
        "entries": array(entry_status, 32, "Every entry, primaries first."),
        "rules": array(rule_status, 8, "Every rule, in order."),
    }, "Where the service answers and what is behind it. " + CONDITIONS_NOTE)
    return xrd("ModelService", "modelservices", "Namespaced", spec, status, ["ms"], [
        col("Address", "string", ".status.address"),
        col("Active", "string", ".status.active"),
        condition_col("Routed"), AGE,
    ], description="One URL for a model across the fleet: a weighted route over "
                   "ModelEndpoints, with fallbacks and ordered rules.")


def col(name: str, typ: str, path: str) -> dict:
    return {"name": name, "type": typ, "jsonPath": path}


def condition_col(typ: str) -> dict:
    """A column showing the status of the condition `typ`."""
    return col(typ, "string", f".status.conditions[?(@.type=='{typ}')].status")


AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def xrd(kind: str, plural: str, scope: str, spec: dict, status: dict, short: list[str],
        columns: list[dict], *, description: str, scale: dict | None = None) -> dict:
    version: dict = {
        "name": VERSION,
        "served": True,
        "referenceable": True,
        "additionalPrinterColumns": columns,
        "schema": {"openAPIV3Schema": {
            "type": "object",
            "description": description,
            "required": ["spec"],
            "properties": {"spec": spec, "status": status},
        }},
    }
    if scale:
        version["subresources"] = {"scale": scale}
    return {
        "apiVersion": "apiextensions.crossplane.io/v2",
        "kind": "CompositeResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "shortNames": short,
                      "categories": ["modelplane"]},
            "defaultCompositionRef": {"name": plural},
            "versions": [version],
        },
    }


def composition(kind: str, plural: str, step: str) -> dict:
    return {
        "apiVersion": "apiextensions.crossplane.io/v1",
        "kind": "Composition",
        "metadata": {"name": plural},
        "spec": {
            "compositeTypeRef": {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind},
            "mode": "Pipeline",
            "pipeline": [{"step": step, "functionRef": {"name": FUNCTION}}],
        },
    }


HEADER = "# Generated by hack/gen_xrds.py; edit that file and run `make generate`.\n"

OUTPUTS = {
    "inferencecluster": (inference_cluster, "InferenceCluster", "inferenceclusters",
                         "report-capacity"),
    "modeldeployment": (model_deployment, "ModelDeployment", "modeldeployments", "schedule"),
    "modelreplica": (model_replica, "ModelReplica", "modelreplicas", "compose-model-replica"),
    "modelcache": (model_cache, "ModelCache", "modelcaches", "stage-model-cache"),
    "inferencequota": (inference_quota, "InferenceQuota", "inferencequotas", "report-quota"),
    "modelendpoint": (model_endpoint, "ModelEndpoint", "modelendpoints", "check-model-endpoint"),
    "modelservice": (model_service, "ModelService", "modelservices", "route-model-service"),
}


def render() -> dict[pathlib.Path, str]:
    files = {}
    for folder, (make, kind, plural, step) in OUTPUTS.items():
        base = ROOT / "apis" / folder
        files[base / "definition.yaml"] = HEADER + dump(make())
        files[base / "composition.yaml"] = HEADER + dump(composition(kind, plural, step))
    return files


def dump(doc: dict) -> str:
    return yaml.safe_dump(doc, sort_keys=False, width=100, allow_unicode=True)


def main(argv: list[str]) -> int:
    return write_or_check(render(), ROOT, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
