"""Where a front door may send requests, and the headers nobody may set: the SSRF policy.

A ModelEndpoint is written by a tenant and becomes a destination of the front
door's Envoy, inside the platform's network. Left open, a tenant could point
it at the cloud's metadata service, the cluster's API server, the front
door's own loopback (Envoy's admin interface) or any private address, and
set the header that selects another namespace's replica on a cluster gateway.

Three classes of destination, by the URL's host:

* **never**: refused whatever an admin allows, at admission (the XRD's CEL,
  hack/gen_xrds.py) and here: link-local addresses (169.254.0.0/16 holds the
  metadata services, fe80::/10), "this network" 0.0.0.0/8 and ::, multicast,
  240.0.0.0/4, the metadata services' names and the API server's names
  (`kubernetes`, `kubernetes.default`, `kubernetes.default.svc...`), and a host
  that only looks like a name but that resolvers read as an IPv4 number
  (`2852039166`, `0x7f.1`, `127.1`: its last label is numeric or hex);
* **private**: refused unless the front door's admin allows it
  (InferenceCluster `spec.frontDoor.allowedDestinations`, `allowed`):
  loopback, RFC 1918, CGNAT 100.64.0.0/10, the other special-purpose IPv4
  blocks, ULA fc00::/7, and the names of cluster or site internal DNS (a
  single label, `localhost`, `*.localhost`, `*.svc`, `*.cluster.local` and
  the names under the front door's own cluster domain, `*.internal`), and
  every name whose last label is no public top-level domain (the ICANN
  section of the Public Suffix List, as the pinned `publicsuffixlist`
  ships it): a pod's resolver tries a name of fewer than five dots under its
  search path first, so `vault.vault` reaches `vault.vault.svc.cluster.local`
  (`<service>.<namespace>`), `a.b.c` a headless Service's pod, and
  `1-2-3-4.ns.pod` a pod; public DNS serves none of them;
* **public**: anything else: a name under a public top-level domain. One
  the search path can still complete is a Service in a namespace named like
  a top-level domain (`models.ai` and a namespace `ai`): docs/security.md
  says to keep such namespaces off a front door's cluster.

A DNS name that resolves to a private address is not caught here (the
function does not resolve names, and Envoy resolves them later): docs/security.md
says so and what to do about it.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from publicsuffixlist import PublicSuffixList

NEVER, PRIVATE, PUBLIC = "never", "private", "public"

NEVER_NETS = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4",
    "::/128", "fe80::/10", "ff00::/8", "fd00:ec2::254/128"))
PRIVATE_NETS = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "172.16.0.0/12", "192.0.0.0/24",
    "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
    "::1/128", "64:ff9b::/96", "100::/64", "2001:db8::/32", "fc00::/7"))
# The API server's and the metadata services' names: no model provider answers there.
NEVER_NAMES = ("kubernetes", "kubernetes.default", "metadata", "metadata.google.internal",
               "instance-data", "instance-data.ec2.internal")
NEVER_PREFIX = "kubernetes.default.svc"
PRIVATE_NAMES = ("localhost",)
PRIVATE_SUFFIXES = (".localhost", ".svc", ".cluster.local", ".internal")
CLUSTER_DOMAIN = "cluster.local"  # Kubernetes' default; an InferenceCluster may say its own
HEALTH_INTERVAL = "2s"  # how often a front door checks an endpoint's healthPath by default
DURATION = re.compile(r"^([0-9]{1,5}(h|m|s|ms)){1,4}$")  # a Gateway API Duration
NUMERIC_LABEL = re.compile(r"^([0-9]+|0x[0-9a-f]*)$")

# Headers a ModelEndpoint may not set and a ModelService rule may not match:
# hop-by-hop headers (RFC 9110 7.6.1; Envoy manages them itself), Host (the
# route rewrites it), Authorization (from a Secret: spec.auth), and our own and
# Envoy's (x-modelplane-replica selects a replica on a cluster gateway: the
# function sets it from spec.replica, only ever for the endpoint's namespace).
RESERVED_HEADERS = frozenset({"connection", "keep-alive", "te", "trailer",
                              "transfer-encoding", "upgrade", "host", "authorization"})
RESERVED_PREFIXES = ("proxy-", "x-modelplane-", "x-envoy-")


def reserved_header(name: str) -> bool:
    low = name.lower()
    return low in RESERVED_HEADERS or low.startswith(RESERVED_PREFIXES)


def reserved_text() -> str:
    return (", ".join(sorted(RESERVED_HEADERS)) + " and "
            + ", ".join(f"{p}*" for p in RESERVED_PREFIXES))


@functools.cache
def _suffixes() -> PublicSuffixList:
    return PublicSuffixList(only_icann=True)  # the list the package ships: no download


def public_tld(label: str) -> bool:
    """Whether public DNS has this top-level domain (com, dev, ai; not svc, vault)."""
    return _suffixes().publicsuffix("x." + label, accept_unknown=False) is not None


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def classify(host: str, cluster_domain: str = CLUSTER_DOMAIN) -> tuple[str, str]:
    """(NEVER, PRIVATE or PUBLIC, why) for a URL's host, lower case, on a front door
    whose cluster's DNS domain is `cluster_domain`."""
    host = host.lower().rstrip(".")
    ip = _ip(host)
    if ip is not None:
        mapped = getattr(ip, "ipv4_mapped", None)
        if mapped is not None:  # ::ffff:a.b.c.d is a.b.c.d to a dual-stack socket
            return classify(str(mapped))
        for net in NEVER_NETS:
            if ip in net:
                return NEVER, f"{host} is in {net} (link-local, metadata, unspecified or " \
                              "multicast)"
        for net in PRIVATE_NETS:
            if ip in net:
                return PRIVATE, f"{host} is in {net}, a private or special-purpose range"
        return PUBLIC, ""
    if NUMERIC_LABEL.match(host.rsplit(".", 1)[-1]):
        return NEVER, (f"{host} is read as an IPv4 number by resolvers; write the address "
                       "as four decimal octets")
    if host in NEVER_NAMES or host == NEVER_PREFIX or host.startswith(NEVER_PREFIX + "."):
        return NEVER, f"{host} names the cluster's API server or a metadata service"
    domain = cluster_domain.lower().rstrip(".")
    if "." not in host or host in PRIVATE_NAMES or host.endswith(PRIVATE_SUFFIXES) \
            or host == domain or host.endswith("." + domain):
        return PRIVATE, (f"{host} is a cluster-internal name (one label, localhost, *.svc, "
                         f"*.cluster.local, *.{domain}, *.internal)")
    last = host.rsplit(".", 1)[-1]
    if not public_tld(last):
        return PRIVATE, (f"{host} is a cluster-internal name: {last!r} is no public top-level "
                         "domain, and the cluster's resolver completes such a name under its "
                         f"search path ({host}.svc.{domain}: a Service <name>.<namespace>)")
    return PUBLIC, ""


@dataclass(frozen=True)
class Allowed:
    """An admin's exceptions to the PRIVATE class: CIDRs and host names
    (exact, or `*.suffix` for the names under it)."""

    cidrs: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    hostnames: tuple[str, ...] = ()

    def admits(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        ip = _ip(host)
        if ip is not None:
            return any(ip in net for net in self.cidrs)
        return any(host == h or (h.startswith("*.") and host.endswith(h[1:]))
                   for h in self.hostnames)


@dataclass(frozen=True)
class FrontDoor:
    """An InferenceCluster's spec.frontDoor: whether ModelServices may route on it,
    from which namespaces ([] every one), and what its Envoy may reach besides the
    public internet and the fleet's own gateways."""

    enabled: bool
    namespaces: tuple[str, ...]
    allowed: Allowed
    cluster_domain: str = CLUSTER_DOMAIN  # the InferenceCluster's spec.clusterDomain
    health_interval: str = HEALTH_INTERVAL  # spec.frontDoor.healthCheck.interval

    def admits_namespace(self, ns: str) -> bool:
        return not self.namespaces or ns in self.namespaces


def parse_front_door(obj: Mapping[str, Any]) -> FrontDoor:
    """An InferenceCluster object's spec.frontDoor; anything malformed counts as
    not a front door (fail closed), and a CIDR that does not parse is ignored."""
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    fd = spec.get("frontDoor") if isinstance(spec, Mapping) else None
    if not isinstance(fd, Mapping) or fd.get("enabled") is not True:
        return FrontDoor(False, (), Allowed())
    allowed = fd.get("allowedDestinations")
    allowed = allowed if isinstance(allowed, Mapping) else {}
    domain = spec.get("clusterDomain") if isinstance(spec, Mapping) else None
    health = fd.get("healthCheck")
    interval = health.get("interval") if isinstance(health, Mapping) else None
    return FrontDoor(True, tuple(_strings(fd.get("namespaces"))),
                     Allowed(tuple(n for n in map(_network, _strings(allowed.get("cidrs")))
                                   if n is not None),
                             tuple(h.lower() for h in _strings(allowed.get("hostnames")))),
                     domain if isinstance(domain, str) and domain else CLUSTER_DOMAIN,
                     interval if isinstance(interval, str) and DURATION.match(interval)
                     else HEALTH_INTERVAL)


def _strings(value: Any) -> Sequence[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def refusal(host: str, port: int, *, allowed: Allowed, gateways: Iterable[tuple[str, int]] = (),
            replica: bool = False, cluster_domain: str = CLUSTER_DOMAIN) -> str:
    """Why the front door may not send to host:port, or "".

    A replica's endpoint (spec.replica) may name one of the fleet's own gateways
    (an InferenceCluster's spec.gateway.address, which only the platform team
    writes), wherever it is; any other endpoint may not name a fleet gateway's
    host, on any port: there a client's path would reach whichever replica it
    names (`/<namespace>/<replica>`), another tenant's too, while a replica's
    endpoint reaches its own replica only (by its Host, contract/api.py)."""
    host = host.lower()
    fleet = set(gateways)
    if not replica and any(host == h for h, _ in fleet):
        return (f"{host} is a gateway of the fleet: a front door sends there only to reach a "
                "ModelReplica of the endpoint's namespace (spec.replica), never a client's "
                "own path")
    kind, why = classify(host, cluster_domain)
    if kind == PUBLIC:
        return ""
    if kind == NEVER:
        return f"{why}: no front door sends there"
    if replica and (host, port) in fleet:
        return ""
    if allowed.admits(host):
        return ""
    return (f"{why}: the front door sends there only when its InferenceCluster's "
            "spec.frontDoor.allowedDestinations lists it")
