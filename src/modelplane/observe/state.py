"""Observing a target: the facts ``plan`` needs, in a bounded number of reads.

Reads: API discovery (two requests, whatever the number of CRDs), one LIST
per kind the product applies (filtered to its own objects by label), one
LIST of Helm's release Secrets that carry the product's label, the
DeviceClasses, and the CA ConfigMap when a hostname is set. Never one GET
per object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import ConfigMap

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
from modelplane.kube.client import list_objects, waiting_out_429
from modelplane.kube.discovery import APIS, PLURALS, Served, served
from modelplane.kube.resources import unless_missing
from modelplane.plan.drift import owned_fields
from modelplane.plan.observed import Observed, ObservedRelease
from modelplane.wire import (
    DIGEST_ANNOTATION,
    FIELD_MANAGER,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    RELEASE_DIGEST_LABEL,
    ApiRef,
    object_key,
)

CRD_API_VERSION = "apiextensions.k8s.io/v1"
SECRETS = ApiRef("", "v1", "secrets")
# The product's own objects, and Helm's release Secrets that carry its digest.
OURS = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
RELEASE_SECRETS = f"owner=helm,{RELEASE_DIGEST_LABEL}"


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


def api_of(api_version: str, kind: str, plurals: PLURALS) -> ApiRef | None:
    """The resource ``kind`` is served as, by discovery's ``plurals``; None when not served."""
    plural = plurals.get((api_version, kind))
    if plural is None:
        return None
    group, _, version = api_version.rpartition("/")
    return ApiRef(group, version, plural)


@dataclass(frozen=True)
class Wanted:
    """What ``observe`` lists for a spec: read directly, or kept by the watches."""

    # (apiVersion, kind, namespaced) of every kind the product applies.
    kinds: frozenset[tuple[str, str, bool]]
    # The named objects requirements ask about, by API (all objects of the kind).
    objects: frozenset[tuple[ApiRef, str]]
    # The CA ConfigMap is read only when the spec sets a hostname.
    bundle_ca: bool


def wanted(spec: ServingStackSpec) -> Wanted:
    objects = {
        (r.api, r.kind)
        for component in components_for(spec)
        for r in component.requirements
        if isinstance(r, ObjectExists)
    }
    return Wanted(frozenset(_kinds(spec)), frozenset(objects), bool(spec.gateway.hostname))


@dataclass
class Listed:
    """The raw answers ``observe`` reads, as wire dictionaries, before any rule.

    The direct reads and the watch-fed cache both fill one of these, and
    ``to_observed`` turns it into ``Observed``: one conversion for both paths.
    """

    apis: APIS
    # (apiVersion, kind) -> the product's own objects of that kind (by label).
    items: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    # ApiRef.key -> every object of a kind a requirement names.
    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Helm's release storage Secrets that carry the product's digest label.
    release_secrets: list[dict[str, Any]] = field(default_factory=list)
    ca_configmap: dict[str, Any] | None = None


def to_observed(listed: Listed) -> Observed:
    observed = Observed(apis=listed.apis)
    applied: dict[str, str] = {}
    owned: dict[str, dict[str, Any]] = {}
    gateway_addresses: list[str] = []
    for (api_version, kind), items in sorted(listed.items.items()):
        for item in items:
            # List items carry no apiVersion or kind of their own.
            body = {**item, "apiVersion": api_version, "kind": kind}
            annotations = body["metadata"].get("annotations") or {}
            if DIGEST_ANNOTATION in annotations:
                applied[object_key(body)] = annotations[DIGEST_ANNOTATION]
                # CRDs come from fetched manifests the plan holds no body
                # of, and their fieldsV1 run to hundreds of KiB: digest only.
                fields = (
                    owned_fields(body["metadata"], FIELD_MANAGER)
                    if kind != "CustomResourceDefinition"
                    else None
                )
                if fields is not None:
                    owned[object_key(body)] = fields
            if kind == "Gateway" and body["metadata"]["name"] == GATEWAY_NAME:
                addresses = (body.get("status") or {}).get("addresses") or []
                gateway_addresses = [a["value"] for a in addresses if a.get("value")]
    ca = listed.ca_configmap
    return observed.model_copy(
        update={
            "applied": applied,
            "owned": owned,
            "objects": {
                key: [o["metadata"]["name"] for o in items] for key, items in listed.objects.items()
            },
            "gateway_addresses": gateway_addresses,
            "releases": _releases(listed.release_secrets),
            "bundle_ca_certificate": (ca.get("data") or {}).get(CA_KEY) if ca else None,
        }
    )


async def observe(client: AsyncClient, spec: ServingStackSpec) -> Observed:
    """Observe the target with direct reads (no watch, no cache)."""
    return to_observed(await read_listed(client, wanted(spec)))


async def read_listed(client: AsyncClient, want: Wanted, found: Served | None = None) -> Listed:
    """Read what ``want`` names from the target; discovery too unless ``found`` is given.

    The same LISTs, with the same selectors, as the watches keep (``WatchCache``).
    """
    if found is None:
        found = await served(client)
    listed = Listed(apis=found.apis)
    for api_version, kind, _ in sorted(want.kinds):
        api = api_of(api_version, kind, found.plurals)
        if api is None or not api.served_in(listed.apis):
            continue
        listed.items[(api_version, kind)] = await waiting_out_429(
            partial(list_objects, client, api, labels=OURS)
        )
    for api, _ in sorted(want.objects, key=lambda o: (o[0].key, o[1])):
        if api.served_in(listed.apis):
            listed.objects[api.key] = await list_objects(client, api)
    listed.release_secrets = await list_objects(client, SECRETS, labels=RELEASE_SECRETS)
    if want.bundle_ca:
        cm = await unless_missing(lambda: client.get(ConfigMap, CLUSTER_CA, namespace=NS))
        listed.ca_configmap = _as_dict(cm) if cm is not None else None
    return listed


def _releases(secrets: list[dict[str, Any]]) -> dict[str, ObservedRelease]:
    """The newest revision of each release the product installed, from Helm's storage."""
    newest: dict[str, ObservedRelease] = {}
    for secret in secrets:
        metadata = secret.get("metadata") or {}
        labels = metadata.get("labels") or {}
        name = labels.get("name", "")
        release = ObservedRelease(
            name=name,
            namespace=metadata.get("namespace") or "",
            revision=int(labels.get("version", "0")),
            status=labels.get("status", "unknown"),
            digest=labels.get(RELEASE_DIGEST_LABEL),
        )
        if name not in newest or newest[name].revision < release.revision:
            newest[name] = release
    return newest


def _as_dict(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    result: dict[str, Any] = item.to_dict()
    return result
