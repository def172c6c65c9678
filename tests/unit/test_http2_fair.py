"""kube.http2's fair connection against a scripted h2 server in memory (tests/h2_peer.py).

Each of the module's fixes is shown on the connection itself, with no
socket: a stream not stalled behind an idle one's read, a stream closed
early reset and its window handed back, a graceful GOAWAY drained. And the
names of httpcore2 it relies on are all there.
"""

from __future__ import annotations

import asyncio
import contextlib

import h2.events
import httpcore2
import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import GoAwayFrame
from tests.h2_peer import H2Peer, connection, request

from modelplane.kube import http2
from modelplane.kube.http2 import FairHTTP2Connection
from modelplane.kube.relied_on import missing_names

# What a test waits, at most, for an event that should come at once: a
# guard against a hang, never a measure.
GUARD = 10.0


async def _open(conn: FairHTTP2Connection, path: str) -> httpcore2.Response:
    return await conn.handle_async_request(request(path))


async def test_a_request_is_answered() -> None:
    peer = H2Peer()
    conn = connection(peer)
    async with asyncio.timeout(GUARD):
        sent = asyncio.create_task(_open(conn, "/api"))
        stream_id = await peer.requests.get()
        peer.answer(stream_id, b'{"kind": "APIVersions"}')
        response = await sent
        assert (response.status, await response.aread()) == (200, b'{"kind": "APIVersions"}')
    assert peer.paths[stream_id] == "/api"


async def test_a_stream_is_answered_while_idle_watches_wait_on_the_connection() -> None:
    # httpcore2's own connection queues the LIST on its read lock behind the
    # second watch, which takes the lock once the first has read the LIST's
    # answer, and blocks on a network with nothing more to say.
    peer = H2Peer()
    conn = connection(peer)
    async with asyncio.timeout(GUARD):
        reading = []
        for path in ("/watch-a", "/watch-b"):
            opening = asyncio.create_task(_open(conn, path))
            watch_id = await peer.requests.get()
            peer.answer(watch_id, b"", end=False)
            watch = await opening
            reading.append(asyncio.create_task(watch.aread()))
        await peer.starved.wait()  # the watches wait on a network that says nothing
        listing = asyncio.create_task(_open(conn, "/list"))
        list_id = await peer.requests.get()
        peer.answer(list_id, b"[]")
        listed = await listing
        assert await listed.aread() == b"[]"
        assert not any(task.done() for task in reading)
        peer.data(1, b"event", end=True)
        assert await reading[0] == b"event"
        reading[1].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading[1]


async def test_a_stream_waiting_behind_a_read_times_out_on_its_own() -> None:
    # The watch reads for the connection; the LIST waits for what that read
    # brings it, and its own read timeout ends its wait: the watch, the
    # connection and a later request are left as they are.
    peer = H2Peer()
    conn = connection(peer)
    async with asyncio.timeout(GUARD):
        opening = asyncio.create_task(conn.handle_async_request(request("/watch", read=None)))
        watch_id = await peer.requests.get()
        peer.answer(watch_id, b"", end=False)
        watch = await opening
        reading = asyncio.create_task(watch.aread())
        await peer.starved.wait()
        with pytest.raises(httpcore2.ReadTimeout):
            await conn.handle_async_request(request("/list", read=0.01))
        assert not conn._waiters
        listing = asyncio.create_task(_open(conn, "/list"))
        await peer.requests.get()  # the LIST that timed out
        list_id = await peer.requests.get()
        peer.answer(list_id, b"[]")
        assert await (await listing).aread() == b"[]"
        peer.data(watch_id, b"event", end=True)
        assert await reading == b"event"


async def test_a_response_closed_early_resets_its_stream_and_returns_its_window() -> None:
    peer = H2Peer()
    conn = connection(peer)
    async with asyncio.timeout(GUARD):
        opening = asyncio.create_task(_open(conn, "/big"))
        stream_id = await peer.requests.get()
        peer.answer(stream_id, b"x" * 1000, end=False)
        response = await opening
        await response.aclose()
    resets = [e for e in peer.received if isinstance(e, h2.events.StreamReset)]
    assert [(e.stream_id, e.error_code) for e in resets] == [(stream_id, ErrorCodes.CANCEL)]
    # The 1000 bytes never read are handed back to the connection's window.
    updates = [e for e in peer.received if isinstance(e, h2.events.WindowUpdated)]
    assert sum(e.delta or 0 for e in updates if e.stream_id == 0) >= 1000


async def test_a_graceful_goaway_drains_the_streams_the_server_took() -> None:
    peer = H2Peer()
    conn = connection(peer)
    async with asyncio.timeout(GUARD):
        opening = asyncio.create_task(_open(conn, "/namespaces"))
        stream_id = await peer.requests.get()
        peer.frames(GoAwayFrame(0, last_stream_id=stream_id, error_code=ErrorCodes.NO_ERROR))
        peer.answer(stream_id, b"{}")
        response = await opening
        assert (response.status, await response.aread()) == (200, b"{}")
    assert not conn.is_available()


async def test_a_request_given_its_connection_at_once_sets_up_no_event() -> None:
    pooled = http2._PoolRequest(request())
    conn = connection(H2Peer())
    pooled.assign_to_connection(conn)
    assert await pooled.wait_for_connection(timeout=None) is conn
    # httpcore2's own made an asyncio.Event here, and kept it with the answer.
    assert not pooled._connection_acquired._backend


async def test_a_request_that_waits_is_given_its_connection() -> None:
    pooled = http2._PoolRequest(request())
    conn = connection(H2Peer())
    async with asyncio.timeout(GUARD):
        waiting = asyncio.create_task(pooled.wait_for_connection(timeout=None))
        await asyncio.sleep(0)  # the request is waiting: its event is set up
        pooled.assign_to_connection(conn)
        assert await waiting is conn
        # Taken back by the pool (a connection that was no longer free), it waits again.
        pooled.clear_connection()
        waiting = asyncio.create_task(pooled.wait_for_connection(timeout=None))
        await asyncio.sleep(0)
        assert not waiting.done()
        pooled.assign_to_connection(conn)
        assert await waiting is conn


async def test_a_request_waits_for_its_connection_within_the_pool_timeout() -> None:
    pooled = http2._PoolRequest(request())
    async with asyncio.timeout(GUARD):
        with pytest.raises(httpcore2.PoolTimeout):
            await pooled.wait_for_connection(timeout=0.01)


def test_every_name_the_module_relies_on_is_there() -> None:
    assert missing_names(http2._RELIED_ON) == []


class _Owner:
    present = 1

    def method(self) -> None:
        self.set_in_a_method = 1


@pytest.mark.parametrize(
    ("names", "missing"),
    [
        (("present", "method"), []),
        (("set_in_a_method",), []),
        (("renamed",), ["_Owner.renamed"]),
        (("present", "renamed", "gone"), ["_Owner.renamed", "_Owner.gone"]),
    ],
)
def test_missing_names(names: tuple[str, ...], missing: list[str]) -> None:
    assert missing_names({_Owner: names}) == missing
