"""A watch's body read straight from its HTTP/2 stream, through no async generator.

On its way to the reflector a watch's body passes through seven layers:
httpx2's answer and its timing stream, the request's deadline
(``kube.deadline``), httpx2's mapping of httpcore2's errors, httpcore2's
pool stream, its HTTP/2 stream and the connection's body reader. All but
the deadline's read with an async generator, each with its frame, the
context managers it sits in (a trace, two ``aclosing``, two
``contextmanager``s) and the weak reference the event loop keeps to it,
for as long as the watch is open: minutes, for each of a target's watches.

``watch_body`` finds, under an answer's layers, the stream of a
``FairHTTP2Connection`` and reads its DATA as httpcore2's reader does
(each piece handed back to the flow-control window as it is read), each
piece by the request's deadline, httpcore2's errors raised as httpx2's.
Closing is unchanged: ``response.aclose()`` closes every layer in turn,
the stream reset if the server has not ended it. An answer of any other
shape (HTTP/1.1, a test's transport) is read as before.

PATCH(httpx2, httpcore2): reads the private attributes that link the
layers, named in ``_RELIED_ON`` and checked when this module is imported.
Goes when httpcore2's HTTP/2 streams read without a generator a layer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import h2.events
import httpx2
from httpcore2._async import connection_pool as _pool
from httpcore2._async import http2 as _h2
from httpx2._client import BoundAsyncStream
from httpx2._transports.default import AsyncResponseStream, map_httpcore_exceptions

from modelplane.kube.bounded import body_of
from modelplane.kube.deadline import Bounded
from modelplane.kube.http2 import FairHTTP2Connection
from modelplane.kube.relied_on import missing_names

# Every private name of httpx2's and httpcore2's this module reads: checked at import.
_RELIED_ON: dict[object, tuple[str, ...]] = {
    BoundAsyncStream: ("_stream",),
    AsyncResponseStream: ("_httpcore_stream",),
    _pool.PoolByteStream: ("_stream",),
    _h2.HTTP2ConnectionByteStream: ("_connection", "_request", "_stream_id"),
    _h2.AsyncHTTP2Connection: ("_receive_stream_event", "_h2_state", "_write_outgoing_data"),
}

_missing = missing_names(_RELIED_ON)
if _missing:
    raise ImportError(
        f"modelplane.kube.watch_body reads httpx2's and httpcore2's layers, and they have no "
        f"{', '.join(_missing)}: pin the versions pyproject.toml names"
    )


def watch_body(response: httpx2.Response) -> AsyncIterator[bytes]:
    """The body of an open answer as it arrives: from its HTTP/2 stream where it has one."""
    stream = _h2_stream(response)
    if stream is None:
        return body_of(response)
    bounded, h2_stream = stream
    return bounded.reading(
        _StreamData(h2_stream._connection, h2_stream._request, h2_stream._stream_id)
    )


def _h2_stream(response: httpx2.Response) -> tuple[Bounded, Any] | None:
    """The deadline's layer and httpcore2's HTTP/2 stream under ``response``, if it has them."""
    timed = response.stream
    bounded = timed._stream if isinstance(timed, BoundAsyncStream) else None
    if not isinstance(bounded, Bounded) or response.is_stream_consumed:
        return None
    mapped = bounded.inner
    pooled = mapped._httpcore_stream if isinstance(mapped, AsyncResponseStream) else None
    h2_stream = pooled._stream if isinstance(pooled, _pool.PoolByteStream) else None
    if not isinstance(h2_stream, _h2.HTTP2ConnectionByteStream):
        return None
    if not isinstance(h2_stream._connection, FairHTTP2Connection):
        return None
    return bounded, h2_stream


class _StreamData:
    """The DATA of one HTTP/2 stream, as httpcore2's body reader reads it, errors as httpx2's."""

    __slots__ = ("_connection", "_ended", "_request", "_stream_id")

    def __init__(self, connection: FairHTTP2Connection, request: Any, stream_id: int) -> None:
        self._connection, self._request, self._stream_id = connection, request, stream_id
        self._ended = False

    def __aiter__(self) -> _StreamData:
        return self

    async def __anext__(self) -> bytes:
        connection, stream_id = self._connection, self._stream_id
        try:
            while not self._ended:
                event = await connection._receive_stream_event(self._request, stream_id)
                if isinstance(event, h2.events.DataReceived):
                    # Handed back to the window as it is read, as httpcore2 does.
                    taken = event.flow_controlled_length or 0
                    connection._h2_state.acknowledge_received_data(taken, stream_id)
                    await connection._write_outgoing_data(self._request)
                    return event.data or b""
                if isinstance(event, h2.events.StreamEnded):
                    self._ended = True
        except Exception:
            with map_httpcore_exceptions():
                raise
        raise StopAsyncIteration


class Lines:
    """The lines of a body, none longer than ``limit``: ``too_long(message)`` raised past it.

    httpx's ``aiter_lines`` keeps a line whole however long it grows, and a
    target may send one without end. An iterator, not an async generator,
    for the reason the module gives: it is read for as long as a watch is open.
    """

    __slots__ = ("_buffer", "_chunks", "_ended", "_limit", "_searched", "_too_long")

    def __init__(
        self, chunks: AsyncIterator[bytes], limit: int, too_long: Callable[[str], Exception]
    ) -> None:
        self._chunks, self._limit, self._too_long = chunks, limit, too_long
        self._buffer = bytearray()
        # Where the next newline is looked for: the buffer before it has none.
        self._searched = 0
        self._ended = False

    def __aiter__(self) -> Lines:
        return self

    async def __anext__(self) -> bytes:
        buffer = self._buffer
        while True:
            end = buffer.find(b"\n", self._searched)
            if 0 <= end <= self._limit:
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                self._searched = 0
                return line
            if len(buffer) > self._limit:
                raise self._too_long(f"a line longer than {self._limit} bytes")
            if self._ended:
                if not buffer:
                    raise StopAsyncIteration
                line = bytes(buffer)
                buffer.clear()
                return line
            self._searched = len(buffer)
            try:
                buffer += await self._chunks.__anext__()
            except StopAsyncIteration:
                self._ended = True
