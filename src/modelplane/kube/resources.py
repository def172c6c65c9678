"""Lightkube resource classes for objects known only as dictionaries."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cache
from typing import Any, TypeVar

from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource

T = TypeVar("T")

# Kubernetes pluralises kinds this way for every kind the product applies.
_IRREGULAR: dict[str, str] = {}


def plural(kind: str) -> str:
    lower = kind.lower()
    if lower in _IRREGULAR:
        return _IRREGULAR[lower]
    if lower.endswith("s"):
        return lower + "es"
    if lower.endswith("y") and lower[-2:-1] not in "aeiou":
        return lower[:-1] + "ies"
    return lower + "s"


@cache
def resource(api_version: str, kind: str, namespaced: bool) -> Any:
    """A resource class for apiVersion/kind (generic resources cover built-ins too)."""
    group, _, version = api_version.rpartition("/")
    maker = create_namespaced_resource if namespaced else create_global_resource
    return maker(group, version, kind, plural(kind))


def resource_of(body: dict[str, Any]) -> Any:
    return resource(body["apiVersion"], body["kind"], bool(body["metadata"].get("namespace")))


async def unless_missing(call: Callable[[], Awaitable[T]]) -> T | None:
    """``call()``, or None when the API server answers 404 (Not Found)."""
    try:
        return await call()
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise
