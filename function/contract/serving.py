"""The serving modes: one table, read by the XRD generator, the rule checks and the composer.

A mode says which engine phases a replica's engines carry (none, or exactly
one engine per phase), whether `serving.kvConnector` applies, and which
routers may reach its serving pods, each router naming the routing layer
that composes it (a module of `function.composer.routing`). The first router
of a mode is its default.

Who reads it:

* `hack/gen_xrds.py`: the `serving.mode`, `serving.router` and engine
  `phase` enums and descriptions, and the CEL rules tying them together;
* `function/contract/rules.py`: the same rules, checked again with the same messages;
* `function/composer/routing/`: the layer of each (mode, router).

This module imports nothing of the function, so the generator can import it
without the function's dependencies. To add a router or a mode: a row here
and its layer module; `make generate` writes the API.
"""

from __future__ import annotations

from dataclasses import dataclass

UNIFIED, PREFILL_DECODE = "Unified", "PrefillDecode"
PREFILL, DECODE = "Prefill", "Decode"
SERVICE, ENDPOINT_PICKER = "Service", "EndpointPicker"

KV_CONNECTORS = ("nixl", "lmcache", "mooncake")
DEFAULT_KV_CONNECTOR = "nixl"

# What each router puts in front of the serving pods, for the API's description.
ROUTERS = {
    SERVICE: "one Service over every serving pod",
    ENDPOINT_PICKER: "an InferencePool whose endpoint picker sends each request to the serving "
                     "pod that best fits it (prefix-cache affinity and load)",
}


@dataclass(frozen=True)
class Mode:
    name: str
    summary: str                      # the mode in one sentence, for the API's description
    routers: dict[str, str]           # router -> its routing layer module; the first: default
    phases: tuple[str, ...] = ()      # exactly one engine per phase; (): engines carry none
    kv_connector: bool = False        # serving.kvConnector applies

    @property
    def default_router(self) -> str:
        return next(iter(self.routers))


MODES: dict[str, Mode] = {m.name: m for m in (
    Mode(UNIFIED, "every serving pod behind one HTTPRoute, through a Service (the default) "
         "or an endpoint picker",
         routers={SERVICE: "service", ENDPOINT_PICKER: "endpoint_picker"}),
    Mode(PREFILL_DECODE, "disaggregated prefill and decode engines behind an InferencePool",
         routers={ENDPOINT_PICKER: "prefill_decode"},
         phases=(PREFILL, DECODE), kv_connector=True),
)}
DEFAULT_MODE = UNIFIED

# Unset serving fields mean the default mode, which must then ask nothing of
# the engines: the rules below read an absent mode as "no phases, no kvConnector".
assert not MODES[DEFAULT_MODE].phases and not MODES[DEFAULT_MODE].kv_connector

PHASES = tuple(dict.fromkeys(p for m in MODES.values() for p in m.phases))
PHASED_MODES = tuple(m.name for m in MODES.values() if m.phases)
KV_MODES = tuple(m.name for m in MODES.values() if m.kv_connector)
ALL_ROUTERS = tuple(dict.fromkeys(r for m in MODES.values() for r in m.routers))
# `serving.router` is offered only when some mode has a choice to make.
ROUTER_CHOICE = any(len(m.routers) > 1 for m in MODES.values())


def mode(name: str | None) -> Mode:
    """The mode of a validated spec (unset: the default)."""
    return MODES[name or DEFAULT_MODE]


def router(mode_name: str | None, router_name: str | None) -> str:
    """The router of a validated spec (unset: the mode's default)."""
    return router_name or mode(mode_name).default_router


def restricted_routers() -> list[Mode]:
    """Modes that allow only some of the routers: each has a rule."""
    return [m for m in MODES.values() if len(m.routers) < len(ALL_ROUTERS)]


# --- the rules' messages, one sentence whichever layer says it ----------------------


def _either(names) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four"}


def phases_message(m: Mode) -> str:
    ones = [f"one with phase {p}" for p in m.phases]
    listed = ones[0] if len(ones) == 1 else ", ".join(ones[:-1]) + " and " + ones[-1]
    return (f"serving mode {m.name} needs exactly {NUMBERS.get(len(m.phases), len(m.phases))} "
            f"engines, {listed}")


def phase_only_message() -> str:
    return f"engine phase is only allowed under serving mode {_either(PHASED_MODES)}"


def kv_connector_message() -> str:
    return f"kvConnector applies to serving mode {_either(KV_MODES)} only"


def router_message(m: Mode) -> str:
    return f"serving mode {m.name} routes through router {_either(m.routers)} only"


def phase_description() -> str:
    return f"{_either(PHASES)}; only under serving mode {_either(PHASED_MODES)}."


def mode_description() -> str:
    return " ".join(f"{m.name}: {m.summary}." for m in MODES.values())
