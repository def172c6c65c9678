"""At most a few of the operator's target connections being set up at once.

A TCP connection and its TLS handshake to a target must finish within the
target timeout (10 s). When a shard starts, or comes back after an outage,
every healthy target opens a connection per watch at once: on 1,000 targets
over 4 shards, on a loaded machine, the handshakes shared the operator's
CPU so thinly that most ran past the timeout, were dropped and tried again,
and fewer than 2% of the stacks became Ready in 15 minutes, each try's work
lost (bench/bench_fleet_healthy.py). Queued instead, each handshake that
starts has the CPU to finish in time.

``limit_handshakes`` puts the limit on a transport's connection pool: a
connection waits for a slot before it connects, outside the connect
timeout, and frees it once its TLS is up (at once for plain HTTP). The slots
are per event loop, shared by every target of the process.
"""

from __future__ import annotations

import asyncio
import ssl
import weakref
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

# Handshakes in flight at once, per process: enough to keep a core busy with
# TLS, few enough that each finishes within the target timeout.
MAX_HANDSHAKES = 8

_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _slots() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    slots = _SLOTS.get(loop)
    if slots is None:
        slots = _SLOTS[loop] = asyncio.Semaphore(MAX_HANDSHAKES)
    return slots


class _Handshaking(httpcore2.AsyncNetworkStream):
    """A connected stream that holds a slot until its TLS is up, or it closes."""

    def __init__(self, inner: httpcore2.AsyncNetworkStream, slots: asyncio.Semaphore) -> None:
        self._inner = inner
        self._slots: asyncio.Semaphore | None = slots

    def _free(self) -> None:
        if self._slots is not None:
            self._slots.release()
            self._slots = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        self._free()
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            return await self._inner.start_tls(ssl_context, server_hostname, timeout)
        finally:
            self._free()

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Limited(httpcore2.AsyncNetworkBackend):
    def __init__(self, inner: httpcore2.AsyncNetworkBackend, *, tls: bool) -> None:
        self._inner = inner
        self._tls = tls

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        slots = _slots()
        # Waited for before the connect timeout starts: the queue is not the target's fault.
        await slots.acquire()
        try:
            stream = await self._inner.connect_tcp(
                host, port, timeout, local_address=local_address, socket_options=socket_options
            )
        except BaseException:
            slots.release()
            raise
        if not self._tls:
            slots.release()
            return stream
        return _Handshaking(stream, slots)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return await self._inner.connect_unix_socket(path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def limit_handshakes(transport: httpx2.AsyncHTTPTransport, *, tls: bool) -> None:
    """Queue ``transport``'s new connections for the process's handshake slots.

    httpx2 takes no network backend of its own; its pool's is replaced
    (``httpcore2.AsyncConnectionPool`` reads it for every new connection).
    """
    pool = transport._pool
    backend = pool._network_backend
    if not isinstance(backend, _Limited):
        pool._network_backend = _Limited(backend, tls=tls)
