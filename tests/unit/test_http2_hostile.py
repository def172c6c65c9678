"""kube.http2 against a hostile HTTP/2 server, scripted in memory (tests/h2_peer.py).

Issue 40, finding 5: a server that advertises MAX_CONCURRENT_STREAMS=1, or
none, held every request after the first waiting for a stream permit with
no timeout. Finding 6: frames that carry nothing, without end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

import h2.events
import httpcore2
import pytest
from h2.errors import ErrorCodes
from h2.settings import ChangedSetting
from hyperframe.frame import WindowUpdateFrame
from tests.h2_peer import MAX_STREAMS, H2Peer, connection, request

from modelplane.kube.http2 import (
    ASSUMED_MAX_STREAMS,
    MAX_IDLE_FRAMES,
    FairHTTP2Connection,
    carries_nothing,
    idle_frames,
)

E = TypeVar("E", bound=h2.events.Event)

# At most what a test waits for an event that should come: a guard against
# a hang (the code before the fix), never a measure.
GUARD = 10.0


async def _watch(peer: H2Peer, conn: FairHTTP2Connection) -> httpcore2.Response:
    """A stream the server answers and then keeps open, saying nothing."""
    opening = asyncio.create_task(conn.handle_async_request(request("/watch")))
    stream_id = await peer.requests.get()
    peer.answer(stream_id, b"", end=False)
    return await opening


async def test_a_server_that_never_says_its_stream_limit_is_taken_at_100() -> None:
    peer = H2Peer(settings={})
    conn = connection(peer)
    async with asyncio.timeout(GUARD):
        watch = await _watch(peer, conn)
        listing = asyncio.create_task(conn.handle_async_request(request("/list")))
        stream_id = await peer.requests.get()
        peer.answer(stream_id, b"[]")
        assert await (await listing).aread() == b"[]"
        await watch.aclose()
    assert conn._max_streams == ASSUMED_MAX_STREAMS


async def test_a_stream_permit_is_waited_for_within_the_pool_timeout() -> None:
    peer = H2Peer(settings={MAX_STREAMS: 1})
    conn = connection(peer)
    async with asyncio.timeout(GUARD):
        watch = await _watch(peer, conn)
        with pytest.raises(httpcore2.PoolTimeout, match="no HTTP/2 stream free"):
            await conn.handle_async_request(request("/list", pool=0.05))
        assert peer.requests.empty()
        # The watch's stream is unharmed, and its permit, once given back,
        # is the next request's.
        await watch.aclose()
        listing = asyncio.create_task(conn.handle_async_request(request("/list")))
        stream_id = await peer.requests.get()
        peer.answer(stream_id, b"[]")
        assert await (await listing).aread() == b"[]"


async def test_a_lower_limit_the_server_says_still_holds() -> None:
    peer = H2Peer(settings={MAX_STREAMS: 2})
    conn = connection(peer)
    async with asyncio.timeout(GUARD):
        watches = [await _watch(peer, conn), await _watch(peer, conn)]
        with pytest.raises(httpcore2.PoolTimeout):
            await conn.handle_async_request(request("/third", pool=0.05))
        for watch in watches:
            await watch.aclose()
    assert conn._max_streams == 2


# Issue 40, finding 6: frames that carry nothing, sent without end, kept a
# read busy for ever at a core per connection, counted by no budget.

# A frame of a type HTTP/2 does not define (0xfa), empty: h2 reports and ignores it.
UNKNOWN_FRAME = b"\x00\x00\x00\xfa\x00\x00\x00\x00\x00"
FLOOD = MAX_IDLE_FRAMES + 10


def _flood_empty_data(peer: H2Peer, stream_id: int) -> None:
    peer.empty_data(stream_id, FLOOD)


def _flood_settings(peer: H2Peer, stream_id: int) -> None:
    peer.empty_settings(FLOOD)


def _flood_pings(peer: H2Peer, stream_id: int) -> None:
    peer.pings(FLOOD)


def _flood_unknown_frames(peer: H2Peer, stream_id: int) -> None:
    peer.raw(UNKNOWN_FRAME * FLOOD)


@pytest.mark.parametrize(
    "flood", [_flood_empty_data, _flood_settings, _flood_pings, _flood_unknown_frames]
)
async def test_a_flood_of_frames_that_carry_nothing_closes_the_connection(
    flood: Callable[[H2Peer, int], None],
) -> None:
    peer = H2Peer()
    conn = connection(peer)
    async with asyncio.timeout(GUARD):
        watch = await _watch(peer, conn)
        flood(peer, 1)
        with pytest.raises(httpcore2.RemoteProtocolError, match="frames that carry nothing"):
            await watch.aread()
        await peer.goaway.wait()
    goaway = next(e for e in peer.received if isinstance(e, h2.events.ConnectionTerminated))
    assert goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
    assert conn.is_closed() and not conn.is_available()
    assert peer.closed


async def test_frames_that_carry_nothing_between_answers_are_let_be() -> None:
    # Each piece of the body pays for the empty frame before it: as many
    # empty frames as the bound, many times over, all let through.
    peer = H2Peer()
    conn = connection(peer)
    async with asyncio.timeout(GUARD):
        watch = await _watch(peer, conn)
        for _ in range(3 * MAX_IDLE_FRAMES):
            peer.empty_data(1, 1)
            peer.data(1, b"x")
        peer.data(1, b"", end=True)
        assert await watch.aread() == b"x" * (3 * MAX_IDLE_FRAMES)
    assert conn.is_available()


def _event(kind: type[E], **fields: object) -> E:
    """An event of ``kind`` with only the fields ``carries_nothing`` reads."""
    event = kind.__new__(kind)
    for name, value in fields.items():
        setattr(event, name, value)
    return event


def _data(data: bytes) -> h2.events.DataReceived:
    return _event(h2.events.DataReceived, data=data)


def _settings(*changes: tuple[int, int, int]) -> h2.events.RemoteSettingsChanged:
    changed = {code: ChangedSetting(code, before, after) for code, before, after in changes}
    return _event(h2.events.RemoteSettingsChanged, changed_settings=changed)


@pytest.mark.parametrize(
    ("event", "nothing"),
    [
        (_data(b""), True),
        (_data(b"{"), False),
        (_settings(), True),
        (_settings((MAX_STREAMS, 100, 100)), True),
        (_settings((MAX_STREAMS, 100, 100), (MAX_STREAMS + 1, 1, 2)), False),
        (_event(h2.events.SettingsAcknowledged), True),
        (_event(h2.events.PingReceived), True),
        (_event(h2.events.PingAckReceived), True),
        (_event(h2.events.WindowUpdated), True),
        (_event(h2.events.UnknownFrameReceived), True),
        (_event(h2.events.InformationalResponseReceived), True),
        (_event(h2.events.ResponseReceived), False),
        (_event(h2.events.TrailersReceived), False),
        (_event(h2.events.StreamEnded), False),
        (_event(h2.events.StreamReset), False),
        (_event(h2.events.ConnectionTerminated), False),
    ],
)
def test_carries_nothing(event: h2.events.Event, nothing: bool) -> None:
    assert carries_nothing(event) is nothing


@pytest.mark.parametrize(
    ("count", "events", "after"),
    [
        (0, [], 0),
        (0, [_data(b"")] * 3, 3),
        (3, [_data(b"x")], 2),
        # No credit: a run of answers leaves the count at 0, not below.
        (0, [_data(b"x")] * 5 + [_data(b"")], 1),
        (2, [_data(b""), _data(b"x"), _data(b"")], 3),
    ],
)
def test_idle_frames(count: int, events: list[h2.events.Event], after: int) -> None:
    assert idle_frames(count, events) == after


async def test_a_window_update_of_zero_is_already_a_connection_error() -> None:
    # RFC 9113 section 6.9: h2 refuses it itself, and the connection takes no
    # new request; nothing of the fair connection's is needed for it.
    peer = H2Peer()
    conn = connection(peer)
    async with asyncio.timeout(GUARD):
        opening = asyncio.create_task(conn.handle_async_request(request("/list")))
        await peer.requests.get()
        peer.frames(WindowUpdateFrame(0))
        with pytest.raises(httpcore2.ProtocolError):
            await opening
    assert not conn.is_available()
