"""The CEL ``device`` variable: one DRA device's driver, attributes and capacity.

Devices arrive in the API shape (``driver``, ``attributes``, ``capacity``);
each shape becomes one `DeviceActivation`, reused by every selector and
every device of that shape. Invalid device data is kept as an error, as
the Kubernetes library fails evaluation for such a device.

Kubernetes returns ``{}`` for an unknown domain: `DeviceActivation.data`
can add such domains as ``{}`` (selector.py decides which, when an
evaluation fails on one).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from typing import Any

from function.contract.devicecel.cost import Sizes
from function.contract.devicecel.library import (
    ENV,
    INT64_MAX,
    INT64_MIN,
    parse_quantity,
    parse_semver,
    quantity_message,
    semver_message,
)


class DeviceActivation:
    """The ``device`` variable for one device shape, reusable by any selector.

    Invalid device data (such as a malformed version or quantity) is kept as
    ``error`` and reported by :meth:`CompiledSelector.matches`, like the
    Kubernetes library, which fails evaluation for such a device.
    """

    __slots__ = ("driver", "attributes", "capacity", "error", "shape", "_cel", "_sizes")

    def __init__(self, driver: str, attributes: dict, capacity: dict, error: str | None = None,
                 shape: str = ""):
        self.driver = driver
        self.shape = shape  # the device as JSON (device_activation's key): what the sandbox is sent
        self.attributes = attributes  # domain -> name -> int|bool|str|Semver message
        self.capacity = capacity  # domain -> name -> Quantity message
        self.error = error
        self._cel: dict[bool, Any] = {}
        self._sizes: Sizes | None = None

    def sizes(self, defaulted_domains: int) -> Sizes:
        """How large this device's values are, in the cost estimate's terms
        (cost.py), with up to `defaulted_domains` unknown domains read as {}."""
        if self._sizes is None:
            domains = {**self.attributes, **self.capacity}
            names = [n for values in (*self.attributes.values(), *self.capacity.values())
                     for n in values]
            strings = [v if isinstance(v, str) else getattr(v, "value", "")
                       for values in self.attributes.values() for v in values.values()]
            self._sizes = Sizes(
                driver=len(self.driver), domain=max(map(len, domains), default=0),
                ident=max(map(len, names), default=0),
                value=max((len(v) for v in strings if isinstance(v, str)), default=0),
                entries=max(map(len, (*self.attributes.values(), *self.capacity.values())),
                            default=0),
                domains=max(len(self.attributes), len(self.capacity)))
        return dataclasses.replace(self._sizes, domains=self._sizes.domains + defaulted_domains)

    def data(self, checked: bool, extra_domains: frozenset[str] = frozenset()) -> dict:
        attributes, capacity = self.attributes, self.capacity
        if extra_domains:  # unknown domains read as {} (see module docstring)
            attributes = {**{d: {} for d in extra_domains}, **attributes}
            capacity = {**{d: {} for d in extra_domains}, **capacity}
        device = {"driver": self.driver, "allowMultipleAllocations": False,
                  "attributes": attributes, "capacity": capacity}
        if checked:  # qualified variable names, see ENV
            return {f"device.{k}": v for k, v in device.items()}
        return {"device": device}

    def cel_activation(self, checked: bool) -> Any:
        if checked not in self._cel:
            self._cel[checked] = ENV.Activation(self.data(checked))
        return self._cel[checked]


def _split_name(name: str, driver: str) -> tuple[str, str]:
    """A name without a domain belongs to the driver (DRA parseQualifiedName)."""
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def _attribute_value(name: str, attr: Any) -> Any:
    kinds = [k for k in ("int", "bool", "string", "version") if isinstance(attr, dict) and k in attr]
    if len(kinds) != 1:
        raise ValueError(f"attribute {name}: needs exactly one of int, bool, string, version")
    kind, value = kinds[0], attr[kinds[0]]
    if kind == "version":
        try:
            return semver_message(parse_semver(str(value)))
        except ValueError as e:
            raise ValueError(f"attribute {name}: parse semantic version: {e}") from None
    expected = {"int": int, "bool": bool, "string": str}[kind]
    # Once type(value) is expected, type(value) is int exactly when kind is "int".
    if type(value) is not expected or (type(value) is int and not INT64_MIN <= value <= INT64_MAX):
        raise ValueError(f"attribute {name}: {kind} value {value!r} is not a {kind}")
    return value


def _capacity_value(name: str, cap: Any) -> Any:
    value = cap.get("value") if isinstance(cap, dict) else None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"capacity {name}: value must be a quantity, got {value!r}")
    try:  # the API server trims blanks when it decodes a quantity
        return quantity_message(parse_quantity(str(value).strip()))
    except ValueError as e:
        raise ValueError(f"capacity {name}: {e}") from None


@functools.lru_cache(maxsize=1024)
def _activation_for(shape: str) -> DeviceActivation:
    device = json.loads(shape)
    driver = device.get("driver") or ""
    attributes: dict[str, dict] = {}
    capacity: dict[str, dict] = {}
    try:
        for name, attr in (device.get("attributes") or {}).items():
            domain, ident = _split_name(name, driver)
            attributes.setdefault(domain, {})[ident] = _attribute_value(name, attr)
        for name, cap in (device.get("capacity") or {}).items():
            domain, ident = _split_name(name, driver)
            capacity.setdefault(domain, {})[ident] = _capacity_value(name, cap)
    except ValueError as e:
        return DeviceActivation(driver, {}, {}, error=f"invalid device: {e}", shape=shape)
    return DeviceActivation(driver, attributes, capacity, shape=shape)


def activation_of_shape(shape: str) -> DeviceActivation:
    """The activation for a device shape as `DeviceActivation.shape` holds it
    (the sandbox's worker rebuilds the device from it)."""
    return _activation_for(shape)


def device_activation(device: dict) -> DeviceActivation:
    """Build (or reuse) the CEL ``device`` variable for a device in the API shape.

    Only ``driver``, ``attributes`` and ``capacity`` matter, so devices of
    the same shape share one cached activation. This never raises; invalid
    device data makes every ``matches`` on it raise CelEvalError.
    """
    if not isinstance(device, Mapping):
        return DeviceActivation("", {}, {}, error=f"invalid device: not a mapping: {device!r}")
    shape = {k: device.get(k) for k in ("driver", "attributes", "capacity")}
    try:
        key = json.dumps(shape, sort_keys=True)
    except (TypeError, ValueError) as e:
        return DeviceActivation("", {}, {}, error=f"device data is not plain YAML/JSON: {e}")
    return _activation_for(key)

