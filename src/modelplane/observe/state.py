"""Observing a target: the facts ``plan`` needs, in a bounded number of reads.

Reads: API discovery (two requests, whatever the number of CRDs), one LIST
per kind the product applies, in each namespace it applies the kind in
(filtered to its own objects by label), one
LIST of Helm's release Secrets that carry the product's label per release
namespace (in that namespace only), the DeviceClasses, and the CA ConfigMap
when a hostname is set; in Managed mode, the releases' workloads by name and
their other objects by kind and namespace, metadata only. Never one GET per
object.

A label is no proof: a target's tenants may label their own objects as the
product's. ``to_observed`` (one conversion for these reads and the watches)
takes a release only from its release namespace under Helm's own name for it,
the address only from the product's Gateway, and the CA only as certificates.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from lightkube import AsyncClient
from lightkube.resources.core_v1 import ConfigMap

from modelplane.api.spec import ServingStackSpec
from modelplane.api.status_limits import OBSERVED_CONDITION_MESSAGE, OBSERVED_CONDITION_REASON
from modelplane.catalog.components import COMPONENTS, components_for, installed_for
from modelplane.catalog.configuration import (
    BUNDLES,
    CA_KEY,
    CLUSTER_CA,
    GATEWAY_NAME,
    NS,
    configuration_for,
)
from modelplane.catalog.facts import Listing
from modelplane.catalog.types import ObjectExists
from modelplane.kube.client import METADATA_LIST, ApiStatusError, list_objects, waiting_out_429
from modelplane.kube.discovery import APIS, Served, served
from modelplane.kube.plurals import Kind
from modelplane.kube.resources import unless_missing
from modelplane.observe.gpu_watch import gpu_listings
from modelplane.observe.storage_name import parse_storage_name
from modelplane.plan.drift import owned_fields
from modelplane.plan.observed import Observed, ObservedCondition, ObservedRelease
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
# Release reads in flight at once on one target.
PARALLEL_READS = 8
T = TypeVar("T")
SECRETS = ApiRef("", "v1", "secrets")
# The product's own objects.
OURS = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
# Where each release the catalog installs lives: Helm reads a release only
# from its release namespace, and so does the operator. Its Secrets are
# listed there and nowhere else (one LIST, or one watch, per namespace): a
# label selector is no scope, since a tenant can set any label, and one
# over every namespace had the API server send every tenant look-alike,
# data and all, to be thrown away here.
RELEASE_NAMESPACES = {c.release_name: c.namespace for c in COMPONENTS if c.chart is not None}


def release_secret_selector(namespace: str) -> str:
    """The label selector of Helm's Secrets of the catalog's releases in ``namespace``.

    Helm's own (``owner=helm,name=<release>``, pkg/storage/driver/secrets.go):
    every Secret Helm would read as a revision of one of them, the product's
    digest label or not, so that none the operator did not write goes unseen
    (plan.release_trust).
    """
    names = sorted(r for r, ns in RELEASE_NAMESPACES.items() if ns == namespace)
    return f"owner=helm,name in ({','.join(names)})"


# The Gateway API caps status.addresses at 16 items.
MAX_ADDRESSES = 16
# The conditions the plan reads of the product's Gateway and Bundle; how
# much of each is kept is status_limits' (OBSERVED_CONDITION_*).
GATEWAY_CONDITIONS = frozenset({"Accepted", "Programmed"})
BUNDLE_CONDITIONS = frozenset({"Synced"})
# A namespace is a DNS-1123 label.
MAX_NAMESPACE = 63
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _kinds(spec: ServingStackSpec) -> set[tuple[str, str, str]]:
    """(apiVersion, kind, namespace) of what the product applies; "" for a cluster-scoped kind.

    A namespaced kind is read only in the namespaces the product's own objects
    of it are in: a tenant may label its own objects as the product's, and
    those elsewhere are never sent.
    """
    kinds = {
        (o.body["apiVersion"], o.body["kind"], str(o.body["metadata"].get("namespace") or ""))
        for o in configuration_for(spec)
    }
    for component in components_for(spec):
        if component.objects is not None:
            kinds |= {
                (b["apiVersion"], b["kind"], str(b["metadata"].get("namespace") or ""))
                for b in component.objects(spec)
            }
        if component.manifests is not None:
            kinds.add((CRD_API_VERSION, "CustomResourceDefinition", ""))
    return kinds


def api_of(api_version: str, kind: str, plurals: Mapping[Kind, str]) -> ApiRef | None:
    """The resource ``kind`` is served as, by discovery's ``plurals``; None when not served."""
    plural = plurals.get((api_version, kind))
    if plural is None:
        return None
    group, _, version = api_version.rpartition("/")
    return ApiRef(group, version, plural)


@dataclass(frozen=True)
class ReleaseWatch:
    """One workload of a release's stored manifest, and the label selector of its pods.

    Read by name (a field selector), the pods by the workload's own
    ``matchLabels`` in its namespace: what the release runs, not the cluster.
    """

    api: ApiRef
    namespace: str
    name: str
    pods: str | None = None

    @property
    def fields(self) -> str:
        return f"metadata.name={self.name}"


@dataclass(frozen=True)
class ReleaseCollection:
    """Where a release's objects other than its workloads are followed: one kind in one
    namespace (None: cluster-scoped), their metadata only, and the names followed there.

    Metadata only: drift is judged by who owns which fields
    (``metadata.managedFields``), and a deletion by presence; a Secret's
    data is never read.
    """

    api: ApiRef
    namespace: str | None
    names: frozenset[str]


PODS = ApiRef("", "v1", "pods")
NODES = ApiRef("", "v1", "nodes")


def _watch_order(w: ReleaseWatch) -> tuple[str, str, str]:
    return (w.api.key, w.namespace, w.name)


@dataclass(frozen=True)
class Wanted:
    """What ``observe`` lists for a spec: read directly, or kept by the watches."""

    # (apiVersion, kind, namespace) of every kind the product applies, once
    # per namespace it applies that kind in ("" for a cluster-scoped kind).
    kinds: frozenset[tuple[str, str, str]]
    # The named objects requirements ask about, by API (all objects of the kind).
    objects: frozenset[tuple[ApiRef, str]]
    # The CA ConfigMap is read only when the spec sets a hostname.
    bundle_ca: bool
    # The --image-pull-secret names, whose presence (metadata only) is read
    # in every namespace: one LIST, or one watch, per name.
    pull_secrets: tuple[str, ...] = ()
    # Managed mode: the workloads the releases' stored manifests install, as
    # the last reconcile read them (observe.release_objects).
    release_objects: tuple[ReleaseWatch, ...] = ()
    # The namespaces of the spec's releases, where Helm's Secrets are read.
    release_namespaces: tuple[str, ...] = ()
    # Managed mode: the releases' other objects (observe.release_others).
    release_collections: tuple[ReleaseCollection, ...] = ()
    # What the GPU checks list, watched so GPUsAvailable follows the
    # cluster (observe.gpu_watch); the facts themselves are read directly.
    gpu_listings: tuple[Listing, ...] = ()

    @property
    def nodes(self) -> bool:
        """Whether the Nodes are read: a release's DaemonSet is judged by the nodes it fits."""
        return any(w.api.resource == "daemonsets" for w in self.release_objects)


def wanted(spec: ServingStackSpec, pull_secrets: Sequence[str] = ()) -> Wanted:
    objects = {
        (r.api, r.kind)
        for component in components_for(spec)
        for r in component.requirements
        if isinstance(r, ObjectExists)
    }
    return Wanted(
        frozenset(_kinds(spec)),
        frozenset(objects),
        bool(spec.gateway.hostname),
        tuple(pull_secrets),
        # Only where a release of the product's may be: in Provided mode Helm's
        # Secrets of the substrate are neither planned from nor removed.
        release_namespaces=tuple(
            sorted({c.namespace for c in installed_for(spec) if c.chart is not None})
        ),
        gpu_listings=gpu_listings(spec),
    )


def pull_secret_selector(name: str) -> str:
    """The field selector that lists the Secrets of one name, in every namespace."""
    return f"metadata.name={name}"


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
    # Helm's release storage Secrets of the catalog's releases, in their namespaces.
    release_secrets: list[dict[str, Any]] = field(default_factory=list)
    ca_configmap: dict[str, Any] | None = None
    # Pull Secret name -> the Secrets of that name, metadata only.
    pull_secrets: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Per release workload: the object (none or one) and its pods; the Nodes.
    release_objects: dict[ReleaseWatch, list[dict[str, Any]]] = field(default_factory=dict)
    release_pods: dict[ReleaseWatch, list[dict[str, Any]]] = field(default_factory=dict)
    nodes: list[dict[str, Any]] | None = None
    # Per collection of a release's other objects: their metadata; absent
    # when the target would not list it (then not judged).
    release_collections: dict[ReleaseCollection, list[dict[str, Any]]] = field(default_factory=dict)


def to_observed(listed: Listed) -> Observed:
    observed = Observed(apis=listed.apis)
    applied: dict[str, str] = {}
    owned: dict[str, dict[str, Any]] = {}
    gateway_addresses: list[str] = []
    gateway_conditions: list[ObservedCondition] = []
    bundle_conditions: list[ObservedCondition] = []
    for (api_version, kind), items in sorted(listed.items.items()):
        for item in items:
            # List items carry no apiVersion or kind of their own.
            body = {**item, "apiVersion": api_version, "kind": kind}
            metadata = body.get("metadata")
            if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
                continue  # no object a plan can name: a target's garbage, not ours
            annotations = metadata.get("annotations") or {}
            if not isinstance(annotations, dict):
                continue
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
            if _is_product_gateway(body):
                gateway_addresses = _addresses(body)
                gateway_conditions = _conditions(body, GATEWAY_CONDITIONS)
            elif _is_product_bundle(body):
                bundle_conditions = _conditions(body, BUNDLE_CONDITIONS)
    ca = listed.ca_configmap
    ca_text = (ca.get("data") or {}).get(CA_KEY) if ca else None
    return observed.model_copy(
        update={
            "applied": applied,
            "owned": owned,
            "objects": {
                key: [o["metadata"]["name"] for o in items] for key, items in listed.objects.items()
            },
            "gateway_addresses": gateway_addresses,
            "gateway_conditions": gateway_conditions,
            "bundle_conditions": bundle_conditions,
            "releases": _releases(listed.release_secrets),
            # Judged by the plan (plan.gateway), so render --observed agrees.
            "bundle_ca_certificate": ca_text if isinstance(ca_text, str) else None,
            "pull_secrets": {
                name: secret_namespaces(name, items) for name, items in listed.pull_secrets.items()
            },
        }
    )


def secret_namespaces(name: str, secrets: list[dict[str, Any]]) -> list[str]:
    """The namespaces a Secret named ``name`` is in, as the plan compares them.

    Only a namespace exactly as the API server allows one (a DNS label) is
    kept: the plan only tests membership, so nothing else from the target
    could ever name a namespace the product installs into.
    """
    found: set[str] = set()
    for secret in secrets:
        metadata = secret.get("metadata") or {}
        namespace = metadata.get("namespace")
        if (
            metadata.get("name") == name
            and isinstance(namespace, str)
            and len(namespace) <= MAX_NAMESPACE
            and _DNS_LABEL.fullmatch(namespace)
        ):
            found.add(namespace)
    return sorted(found)


def _is_product_gateway(body: dict[str, Any]) -> bool:
    # Listed by the product's label in every namespace; only the one the
    # plan writes is ours (a tenant may label a Gateway of its own).
    metadata = body["metadata"]
    return bool(metadata.get("namespace") == NS and metadata.get("name") == GATEWAY_NAME)


def _is_product_bundle(body: dict[str, Any]) -> bool:
    # A Bundle is cluster-scoped; the product's is named after its CA.
    return bool(
        body.get("apiVersion") == BUNDLES.group_version
        and body.get("kind") == "Bundle"
        and body["metadata"].get("name") == CLUSTER_CA
    )


def _conditions(body: dict[str, Any], types: frozenset[str]) -> list[ObservedCondition]:
    """The conditions of ``types`` in ``body``'s status, of the shape the API gives them.

    Strings only, as the target wrote them: the plan cuts them where it shows them.
    """
    found = (body.get("status") or {}).get("conditions")
    out: dict[str, ObservedCondition] = {}
    for c in found if isinstance(found, list) else []:
        if not isinstance(c, dict) or c.get("type") not in types or c["type"] in out:
            continue
        if not isinstance(c.get("status"), str):
            continue
        reason, message = c.get("reason"), c.get("message")
        out[c["type"]] = ObservedCondition(
            type=c["type"],
            status=c["status"],
            reason=reason[:OBSERVED_CONDITION_REASON] if isinstance(reason, str) else "",
            message=message[:OBSERVED_CONDITION_MESSAGE] if isinstance(message, str) else "",
        )
    return [out[t] for t in sorted(out)]


def _addresses(gateway: dict[str, Any]) -> list[str]:
    found = (gateway.get("status") or {}).get("addresses") or []
    values = [a.get("value") for a in found if isinstance(a, dict)]
    # Strings only; which of them may be published is the plan's decision
    # (plan.gateway.published_address), so render --observed agrees.
    return [v for v in values if isinstance(v, str)][:MAX_ADDRESSES]


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
    for api_version, kind, namespace in sorted(want.kinds):
        api = api_of(api_version, kind, found.plurals)
        if api is None or not api.served_in(listed.apis):
            continue
        listed.items.setdefault((api_version, kind), []).extend(
            await waiting_out_429(
                partial(list_objects, client, api, namespace=namespace or None, labels=OURS)
            )
        )
    for api, _ in sorted(want.objects, key=lambda o: (o[0].key, o[1])):
        if api.served_in(listed.apis):
            listed.objects[api.key] = await list_objects(client, api)
    for namespace in want.release_namespaces:
        listed.release_secrets += await list_objects(
            client, SECRETS, namespace=namespace, labels=release_secret_selector(namespace)
        )
    if want.bundle_ca:
        cm = await unless_missing(lambda: client.get(ConfigMap, CLUSTER_CA, namespace=NS))
        listed.ca_configmap = _as_dict(cm) if cm is not None else None
    for name in want.pull_secrets:
        listed.pull_secrets[name] = await list_objects(
            client, SECRETS, fields=pull_secret_selector(name), accept=METADATA_LIST
        )
    await read_release_objects(client, want, listed)
    return listed


async def read_release_objects(client: AsyncClient, want: Wanted, listed: Listed) -> None:
    """Read the release workloads ``want`` names into ``listed``, as the watches keep them."""
    # A few at a time rather than one by one: a stack's releases run a few
    # dozen workloads, and a change that arrives while these are read waits
    # for all of them (seconds, one after the other, on a loaded server).
    gate = asyncio.Semaphore(PARALLEL_READS)

    async def gated(read: Awaitable[T]) -> T:
        async with gate:
            return await read

    watches = sorted(want.release_objects, key=_watch_order)
    objects, pods, nodes, collections = await asyncio.gather(
        asyncio.gather(
            *(
                gated(list_objects(client, w.api, namespace=w.namespace, fields=w.fields))
                for w in watches
            )
        ),
        asyncio.gather(
            *(
                gated(list_objects(client, PODS, namespace=w.namespace, labels=w.pods))
                for w in watches
                if w.pods is not None
            )
        ),
        gated(list_objects(client, NODES)) if want.nodes else _none(),
        asyncio.gather(
            *(
                gated(
                    _unless_refused(
                        list_objects(client, c.api, namespace=c.namespace, accept=METADATA_LIST)
                    )
                )
                for c in want.release_collections
            )
        ),
    )
    listed.release_objects.update(zip(watches, objects, strict=True))
    listed.release_pods.update(zip([w for w in watches if w.pods is not None], pods, strict=True))
    listed.nodes = nodes
    for c, found in zip(want.release_collections, collections, strict=True):
        if found is not None:
            listed.release_collections[c] = found


async def _none() -> None:
    return None


async def _unless_refused(
    listing: Awaitable[list[dict[str, Any]]],
) -> list[dict[str, Any]] | None:
    """A LIST's items; None when the target does not let us list, or serve, the kind.

    A release's objects are followed where the operator may read them; one
    it may not is left unjudged rather than stopping the reconcile.
    """
    try:
        return await listing
    except ApiStatusError as err:
        if err.status in (403, 404, 405):
            return None
        raise


def _releases(secrets: list[dict[str, Any]]) -> dict[str, ObservedRelease]:
    """The newest revision of each release the product installed, from Helm's storage.

    A Secret counts only in its release's namespace, under Helm's name for
    one revision of it, with labels that agree (name and version): what
    Helm itself would read. Anything else is someone else's Secret.
    """
    newest: dict[str, ObservedRelease] = {}
    for secret in secrets:
        release = release_of(secret)
        if release is None:
            continue
        if release.name not in newest or newest[release.name].revision < release.revision:
            newest[release.name] = release
    return newest


def release_of(secret: dict[str, Any]) -> ObservedRelease | None:
    """The revision a release Secret stores, or None unless Helm would read it as ours."""
    metadata = secret.get("metadata") or {}
    labels = metadata.get("labels") or {}
    found = parse_storage_name(str(metadata.get("name") or ""))
    if found is None:
        return None
    name, revision = found
    if RELEASE_NAMESPACES.get(name) != metadata.get("namespace"):
        return None
    if labels.get("name") != name or labels.get("version") != str(revision):
        return None
    digest = labels.get(RELEASE_DIGEST_LABEL)
    return ObservedRelease(
        name=name,
        namespace=str(metadata["namespace"]),
        revision=revision,
        # Labels are at most 63 characters; a status Helm does not write
        # reads as out of sync, never as deployed.
        status=str(labels.get("status") or "unknown")[:63],
        digest=str(digest)[:63] if digest is not None else None,
    )


def _as_dict(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    result: dict[str, Any] = item.to_dict()
    return result
