"""Cheap reads of a target: what it serves, and lists of a kind across namespaces.

``served_apis`` uses aggregated discovery (``apidiscovery.k8s.io/v2``, served
since Kubernetes 1.30): two requests list every resource of every group and
version, whatever the number of CRDs. Against an older server it falls back to
the legacy documents (one request per group-version, still independent of how
many CRDs a group holds).

Requests go through the target's raw HTTP client (``TargetClient.http``),
built by lightkube's public client adapter from the same connection
parameters and transport as the lightkube client, so authentication, TLS and
the address and answer checks of ``transport.py`` apply alike; lightkube 1.0
has no public call for a GET with its own ``Accept`` header.
"""

from __future__ import annotations

from typing import Any

import httpx2
from lightkube import AsyncClient

from modelplane.credentials.connect import TargetClient
from modelplane.kube.address import AddressDenied
from modelplane.kube.answers import describe_answer, describe_error, status_message
from modelplane.wire import ApiRef

APIS = dict[str, dict[str, list[str]]]

AGGREGATED_ACCEPT = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
    "application/json"
)
PAGE_SIZE = 500


class TargetError(Exception):
    """The target could not be reached or answered in a way we cannot use."""


class ApiStatusError(TargetError):
    """The API server answered with an error status (403, 404, ...).

    ``reason`` is the answer's Status message, or a description by HTTP status
    code and media type when the answer is not a Kubernetes Status.
    """

    def __init__(self, status: int, path: str, message: str) -> None:
        super().__init__(f"GET {path}: {status} {message}".rstrip())
        self.status = status
        self.path = path
        self.reason = message


def _http(client: AsyncClient) -> httpx2.AsyncClient:
    if not isinstance(client, TargetClient):
        raise TypeError(
            "discovery needs the client of a Target (modelplane.credentials.connect), "
            f"not a {type(client).__name__}"
        )
    return client.http


async def get_json(
    client: AsyncClient,
    path: str,
    *,
    params: dict[str, str] | None = None,
    accept: str = "application/json",
) -> Any:
    """GET ``path`` (absolute, e.g. ``/apis``) and decode the JSON answer."""
    try:
        response = await _http(client).get(path, params=params, headers={"Accept": accept})
    except AddressDenied:
        raise
    except httpx2.TransportError as err:
        raise TargetError(f"cannot reach the API server: {describe_error(err)}") from err
    if response.status_code >= 300:
        content_type = response.headers.get("content-type")
        message = status_message(response.content, content_type)
        if message is None:
            # Not a Status: its body, reason phrase and headers are the
            # server's free text, and are not repeated.
            message = describe_answer(content_type)
        raise ApiStatusError(response.status_code, path, message)
    try:
        return response.json()
    except ValueError as err:
        raise TargetError(f"GET {path}: the answer is not JSON") from err


def _add(apis: APIS, group: str, version: str, resource: str) -> None:
    if not resource or "/" in resource:  # subresources are not resources
        return
    versions = apis.setdefault(group, {}).setdefault(resource, [])
    if version not in versions:
        versions.append(version)


def _from_aggregated(doc: dict[str, Any], apis: APIS) -> None:
    for item in doc.get("items") or []:
        group = ((item.get("metadata") or {}).get("name")) or ""
        for version in item.get("versions") or []:
            # A Stale group-version belongs to an aggregated API server that
            # did not answer: it is not being served right now.
            if version.get("freshness", "Current") != "Current":
                continue
            for resource in version.get("resources") or []:
                _add(apis, group, str(version.get("version", "")), str(resource.get("resource")))


def _is_aggregated(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == "APIGroupDiscoveryList"


async def served_apis(client: AsyncClient) -> APIS:
    """group ("" for core) -> resource plural -> versions served, in two requests."""
    apis: APIS = {}
    core = await get_json(client, "/api", accept=AGGREGATED_ACCEPT)
    groups = await get_json(client, "/apis", accept=AGGREGATED_ACCEPT)
    if _is_aggregated(core) and _is_aggregated(groups):
        _from_aggregated(core, apis)
        _from_aggregated(groups, apis)
    else:
        await _legacy(client, core, groups, apis)
    for resources in apis.values():
        for versions in resources.values():
            versions.sort()
    return apis


async def _legacy(client: AsyncClient, core: Any, groups: Any, apis: APIS) -> None:
    """Pre-1.30 servers: one document per group-version."""
    core_versions = core.get("versions") if isinstance(core, dict) else None
    paths: list[tuple[str, str, str]] = [("", str(v), f"/api/{v}") for v in core_versions or []]
    for group in (groups.get("groups") or []) if isinstance(groups, dict) else []:
        for version in group.get("versions") or []:
            gv = str(version.get("groupVersion", ""))
            paths.append(
                (str(group.get("name", "")), str(version.get("version", "")), f"/apis/{gv}")
            )
    for group_name, version_name, path in paths:
        try:
            doc = await get_json(client, path)
        except ApiStatusError:
            continue  # an unavailable aggregated API: not served
        for resource in doc.get("resources") or []:
            _add(apis, group_name, version_name, str(resource.get("name", "")))


def collection_path(api: ApiRef, namespace: str | None = None) -> str:
    base = f"/api/{api.version}" if not api.group else f"/apis/{api.group}/{api.version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    return f"{base}/{api.resource}"


async def list_objects(
    client: AsyncClient,
    api: ApiRef,
    *,
    namespace: str | None = None,
    labels: str | None = None,
    fields: str | None = None,
) -> list[dict[str, Any]]:
    """Every object of one resource, across all namespaces unless one is given.

    One LIST (more only past ``PAGE_SIZE`` objects), as plain JSON: no model
    decoding, and no resource class needed for CRDs.
    """
    path = collection_path(api, namespace)
    params: dict[str, str] = {"limit": str(PAGE_SIZE)}
    if labels:
        params["labelSelector"] = labels
    if fields:
        params["fieldSelector"] = fields
    items: list[dict[str, Any]] = []
    while True:
        doc = await get_json(client, path, params=params)
        items += [i for i in doc.get("items") or [] if isinstance(i, dict)]
        cont = (doc.get("metadata") or {}).get("continue")
        if not cont:
            return items
        params["continue"] = str(cont)


async def get_object(
    client: AsyncClient, api: ApiRef, name: str, namespace: str | None = None
) -> dict[str, Any] | None:
    """One object, or None when it does not exist."""
    try:
        doc = await get_json(client, f"{collection_path(api, namespace)}/{name}")
    except ApiStatusError as err:
        if err.status == 404:
            return None
        raise
    return doc if isinstance(doc, dict) else None
