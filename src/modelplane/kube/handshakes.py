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
connection waits for a slot before it connects, and frees it once its TLS
is up (at once for plain HTTP). The slots are per event loop, shared by
every target of the process. Three rules keep a target that never
finishes its handshakes (a tarpit: it takes the TCP connection and says
nothing) from taking the slots from the rest; with 24 of them, a healthy
target's first request waited 10 to 15 s (issue 40, finding 7):

- at most one handshake per target (host and port) at a time: its other
  connections wait for it, not for the process's slots;
- a target whose last connection did not get through its handshake is a
  suspect, and waits for one of ``MAX_SUSPECT_HANDSHAKES`` slots of its
  own, until one does; the others stay for targets that answer;
- the wait for a slot is bounded (``SLOT_WAIT_SECONDS``): past it the
  connection fails as a ConnectTimeout, and its caller's backoff (a
  watch's, the lost-target probe's) decides when to try again.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import weakref
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

# Handshakes in flight at once, per process: enough to keep a core busy with
# TLS, few enough that each finishes within the target timeout.
MAX_HANDSHAKES = 8
# Of suspect targets, on slots of their own.
MAX_SUSPECT_HANDSHAKES = 2
# The longest a connection waits for its target's turn and a slot. Longer
# than the connect timeout: at a shard's start thousands of targets queue,
# and a wait is not the target's fault; bounded, so that it is not for ever.
SLOT_WAIT_SECONDS = 30.0
# Suspects remembered, per process: past it the oldest is forgotten (and
# judged again by its next handshake).
MAX_SUSPECTS = 10_000

Target = tuple[str, int]


class _Gates:
    """One event loop's handshake slots, its targets' turns and its suspects."""

    def __init__(self) -> None:
        self.slots = asyncio.Semaphore(MAX_HANDSHAKES)
        self.suspect_slots = asyncio.Semaphore(MAX_SUSPECT_HANDSHAKES)
        # A target's turn, while anyone holds or waits for it.
        self._turns: weakref.WeakValueDictionary[Target, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self.suspects: collections.OrderedDict[Target, None] = collections.OrderedDict()

    def turn(self, target: Target) -> asyncio.Lock:
        turn = self._turns.get(target)
        if turn is None:
            turn = self._turns[target] = asyncio.Lock()
        return turn

    def slots_for(self, target: Target) -> asyncio.Semaphore:
        return self.suspect_slots if target in self.suspects else self.slots

    def judge(self, target: Target, *, through: bool) -> None:
        """Note how the target's last handshake went."""
        if through:
            self.suspects.pop(target, None)
            return
        self.suspects[target] = None
        self.suspects.move_to_end(target)
        while len(self.suspects) > MAX_SUSPECTS:
            self.suspects.popitem(last=False)

    async def admit(self, target: Target) -> _Ticket:
        """The target's turn and a slot, within ``SLOT_WAIT_SECONDS``: ConnectTimeout past it."""
        turn = self.turn(target)
        try:
            async with asyncio.timeout(SLOT_WAIT_SECONDS):
                await turn.acquire()
                try:
                    slots = self.slots_for(target)
                    await slots.acquire()
                except BaseException:
                    turn.release()
                    raise
        except TimeoutError as err:
            raise httpcore2.ConnectTimeout(
                f"no TLS handshake slot within {SLOT_WAIT_SECONDS:.0f} s: the process sets up "
                f"at most {MAX_HANDSHAKES} connections at once"
            ) from err
        return _Ticket(self, target, turn, slots)


class _Ticket:
    """A target's turn and a slot, given back once (with how the handshake went, if known)."""

    def __init__(
        self, gates: _Gates, target: Target, turn: asyncio.Lock, slots: asyncio.Semaphore
    ) -> None:
        self._gates, self._target, self._turn, self._slots = gates, target, turn, slots
        self._done = False

    def done(self, through: bool | None) -> None:
        if self._done:
            return
        self._done = True
        if through is not None:
            self._gates.judge(self._target, through=through)
        self._slots.release()
        self._turn.release()


_GATES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Gates] = weakref.WeakKeyDictionary()


def _gates() -> _Gates:
    loop = asyncio.get_running_loop()
    gates = _GATES.get(loop)
    if gates is None:
        gates = _GATES[loop] = _Gates()
    return gates


class _Handshaking(httpcore2.AsyncNetworkStream):
    """A connected stream that holds its ticket until its TLS is up, or it closes."""

    def __init__(self, inner: httpcore2.AsyncNetworkStream, ticket: _Ticket) -> None:
        self._inner = inner
        self._ticket = ticket

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        self._ticket.done(through=None)
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            secured = await self._inner.start_tls(ssl_context, server_hostname, timeout)
        except Exception:
            self._ticket.done(through=False)
            raise
        except BaseException:
            # Cancelled: no verdict on the target.
            self._ticket.done(through=None)
            raise
        self._ticket.done(through=True)
        return secured

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
        ticket = await _gates().admit((host, port))
        try:
            stream = await self._inner.connect_tcp(
                host, port, timeout, local_address=local_address, socket_options=socket_options
            )
        except Exception:
            ticket.done(through=False)
            raise
        except BaseException:
            ticket.done(through=None)
            raise
        if not self._tls:
            ticket.done(through=True)
            return stream
        return _Handshaking(stream, ticket)

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
