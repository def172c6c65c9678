"""What a target serves: every resource of every group and version, in two requests.

``served_apis`` uses aggregated discovery (``apidiscovery.k8s.io/v2``, served
since Kubernetes 1.30): two requests list every resource of every group and
version, whatever the number of CRDs. Against an older server it falls back to
the legacy documents (one request per group-version, still independent of how
many CRDs a group holds).

Requests go through the target's raw HTTP client (``kube.client.get_json``):
lightkube 1.0 has no public call for a GET with its own ``Accept`` header.
"""

from __future__ import annotations

from typing import Any

from lightkube import AsyncClient

from modelplane.kube.client import ApiStatusError, get_json

APIS = dict[str, dict[str, list[str]]]

AGGREGATED_ACCEPT = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
    "application/json"
)


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
