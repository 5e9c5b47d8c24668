"""A ModelEndpoint as the ModelService function reads it: its URL taken apart.

The XRD checks the URL's shape, the destinations no front door may reach
(destinations.py), the reserved headers, `replica` and `auth` at admission;
`parse_endpoint` checks them again
(an object written before the rule, or through a path that skips admission,
must not break a route) and returns why an endpoint is unusable instead of
raising: the ModelEndpoint's own function reports that reason in its `Valid`
condition, and a ModelService leaves the endpoint out and names it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from function.contract.api import replica_host
from function.contract.destinations import NEVER, classify, reserved_header, reserved_text
from function.contract.names import is_dns_subdomain
from function.contract.validation import dig

MAX_URL = 2048
MAX_REWRITE = 1024
MAX_HEADERS = 8
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$")
DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<host>[^/:?#]*)(:(?P<port>[^/?#]*))?"
                 r"(?P<path>/[^?#]*)?(?P<rest>[?#].*)?$")
DEFAULT_PORTS = {"http": 80, "https": 443}
AUTH_HEADER = "Authorization"


@dataclass(frozen=True)
class Endpoint:
    """A valid ModelEndpoint."""

    name: str
    scheme: str                         # http or https
    host: str                           # lower-case DNS name or IPv4 address
    port: int
    rewrite_path: str                   # what replaces the service's prefix
    headers: tuple[tuple[str, str], ...]  # set on requests sent here, by name
    labels: Mapping[str, str]
    namespace: str = ""
    replica: str = ""       # the ModelReplica of `namespace` it reaches (spec.replica)
    auth_secret: str = ""   # a Secret of `namespace` whose key `credential` is injected
    auth_header: str = AUTH_HEADER
    health_path: str = ""   # spec.healthPath: where the front door checks it; "" not at all
    host_header: str = ""   # a Host of its own (a slice's, composer/modelservice/slices.py)

    @property
    def is_ip(self) -> bool:
        return _ip(self.host)

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def hostname(self) -> str:
        """The Host the front door sends: a replica's on its cluster gateway (always a
        replica of the endpoint's own namespace), else the URL's DNS name; "" for an IP
        address, which Envoy Gateway refuses as an endpoint's hostname (the client's
        Host then goes on)."""
        if self.host_header:
            return self.host_header
        if self.replica:
            return replica_host(self.namespace, self.replica)
        return "" if self.is_ip else self.host


class Invalid(Exception):
    """Why a ModelEndpoint cannot be used: `reason` is one word, the text a sentence."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _ip(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).version == 4
    except ValueError:
        return False


def parse_url(url: Any, field: str = "spec.url") -> tuple[str, str, int, str]:
    """(scheme, host, port, path) of an endpoint URL (or another URL Envoy fetches, named
    `field` in messages), or Invalid saying what is wrong."""
    if not isinstance(url, str) or not url:
        raise Invalid("InvalidURL", f"{field} is missing")
    if len(url) > MAX_URL:
        raise Invalid("InvalidURL", f"{field} is longer than {MAX_URL} characters")
    m = URL.match(url)
    if not m or any(c.isspace() for c in url):
        raise Invalid("InvalidURL", f"{field} {url!r} is not a URL of the form "
                      "http(s)://host[:port][/path]")
    scheme = m["scheme"].lower()
    if scheme not in DEFAULT_PORTS:
        raise Invalid("UnsupportedScheme", f"{field} {url!r} has scheme {scheme!r}; the "
                      "gateway reaches only http and https endpoints")
    if m["rest"]:
        raise Invalid("InvalidURL", f"{field} {url!r} has a query or fragment; remove it")
    host = m["host"].lower().rstrip(".")
    if "@" in url.split("/")[2]:
        raise Invalid("InvalidURL", f"{field} {url!r} carries credentials; put none in a URL")
    if not host or not (_ip(host) or (len(host) <= 253 and DNS_NAME.match(host))):
        raise Invalid("InvalidURL", f"{field} {url!r} needs a host: a DNS name or an IPv4 "
                      "address")
    port = DEFAULT_PORTS[scheme]
    if m["port"] is not None:
        if not m["port"].isdigit() or not 1 <= int(m["port"]) <= 65535:
            raise Invalid("InvalidURL", f"{field} {url!r} has port {m['port']!r}, not "
                          "1..65535")
        port = int(m["port"])
    return scheme, host, port, m["path"] or ""


def parse_endpoint(obj: Mapping[str, Any]) -> Endpoint:
    """A ModelEndpoint object as an Endpoint, or Invalid."""
    meta, spec = dig(obj, "metadata"), dig(obj, "spec")
    scheme, host, port, path = parse_url(spec.get("url"))
    kind, why = classify(host)
    if kind == NEVER:
        raise Invalid("DeniedDestination", f"spec.url: {why}: no front door sends there")
    rewrite = spec.get("rewritePath")
    if rewrite is None:
        rewrite = path or "/"
    if not _path(rewrite):
        raise Invalid("InvalidRewritePath", f"spec.rewritePath {rewrite!r} must be a path "
                      f"starting with '/', at most {MAX_REWRITE} characters, without query "
                      "or fragment")
    headers = spec.get("requestHeaders") or []
    if not isinstance(headers, list) or len(headers) > MAX_HEADERS:
        raise Invalid("InvalidHeaders", f"spec.requestHeaders holds at most {MAX_HEADERS} "
                      "headers")
    seen: dict[str, tuple[str, str]] = {}
    for h in headers:
        name = h.get("name") if isinstance(h, Mapping) else None
        value = h.get("value") if isinstance(h, Mapping) else None
        if not isinstance(name, str) or not HEADER_NAME.match(name) \
                or not isinstance(value, str):
            raise Invalid("InvalidHeaders", f"spec.requestHeaders: {h!r} needs a name (an "
                          "HTTP token) and a string value")
        if name.lower() in seen:
            raise Invalid("InvalidHeaders", f"spec.requestHeaders names {name!r} twice")
        if reserved_header(name):
            raise Invalid("ReservedHeader", f"spec.requestHeaders names {name!r}, which is "
                          f"reserved ({reserved_text()}): a replica is reached with "
                          "spec.replica, a credential with spec.auth")
        seen[name.lower()] = (name, value)
    replica = spec.get("replica")
    if replica is not None:
        if not isinstance(replica, str) or not is_dns_subdomain(replica):
            raise Invalid("InvalidReplica", f"spec.replica {replica!r} must name a "
                          "ModelReplica (a DNS subdomain)")
        if rewrite != "/":
            raise Invalid("InvalidReplica", "a replica's endpoint reaches it at its cluster "
                          f"gateway's root: spec.rewritePath must be '/', not {rewrite!r}")
    auth_secret, auth_header = _auth(spec.get("auth"), seen)
    health = spec.get("healthPath")
    if health is not None and not _path(health):
        raise Invalid("InvalidHealthPath", f"spec.healthPath {health!r} must be a path "
                      f"starting with '/', at most {MAX_REWRITE} characters, without query "
                      "or fragment")
    labels = dig(meta, "labels")
    return Endpoint(name=str(meta.get("name") or ""), scheme=scheme, host=host, port=port,
                    rewrite_path=rewrite, headers=tuple(v for _, v in sorted(seen.items())),
                    labels=dict(labels), namespace=str(meta.get("namespace") or ""),
                    replica=replica or "", auth_secret=auth_secret, auth_header=auth_header,
                    health_path=health or "")


def _path(value: Any) -> bool:
    """A path Envoy sends as is: from '/', bounded, without query, fragment or space."""
    return isinstance(value, str) and value.startswith("/") and len(value) <= MAX_REWRITE \
        and not any(c.isspace() or c in "?#" for c in value)


def _auth(auth: Any, headers: Mapping[str, Any]) -> tuple[str, str]:
    """(Secret name, header) of spec.auth, ("", default) without it."""
    if auth is None:
        return "", AUTH_HEADER
    name = dig(auth, "secretRef").get("name")
    header = auth.get("header", AUTH_HEADER) if isinstance(auth, Mapping) else None
    if not isinstance(name, str) or not is_dns_subdomain(name):
        raise Invalid("InvalidAuth", f"spec.auth.secretRef.name {name!r} must name a Secret "
                      "of the endpoint's namespace")
    if not isinstance(header, str) or not HEADER_NAME.match(header) or (
            reserved_header(header) and header.lower() != AUTH_HEADER.lower()):
        raise Invalid("InvalidAuth", f"spec.auth.header {header!r} must be an HTTP header "
                      f"name, Authorization or one not reserved ({reserved_text()})")
    if header.lower() in headers:
        raise Invalid("InvalidAuth", f"spec.auth.header {header!r} is also in "
                      "spec.requestHeaders: the credential is set from the Secret only")
    return name, header
