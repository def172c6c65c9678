"""Writing to a target: server-side apply with one field manager, and deletes."""

from __future__ import annotations

from typing import Any

import httpx2
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from modelplane.target.resources import resource_of
from modelplane.wire import FIELD_MANAGER, settled


async def apply_object(client: AsyncClient, body: dict[str, Any]) -> None:
    res = resource_of(body)
    obj: Any = res.from_dict(body)
    await settled(
        lambda: client.apply(
            obj,
            name=body["metadata"]["name"],
            namespace=body["metadata"].get("namespace"),
            field_manager=FIELD_MANAGER,
            # The product owns these fields; another manager that took them
            # over (someone's kubectl edit) is overruled, as drift
            # correction should.
            force=True,
        )
    )


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
    async with httpx2.AsyncClient(timeout=timeout, follow_redirects=True) as http:
        response = await http.get(url)
        response.raise_for_status()
    return [doc for doc in yaml.safe_load_all(response.text) if isinstance(doc, dict)]
