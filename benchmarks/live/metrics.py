"""Reconciles, counted by the controllers themselves.

Crossplane core and provider-kubernetes are controller-runtime managers: their
Prometheus endpoint counts `controller_runtime_reconcile_total{controller, result}`,
one controller per composite kind (Crossplane names it after the XRD,
`composite/modeldeployments.modelplane.ai`) and one for provider-kubernetes' Objects.
Two scrapes, before and after a wave, give the reconciles it took; divided by the
composites of that kind, reconciles per composite. Crossplane also counts the
RunFunction calls it makes (`function_run_function_request_total`) and the
seconds it waited for their answers (`function_run_function_seconds`). Parsing is
pure; the function itself counts nothing (it logs no request), so these counters
are where reconciles are observable.

The control plane's API server counts what it is asked, per verb and resource
(`apiserver_request_total`), and the seconds it took to answer
(`apiserver_request_duration_seconds`; a watch's is how long it was open, so
watches are left out): read through
kubectl (`get --raw /metrics`, the admin's credentials), they say which requests
the API server, the busiest process, spends its time on.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Mapping

RECONCILES = "controller_runtime_reconcile_total"
FUNCTION_CALLS = "function_run_function_request_total"
FUNCTION_SECONDS = "function_run_function_seconds_sum"   # the histogram's sum: wall time
# Crossplane's per-composite watch circuit breaker (internal/circuit): how often it
# opened, and the watch events it let through or dropped, per controller.
CIRCUIT_OPENS = "circuit_breaker_opens_total"
CIRCUIT_EVENTS = "circuit_breaker_events_total"
API_REQUESTS = "apiserver_request_total"
API_SECONDS = "apiserver_request_duration_seconds_sum"
API_LABELS = ("verb", "resource", "subresource")
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def counter_by(text: str, metric: str, label: str) -> dict[str, float]:
    """The samples of `metric` in a Prometheus text exposition, summed per value of
    `label` (the other labels, such as `result`, summed over)."""
    return counter_by_labels(text, metric, (label,))


def counter_by_labels(text: str, metric: str, labels: tuple[str, ...]) -> dict[str, float]:
    """The samples of `metric`, summed per combination of the values of `labels`
    (the key: the non-empty values joined by spaces; the other labels summed over)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None or m.group(1) != metric:
            continue
        found = dict(_LABEL.findall(m.group(2) or ""))
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        key = " ".join(v for v in (found.get(k, "") for k in labels) if v)
        out[key] = out.get(key, 0.0) + value
    return out


def circuits(text: str, controllers: str = "modelplane.ai") -> dict[str, float]:
    """Crossplane's watch circuit breaker for the controllers whose name contains
    `controllers`: "<controller> opened", and "<controller> <result>" per outcome of a
    watch event (Allowed, Dropped, HalfOpenAllowed)."""
    out = {f"{c} opened": n for c, n in counter_by(text, CIRCUIT_OPENS, "controller").items()}
    out |= counter_by_labels(text, CIRCUIT_EVENTS, ("controller", "result"))
    return {k: n for k, n in out.items() if controllers in k}


# Requests that stay open (a watch, a proxied stream): their duration is how long a
# client listened, not work done.
LONG_RUNNING_VERBS = ("WATCH", "CONNECT")


def short_requests(counts: Mapping[str, float]) -> dict[str, float]:
    """The non-zero counts of `counter_by_labels(..., API_LABELS)` without the
    long-running requests."""
    return {k: n for k, n in counts.items() if n and k.split(" ", 1)[0] not in LONG_RUNNING_VERBS}


def delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """What each key's counter grew by (a counter reset, a restart, counts from zero)."""
    out = {}
    for key, value in after.items():
        start = before.get(key, 0.0)
        out[key] = value - start if value >= start else value
    return out


def scrape(url: str, timeout: float = 5.0) -> str:
    """The exposition at `url` (loopback only), or "" when it does not answer."""
    if not url.startswith(("http://127.0.0.1:", "http://localhost:")):
        raise ValueError(f"{url}: only loopback metrics endpoints are read")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as rsp:  # noqa: S310 - loopback
            return rsp.read().decode(errors="replace")
    except OSError:
        return ""
