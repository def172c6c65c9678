"""Lightkube resource classes for objects known only as dictionaries.

A kind's resource name (its plural) is never guessed from its spelling: a
core kind's is Kubernetes' own, from lightkube's models; any other comes from
the target's discovery (``kube.discovery``), kept on the Target's client for
as long as the connection lives, so a reconcile that observed the target
first pays nothing more for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cache
from typing import Any, TypeVar

from lightkube import AsyncClient
from lightkube.codecs import resource_registry
from lightkube.core.exceptions import ApiError, LoadResourceError
from lightkube.core.resource import NamespacedResource, api_info
from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from modelplane.kube.client import TargetClient
from modelplane.kube.discovery import served

T = TypeVar("T")


class KindNotServed(ValueError):
    """The target serves no resource for this apiVersion and kind.

    A ValueError, so the reconciler's guard reports it as the component's failure.
    """


async def plural_of(client: AsyncClient, api_version: str, kind: str) -> str:
    """The resource name the target serves ``kind`` of ``api_version`` under.

    Discovery is read only for a kind the client has not seen served yet.
    """
    if not isinstance(client, TargetClient):
        raise TypeError(f"the plural of {kind} needs the client of a Target, not {client!r}")
    if (api_version, kind) not in client.plurals:
        core = _core_plural(api_version, kind)
        if core is not None:
            return core
        await served(client)  # keeps what it found on the client
    try:
        return client.plurals[(api_version, kind)]
    except KeyError:
        raise KindNotServed(f"the target serves no {kind} in {api_version}") from None


@cache
def _core_plural(api_version: str, kind: str) -> str | None:
    """The plural of a kind of the core group, from Kubernetes' own models; None for others.

    The core group cannot be turned off and its plurals are part of the
    API, so a new target's first write (the claim's namespace) needs no
    discovery: at 2,500 new targets a shard, that discovery was a fifth of
    the shard's CPU. Every other group's plural still comes from discovery.
    """
    if api_version != "v1":
        return None
    try:
        return str(api_info(resource_registry.load(api_version, kind)).plural)
    except LoadResourceError:
        return None


@cache
def resource(api_version: str, kind: str, namespaced: bool, plural: str) -> Any:
    """A resource class for apiVersion/kind (generic resources cover built-ins too)."""
    # lightkube keeps one class per kind in a process-wide registry, and
    # refuses a second: reuse one registered already (lightkube's own model,
    # when some other code of this process loaded it) if it names the same
    # plural and scope.
    known = resource_registry.get(api_version, kind)
    if (
        known is not None
        and api_info(known).plural == plural
        and issubclass(known, NamespacedResource) == namespaced
    ):
        return known
    group, _, version = api_version.rpartition("/")
    maker = create_namespaced_resource if namespaced else create_global_resource
    return maker(group, version, kind, plural)


async def resource_of(client: AsyncClient, body: dict[str, Any]) -> Any:
    """The resource class of ``body``, with the plural the target serves its kind under."""
    api_version, kind = body["apiVersion"], body["kind"]
    plural = await plural_of(client, api_version, kind)
    return resource(api_version, kind, bool(body["metadata"].get("namespace")), plural)


async def unless_missing(call: Callable[[], Awaitable[T]]) -> T | None:
    """``call()``, or None when the API server answers 404 (Not Found)."""
    try:
        return await call()
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise
