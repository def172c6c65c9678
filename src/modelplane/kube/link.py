"""Whether a target answers: while it does not, one probe stands in for all its watches.

When the target stops answering, one ``Link`` probe per target (``/readyz``,
``PROBE_BACKOFF`` apart) stands in for every watch's retries
(``kube.reflector``), so an outage costs one connection attempt per probe,
is logged once, and the watches resume within a probe of the server being
back. The probes back off: a target lost for good (or a tarpit) would
otherwise take one of the process's handshake slots four times a second
(``kube.handshakes``). A reconcile that waits on the copies of a lost
target asks for one probe at once (``probe_now``) before it gives up on
them: a target back after a cut of 10 s would otherwise be noticed only
at the probe after next (up to 15.75 s after the loss), and every stack
of the shard woken by the cut would read its target whole meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable

import httpx2

from modelplane.backoff import Attempts, Backoff
from modelplane.kube.answers import describe_error

log = logging.getLogger("modelplane.operator.watch")

PROBE_SECONDS = 0.25
# Between probes of a lost target: from PROBE_SECONDS, doubling to a cap,
# jittered so that a shard's lost targets do not probe in step.
PROBE_BACKOFF = Backoff(first=PROBE_SECONDS, cap=15.0, jitter=0.5)
# How long one probe may take to be answered.
PROBE_TIMEOUT_SECONDS = 5.0


class Link:
    """Whether a target answers; while it does not, one probe stands in for every watch."""

    __slots__ = ("_asked", "_every", "_http", "_label", "_probe", "_rand", "_sleep", "up")

    def __init__(
        self,
        http: httpx2.AsyncClient,
        label: str,
        every: Backoff = PROBE_BACKOFF,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._http, self._label, self._every = http, label, every
        self._sleep, self._rand = sleep, rand
        self.up = asyncio.Event()
        self.up.set()
        self._probe: asyncio.Task[None] | None = None
        # Set by ``probe_now``; made only while the target is lost (a
        # shard keeps a Link a target, and an Event holds a deque).
        self._asked: asyncio.Event | None = None

    def lost(self, err: BaseException) -> bool:
        """Note that the target stopped answering; True for the first watch to notice."""
        if not self.up.is_set():
            return False
        self.up.clear()
        log.warning(
            "target of %s: watches lost (%s); probing from every %.2g s to every %.2g s "
            "until it answers",
            self._label,
            describe_error(err),
            self._every.first,
            self._every.cap,
        )
        self._asked = asyncio.Event()
        self._probe = asyncio.create_task(self._until_up(time.monotonic()))
        return True

    def probe_now(self) -> None:
        """Probe a lost target now rather than at the end of its backoff; nothing if it is up."""
        if self._asked is not None and not self.up.is_set():
            self._asked.set()

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if a probe is asked for meanwhile."""
        asked = self._asked
        if asked is None:
            await self._sleep(seconds)
            return
        waits = (asyncio.ensure_future(self._sleep(seconds)), asyncio.ensure_future(asked.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        asked.clear()

    async def _until_up(self, since: float) -> None:
        probes = Attempts(self._every, rand=self._rand)
        while True:
            await self._pause(probes.fail())
            try:
                # Its status is all that is read of it: a body is never read.
                async with self._http.stream(
                    "GET", "/readyz", timeout=PROBE_TIMEOUT_SECONDS
                ) as response:
                    code = response.status_code
            except httpx2.TransportError:
                continue
            # A server still starting answers 5xx; one that hides /readyz
            # from us answers 401/403, and is up.
            if code < 500:
                break
        log.info(
            "target of %s: answering again after %.0f s; watches resume",
            self._label,
            time.monotonic() - since,
        )
        self._asked = None
        self.up.set()

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
