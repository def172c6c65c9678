"""The catalog: every substrate component of both stacks, one module each.

A component is a module in this package that defines ``COMPONENT``, its
record (and next to it ``VERSION``, its pin): values, requirements and
advisories included. The catalog finds every such module (a name starting
with ``_`` is a helper, not a component), so adding a component is adding its
module; the API's version fields, the CRD, the requirements reference and
docs/catalog.md's component table follow from the records.

Facts and their sources are in ../shared/docs/upstream-facts.md (section per
component); the values the spec states are in the requirements document.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

from modelplane.catalog.components._common import (
    AI_GATEWAY_CONTROLLER,
    AI_GATEWAY_EXTENSION_PORT,
    AI_GATEWAY_FQDN,
    AI_GATEWAY_NAMESPACE,
    BOTH,
    DYNAMO,
    ENVOY_GATEWAY_NAMESPACE,
    GPU_DEVICE_CLASS,
    GPU_TAINT_KEY,
    GPUS,
    INFERENCE_POOL,
    MODELPLANE_NAMESPACE,
    NVIDIA_DRA_NAMESPACE,
    STANDARD,
    SYSTEM_CRITICAL_CLASSES,
)
from modelplane.catalog.types import Component
from modelplane.pins import ComponentsMode, Stack

if TYPE_CHECKING:
    from modelplane.api.spec import ServingStackSpec


# Besides its own names, what several components share (_common), importable from here as before.
__all__ = [
    "AI_GATEWAY_CONTROLLER",
    "AI_GATEWAY_EXTENSION_PORT",
    "AI_GATEWAY_FQDN",
    "AI_GATEWAY_NAMESPACE",
    "BOTH",
    "BY_NAME",
    "COMPONENTS",
    "DYNAMO",
    "ENVOY_GATEWAY_NAMESPACE",
    "GPUS",
    "GPU_DEVICE_CLASS",
    "GPU_TAINT_KEY",
    "INFERENCE_POOL",
    "MODELPLANE_NAMESPACE",
    "NVIDIA_DRA_NAMESPACE",
    "STANDARD",
    "SYSTEM_CRITICAL_CLASSES",
    "CatalogError",
    "components_for",
    "components_of_stack",
    "ordered",
]


class CatalogError(Exception):
    """The component modules do not make a catalog (a programming error, raised on import)."""


def _discover() -> dict[str, Component]:
    """Every component module's record, by module name."""
    found: dict[str, Component] = {}
    # __path__, not the directory of this file: a test may add a directory of
    # component modules to the package's search path before importing it.
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        component = getattr(module, "COMPONENT", None)
        if not isinstance(component, Component):
            raise CatalogError(f"{module.__name__} defines no COMPONENT record")
        found[info.name] = component
    return found


def ordered(components: list[Component]) -> tuple[Component, ...]:
    """The install order: by ``order``, then name; every dependency before its dependents."""
    out = tuple(sorted(components, key=lambda c: (c.order, c.name)))
    by_name: dict[str, Component] = {}
    for c in out:
        if c.name in by_name:
            raise CatalogError(f"two components share the name {c.name}")
        by_name[c.name] = c
    for c in out:
        for name in c.depends_on:
            dep = by_name.get(name)
            if dep is None:
                raise CatalogError(f"{c.name} depends on {name}, which is not in the catalog")
            # Strictly lower, so the order alone puts it first (and no record
            # can depend on itself).
            if dep.order >= c.order:
                raise CatalogError(
                    f"{c.name} (order {c.order}) depends on {name}, whose order "
                    f"{dep.order} is not lower"
                )
            if not c.stacks <= dep.stacks:
                raise CatalogError(f"{c.name} is on a stack its dependency {name} is not on")
    return out


_BY_MODULE = _discover()

# Ordered so that dependencies come first; teardown walks it backwards.
COMPONENTS: tuple[Component, ...] = ordered(list(_BY_MODULE.values()))

BY_NAME: dict[str, Component] = {c.name: c for c in COMPONENTS}


def components_for(spec: ServingStackSpec) -> list[Component]:
    """The components of the spec's stack that its settings enable."""
    return [c for c in COMPONENTS if spec.stack in c.stacks and c.enabled(spec)]


def installed_for(spec: ServingStackSpec) -> list[Component]:
    """The components the product installs for the spec: all of them in Managed mode,
    only its own configuration in Provided mode, where the substrate is checked instead."""
    managed = spec.components is ComponentsMode.MANAGED
    return [c for c in components_for(spec) if managed or c.role != "substrate"]


def components_of_stack(stack: Stack) -> list[Component]:
    return [c for c in COMPONENTS if stack in c.stacks]
