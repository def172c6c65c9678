"""Reading the hook objects teardown looks for (``plan.teardown.hooks_to_find``).

One GET each, by the name the catalog gives it, and only at teardown: a
Standard stack's releases leave a handful, so nothing is watched for them.
What is read is reduced at once to the marks ``plan.teardown`` judges by.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lightkube import AsyncClient

from modelplane.kube.resources import KindNotServed, resource_of, unless_missing
from modelplane.plan.teardown import FoundObject, HookRef


async def find_hooks(client: AsyncClient, wanted: Sequence[HookRef]) -> list[FoundObject]:
    """The ones of ``wanted`` the target holds, each with its marks."""
    found: list[FoundObject] = []
    for hook in wanted:
        metadata = await _metadata(client, hook.ref.body())
        if metadata is not None:
            found.append(FoundObject.of(hook.ref, metadata))
    return found


async def _metadata(client: AsyncClient, body: dict[str, Any]) -> dict[str, Any] | None:
    """The live object's metadata; None when there is none of that name (or of that kind)."""
    try:
        res = await resource_of(client, body)
    except KindNotServed:
        return None
    name, namespace = body["metadata"]["name"], body["metadata"].get("namespace")
    obj = await unless_missing(lambda: client.get(res, name, namespace=namespace))
    if obj is None:
        return None
    metadata = obj.to_dict().get("metadata")
    return metadata if isinstance(metadata, dict) else {}
