"""Observing a target: the facts ``plan`` needs, in a bounded number of reads.

Reads: API discovery (two requests, whatever the number of CRDs), one LIST
per kind the product applies (filtered to its own objects by label), one
LIST of Helm's release Secrets that carry the product's label, the
DeviceClasses, and the CA ConfigMap when a hostname is set. Never one GET
per object.
"""

from __future__ import annotations

from typing import Any

from lightkube import AsyncClient, operators
from lightkube.resources.core_v1 import ConfigMap, Secret

from modelplane.api.models import ServingStackSpec
from modelplane.catalog.components import components_for
from modelplane.catalog.configuration import (
    CA_KEY,
    CLUSTER_CA,
    GATEWAY_NAME,
    NS,
    configuration_for,
)
from modelplane.catalog.types import ObjectExists
from modelplane.plan.observed import Observed, ObservedRelease
from modelplane.target.discovery import served_apis
from modelplane.target.resources import list_settled, plural, resource, unless_missing
from modelplane.wire import (
    DIGEST_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    RELEASE_DIGEST_LABEL,
    ApiRef,
    object_key,
)

CRD_API_VERSION = "apiextensions.k8s.io/v1"


def _kinds(spec: ServingStackSpec) -> set[tuple[str, str, bool]]:
    kinds = {
        (o.body["apiVersion"], o.body["kind"], bool(o.body["metadata"].get("namespace")))
        for o in configuration_for(spec)
    }
    for component in components_for(spec):
        if component.objects is not None:
            kinds |= {
                (b["apiVersion"], b["kind"], bool(b["metadata"].get("namespace")))
                for b in component.objects(spec)
            }
        if component.manifests is not None:
            kinds.add((CRD_API_VERSION, "CustomResourceDefinition", False))
    return kinds


def _api_of(api_version: str, kind: str) -> ApiRef:
    group, _, version = api_version.rpartition("/")
    return ApiRef(group, version, plural(kind))


async def observe(client: AsyncClient, spec: ServingStackSpec) -> Observed:
    apis = await served_apis(client)
    observed = Observed(apis=apis)

    applied: dict[str, str] = {}
    gateway_addresses: list[str] = []
    for api_version, kind, namespaced in sorted(_kinds(spec)):
        if not observed.serves(_api_of(api_version, kind)):
            continue
        res = resource(api_version, kind, namespaced)
        kwargs: dict[str, Any] = {"labels": {MANAGED_BY_LABEL: MANAGED_BY}}
        if namespaced:
            kwargs["namespace"] = "*"
        for item in await list_settled(client, res, **kwargs):
            # List items carry no apiVersion or kind of their own.
            body = {**_as_dict(item), "apiVersion": api_version, "kind": kind}
            annotations = body["metadata"].get("annotations") or {}
            if DIGEST_ANNOTATION in annotations:
                applied[object_key(body)] = annotations[DIGEST_ANNOTATION]
            if kind == "Gateway" and body["metadata"]["name"] == GATEWAY_NAME:
                addresses = (body.get("status") or {}).get("addresses") or []
                gateway_addresses = [a["value"] for a in addresses if a.get("value")]

    objects: dict[str, list[str]] = {}
    for component in components_for(spec):
        for requirement in component.requirements:
            if isinstance(requirement, ObjectExists) and observed.serves(requirement.api):
                api = requirement.api
                res = resource(f"{api.group}/{api.version}", requirement.kind, False)
                names = [_as_dict(o)["metadata"]["name"] async for o in client.list(res)]
                objects[api.key] = names

    return observed.model_copy(
        update={
            "applied": applied,
            "objects": objects,
            "gateway_addresses": gateway_addresses,
            "releases": await _releases(client),
            "bundle_ca_certificate": await _bundle_ca(client) if spec.gateway.hostname else None,
        }
    )


async def _releases(client: AsyncClient) -> dict[str, ObservedRelease]:
    """The newest revision of each release the product installed, from Helm's storage."""
    newest: dict[str, ObservedRelease] = {}
    async for secret in client.list(
        Secret,
        namespace="*",
        labels={"owner": "helm", RELEASE_DIGEST_LABEL: operators.exists()},
    ):
        labels = secret.metadata.labels or {} if secret.metadata else {}
        name = labels.get("name", "")
        release = ObservedRelease(
            name=name,
            namespace=secret.metadata.namespace or "" if secret.metadata else "",
            revision=int(labels.get("version", "0")),
            status=labels.get("status", "unknown"),
            digest=labels.get(RELEASE_DIGEST_LABEL),
        )
        if name not in newest or newest[name].revision < release.revision:
            newest[name] = release
    return newest


async def _bundle_ca(client: AsyncClient) -> str | None:
    cm = await unless_missing(lambda: client.get(ConfigMap, CLUSTER_CA, namespace=NS))
    return (cm.data or {}).get(CA_KEY) if cm is not None else None


def _as_dict(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    result: dict[str, Any] = item.to_dict()
    return result
