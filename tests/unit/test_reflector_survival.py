"""A reflector outlives whatever a target's server answers, and re-arms with backoff.

Issue 27, item 3: a watch that ended after one bookmark was re-opened at
once (a hostile server drove 648 WATCH requests a second into one
reflector), and an answer the reflector could not use (a page over the
bound, a list that is no list) ended its task until the operator
restarted. The re-arms are made against a loopback server, over real
sockets, with the reflector's clock and sleeps the test's own (a sleep is
recorded, not slept); the answers it cannot use are scripted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from tests.hostile_server import Answer, HostileServer
from tests.scripted import Script, list_answer

from modelplane.backoff import Backoff
from modelplane.kube import client as client_module
from modelplane.kube.link import Link
from modelplane.kube.reflector import REARM_BACKOFF, WATCH_BACKOFF, Reflector, WatchKey
from modelplane.wire import ApiRef

KEY = WatchKey(ApiRef("", "v1", "configmaps"), namespace="ns")
EMPTY_LIST = b'{"metadata": {"resourceVersion": "1"}, "items": []}'
BOOKMARK = b'{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}}\n'


async def one_bookmark(params: dict[str, str], answer: Answer) -> None:
    """An empty LIST; then watches that each send one bookmark and end."""
    await answer.send(EMPTY_LIST if params.get("watch") != "true" else BOOKMARK)
    await answer.end()


# How long a test may hang before it fails, never a measure of speed.
GUARD = 20.0
# The re-arms a test watches before it stops the reflector.
REARMS = 4


async def test_a_watch_that_ends_after_one_bookmark_is_rearmed_with_backoff() -> None:
    # The hostile server of issue 27 drove 648 WATCH requests a second into
    # one reflector this way: the code before re-armed at once, and never
    # slept (this test then fails at its guard).
    now = 0.0
    slept: list[float] = []
    rearmed = asyncio.Event()

    async def sleep(seconds: float) -> None:
        nonlocal now
        slept.append(seconds)
        now += seconds  # the watches still end at once on the reflector's clock
        if len(slept) == REARMS:
            rearmed.set()
            await asyncio.Event().wait()  # held here until the test stops it

    async with HostileServer(one_bookmark) as server, server.client() as http:
        reflector = Reflector(
            http,
            KEY,
            Link(http, "test"),
            lambda _k, _kind, _name: None,
            clock=lambda: now,
            sleep=sleep,
            rand=lambda: 0.0,
        )
        task = asyncio.create_task(reflector.run())
        waiting = asyncio.create_task(rearmed.wait())
        try:
            await asyncio.wait({task, waiting}, timeout=GUARD, return_when=asyncio.FIRST_COMPLETED)
            assert rearmed.is_set(), f"no {REARMS} re-arms: {slept}"
            assert not task.done(), "the reflector died"
        finally:
            task.cancel()
            waiting.cancel()
            await asyncio.gather(task, waiting, return_exceptions=True)
    # Each watch that ended at once waited out the re-arm backoff, doubling.
    assert slept == [REARM_BACKOFF.delay(n, lambda: 0.0) for n in range(1, REARMS + 1)]
    assert server.lists() == 1
    assert server.watches() == REARMS and reflector.bookmarks == REARMS


# ---- a reflector survives what a target makes of an answer ---------------------------


def _events(*events: dict[str, Any]) -> httpx2.Response:
    return httpx2.Response(200, content="".join(json.dumps(e) + "\n" for e in events).encode())


@pytest.mark.parametrize(
    "answer",
    [
        httpx2.Response(200, content=b'{"items": []}' + b" " * (1 << 18)),
        httpx2.Response(200, json=[]),
        httpx2.Response(200, json={"items": {"a": 1}}),
        httpx2.Response(200, json={"items": [], "metadata": "none"}),
    ],
    ids=["a page over the bound", "a list", "items not a list", "metadata not an object"],
)
async def test_a_reflector_survives_an_answer_it_cannot_use(
    answer: httpx2.Response, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "MAX_ANSWER_BYTES", 1 << 17)
    script = Script([answer, list_answer("10", "a")])
    reflector, slept, changes = await _scripted(script)
    # Waited out, and listed again: the watch is not dead until a restart.
    assert slept == [WATCH_BACKOFF.first]
    assert reflector.lists == 1 and list(reflector.items) == ["ns/a"] and reflector.synced
    assert changes[:2] == ["FAILED", "LIST"]


async def test_a_watch_event_of_another_shape_relists() -> None:
    script = Script(
        [
            list_answer("10", "a"),
            _events({"type": "ADDED", "object": {"metadata": ["not", "an", "object"]}}),
            list_answer("20", "b"),
        ]
    )
    reflector, _, _ = await _scripted(script)
    assert reflector.lists == 2 and list(reflector.items) == ["ns/b"]


@pytest.mark.parametrize(
    "line",
    [
        # A List answered to a watch, as a server that ignores ?watch does.
        {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": []},
        {"type": "SOMETHING", "object": {"metadata": {"name": "c", "namespace": "ns"}}},
    ],
    ids=["a list", "an unknown type"],
)
async def test_a_watch_line_that_is_no_event_relists_and_keeps_nothing(
    line: dict[str, Any],
) -> None:
    # Kept as an object, a List's line was a body with no metadata, and
    # every plan of the stack then failed on it (ReconcileError).
    script = Script([list_answer("10", "a"), _events(line), list_answer("20", "b")])
    reflector, _, _ = await _scripted(script)
    assert reflector.lists == 2 and list(reflector.items) == ["ns/b"]


async def _scripted(
    script: Script, seen: Callable[[Reflector, httpx2.Request], None] | None = None
) -> tuple[Reflector, list[float], list[str]]:
    """Run a reflector against ``script``; ``seen`` is told of each request as it is made."""
    reflectors: list[Reflector] = []

    async def answer(request: httpx2.Request) -> httpx2.Response:
        if seen is not None:
            seen(reflectors[0], request)
        return await script(request)

    http = httpx2.AsyncClient(
        base_url="https://target.invalid", transport=httpx2.MockTransport(answer)
    )
    slept: list[float] = []
    changes: list[str] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    reflector = Reflector(
        http, KEY, Link(http, "test"), lambda _k, kind, _name: changes.append(kind), sleep=sleep
    )
    reflectors.append(reflector)
    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(script.done.wait(), 10.0)
        assert not task.done(), "the reflector died"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await http.aclose()
    return reflector, slept, changes


async def test_a_reflector_says_when_its_list_is_worth_waiting_for() -> None:
    # A reconcile waits for a LIST that no failure came before (the first,
    # or one after a 410) and reads around one that follows a failure.
    gone = httpx2.Response(
        410, json={"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410}
    )
    script = Script(
        [
            list_answer("10", "a"),
            gone,
            httpx2.Response(200, json=[]),
            list_answer("20", "b"),
        ]
    )
    listing: list[bool] = []

    def note(reflector: Reflector, request: httpx2.Request) -> None:
        if request.url.params.get("watch") != "true":
            listing.append(reflector.listing)

    reflector, _, _ = await _scripted(script, note)
    # The first LIST, the one after the 410 (answered with no list), and
    # the one after that failure; then a watch is open and nothing is listing.
    assert listing == [True, True, False], listing
    assert not reflector.listing and reflector.synced


async def test_a_collection_not_served_is_listed_again_when_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A 404 waits for a CRD to serve the API (``retry_now``), not for its
    # backoff: here an hour, so only being told lists it again.
    monkeypatch.setattr("modelplane.kube.reflector.WATCH_BACKOFF", Backoff(first=3600, cap=3600))
    lists = 0

    async def served_second(params: dict[str, str], answer: Answer) -> None:
        nonlocal lists
        if params.get("watch") == "true":
            await asyncio.Event().wait()  # a watch that stays open
        lists += 1
        if lists == 1:
            await answer.start(404)
            await answer.send(b'{"kind": "Status", "code": 404}')
        else:
            await answer.send(EMPTY_LIST)
        await answer.end()

    told: list[str] = []
    moved = asyncio.Event()

    def changed(_key: WatchKey, kind: str, _name: str | None) -> None:
        told.append(kind)
        moved.set()

    async with HostileServer(served_second) as server, server.client() as http:
        reflector = Reflector(http, KEY, Link(http, "test"), changed, rand=lambda: 0.0)
        task = asyncio.create_task(reflector.run())
        try:
            async with asyncio.timeout(GUARD):
                while told != ["GONE"]:
                    moved.clear()
                    await moved.wait()
                reflector.retry_now()
                while told != ["GONE", "LIST"]:
                    moved.clear()
                    await moved.wait()
            assert reflector.served and reflector.synced
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
