"""The ModelService function: one URL for a model, routed on the fleet's front door.

A ModelService selects ModelEndpoints (in its namespace) by label, in
weighted primary entries and fallback entries. On the front door's cluster
(`spec.gateway.clusterName`, else the one InferenceCluster labelled
`modelplane.ai/front-door: "true"`; either way one its platform team admitted for
the namespace, and each endpoint one that front door may send to: policy.py)
it composes, as-is in its namespace on the
control-plane cluster or wrapped in provider-kubernetes Objects on a remote
one (placement.py):

* one Envoy Gateway `Backend` per endpoint in use (`objects.py`);
* one HTTPRoute on the front door's Gateway: a rule per match of each of
  `spec.rules`, in order, then one matching `/<namespace>/<name>` (and the
  model names, when set) for the service's own entries; each rewrites that
  prefix to its endpoints' rewritePath and has a weighted backendRef per
  endpoint (`weights.py`: an entry's weight is its share however many
  endpoints it selects) that sets the endpoint's request headers;
* an `HTTPRouteFilter` rewriting the Host to the backend's hostname when an
  endpoint is a DNS name, one injecting each `spec.auth` endpoint's credential
  from its Secret, a `BackendTrafficPolicy` when `spec.retry` is set and a
  `SecurityPolicy` when `spec.authentication` is set.

Which entries take traffic, for the service's own entries and for each rule
alike: the primaries while any primary entry of weight above 0 has a valid
endpoint; else the fallbacks; else none: that part of the route stays,
without backends (it answers 500), and `Routed=False, NoServingEndpoints`.
A rule's requests never fall through to a later rule or to the service's own
entries: a matched rule is final, in Kthena's ModelRoute and in Gateway API
alike, and a rule may exist to keep requests away from some endpoints (list
the service's entries as the rule's fallback to fail over to them).

Rules whose order Gateway API would not keep (rules.py) are refused:
`Routed=False, RuleConflict`, naming both rules and why.

Never destructive: until the requirements are resolved, without a front
door, with a bad spec, with a JWKS the front door may not fetch (authn.py), or
when the endpoints in use need different rewrite paths (Envoy cannot rewrite
per weighted backend: envoyproxy/gateway#7099),
the observed objects are kept as they are and `Routed` says why. The
rewrite paths need to agree only within one rule: each has its own filter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.composer import keep, kinds, placement
from function.composer.modelservice import authn, objects, policy, rules, slices, weights
from function.composer.modelservice.endpoint import check
from function.composer.modelservice.rules import Match
from function.kit import requeue
from function.contract.api import (
    API_VERSION,
    KIND_INFERENCE_CLUSTER,
    KIND_MODEL_ENDPOINT,
    KIND_MODEL_REPLICA,
    LABEL_FRONT_DOOR,
    REQUIRE_CLUSTERS,
    REQUIRE_REPLICAS,
    REQUIRE_ENDPOINTS,
    REQUIRE_FRONT_DOOR,
)
from function.contract.destinations import FrontDoor
from function.contract.endpoints import Endpoint, parse_endpoint
from function.contract.records import Cluster, parse_clusters, selects
from function.contract.validation import dig
from function.kit.request import Request, desired_ready

ROUTED = "Routed"
MAX_MESSAGE = 1000
PRIMARY, FALLBACK = "Primary", "Fallback"
# Each role's spec field and the tag of its entries' requirements.
ROLES = {PRIMARY: ("endpoints", "primary"), FALLBACK: ("fallback", "fallback")}


@dataclass
class Entry:
    role: str               # Primary or Fallback
    index: int
    weight: int
    selector: dict[str, str]
    rule: int | None = None  # the rule's index; None: the service's own entries
    endpoints: list[Endpoint] = field(default_factory=list)  # valid, by name
    invalid: list[str] = field(default_factory=list)         # "<name> (<why>)"

    @property
    def serving(self) -> bool:
        return self.weight > 0 and bool(self.endpoints)

    def status(self) -> dict[str, Any]:
        return {"role": self.role, "index": self.index, "weight": self.weight,
                "endpoints": [e.name for e in self.endpoints]}

    def __str__(self) -> str:
        where = "" if self.rule is None else f"rules[{self.rule}]."
        return f"{where}{ROLES[self.role][0]}[{self.index}]"


def requirement(role: str, index: int, rule: int | None = None) -> str:
    tag = f"{ROLES[role][1]}-{index}"
    return f"{REQUIRE_ENDPOINTS}/{tag if rule is None else f'rule-{rule}-{tag}'}"


@dataclass
class Part:
    """One part of the route: a rule, or the service's own entries (`rule` None)."""

    rule: int | None
    name: str
    matches: list[Match]
    entries: list[Entry]

    @property
    def primaries(self) -> list[Entry]:
        return [e for e in self.entries if e.role == PRIMARY and e.serving]

    @property
    def fallbacks(self) -> list[Entry]:
        return [e for e in self.entries if e.role == FALLBACK and e.serving]

    @property
    def serving(self) -> list[Entry]:
        """The entries the control plane sends to: the primaries, else the fallbacks."""
        return self.primaries or self.fallbacks


    @property
    def active(self) -> str:
        serving = self.serving
        return serving[0].role if serving else "None"

    def __str__(self) -> str:
        return "the service's own entries" if self.rule is None \
            else f"rules[{self.rule}] ({self.name})"


def entries_of(spec: Mapping[str, Any], rule: int | None) -> list[Entry]:
    return [Entry(role, i, e.get("weight", 1), dict(e["selector"]["matchLabels"]), rule)
            for role, (key, _) in ROLES.items() for i, e in enumerate(spec.get(key) or [])]


def hold_invalid(req: Request, rsp: fnv1.RunFunctionResponse, errors: list[str]) -> None:
    """An invalid ModelService keeps its route as it is, and says why."""
    reason = "AllWeightsZero" if errors == [ALL_ZERO] else "InvalidSpec"
    hold(rsp, req.observed(), reason, "; ".join(errors))


def route(req: Request, rsp: fnv1.RunFunctionResponse, ms: dict[str, Any]) -> None:
    """Route a valid ModelService on its front door (handlers/modelservice.py)."""
    meta = ms["metadata"]
    observed = req.observed()
    spec, ns, name = ms["spec"], meta["namespace"], meta["name"]
    requeue.follow(rsp)  # its endpoints are required, not watched
    prefix = f"/{ns}/{name}"
    spec_rules = spec.get("rules") or []
    per_rule = rules.rule_matches(spec, prefix)
    conflict = rules.conflict([r["name"] for r in spec_rules], per_rule)
    if conflict:
        hold(rsp, observed, "RuleConflict", conflict)
        return

    parts = [Part(r, rule["name"], per_rule[r], entries_of(rule, r))
             for r, rule in enumerate(spec_rules)]
    parts.append(Part(None, "", [rules.own_match(spec, prefix)], entries_of(spec, None)))
    entries = [e for p in parts for e in p.entries]
    for e in entries:
        response.require_resources(rsp, requirement(e.role, e.index, e.rule), API_VERSION,
                                   KIND_MODEL_ENDPOINT, match_labels=e.selector, namespace=ns)
    door = (spec.get("gateway") or {}).get("clusterName")
    if door:
        response.require_resources(rsp, REQUIRE_FRONT_DOOR, API_VERSION, KIND_INFERENCE_CLUSTER,
                                   match_name=door)
    else:
        response.require_resources(rsp, REQUIRE_FRONT_DOOR, API_VERSION, KIND_INFERENCE_CLUSTER,
                                   match_labels={LABEL_FRONT_DOOR: "true"})
    # Every cluster, for the fleet's gateways a replica's endpoint may name (policy.py)
    # and the clusters its replicas' slices go to; the namespace's replicas, for how
    # each routes (slices.py).
    response.require_resources(rsp, REQUIRE_CLUSTERS, API_VERSION, KIND_INFERENCE_CLUSTER,
                               match_labels={})
    response.require_resources(rsp, REQUIRE_REPLICAS, API_VERSION, KIND_MODEL_REPLICA,
                               match_labels={}, namespace=ns)
    wanted = [REQUIRE_FRONT_DOOR, REQUIRE_CLUSTERS, REQUIRE_REPLICAS] + [
        requirement(e.role, e.index, e.rule) for e in entries]
    if not all(req.resolved(w) for w in wanted):
        hold(rsp, observed, "Resolving", "waiting for the ModelEndpoints and the "
             "InferenceClusters", status="Unknown")
        return

    cluster, why = front_door(req.required(REQUIRE_FRONT_DOOR), door)
    if cluster is None:
        hold(rsp, observed, "NoGateway", why)
        return
    admission, why = policy.admitted(req.required(REQUIRE_FRONT_DOOR), cluster, ns)
    if why:
        hold(rsp, observed, "NoGateway", why)
        return
    # Fail closed: without the JWKS there is no policy, and a route without it would
    # answer anyone; what exists is kept as it is.
    denied = authn.refusals(spec, admission)
    if denied:
        hold(rsp, observed, "DeniedJWKS", "; ".join(denied))
        return
    clusters, _ = parse_clusters(req.required(REQUIRE_CLUSTERS))
    by_address = policy.addresses(clusters)
    fleet = frozenset(by_address)
    for e in entries:
        resolve(e, req.required(requirement(e.role, e.index, e.rule)), admission, fleet, ns)
    own = parts[-1]
    address = service_address(cluster, ns, name)
    status: dict[str, Any] = {"entries": [e.status() for e in own.entries], "active": own.active}
    if spec_rules:
        status["rules"] = [{"name": p.name, "active": p.active,
                            "entries": [e.status() for e in p.entries]} for p in parts[:-1]]
    if address:
        status["address"] = address
    resource.update(rsp.desired.composite, {"status": status})

    for part in parts:
        clash = rewrite_conflict(part)
        if clash:
            hold(rsp, observed, "RewriteConflict", clash, notes=notes(entries))
            return

    slicer = slices.Slicer(ns, name, spec, slices.gateway_clusters(by_address),
                           slices.service_routed({str(dig(mr, "metadata").get("name")): mr
                                                  for mr in req.required(REQUIRE_REPLICAS)}),
                           observed, objects.key(cluster, "route"))
    targets = [target(p, i, slicer) for i, p in enumerate(parts)]
    composed = objects.compose(ns, name, spec, cluster, targets, admission.health_interval)
    placed = placement.place(kinds.recorded(composed), objects.owner(ns, name), cluster,
                             namespace_key=objects.key(cluster, "namespace")) + slicer.composed
    for c in placed:
        resource.update(rsp.desired.resources[c.key], c.manifest)
        rsp.desired.resources[c.key].ready = desired_ready(kinds.judge(observed.get(c.key)).ready)
    for k, obj in slices.lingering(observed, objects.key(cluster, "route"),
                                   {c.key for c in placed}, ns, name).items():
        resource.update(rsp.desired.resources[k], keep.as_desired(obj))
        rsp.desired.resources[k].ready = desired_ready(kinds.judge(obj).ready)
    accepted = kinds.judge(observed.get(objects.key(cluster, "route"))).ready
    unserved = [p for p in parts if not p.serving]
    if not unserved:
        tiered = {id(p) for p, t in zip(parts, targets, strict=True) if t.fallbacks}
        message = "; ".join(f"{'' if p.rule is None else f'{p}: '}{p.active} entries take "
                            f"traffic: {split_text(p.serving)}"
                            + (f"; Fallback entries take what they cannot serve: "
                               f"{split_text(p.fallbacks)}" if id(p) in tiered else "")
                            for p in [own, *parts[:-1]])
        set_routed(rsp, "True", own.active, message, notes(entries))
    else:
        set_routed(rsp, "False", "NoServingEndpoints",
                   f"{' and '.join(map(str, unserved))}: no entry of weight above 0 has a "
                   "valid ModelEndpoint: their requests answer 500 until one does",
                   notes(entries))
    rsp.desired.composite.ready = desired_ready(not unserved and accepted)


def split_text(serving: list[Entry]) -> str:
    total = sum(e.weight for e in serving)
    return ", ".join(f"{e} {e.weight * 100 / total:g}% over {len(e.endpoints)} "
                     f"endpoint{'s' if len(e.endpoints) > 1 else ''}" for e in serving)


def rewrite_conflict(part: Part) -> str:
    """Why the part's endpoints cannot share one rule, or ""."""
    serving = part.serving
    rewrites = sorted({ep.rewrite_path for e in serving for ep in e.endpoints})
    if len(rewrites) < 2:
        return ""
    users = "; ".join(f"{p}: " + ", ".join(sorted({ep.name for e in serving
                                                    for ep in e.endpoints
                                                    if ep.rewrite_path == p}))
                      for p in rewrites)
    return (f"the {part.active.lower()} endpoints of {part} need different rewrite paths "
            f"({users}); Envoy cannot rewrite the path per weighted backend "
            "(envoyproxy/gateway#7099): give them one rewritePath, or select them from "
            "different ModelServices or rules")


def target(part: Part, index: int, slicer: slices.Slicer) -> objects.Target:
    """The part's matches and each endpoint's weight: an endpoint two entries
    select is one backend with both shares, and the replicas of a tier behind one
    cluster gateway one slice (slices.py) once it is ready. The fallback tier joins
    the primary one as Envoy's priority 1 when all their endpoints share one Envoy
    cluster and one rewrite; else the control plane chooses the tier (part.serving)."""
    primaries, primary_slices = slicer.slice(index, PRIMARY.lower(), shares(part.primaries))
    fallbacks, fallback_slices = slicer.slice(index, FALLBACK.lower(), shares(part.fallbacks))
    # Both tiers' slices while both serve: a tier may share the rule's Envoy cluster
    # only once its slices are ready (its replicas behind one gateway, apart until then).
    slicer.keep(primary_slices + fallback_slices if primaries else fallback_slices)
    both = [ep for ep, _ in primaries + fallbacks]
    if primaries and fallbacks and objects.shares_cluster(both) \
            and len({ep.rewrite_path for ep in both}) == 1:
        return objects.Target(tuple(part.matches), primaries, fallbacks)
    return objects.Target(tuple(part.matches), primaries or fallbacks)


def shares(serving: list[Entry]) -> tuple[tuple[Endpoint, int], ...]:
    split = weights.split([(e.weight, len(e.endpoints)) for e in serving])
    per_endpoint: dict[str, tuple[Endpoint, int]] = {}
    for entry, ws in zip(serving, split, strict=True):
        for ep, w in zip(entry.endpoints, ws, strict=True):
            per_endpoint[ep.name] = (ep, per_endpoint.get(ep.name, (ep, 0))[1] + w)
    return tuple(per_endpoint[n] for n in sorted(per_endpoint))


ALL_ZERO = ("spec.endpoints: every primary entry has weight 0; give at least one a weight "
            "above 0")


def spec_errors(spec: Mapping[str, Any]) -> list[str]:
    """The XRD's CEL rules, checked again."""
    errors = []
    if not any((e or {}).get("weight", 1) > 0 for e in spec.get("endpoints") or []):
        errors.append(ALL_ZERO)
    adapters = spec.get("loraAdapters") or []
    if adapters and not spec.get("modelName"):
        errors.append("spec.loraAdapters need spec.modelName")
    if len(set(adapters)) != len(adapters):
        errors.append("spec.loraAdapters must be unique")
    return errors + rules.rule_errors(spec) + authn.errors(spec)


def resolve(entry: Entry, objs: list[dict[str, Any]], door: FrontDoor,
            fleet: frozenset[tuple[str, int]], namespace: str) -> None:
    """The entry's valid endpoints of the service's namespace that the front door
    may send to, by name, and the others with why."""
    for obj in sorted(objs, key=lambda o: str(dig(o, "metadata").get("name"))):
        if not selects(entry.selector, dig(obj, "metadata", "labels")):
            continue
        if dig(obj, "metadata").get("namespace") != namespace:
            # Required in the service's namespace only; a ModelEndpoint of another
            # one is never routed to, whoever listed it.
            entry.invalid.append(f"{dig(obj, 'metadata').get('name')} (it is in namespace "
                                 f"{str(dig(obj, 'metadata').get('namespace'))[:63]!r}, not "
                                 f"the ModelService's {namespace!r})")
            continue
        if dig(obj, "metadata").get("deletionTimestamp"):
            # Withdrawn (its replica leaves: scheduler/drain.py) or deleted: Crossplane
            # lists it until its finalizer is gone, which takes a reconcile of its own.
            continue
        bad = check(obj)
        ep = parse_endpoint(obj) if bad is None else None
        denied = policy.check(ep, door, fleet) if ep is not None else ""
        if ep is not None and not denied:
            entry.endpoints.append(ep)
        else:
            entry.invalid.append(f"{dig(obj, 'metadata').get('name')} ({bad or denied})")


def front_door(objs: list[dict[str, Any]], named: str | None) -> tuple[Cluster | None, str]:
    """The front door's InferenceCluster, or why there is none and what to do."""
    clusters, unreadable = parse_clusters(objs)
    how = (f"label one InferenceCluster {LABEL_FRONT_DOOR}: \"true\", or name one in "
           "spec.gateway.clusterName")
    if named:
        if named in unreadable:
            return None, f"InferenceCluster {named} is malformed: {unreadable[named]}"
        if named not in clusters:
            return None, f"InferenceCluster {named} (spec.gateway.clusterName) does not exist"
        cluster = clusters[named]
    elif unreadable:
        return None, (f"the front door's InferenceCluster {', '.join(sorted(unreadable))} is "
                      f"malformed: {'; '.join(unreadable.values())}")
    elif not clusters:
        return None, f"no InferenceCluster is labelled {LABEL_FRONT_DOOR}: \"true\"; {how}"
    elif len(clusters) > 1:
        return None, (f"{len(clusters)} InferenceClusters are labelled {LABEL_FRONT_DOOR}: "
                      f"\"true\" ({', '.join(sorted(clusters))}): keep the label on one, or "
                      "name one in spec.gateway.clusterName")
    else:
        (cluster,) = clusters.values()
    if cluster.gateway is None:
        return None, (f"InferenceCluster {cluster.name} has no spec.gateway (name and "
                      "namespace): the route needs a Gateway to attach to")
    return cluster, ""


def service_address(cluster: Cluster, ns: str, name: str) -> str:
    """`<front door's base URL>/<namespace>/<name>`, "" when it publishes no address."""
    base = cluster.gateway.url if cluster.gateway else ""
    return f"{base}/{ns}/{name}" if base else ""


def notes(entries: list[Entry]) -> list[str]:
    """What a user should know about the entries: empty selectors, invalid endpoints."""
    out = []
    for e in entries:
        if not e.endpoints and not e.invalid:
            labels = ",".join(f"{k}={v}" for k, v in sorted(e.selector.items()))
            out.append(f"{e} selects no ModelEndpoint ({labels})")
        out += [f"{e}: ModelEndpoint {bad} is left out" for bad in e.invalid]
    return out


def set_routed(rsp: fnv1.RunFunctionResponse, status: str, reason: str, message: str,
               extra: Sequence[str] = ()) -> None:
    text = "; ".join([message, *extra])
    response.set_conditions(rsp, resource.Condition(
        typ=ROUTED, status=status, reason=reason, message=text[:MAX_MESSAGE]))


def hold(rsp: fnv1.RunFunctionResponse, observed: Mapping[str, Mapping[str, Any]], reason: str,
         message: str, *, status: str = "False", notes: Sequence[str] = ()) -> None:
    """Keep every observed object as it is and say why nothing new is composed."""
    kept = keep.keep_observed(rsp, observed)
    suffix = "; the route is kept as it is" if kept else "; nothing is composed"
    set_routed(rsp, status, reason, message + suffix, list(notes))
    rsp.desired.composite.ready = desired_ready(False)

