"""operator.kopf_bodies: the stack bodies kopf keeps come without their managedFields.

kopf keeps the last body of each stack it watches; nothing reads a stack's
managedFields. The patch strips them as kopf's watch yields its events, so
what kopf's per-object processing (and its memory) gets has none.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import watching
from kopf._cogs.structs import references
from kopf._core.reactor import queueing

from modelplane.operator import kopf_bodies

RESOURCE = references.Resource("modelplane.ai", "v1alpha1", "servingstacks")

_MANAGED = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}]


def _stack(uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ServingStack",
        "metadata": {
            "name": f"s-{uid}",
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": "7",
            "labels": {"a": "b"},
            "managedFields": copy.deepcopy(_MANAGED),
        },
        "spec": {"components": "Provided"},
        "status": {"phase": "Ready"},
    }


@pytest.mark.parametrize(
    ("event", "kept"),
    [
        ({"type": "MODIFIED", "object": _stack("u")}, {k: v for k, v in _stack("u").items()}),
        ({"type": None, "object": {"metadata": {"managedFields": []}}}, {"metadata": {}}),
        ({"type": "ADDED", "object": {"metadata": {"name": "x"}}}, {"metadata": {"name": "x"}}),
        ({"type": "ERROR", "object": {"code": 410}}, {"code": 410}),
        ({"type": "ADDED", "object": {"metadata": "not a dict"}}, {"metadata": "not a dict"}),
        ({"type": "ADDED", "object": []}, []),
    ],
)
def test_an_events_object_loses_its_managed_fields_and_nothing_else(
    event: dict[str, Any], kept: Any
) -> None:
    if isinstance(kept, dict) and isinstance(kept.get("metadata"), dict):
        kept["metadata"] = {k: v for k, v in kept["metadata"].items() if k != "managedFields"}
    assert kopf_bodies.without_managed_fields(event)["object"] == kept


def test_what_is_not_an_event_passes_as_it_is() -> None:
    assert kopf_bodies.without_managed_fields(watching.Bookmark.LISTED) is watching.Bookmark.LISTED


def test_kopf_still_has_every_name_the_patch_rests_on(monkeypatch: pytest.MonkeyPatch) -> None:
    kopf_bodies._check_relied_on()
    monkeypatch.delattr(watching, "infinite_watch")
    with pytest.raises(ImportError, match="infinite_watch"):
        kopf_bodies._check_relied_on()


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The patch installed for one test, kopf's own watch back after it."""
    monkeypatch.setattr(watching, "infinite_watch", watching.infinite_watch)
    kopf_bodies.install()
    kopf_bodies.install()  # once, however often


def _fake_watch(events: list[Any]) -> Any:
    """A stand-in for kopf's watch of the API: ``events``, then an open stream."""

    async def continuous_watch(**_: Any) -> AsyncIterator[Any]:
        for event in events:
            yield event
        await asyncio.Future()  # the stream stays open until cancelled

    return continuous_watch


def test_the_patch_wraps_kopfs_watch_once(installed: None) -> None:
    wrapped = watching.infinite_watch
    assert getattr(wrapped, "_modelplane_strips", False)
    assert not getattr(wrapped.__wrapped__, "_modelplane_strips", False)  # type: ignore[attr-defined]


async def test_kopfs_processing_gets_the_bodies_without_managed_fields(
    installed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Listed, then changed: two stacks, through kopf's own queueing.
    events = [
        {"type": None, "object": _stack("a")},
        watching.Bookmark.LISTED,
        {"type": "MODIFIED", "object": _stack("b")},
    ]
    monkeypatch.setattr(watching, "continuous_watch", _fake_watch(events))
    settings = kopf.OperatorSettings()
    seen: dict[str, dict[str, Any]] = {}
    both = asyncio.Event()

    async def processor(*, raw_event: Any, **_: Any) -> None:
        body = raw_event["object"]
        seen[body["metadata"]["uid"]] = body
        if len(seen) == 2:
            both.set()

    watcher = asyncio.create_task(
        queueing.watcher(namespace=None, settings=settings, resource=RESOURCE, processor=processor)
    )
    try:
        async with asyncio.timeout(30):
            await both.wait()
    finally:
        watcher.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watcher
    assert sorted(seen) == ["a", "b"]
    for uid, body in seen.items():
        assert "managedFields" not in body["metadata"]
        assert body["metadata"]["labels"] == {"a": "b"} and body["spec"] == _stack(uid)["spec"]
