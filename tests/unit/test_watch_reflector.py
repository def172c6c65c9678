"""How one Reflector speaks the watch protocol: bookmarks, 410 Gone, and no request loop.

The server here is a script of answers on httpx2's MockTransport, so that
each protocol case (a bookmark, a 410 as an ERROR event or as the answer)
comes exactly when the test needs it. That a real API server sends these
to our requests is shown in tests/integration/test_watch_gone.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import pytest
from tests.scripted import Script

from modelplane.kube.link import Link
from modelplane.kube.reflector import WATCH_BACKOFF, Reflector, WatchKey
from modelplane.operator.handlers import coalesce
from modelplane.wire import ApiRef

KEY = WatchKey(ApiRef("", "v1", "configmaps"), namespace="ns")
Answer = Callable[[httpx2.Request], Awaitable[httpx2.Response]]


def _cm(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


def _list(rv: str, *items: dict[str, Any]) -> httpx2.Response:
    return httpx2.Response(200, json={"metadata": {"resourceVersion": rv}, "items": list(items)})


def _events(*events: dict[str, Any]) -> httpx2.Response:
    return httpx2.Response(200, content="".join(json.dumps(e) + "\n" for e in events).encode())


GONE_EVENT = {
    "type": "ERROR",
    "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"},
}


async def _run(script: Script, deadline: float = 20.0, seen: list[str] | None = None) -> Reflector:
    """Run a reflector on ``script``; ``seen``: its resourceVersion at each change it tells."""
    http = httpx2.AsyncClient(
        base_url="https://target.invalid", transport=httpx2.MockTransport(script)
    )
    changes: list[str] = []
    reflector: Reflector

    def changed(_key: WatchKey, kind: str, _name: str | None) -> None:
        changes.append(kind)
        if seen is not None:
            seen.append(reflector.resource_version)

    reflector = Reflector(http, KEY, Link(http, "test"), changed)
    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(script.done.wait(), deadline)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await http.aclose()
    return reflector


def _is_watch(params: dict[str, str]) -> bool:
    return params.get("watch") == "true"


async def test_a_bookmark_moves_the_resource_version_the_next_watch_starts_from() -> None:
    script = Script(
        [
            _list("10", _cm("a", "9")),
            # The server ends the watch after a bookmark and nothing else.
            _events({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}}),
        ]
    )
    reflector = await _run(script)
    listed, first, second = script.requests
    assert not _is_watch(listed)
    assert _is_watch(first) and _is_watch(second)
    assert first["allowWatchBookmarks"] == second["allowWatchBookmarks"] == "true"
    assert first["resourceVersion"] == "10"
    assert second["resourceVersion"] == "20"
    # A bookmark is no change: the copy is untouched and no second LIST was made.
    assert reflector.bookmarks == 1 and reflector.lists == 1
    assert list(reflector.items) == ["ns/a"]
    # But the copy is as new as the bookmark: every write up to it is in.
    assert reflector.resource_version == "20"


async def test_the_copys_resource_version_follows_its_list_and_events() -> None:
    script = Script(
        [
            _list("10", _cm("a", "9")),
            _events({"type": "MODIFIED", "object": _cm("a", "15")}),
        ]
    )
    seen: list[str] = []
    reflector = await _run(script, seen=seen)
    assert seen[:2] == ["10", "15"]
    assert reflector.resource_version == "15"


@pytest.mark.parametrize("gone", ["event", "answer"])
async def test_410_relists_and_watches_from_the_new_resource_version(gone: str) -> None:
    script = Script(
        [
            _list("10", _cm("a", "9")),
            _events({"type": "MODIFIED", "object": _cm("a", "15")}),
            # Re-armed from 15, which was compacted meanwhile.
            _events(GONE_EVENT) if gone == "event" else httpx2.Response(410),
            # a was deleted and b created while nothing watched.
            _list("40", _cm("b", "35")),
        ]
    )
    reflector = await _run(script)
    _, _, rearmed, relisted, watched = script.requests
    assert rearmed["resourceVersion"] == "15"
    assert not _is_watch(relisted)
    assert "resourceVersion" not in relisted
    assert watched["resourceVersion"] == "40"
    # The relist replaced the copy: what was deleted meanwhile is gone from it.
    assert list(reflector.items) == ["ns/b"]
    assert reflector.lists == 2 and reflector.expired == 1


async def test_a_server_that_answers_every_watch_with_410_is_not_a_loop() -> None:
    # Every LIST followed by a watch answered 410: a server at fault. The
    # reflector pauses before each relist instead of relisting at once, and
    # longer each time: only a watch that stayed open starts the backoff
    # over, not the LIST that succeeded. Its clock stands still, so every
    # 410 comes "right after" its LIST; its sleeps are recorded, not slept.
    rounds = 8
    answers: list[httpx2.Response] = []
    for i in range(rounds):
        answers += [_list(str(10 + i)), httpx2.Response(410)]
    script = Script(answers)
    http = httpx2.AsyncClient(
        base_url="https://target.invalid", transport=httpx2.MockTransport(script)
    )
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    reflector = Reflector(
        http,
        KEY,
        Link(http, "test"),
        lambda _k, _kind, _name: None,
        clock=lambda: 100.0,
        sleep=sleep,
    )
    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(script.done.wait(), 20.0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await http.aclose()
    lists = sum(not _is_watch(r) for r in script.requests)
    assert lists == rounds + 1 and reflector.expired == rounds
    # One pause after every 410, none between a LIST and its watch.
    assert slept == [WATCH_BACKOFF.delay(i) for i in range(1, rounds + 1)]
    assert slept[:4] == [0.5, 1.0, 2.0, 4.0] and slept[-1] == WATCH_BACKOFF.cap


async def test_a_lone_wake_up_is_not_held_for_the_whole_coalescing_period() -> None:
    wake = asyncio.Event()
    wake.set()
    # ``most`` is an hour: only ending after the quiet pause lets this return
    # within the deadline, which bounds a hang and is no claim about speed.
    more = await asyncio.wait_for(coalesce(wake, quiet=0.01, most=3600.0), 30.0)
    assert more == 0
    assert wake.is_set()


async def test_a_burst_of_wake_ups_is_folded_into_one() -> None:
    wake = asyncio.Event()
    wake.set()

    async def burst() -> None:
        for _ in range(5):
            await asyncio.sleep(0.002)
            wake.set()

    task = asyncio.create_task(burst())
    more = await coalesce(wake, quiet=1.0, most=30.0)
    await task
    # Each wake-up came within the quiet pause of the last, so all were taken.
    assert more == 5
    assert wake.is_set()


async def test_wake_ups_that_never_pause_are_taken_for_at_most_the_period() -> None:
    wake = asyncio.Event()
    wake.set()
    stop = asyncio.Event()

    async def forever() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.001)
            wake.set()

    task = asyncio.create_task(forever())
    # The burst never pauses, so only ``most`` can end the wait (the deadline
    # bounds a hang); and every wake-up of it was taken, none left waiting.
    try:
        more = await asyncio.wait_for(coalesce(wake, quiet=1.0, most=0.3), 30.0)
    finally:
        stop.set()
        await task
    assert more > 0
    assert wake.is_set()
