"""A TCP relay on 127.0.0.1 whose connections a test can cut, as a lost network path does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from types import TracebackType


async def _pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count: Callable[[int], None]
) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(64 * 1024):
            count(len(data))
            writer.write(data)
            await writer.drain()
    writer.close()


class Relay:
    """Relays each connection to ``127.0.0.1:port``; ``cut()`` drops them all, ``mend()`` heals.

    While cut, a new connection is accepted and dropped at once: the
    client sees its connection reset, as it does when a path is lost.
    ``served``: the bytes relayed from the server to its clients so far.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = ""
        self.cut_off = False
        self.served = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> Relay:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"https://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 5.0)

    def cut(self) -> None:
        """Drop every connection (a reset on both ends) and every new one until ``mend``."""
        self.cut_off = True
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def mend(self) -> None:
        self.cut_off = False

    def _count(self, n: int) -> None:
        self.served += n

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(
                _pipe(reader, up_writer, lambda _n: None), _pipe(up_reader, writer, self._count)
            )
        finally:
            self._writers -= {writer, up_writer}
