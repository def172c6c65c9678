"""kube.handshakes: at most MAX_HANDSHAKES connections set up at once, and slots never lost.

Issue 40, finding 7: targets that never finish a handshake (tarpits) took
the process's slots from healthy targets, for as long as anyone waited;
now one handshake per target at a time, suspects on slots of their own,
and a wait that ends.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2
import pytest

from modelplane.kube import handshakes
from modelplane.kube.handshakes import MAX_HANDSHAKES, MAX_SUSPECT_HANDSHAKES, limit_handshakes


class _Stream(httpcore2.AsyncNetworkStream):
    def __init__(self, backend: _Backend, host: str) -> None:
        self.backend, self.host = backend, host

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
        b.in_flight[self.host] += 1
        b.most = max(b.most, sum(b.in_flight.values()))
        b.most_per_target = max(b.most_per_target, b.in_flight[self.host])
        try:
            if self.host in b.tarpits:
                b.stalled.set()
                await b.released.wait()
                raise httpcore2.ConnectTimeout("the tarpit said nothing")
            await asyncio.sleep(0)
        finally:
            b.in_flight[self.host] -= 1
        if b.fail_tls:
            raise httpcore2.ConnectError("handshake refused")
        return self


class _Backend(httpcore2.AsyncNetworkBackend):
    def __init__(self, *, fail_tls: bool = False, tarpits: Iterable[str] = ()) -> None:
        self.in_flight: collections.Counter[str] = collections.Counter()
        self.most = self.most_per_target = 0
        self.fail_tls = fail_tls
        # Hosts whose handshakes hang until ``released``, then time out.
        self.tarpits = set(tarpits)
        self.stalled = asyncio.Event()
        self.released = asyncio.Event()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return _Stream(self, host)

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


# Never used to connect (the fake stream ignores it); made once, as making
# one loads the system's certificates.
_TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


async def _connect(backend: httpcore2.AsyncNetworkBackend, host: str = "127.0.0.1") -> None:
    stream = await backend.connect_tcp(host, 443, timeout=1.0)
    await stream.start_tls(_TLS, "target", timeout=1.0)


def _free() -> tuple[int, int]:
    gates = handshakes._gates()
    return gates.slots._value, gates.suspect_slots._value


ALL_FREE = (MAX_HANDSHAKES, MAX_SUSPECT_HANDSHAKES)
# What a test waits, at most, for what should come: a guard, never a measure.
GUARD = 10.0


async def test_at_most_the_limit_of_handshakes_run_at_once() -> None:
    inner = _Backend()
    backend = _limited(inner)
    hosts = [f"10.0.0.{i}" for i in range(5 * MAX_HANDSHAKES)]
    await asyncio.gather(*(_connect(backend, host) for host in hosts))
    assert inner.most == MAX_HANDSHAKES
    assert _free() == ALL_FREE


async def test_a_failed_handshake_frees_its_slot() -> None:
    backend = _limited(_Backend(fail_tls=True))
    hosts = [f"10.0.1.{i}" for i in range(3 * MAX_HANDSHAKES)]
    results = await asyncio.gather(
        *(_connect(backend, host) for host in hosts), return_exceptions=True
    )
    assert all(isinstance(r, httpcore2.ConnectError) for r in results)
    assert _free() == ALL_FREE
    handshakes._gates().suspects.clear()


async def test_plain_http_holds_no_slot_past_the_connect() -> None:
    backend = _limited(_Backend(), tls=False)
    streams = [await backend.connect_tcp("127.0.0.1", 80) for _ in range(3 * MAX_HANDSHAKES)]
    assert len(streams) == 3 * MAX_HANDSHAKES
    assert _free() == ALL_FREE


async def test_one_handshake_per_target_at_a_time() -> None:
    inner = _Backend()
    backend = _limited(inner)
    await asyncio.gather(*(_connect(backend, "10.0.2.1") for _ in range(MAX_HANDSHAKES)))
    assert inner.most_per_target == 1
    assert _free() == ALL_FREE


async def test_the_wait_for_a_slot_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every slot held by a handshake that hangs: the next connection is
    # refused once its wait is over, not queued for ever.
    monkeypatch.setattr(handshakes, "SLOT_WAIT_SECONDS", 0.05)
    tarpits = [f"10.0.3.{i}" for i in range(MAX_HANDSHAKES)]
    inner = _Backend(tarpits=tarpits)
    backend = _limited(inner)
    hanging = [asyncio.create_task(_connect(backend, host)) for host in tarpits]
    async with asyncio.timeout(GUARD):
        # Set by the first to hang, and seen once every one has taken its turn.
        await inner.stalled.wait()
        with pytest.raises(httpcore2.ConnectTimeout, match="no TLS handshake slot"):
            await _connect(backend, "10.0.3.200")
    inner.released.set()
    await asyncio.gather(*hanging, return_exceptions=True)
    assert _free() == ALL_FREE
    handshakes._gates().suspects.clear()


async def test_targets_whose_handshakes_never_finish_leave_the_slots_to_the_rest() -> None:
    tarpits = [f"10.0.4.{i}" for i in range(3 * MAX_HANDSHAKES)]
    inner = _Backend(tarpits=tarpits)
    backend = _limited(inner)
    # Each tarpit once timed out its handshake: it is a suspect now.
    for host in tarpits:
        handshakes._gates().judge((host, 443), through=False)
    # Each tarpit tries again (its watches and its probe), and hangs.
    hanging = [asyncio.create_task(_connect(backend, h)) for h in tarpits for _ in range(3)]
    async with asyncio.timeout(GUARD):
        # Set by the first to hang, and seen once every one has taken its turn.
        await inner.stalled.wait()
        # A healthy target is set up at once, beside them.
        await _connect(backend, "10.0.4.200")
    assert inner.most_per_target == 1
    assert sum(inner.in_flight.values()) == MAX_SUSPECT_HANDSHAKES
    inner.released.set()
    await asyncio.gather(*hanging, return_exceptions=True)
    assert _free() == ALL_FREE
    handshakes._gates().suspects.clear()


async def test_a_target_whose_handshake_gets_through_is_no_longer_a_suspect() -> None:
    gates = handshakes._gates()
    backend = _limited(_Backend())
    gates.judge(("10.0.5.1", 443), through=False)
    assert gates.slots_for(("10.0.5.1", 443)) is gates.suspect_slots
    await _connect(backend, "10.0.5.1")
    assert gates.slots_for(("10.0.5.1", 443)) is gates.slots


def test_suspects_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handshakes, "MAX_SUSPECTS", 3)
    gates = handshakes._Gates()
    for i in range(5):
        gates.judge((f"10.0.6.{i}", 443), through=False)
    assert list(gates.suspects) == [(f"10.0.6.{i}", 443) for i in (2, 3, 4)]
