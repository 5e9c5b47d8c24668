"""How the front door's Envoy judges, retries and tiers a route's endpoints.

Health is judged in the data plane, so a dead engine, gateway or cluster leaves
rotation within about a second under load, without waiting for the control
plane (whose withdrawal of a replica's ModelEndpoint stays the slower,
authoritative path). Envoy Gateway's `BackendTrafficPolicy`, one per group of
HTTPRoute rules that need the same settings (`targetRefs[].sectionName`, the
rule's name), sets on each rule's Envoy cluster:

* **outlier detection** (passive): a refused or reset connection or a timeout
  ejects the endpoint at once (`consecutiveLocalOriginFailures: 1`, local
  errors apart from answers), three 502/503/504 answers in a row or five 5xx
  do too; ejected for 5 s, longer each time it happens again, up to every
  endpoint of the cluster (`maxEjectionPercent: 100`);
* **active health checks** when every endpoint of the rule has one
  `healthPath` (a replica's endpoint has its engine's, `/health`): a GET each
  `spec.frontDoor.healthCheck.interval` (default 2 s) with the Host the
  endpoint's requests get (Envoy Gateway sets the endpoint's hostname as the
  check's Host), so a replica is checked through its cluster gateway: two
  failures take it out, one success brings it back. A rule whose endpoints
  do not share one path (an external provider without one) is judged by its
  answers alone: a provider's `/health` may not exist, and a check answered
  404 would take a healthy provider out;
* **no panic mode** (`panicThreshold: 0`): Envoy's default sends to every
  endpoint once fewer than half are healthy, failed ones included;
* **retries before the first byte**: a connect failure, a reset, 429, 502,
  503 or 504 is retried (twice, or `spec.retry.attempts` times) on another
  endpoint (Envoy Gateway always adds the previous-hosts predicate), never
  once the response has begun: Envoy retries only before it has sent the
  client any of the answer, so a token stream is never cut or replayed. With
  a fallback tier in the rule, the second attempt on the primary tier goes
  to the fallback tier (`numAttemptsPerPriority: 2`).

Priorities need one Envoy cluster per rule (objects.py says when): there a
fallback entry's Backend is `fallback: true`, Envoy's priority 1, which takes
traffic only as the primary tier's healthy share falls (Envoy's
overprovisioning factor 1.4: from below 72 % healthy) and per request when a
retry moves there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

RETRY_ON = ["connect-failure", "reset", "retriable-status-codes"]
RETRY_STATUSES = [429, 502, 503, 504]
DEFAULT_RETRIES = 2
ATTEMPTS_PER_TIER = 2
PASSIVE = {"splitExternalLocalOriginErrors": True, "consecutiveLocalOriginFailures": 1,
           "consecutiveGatewayErrors": 3, "consecutive5XxErrors": 5, "interval": "1s",
           "baseEjectionTime": "5s", "maxEjectionPercent": 100}
CHECK_TIMEOUT_MS = 1000
UNITS_MS = {"h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}


@dataclass(frozen=True)
class RuleTraffic:
    """What one HTTPRoute rule needs from its policy."""

    rule: str               # the rule's name (its sectionName)
    health_path: str        # "" when its endpoints share none
    tiered: bool            # a fallback tier in the same Envoy cluster


def milliseconds(duration: str) -> int:
    """A Gateway API Duration (`1h2m3s`, `500ms`) in milliseconds."""
    return sum(int(n) * UNITS_MS[u] for n, u in re.findall(r"([0-9]+)(ms|h|m|s)", duration))


def policies(rules: Sequence[RuleTraffic], spec: Mapping[str, Any],
             interval: str) -> list[tuple[list[str], dict[str, Any]]]:
    """(the rules' names, the BackendTrafficPolicy's spec less its targetRefs) for
    each group of rules needing the same settings, in the order their first rule
    comes."""
    groups: dict[tuple[str, bool], list[str]] = {}
    for r in rules:
        groups.setdefault((r.health_path, r.tiered), []).append(r.rule)
    return [(names, policy(path, tiered, spec.get("retry") or {}, interval))
            for (path, tiered), names in groups.items()]


def policy(health_path: str, tiered: bool, retry: Mapping[str, Any],
           interval: str) -> dict[str, Any]:
    """The health checks and retries of rules with this health path and tiering."""
    health: dict[str, Any] = {"passive": dict(PASSIVE), "panicThreshold": 0}
    if health_path:
        timeout = min(CHECK_TIMEOUT_MS, milliseconds(interval))
        health["active"] = {"type": "HTTP", "interval": interval,
                            "timeout": f"{timeout}ms", "unhealthyThreshold": 2,
                            "healthyThreshold": 1,
                            "http": {"path": health_path, "expectedStatuses": [200]}}
    attempts: dict[str, Any] = {
        "numRetries": retry.get("attempts", DEFAULT_RETRIES),
        "retryOn": {"triggers": list(RETRY_ON), "httpStatusCodes": list(RETRY_STATUSES)}}
    if tiered:
        attempts["numAttemptsPerPriority"] = ATTEMPTS_PER_TIER
    if retry.get("interval"):
        attempts["perRetry"] = {"backOff": {"baseInterval": retry["interval"]}}
    return {"healthCheck": health, "retry": attempts}
