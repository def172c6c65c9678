"""kube.http2 against a hostile HTTP/2 server, scripted in memory (tests/h2_peer.py).

Issue 40, finding 5: a server that advertises MAX_CONCURRENT_STREAMS=1, or
none, held every request after the first waiting for a stream permit with
no timeout.
"""

from __future__ import annotations

import asyncio

import httpcore2
import pytest
from tests.h2_peer import MAX_STREAMS, H2Peer, connection, request

from modelplane.kube.http2 import ASSUMED_MAX_STREAMS, FairHTTP2Connection

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
