"""The canaries read afresh from the hub, before a stack that is not one takes a slot.

Why the watch is not enough is in operator.rollout. A LIST without a
resourceVersion is a quorum read: it holds every edit the hub acknowledged
before it, so every canary edit made before the stack's own is in it,
however late the watch brings it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import httpx2
from lightkube.core.exceptions import ApiError

from modelplane.kube.answers import describe_error
from modelplane.operator.rollout import Canaries
from modelplane.operator.runtime import Runtime, ServingStackResource
from modelplane.plan.selector import selects


async def canaries_for(rt: Runtime, body: Mapping[str, Any], now: datetime) -> Canaries | None:
    """The canaries, read now, when the stack's turn needs them; else None."""
    if not rt.rollout.needs_canaries(body, now):
        return None
    try:
        return Canaries(tuple(await _read(rt)))
    except (ApiError, httpx2.HTTPError) as err:
        return Canaries(error=describe_error(err))


async def _read(rt: Runtime) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for namespace in sorted(rt.rollout.policy.canary_namespaces):
        async for obj in rt.hub.list(ServingStackResource, namespace=namespace):
            # A generic resource: lightkube leaves its to_dict untyped.
            stack: dict[str, Any] = obj.to_dict()  # type: ignore[no-untyped-call]
            labels = (stack.get("metadata") or {}).get("labels") or {}
            # Only this shard's: the rollout is per shard.
            if rt.options.selector is None or selects(rt.options.selector, labels):
                out.append(stack)
    return out
