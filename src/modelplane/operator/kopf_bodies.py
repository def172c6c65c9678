"""The hub's ServingStacks as kopf keeps them: without their managedFields.

kopf keeps the last body it saw of every stack (a daemon's live body, its
per-object memory) as the JSON its watch parsed, for as long as the stack
lives. A reconciled stack's body is some 6 KB of JSON, 1.4 KB of it
``metadata.managedFields`` (who last set which field: the operator's status
writes, kopf's finalizer, the stack's author), which neither kopf nor the
operator ever reads: kopf's diff base keeps none of the metadata but labels
and annotations, and the operator reads the spec, the status and the rest
of the metadata. Parsed, those are 10.6 KiB a stack of the 25 the body
takes, 26 MiB on a shard of 2,500 (issue 42, measured over a bench hub's
504 reconciled stacks). Controllers in Go drop the same field as it enters
their caches (a transform set on client-go's informer, ``SetTransform``);
kopf 1.45 has no such hook, so the events are stripped as kopf's watch
yields them, before anything of kopf queues or keeps them. Dropping the
field from a copy read locally changes nothing on the hub: kopf patches,
and never sends a body back.

PATCH(kopf): ``install`` replaces ``kopf._cogs.clients.watching.infinite_watch``
(private) with a wrapper of it, which kopf's queueing looks up at every
watch it starts. ``_RELIED_ON`` names what this rests on, checked when this
module is imported, so that a kopf that renames one fails at start, not as a
silent loss of the saving. Goes when kopf takes a transform of its watched
objects, or when the API server can be asked to leave the field out (the
proposal in kubernetes/enhancements,
keps/sig-api-machinery/2211-strip-managed-fields-server-side).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from typing import Any

from kopf._cogs.clients import watching
from kopf._core.reactor import queueing

# Every private name of kopf's this module reads or replaces: checked at import.
_RELIED_ON: dict[object, tuple[str, ...]] = {
    # The watch of one resource: listing and events, as raw dicts.
    watching: ("infinite_watch",),
    # Looks ``watching.infinite_watch`` up each time a watch starts.
    queueing: ("watching", "watcher"),
}


def _check_relied_on() -> None:
    missing = [
        f"{getattr(owner, '__name__', owner)}.{name}"
        for owner, names in _RELIED_ON.items()
        for name in names
        if not hasattr(owner, name)
    ]
    if getattr(queueing, "watching", None) is not watching:
        missing.append("kopf._core.reactor.queueing.watching (not kopf's watching module)")
    if missing:
        raise ImportError(
            f"modelplane.operator.kopf_bodies: kopf no longer has {', '.join(missing)}"
        )


_check_relied_on()


def without_managed_fields(event: Any) -> Any:
    """``event`` with its object's ``metadata.managedFields`` dropped, in place."""
    obj = event.get("object") if isinstance(event, dict) else None
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return event


Watch = Callable[..., AsyncIterator[Any]]


def _stripping(watch: Watch) -> Watch:
    @functools.wraps(watch)
    async def stripped(**kwargs: Any) -> AsyncIterator[Any]:
        async for event in watch(**kwargs):
            yield without_managed_fields(event)

    stripped.__dict__["_modelplane_strips"] = True
    return stripped


def install() -> None:
    """Have kopf's watches drop managedFields from now on (once, however often called)."""
    if not getattr(watching.infinite_watch, "_modelplane_strips", False):
        watching.infinite_watch = _stripping(watching.infinite_watch)
