"""kube.handshakes: at most MAX_HANDSHAKES connections set up at once, and slots never lost."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2
import pytest

from modelplane.kube import handshakes
from modelplane.kube.handshakes import MAX_HANDSHAKES, limit_handshakes


class _Stream(httpcore2.AsyncNetworkStream):
    def __init__(self, backend: _Backend) -> None:
        self.backend = backend

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        b = self.backend
        b.in_flight += 1
        b.most = max(b.most, b.in_flight)
        await asyncio.sleep(0.01)
        b.in_flight -= 1
        if b.fail_tls:
            raise httpcore2.ConnectError("handshake refused")
        return self


class _Backend(httpcore2.AsyncNetworkBackend):
    def __init__(self, *, fail_tls: bool = False) -> None:
        self.in_flight = self.most = 0
        self.fail_tls = fail_tls

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return _Stream(self)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.AsyncNetworkStream:
        raise NotImplementedError

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _limited(inner: _Backend, tls: bool = True) -> httpcore2.AsyncNetworkBackend:
    transport = httpx2.AsyncHTTPTransport()
    transport._pool._network_backend = inner
    limit_handshakes(transport, tls=tls)
    limit_handshakes(transport, tls=tls)  # once is enough: not wrapped twice
    backend = transport._pool._network_backend
    assert isinstance(backend, handshakes._Limited) and backend._inner is inner
    return backend


async def _connect(backend: httpcore2.AsyncNetworkBackend) -> None:
    stream = await backend.connect_tcp("127.0.0.1", 443, timeout=1.0)
    await stream.start_tls(ssl.create_default_context(), "target", timeout=1.0)


@pytest.mark.asyncio
async def test_at_most_the_limit_of_handshakes_run_at_once() -> None:
    inner = _Backend()
    backend = _limited(inner)
    await asyncio.gather(*(_connect(backend) for _ in range(5 * MAX_HANDSHAKES)))
    assert inner.most == MAX_HANDSHAKES
    assert handshakes._slots()._value == MAX_HANDSHAKES


@pytest.mark.asyncio
async def test_a_failed_handshake_frees_its_slot() -> None:
    backend = _limited(_Backend(fail_tls=True))
    results = await asyncio.gather(
        *(_connect(backend) for _ in range(3 * MAX_HANDSHAKES)), return_exceptions=True
    )
    assert all(isinstance(r, httpcore2.ConnectError) for r in results)
    assert handshakes._slots()._value == MAX_HANDSHAKES


@pytest.mark.asyncio
async def test_plain_http_holds_no_slot_past_the_connect() -> None:
    backend = _limited(_Backend(), tls=False)
    streams = [await backend.connect_tcp("127.0.0.1", 80) for _ in range(3 * MAX_HANDSHAKES)]
    assert len(streams) == 3 * MAX_HANDSHAKES
    assert handshakes._slots()._value == MAX_HANDSHAKES
