"""What a target serves: every resource of every group and version, in two requests.

``served`` uses aggregated discovery (``apidiscovery.k8s.io/v2``, served since
Kubernetes 1.30): two requests list every resource of every group and
version, whatever the number of CRDs. Against an older server it falls back to
the legacy documents (one request per group-version, still independent of how
many CRDs a group holds).

Discovery is also where a kind's resource name (its plural) comes from: the
server says it, so nothing is guessed from the kind's spelling.

Requests go through the target's raw HTTP client (``kube.client.get_answer``):
lightkube 1.0 has no public call for a GET with its own ``Accept`` header.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx2
from lightkube import AsyncClient

from modelplane.kube.address import AddressDenied
from modelplane.kube.answers import describe_error
from modelplane.kube.client import ApiStatusError, TargetClient, TargetError, get_answer, raw_http
from modelplane.kube.interned import KeptOnce
from modelplane.kube.plurals import Kind, merged

APIS = dict[str, dict[str, list[str]]]
# (apiVersion, kind) -> the resource name the server serves the kind under.
PLURALS = dict[Kind, str]

AGGREGATED_ACCEPT = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
    "application/json"
)


@dataclass
class Served:
    """group ("" for core) -> resource plural -> versions served, and each kind's plural."""

    apis: APIS = field(default_factory=dict)
    plurals: PLURALS = field(default_factory=dict)

    def add(self, group: str, version: str, resource: str, kind: str) -> None:
        if not resource or "/" in resource:  # subresources are not resources
            return
        versions = self.apis.setdefault(group, {}).setdefault(resource, [])
        if version not in versions:
            versions.append(version)
        if kind:
            self.plurals[(f"{group}/{version}" if group else version, kind)] = resource


def _from_aggregated(doc: dict[str, Any], served: Served) -> None:
    for item in doc.get("items") or []:
        group = ((item.get("metadata") or {}).get("name")) or ""
        for version in item.get("versions") or []:
            # A Stale group-version belongs to an aggregated API server that
            # did not answer: it is not being served right now.
            if version.get("freshness", "Current") != "Current":
                continue
            for resource in version.get("resources") or []:
                kind = (resource.get("responseKind") or {}).get("kind") or ""
                served.add(
                    group,
                    str(version.get("version", "")),
                    str(resource.get("resource")),
                    str(kind),
                )


def _is_aggregated(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == "APIGroupDiscoveryList"


async def discover(http: httpx2.AsyncClient) -> Served:
    """What the server at ``http`` serves; transport errors are raised as they are."""
    served = Served()
    core = await get_answer(http, "/api", accept=AGGREGATED_ACCEPT)
    groups = await get_answer(http, "/apis", accept=AGGREGATED_ACCEPT)
    if _is_aggregated(core) and _is_aggregated(groups):
        _from_aggregated(core, served)
        _from_aggregated(groups, served)
    else:
        await _legacy(http, core, groups, served)
    for resources in served.apis.values():
        for versions in resources.values():
            versions.sort()
    return shared(served)


# What targets serving the same APIs were told, kept once for all of them.
_SERVED: KeptOnce[Served] = KeptOnce()


def shared(served: Served) -> Served:
    """The one kept ``Served`` equal to ``served`` (``served`` itself the first time).

    Every target of a stack at the same versions, on the same Kubernetes
    release, serves the same APIs: a shard's discoveries are mostly one
    answer, kept once (as ``kube.interned`` keeps parts of objects). Read
    it, never change it: its readers merge what they keep into maps of their
    own (``kube.plurals.merged``).
    """
    content = [served.apis, sorted([*key, plural] for key, plural in served.plurals.items())]
    return _SERVED.get(content, lambda: served)


async def served(client: AsyncClient) -> Served:
    """What a Target's client says its server serves, in two requests.

    The plurals are kept on the client too, so that applying an object of a
    kind just observed costs no second discovery.
    """
    try:
        found = await discover(raw_http(client))
    except AddressDenied:
        raise
    except httpx2.TransportError as err:
        raise TargetError(f"cannot reach the API server: {describe_error(err)}") from err
    assert isinstance(client, TargetClient)  # raw_http refuses any other
    client.plurals = merged(client.plurals, found.plurals)
    return found


async def served_apis(client: AsyncClient) -> APIS:
    """group ("" for core) -> resource plural -> versions served, in two requests."""
    return (await served(client)).apis


async def _legacy(http: httpx2.AsyncClient, core: Any, groups: Any, served: Served) -> None:
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
            doc = await get_answer(http, path)
        except ApiStatusError:
            continue  # an unavailable aggregated API: not served
        for resource in doc.get("resources") or []:
            served.add(
                group_name,
                version_name,
                str(resource.get("name", "")),
                str(resource.get("kind", "")),
            )
