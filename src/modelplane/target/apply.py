"""Writing to a target: server-side apply with one field manager, and deletes."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from modelplane.catalog.configuration import object_key
from modelplane.plan.planner import DIGEST_ANNOTATION, MANAGED_BY, MANAGED_BY_LABEL
from modelplane.target.resources import SETTLE_ATTEMPTS, SETTLE_DELAY, resource_of

FIELD_MANAGER = "modelplane"


async def apply_object(client: AsyncClient, body: dict[str, Any]) -> None:
    res = resource_of(body)
    obj: Any = res.from_dict(body)
    for attempt in range(SETTLE_ATTEMPTS):
        try:
            await client.apply(
                obj,
                name=body["metadata"]["name"],
                namespace=body["metadata"].get("namespace"),
                field_manager=FIELD_MANAGER,
                # The product owns these fields; another manager that took them
                # over (someone's kubectl edit) is overruled, as drift
                # correction should.
                force=True,
            )
            return
        except ApiError as err:
            # 429: the CRD's storage is still initialising (see list_settled).
            if err.status.code != 429 or attempt == SETTLE_ATTEMPTS - 1:
                raise
            await asyncio.sleep(SETTLE_DELAY)


async def delete_object(client: AsyncClient, body: dict[str, Any]) -> bool:
    """Delete the object; True while it still exists (finalizers may hold it)."""
    res = resource_of(body)
    name, namespace = body["metadata"]["name"], body["metadata"].get("namespace")
    try:
        await client.delete(res, name, namespace=namespace)
    except ApiError as err:
        if err.status.code == 404:
            return False
        raise
    try:
        await client.get(res, name, namespace=namespace)
    except ApiError as err:
        if err.status.code == 404:
            return False
        raise
    return True


async def fetch_manifests(url: str, timeout: float = 60.0) -> list[dict[str, Any]]:
    """The objects of a release manifest, as the upstream (or a mirror) serves it."""
    async with httpx.AsyncClient(timeout=timeout, follow_redirects=True) as http:
        response = await http.get(url)
        response.raise_for_status()
    return [doc for doc in yaml.safe_load_all(response.text) if isinstance(doc, dict)]


def stamp_manifest(body: dict[str, Any], digest: str) -> dict[str, Any]:
    """A fetched object as applied: ours by label, carrying its source's digest.

    Status and creationTimestamp are dropped: they are not ours to set, and
    keeping them would make every apply a change.
    """
    meta = {k: v for k, v in body["metadata"].items() if k != "creationTimestamp"}
    meta["labels"] = {**(meta.get("labels") or {}), MANAGED_BY_LABEL: MANAGED_BY}
    meta["annotations"] = {**(meta.get("annotations") or {}), DIGEST_ANNOTATION: digest}
    return {**{k: v for k, v in body.items() if k != "status"}, "metadata": meta}


__all__ = ["apply_object", "delete_object", "fetch_manifests", "object_key", "stamp_manifest"]
