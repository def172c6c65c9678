"""A reconcile's own writes, and when the watches' copy shows them (observe.writes)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest

from modelplane.kube.reflector import WatchKey
from modelplane.observe.crd_outline import crd_outline
from modelplane.observe.state import wanted
from modelplane.observe.watches import CRDS, WatchCache
from modelplane.observe.writes import Writes, Written, at_or_after, covers
from modelplane.wire import MANAGED_BY, MANAGED_BY_LABEL, ApiRef

from .test_watch_cache import FOREVER, GUARD, SERVED, SPEC, polls_out_of_reach

OURS = {MANAGED_BY_LABEL: MANAGED_BY}
GATEWAYS = ApiRef("gateway.networking.k8s.io", "v1", "gateways")


def _gateway(resource_version: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {
            "name": "inference-gateway",
            "namespace": "modelplane-system",
            "labels": OURS if labels is None else labels,
            "resourceVersion": resource_version,
        },
    }


def _written(resource_version: str, labels: dict[str, str] | None = None) -> Written:
    writes = Writes()
    writes.applied(_gateway("", labels), resource_version)
    return writes.objects[0]


@pytest.mark.parametrize(
    ("seen", "wrote", "included"),
    [
        ("17", "17", True),
        ("18", "17", True),
        ("100", "99", True),
        ("99", "100", False),
        ("16", "17", False),
        # Not KEP-5504's form: only equality tells.
        ("abc", "abc", True),
        ("abd", "abc", False),
        ("017", "16", False),
        ("1" * 5000, "2", True),
    ],
)
def test_a_copy_includes_a_write_at_its_version_or_a_later_one(
    seen: str, wrote: str, included: bool
) -> None:
    assert at_or_after(seen, wrote) is included


def test_an_apply_without_a_resource_version_is_untracked() -> None:
    writes = Writes()
    writes.applied(_gateway(""), "5")
    assert not writes.untracked
    writes.applied(_gateway(""), None)
    assert writes.untracked


def test_a_write_is_covered_by_the_collections_whose_selectors_it_matches() -> None:
    w = _written("5")
    assert covers(WatchKey(GATEWAYS), w)
    assert covers(
        WatchKey(
            GATEWAYS, namespace="modelplane-system", labels=f"{MANAGED_BY_LABEL}={MANAGED_BY}"
        ),
        w,
    )
    assert covers(WatchKey(GATEWAYS, fields="metadata.name=inference-gateway"), w)
    assert not covers(WatchKey(GATEWAYS, namespace="other"), w)
    assert not covers(WatchKey(GATEWAYS, labels="team=a"), w)
    assert not covers(WatchKey(GATEWAYS, fields="metadata.name=other"), w)
    # Every form of requirement the API server takes, as it would judge it.
    label = MANAGED_BY_LABEL
    assert covers(WatchKey(GATEWAYS, labels=f"{label}!=x"), w)
    assert not covers(WatchKey(GATEWAYS, labels=f"{label}!={MANAGED_BY}"), w)
    assert covers(WatchKey(GATEWAYS, labels=label), w)
    assert not covers(WatchKey(GATEWAYS, labels=f"!{label}"), w)
    assert covers(WatchKey(GATEWAYS, labels=f"{label} in (a,{MANAGED_BY})"), w)
    assert not covers(WatchKey(GATEWAYS, labels=f"{label} notin ({MANAGED_BY})"), w)


def _cache() -> tuple[WatchCache, WatchKey]:
    cache = WatchCache(httpx2.AsyncClient(), wanted(SPEC), lambda: None)
    cache.learn(SERVED)
    for reflector in cache.reflectors.values():
        reflector.synced = True
    key = next(k for k in cache.reflectors if k.api == GATEWAYS)
    return cache, key


def test_the_copy_shows_a_write_once_its_event_is_in(monkeypatch: pytest.MonkeyPatch) -> None:
    polls_out_of_reach(monkeypatch)

    async def run() -> None:
        cache, key = _cache()
        cache.reflectors[key].items = {"modelplane-system/inference-gateway": _gateway("4")}
        shown = asyncio.create_task(cache.shows([_written("5")], within=FOREVER))
        await asyncio.sleep(0)  # one turn of the loop: it finds "4" in the copy, and waits
        assert not shown.done()
        cache.reflectors[key].items["modelplane-system/inference-gateway"] = _gateway("5")
        cache._on_change(key, "MODIFIED")
        # Woken by the event: with the poll and the bound out of reach,
        # nothing else could end the wait.
        async with asyncio.timeout(GUARD):
            assert await shown
        # A later change by someone else still includes ours.
        cache.reflectors[key].items["modelplane-system/inference-gateway"] = _gateway("9")
        assert await cache.shows([_written("5")], within=0.0)

    asyncio.run(run())


def test_a_write_whose_event_does_not_come_is_not_shown() -> None:
    async def run() -> None:
        cache, key = _cache()
        cache.reflectors[key].items = {"modelplane-system/inference-gateway": _gateway("4")}
        assert not await cache.shows([_written("5")], within=0.3)
        # Nor by a copy that is listing again.
        cache.reflectors[key].items["modelplane-system/inference-gateway"] = _gateway("5")
        cache.reflectors[key].synced = False
        assert not await cache.shows([_written("5")], within=0.0)

    asyncio.run(run())


def test_a_write_no_watch_covers_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    polls_out_of_reach(monkeypatch)

    async def run() -> None:
        cache, _ = _cache()
        # Without our label: the own-objects watch selects by it. Answered
        # without a wait: one would last for ever (past the guard).
        async with asyncio.timeout(GUARD):
            assert not await cache.shows([_written("5", labels={})], within=FOREVER)

    asyncio.run(run())


def _crd(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "resourceVersion": ""},
        "spec": {"group": "example.com", "names": {"plural": "things", "kind": "Thing"}},
    }


def test_a_crd_write_is_shown_by_the_copys_version_its_outline_keeps_none() -> None:
    # A CRD's outline is shared by every target and keeps no resourceVersion:
    # the copy's own, taken from each event in order, tells the write is in.
    async def run() -> None:
        cache, _ = _cache()
        cache.learn({("apiextensions.k8s.io/v1", "CustomResourceDefinition"): CRDS.resource})
        key = WatchKey(CRDS)
        reflector = cache.reflectors[key]
        name = "things.example.com"
        writes = Writes()
        writes.applied(_crd(name), "12")
        reflector.items = {f"/{name}": crd_outline(_crd(name))}
        reflector.resource_version = "11"
        assert not await cache.shows(writes.objects, within=0.0)
        reflector.resource_version = "12"
        assert await cache.shows(writes.objects, within=0.0)
        # Not while the copy is listing again, nor once the CRD is gone.
        reflector.synced = False
        assert not await cache.shows(writes.objects, within=0.0)
        reflector.synced, reflector.items = True, {}
        assert not await cache.shows(writes.objects, within=0.0)

    asyncio.run(run())
