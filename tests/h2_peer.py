"""A scripted HTTP/2 server in memory: h2 plays the server side of one connection.

The connection under test (``kube.http2.FairHTTP2Connection``) is given an
``H2Peer`` as its network stream: what the client writes goes into h2's
server state machine, and what the test has the server say (answers,
settings, raw frames h2 itself would never send) is what the client reads.
No socket, no thread, no clock: a test waits on the events it needs.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import httpcore2
from hyperframe.frame import DataFrame, Frame, PingFrame, SettingsFrame

from modelplane.kube.http2 import FairHTTP2Connection

ORIGIN = httpcore2.Origin(b"https", b"target.test", 443)
MAX_STREAMS = h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS


class H2Peer(httpcore2.AsyncNetworkStream):
    """The server end of one HTTP/2 connection, as the test scripts it.

    ``settings`` is the server's first SETTINGS frame, whole: a setting
    left out of it is one the server does not advertise.
    """

    def __init__(self, settings: dict[int, int] | None = None) -> None:
        config = h2.config.H2Configuration(client_side=False, validate_inbound_headers=False)
        self.h2 = h2.connection.H2Connection(config=config)
        self.h2.initiate_connection()
        # h2's own first SETTINGS is dropped for one that says only ``settings``.
        self.h2.data_to_send()
        said = {MAX_STREAMS: 100} if settings is None else settings
        first = SettingsFrame(0, settings=dict(said))
        self._out = bytearray(first.serialize())
        self._more = asyncio.Event()
        self._more.set()
        # Stream ids of the requests received, in order, as they arrive.
        self.requests: asyncio.Queue[int] = asyncio.Queue()
        self.paths: dict[int, str] = {}
        self.received: list[h2.events.Event] = []
        self.goaway = asyncio.Event()
        self.closed = False
        # Set when a read finds nothing to give: the client waits on the network.
        self.starved = asyncio.Event()

    # ---- what the client sees ----

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                while not self._out and not self.closed:
                    self._more.clear()
                    self.starved.set()
                    await self._more.wait()
        except TimeoutError as err:
            raise httpcore2.ReadTimeout("the scripted peer said nothing") from err
        data = bytes(self._out[:max_bytes])
        del self._out[:max_bytes]
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if self.closed:
            raise httpcore2.WriteError("closed")
        for event in self.h2.receive_data(buffer):
            self.received.append(event)
            if isinstance(event, h2.events.RequestReceived):
                assert event.stream_id is not None
                headers = dict(event.headers or [])
                self.paths[event.stream_id] = bytes(headers.get(b":path", b"")).decode()
                self.requests.put_nowait(event.stream_id)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.goaway.set()
        self._flush()

    async def aclose(self) -> None:
        self.closed = True
        self._more.set()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return self

    def get_extra_info(self, info: str) -> Any:
        return None

    # ---- what the test has the server say ----

    def _flush(self) -> None:
        self._out += self.h2.data_to_send()
        self._more.set()
        self.starved.clear()

    def answer(self, stream_id: int, body: bytes = b"{}", *, end: bool = True) -> None:
        """Headers of a 200, then ``body``, then the end of the stream if ``end``."""
        self.h2.send_headers(stream_id, [(":status", "200")])
        if body or end:
            self.h2.send_data(stream_id, body, end_stream=end)
        self._flush()

    def data(self, stream_id: int, body: bytes, *, end: bool = False) -> None:
        self.h2.send_data(stream_id, body, end_stream=end)
        self._flush()

    def frames(self, frame: Frame, count: int = 1) -> None:
        """``count`` copies of a raw frame: what h2 would never send of itself."""
        self._out += frame.serialize() * count
        self._more.set()
        self.starved.clear()

    def raw(self, data: bytes) -> None:
        self._out += data
        self._more.set()
        self.starved.clear()

    def empty_data(self, stream_id: int, count: int) -> None:
        self.frames(DataFrame(stream_id, data=b""), count)

    def empty_settings(self, count: int) -> None:
        self.frames(SettingsFrame(0), count)

    def pings(self, count: int) -> None:
        self.frames(PingFrame(0, opaque_data=b"\0" * 8), count)


def connection(peer: H2Peer) -> FairHTTP2Connection:
    return FairHTTP2Connection(origin=ORIGIN, stream=peer)


def request(path: str = "/api", *, read: float | None = 5.0, pool: float | None = 5.0) -> Any:
    return httpcore2.Request(
        "GET",
        f"https://target.test{path}",
        headers=[(b"host", b"target.test")],
        extensions={"timeout": {"read": read, "write": 5.0, "pool": pool, "connect": 5.0}},
    )
