"""Writing to a target: server-side apply with one field manager, and deletes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable
from typing import Any

import httpx2
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.admissionregistration_v1 import (
    MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration,
)

from modelplane.catalog.components import BY_NAME
from modelplane.kube.address import DEFAULT_DENIED, IPNetwork
from modelplane.kube.answers import describe_error, webhook_call_failed
from modelplane.kube.client import waiting_out_429
from modelplane.kube.errors import ErrorKind, KnownError
from modelplane.kube.fetch import FetchError, fetch
from modelplane.kube.resources import resource_of, unless_missing
from modelplane.kube.scrub import shown_url
from modelplane.plan.model import PlannedManifests
from modelplane.untrusted import Limits, UntrustedInputError, load_yaml_all, printable
from modelplane.wire import FIELD_MANAGER, stamp

log = logging.getLogger("modelplane.actions")


class WebhookNotReady(KnownError):
    """The target could not call an admission webhook for an object: nothing was written.

    A webhook's chart is Ready before its server answers (cert-manager's
    webhook waits for its pod and for cainjector to inject its CA), so this is
    a wait, retried with backoff, and said as such rather than as a failure.
    """

    kind = ErrorKind.WEBHOOK_NOT_READY

    def __init__(self, webhook: str, configurations: list[str], refused: str, detail: str) -> None:
        self.webhook = webhook
        self.configurations = configurations
        self.refused = refused
        self.detail = detail
        held_in = f" ({', '.join(configurations)})" if configurations else ""
        super().__init__(
            f'admission webhook "{webhook}"{held_in} cannot be called yet, so the target '
            f"refused {refused}: {detail}"
        )


async def webhook_configurations(client: AsyncClient, webhook: str) -> list[str]:
    """The webhook configurations that hold a webhook of this name, as ``Kind name``.

    The API server's error names the webhook, not its configuration, which
    is what a person looks up (``kubectl get validatingwebhookconfiguration``).
    Best effort: without the right to list them, the webhook's name stands alone.
    """
    found: list[str] = []
    kinds: tuple[Any, ...] = (ValidatingWebhookConfiguration, MutatingWebhookConfiguration)
    for res in kinds:
        try:
            async for configuration in client.list(res):
                if any(w.name == webhook for w in configuration.webhooks or []):
                    found.append(f"{res.__name__} {configuration.metadata.name}")
        except (ApiError, httpx2.HTTPError) as err:
            log.debug("cannot list %s: %s", res.__name__, describe_error(err))
    return sorted(found)


def _shown(body: dict[str, Any]) -> str:
    meta = body["metadata"]
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{body['kind']} {where}{meta['name']}"


async def apply_object(client: AsyncClient, body: dict[str, Any]) -> str | None:
    """Server-side apply ``body``; the resourceVersion it is stored at, if the answer says.

    ``WebhookNotReady`` when a webhook cannot be called.
    """
    answer = await _apply(client, body, dry_run=False)
    version = getattr(getattr(answer, "metadata", None), "resourceVersion", None)
    return version if isinstance(version, str) else None


async def dry_run_apply(client: AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    """What the API server would make of ``apply_object(body)``, with nothing written.

    The same request with ``dryRun=All``: admission (webhooks included) and
    defaulting run, nothing is stored. The answer goes through the same
    resource class as the apply, as ``normalized`` puts a live object.
    """
    answer = await _apply(client, body, dry_run=True)
    out: dict[str, Any] = answer.to_dict()
    return out


async def normalized(client: AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the resource class ``apply_object`` uses reads it back.

    A typed model keeps only the fields it knows, so a live object read as
    plain JSON is put through it before it is compared with a dry run's answer.
    """
    res = await resource_of(client, body)
    out: dict[str, Any] = res.from_dict(body).to_dict()
    return out


async def _apply(client: AsyncClient, body: dict[str, Any], *, dry_run: bool) -> Any:
    res = await resource_of(client, body)
    obj: Any = res.from_dict(body)
    try:
        return await waiting_out_429(
            lambda: client.apply(
                obj,
                name=body["metadata"]["name"],
                namespace=body["metadata"].get("namespace"),
                field_manager=FIELD_MANAGER,
                # The product owns these fields; another manager that took them
                # over (someone's kubectl edit) is overruled, as drift
                # correction should.
                force=True,
                dry_run=dry_run,
            )
        )
    except ApiError as err:
        failed = webhook_call_failed(err)
        if failed is None:
            raise
        configurations = await webhook_configurations(client, failed.webhook)
        raise WebhookNotReady(failed.webhook, configurations, _shown(body), failed.detail) from err


def namespace_body(name: str) -> dict[str, Any]:
    """A namespace as the product creates it: labelled and stamped as its own."""
    return stamp({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


async def create_namespace(client: AsyncClient, name: str) -> bool:
    """Create the namespace as the product's own unless it exists; True when this created it.

    Created, never applied: applying would label a namespace the cluster
    owner made as ours, and teardown deletes the namespaces that carry the
    label. One that exists (the owner's, or ours already) is left as it is.
    """
    body = namespace_body(name)
    res = await resource_of(client, body)
    try:
        await waiting_out_429(lambda: client.create(res.from_dict(body)))
    except ApiError as err:
        if err.status.code == 409:  # AlreadyExists
            return False
        raise
    return True


async def delete_object(client: AsyncClient, body: dict[str, Any]) -> bool:
    """Delete the object; True while it still exists (finalizers may hold it)."""
    res = await resource_of(client, body)
    name, namespace = body["metadata"]["name"], body["metadata"].get("namespace")

    async def delete() -> bool:
        await client.delete(res, name, namespace=namespace)
        return True

    if not await unless_missing(delete):
        return False
    return await unless_missing(lambda: client.get(res, name, namespace=namespace)) is not None


# A release's CRD file is a few hundred KiB (Gateway API's largest CRD is
# under 500 KiB); more than this is not a manifest we asked for.
MAX_MANIFEST_BYTES = 8 * 1024 * 1024
CRD_API_VERSION = "apiextensions.k8s.io/v1"
# A CRD's schema nests deeper than a configuration does (properties, items,
# additionalProperties at every level); a real manifest is a few nodes for
# every ten bytes, so a million nodes is far more than one holds and far
# less than an alias bomb expands to.
MANIFEST_MAX_DEPTH = 256
MANIFEST_MAX_NODES = 1_000_000


def _manifest_limits() -> Limits:
    return Limits(
        max_bytes=MAX_MANIFEST_BYTES, max_depth=MANIFEST_MAX_DEPTH, max_nodes=MANIFEST_MAX_NODES
    )


CRD_KIND = "CustomResourceDefinition"


class ManifestError(ValueError):
    """A fetched manifest set the operator will not apply; nothing of it was applied.

    A ValueError, so the reconciler's guard reports it as the component's failure.
    """


async def fetch_manifests(
    url: str, timeout: float = 60.0, *, deny: Iterable[IPNetwork] = DEFAULT_DENIED
) -> list[dict[str, Any]]:
    """The objects of a release manifest, as the upstream (or a mirror) serves it."""
    shown = shown_url(url)
    try:
        data = await fetch(url, deny=deny, limit=MAX_MANIFEST_BYTES, timeout=timeout)
    except FetchError as err:
        raise ManifestError(f"{shown} {err}") from None
    # Up to MAX_MANIFEST_BYTES of YAML: seconds to parse, off the event loop.
    return await asyncio.to_thread(parse_manifests, bytes(data), shown)


def parse_manifests(data: bytes, shown: str) -> list[dict[str, Any]]:
    """The objects of a manifest file, parsed within ``MANIFEST_LIMITS``; ``shown`` names it.

    An empty document (between two ``---``, or after a trailing one) is
    nothing, as for kubectl.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ManifestError(f"{shown} is not UTF-8 text (byte {err.start})") from None
    try:
        docs = list(load_yaml_all(text, _manifest_limits()))
    except UntrustedInputError as err:
        raise ManifestError(f"{shown} is not valid YAML: {err}") from None
    objects = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue  # an empty document between two "---"
        if not isinstance(doc, dict):
            raise ManifestError(
                f"{shown}: document {index + 1} is a {type(doc).__name__}, not an object"
            )
        objects.append(doc)
    return objects


def _name(body: dict[str, Any]) -> str | None:
    metadata = body.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else None


def vet_manifests(
    objects: list[dict[str, Any]],
    required: Collection[str],
    allowed: Collection[str],
    source: str,
) -> list[dict[str, Any]]:
    """``objects`` if they are exactly what the catalog expects the source to bring.

    Every object must be a CustomResourceDefinition named in ``required`` or
    ``allowed``, and every ``required`` one must be there. Anything else
    refuses the whole set: the URL is built from a spec field and may point at
    a mirror, and whatever it serves would be applied with the operator's
    rights on the target.
    """
    source = shown_url(source)
    expected = set(required) | set(allowed)
    unexpected = [
        f"{printable(body.get('kind') or '(no kind)', 80)} "
        f"{printable(_name(body) or '(no name)', 253)}"
        for body in objects
        if body.get("apiVersion") != CRD_API_VERSION
        or body.get("kind") != CRD_KIND
        or _name(body) not in expected
    ]
    if unexpected:
        shown = ", ".join(unexpected[:5]) + (
            f" and {len(unexpected) - 5} more" if len(unexpected) > 5 else ""
        )
        raise ManifestError(
            f"{source} holds objects this component does not bring, so none of it was "
            f"applied: {shown} (expected only {CRD_KIND} {', '.join(sorted(expected))})"
        )
    missing = sorted(set(required) - {_name(body) for body in objects})
    if missing:
        raise ManifestError(
            f"{source} lacks {CRD_KIND} {', '.join(missing)}, so none of it was applied"
        )
    return objects


async def manifest_objects(
    m: PlannedManifests, deny: Iterable[IPNetwork] = DEFAULT_DENIED
) -> list[dict[str, Any]]:
    """The objects of a component's planned manifests, as the reconcile and ``diff`` take them.

    Fetched through the deny list and vetted against what the catalog says
    the source brings; not yet stamped with the source's digest, which each
    apply (or dry run) adds to its own copy.
    """
    source = BY_NAME[m.component].manifests
    others = source.other_crds if source is not None else ()
    return vet_manifests(await fetch_manifests(m.url, deny=deny), m.crds, others, m.url)
