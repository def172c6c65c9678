"""Putting a release's object back as its stored manifest has it, as Helm would.

A release's objects are Helm's: it writes them with Update operations (a
three-way merge patch), so it owns their fields as an updater. A restore
that server-side applied the whole manifest under the operator's name made
the operator an owner of every field of the object, beside Helm, and took
fields away from nobody who should keep them only by luck. So a restore is
what Helm's own upgrade sends: a strategic merge patch of the manifest's
body (Update, under the operator's field manager), which moves to the
operator only the fields whose value it changes, the ones a hand edit took,
and leaves every other field Helm's. An object that is gone is created.

Every kind a release's drift is judged for is a built-in one
(``observe.release_others.FOLLOWED`` and the workloads), which the API
server patches by its strategic merge rules (list items merged by their
keys).

The body comes from a stored revision, which is the target's text: the
patch directives a strategic merge patch honours (``$patch``,
``$retainKeys``, ``$setElementOrder/…``, ``$deleteFromPrimitiveList/…``)
are no field of any object, and are stripped before anything is sent, so a
forged revision cannot make a restore delete what it names.
"""

from __future__ import annotations

from typing import Any

from lightkube import AsyncClient
from lightkube.types import PatchType

from modelplane.kube.client import waiting_out_429
from modelplane.kube.resources import resource_of, unless_missing
from modelplane.wire import FIELD_MANAGER


def patch_body(body: Any) -> Any:
    """``body`` without patch directives (keys that start with ``$``), empty values and nulls.

    A null in a merge patch deletes the field; an empty map or list sets
    nothing the API server keeps.
    """
    if isinstance(body, dict):
        out = {k: patch_body(v) for k, v in body.items() if not str(k).startswith("$")}
        return {k: v for k, v in out.items() if v not in ({}, [], None)}
    if isinstance(body, list):
        return [patch_body(v) for v in body]
    return body


async def restore_object(client: AsyncClient, body: dict[str, Any]) -> str | None:
    """Patch the live object back to ``body`` (create it when gone); the resourceVersion stored."""
    answer = await _restore(client, body, dry_run=False)
    version = getattr(getattr(answer, "metadata", None), "resourceVersion", None)
    return version if isinstance(version, str) else None


async def restore_changes(client: AsyncClient, body: dict[str, Any]) -> bool | None:
    """Whether restoring ``body`` would change the live object, by a dry run; None if it is gone.

    The dry run's answer is what the API server would store: zero values
    it drops, defaults it adds and fields a disabled feature gate removes
    are all applied to it. Compared with the live object less what a write
    changes anyway (its version, managed fields, generation) and status.
    """
    res = await resource_of(client, body)
    name, namespace = body["metadata"]["name"], body["metadata"].get("namespace")
    live = await unless_missing(
        lambda: waiting_out_429(lambda: client.get(res, name, namespace=namespace))
    )
    if live is None:
        return None
    after = await _restore(client, body, dry_run=True)
    return comparable(after.to_dict()) != comparable(live.to_dict())


# What a write changes whatever it writes, and what a patch of the spec never does.
_VOLATILE = frozenset({"resourceVersion", "managedFields", "generation"})


def comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` less its status and the metadata every write changes."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _VOLATILE}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


async def _restore(client: AsyncClient, body: dict[str, Any], *, dry_run: bool) -> Any:
    res = await resource_of(client, body)
    clean = patch_body(body)
    meta = clean["metadata"]
    name, namespace = meta["name"], meta.get("namespace")
    patched = await unless_missing(
        lambda: waiting_out_429(
            lambda: client.patch(
                res,
                name,
                clean,
                namespace=namespace,
                patch_type=PatchType.STRATEGIC,
                field_manager=FIELD_MANAGER,
                dry_run=dry_run,
            )
        )
    )
    if patched is not None:
        return patched
    return await waiting_out_429(
        # The namespace is the body's own.
        lambda: client.create(res.from_dict(clean), field_manager=FIELD_MANAGER, dry_run=dry_run)
    )
