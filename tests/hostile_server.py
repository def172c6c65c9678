"""A hostile "API server" on 127.0.0.1: real sockets, real HTTP/1.1, answers as a test scripts them.

httpx's MockTransport hands the client a body the test already holds; a
server that streams without end, or ends every watch at once, is only
shown for what it is over a socket, where the client decides when to stop
reading. Each request's query is recorded; what the server wrote is
counted. A fuse ends any answer past ``fuse`` bytes, so a client that
never stops (the code before a fix) fails its test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from urllib.parse import parse_qsl, urlsplit

import httpx2

_PIECE = 64 * 1024


class Answer:
    """One streamed answer: a status, then chunks, then the end (chunked transfer coding)."""

    def __init__(self, server: HostileServer, writer: asyncio.StreamWriter) -> None:
        self._server, self._writer = server, writer
        self._started = False

    async def start(self, status: int = 200, headers: dict[str, str] | None = None) -> None:
        extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        self._writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra}"
            "Transfer-Encoding: chunked\r\n\r\n".encode()
        )
        self._started = True

    async def send(self, data: bytes) -> bool:
        """Write ``data``; False once the fuse has blown (the answer should end).

        In pieces of 64 KiB, each drained before the next, so the server
        holds no copy of a large answer and memory counted is the client's.
        """
        if not self._started:
            await self.start()
        view = memoryview(data)
        for start in range(0, len(view), _PIECE):
            if self._server.sent >= self._server.fuse:
                return False
            piece = view[start : start + _PIECE]
            self._writer.write(b"%x\r\n" % len(piece))
            self._writer.write(piece)
            self._writer.write(b"\r\n")
            self._server.sent += len(piece)
            await self._writer.drain()
        return True

    def abort(self) -> None:
        """Drop the connection mid-answer, as a reset or a lost network path does."""
        self._writer.transport.abort()

    async def end(self) -> None:
        if not self._started:
            await self.start()
        self._writer.write(b"0\r\n\r\n")
        await self._writer.drain()


Script = Callable[[dict[str, str], Answer], Awaitable[None]]


class HostileServer:
    """Serves ``script`` on a free loopback port while open; ``client()`` talks to it."""

    def __init__(self, script: Script, *, fuse: int = 256 << 20) -> None:
        self.script, self.fuse = script, fuse
        self.requests: list[dict[str, str]] = []
        # Each request's line and headers, as sent.
        self.heads: list[str] = []
        self.sent = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.url = ""

    async def __aenter__(self) -> HostileServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        # Connections still open (a watch held by a cancelled reflector) are
        # dropped rather than waited for.
        for writer in list(self._writers):
            writer.close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 5.0)

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[httpx2.AsyncClient]:
        async with httpx2.AsyncClient(base_url=self.url, trust_env=False) as http:
            yield http

    def watches(self) -> int:
        return sum(r.get("watch") == "true" for r in self.requests)

    def lists(self) -> int:
        return sum(r.get("watch") != "true" for r in self.requests)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:  # keep-alive: one request after another on the connection
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1].decode()
                params = dict(parse_qsl(urlsplit(target).query))
                self.requests.append(params)
                self.heads.append(head.decode("latin-1"))
                await self.script(params, Answer(self, writer))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client hung up, as it should on a hostile answer
        finally:
            self._writers.discard(writer)
            writer.close()
