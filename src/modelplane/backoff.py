"""The one retry rule of the product: exponential backoff, capped, maybe jittered.

Every wait between tries (a blocked stack, a failed release, a broken watch,
a CRD whose storage is still settling, a Lease that could not be renewed) is
a ``Backoff`` with its own numbers. A policy is a value and ``delay`` a pure
function of the attempt, so a table test pins each policy down; ``Attempts``
counts one run of failures, and ``retry`` repeats one call.

Written here rather than taken from ``tenacity`` or ``backoff``: both decorate
a function, while most of our retries are loops that do other work between
tries (watch, report, sleep on a wake-up) and need only the next delay.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """``first`` seconds, times ``factor`` per attempt, at most ``cap``.

    ``jitter`` takes up to that fraction off each delay at random, so that
    many stacks failing together do not retry in lockstep.
    """

    first: float
    cap: float
    factor: float = 2.0
    jitter: float = 0.0

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds before try number ``attempt + 1`` (``attempt`` 1 is the first failure)."""
        try:
            grown = self.first * self.factor ** max(attempt - 1, 0)
        except OverflowError:
            # A run that never resets (a standby polling its Lease) reaches
            # attempts whose power no float holds; the cap is the answer.
            grown = self.cap
        return min(self.cap, grown) * (1.0 - self.jitter * rand())

    def capped(self, cap: float) -> Backoff:
        return Backoff(self.first, cap, self.factor, self.jitter)


@dataclass(slots=True)
class Attempts:
    """One run of failures under a policy: ``fail`` counts one and gives the next delay.

    Slotted: every reflector keeps five, nine reflectors a target.
    """

    policy: Backoff
    count: int = 0
    # The jitter's draw; a test gives one of its own.
    rand: Callable[[], float] = field(default=random.random, repr=False)

    def fail(self) -> float:
        self.count += 1
        return self.policy.delay(self.count, self.rand)

    def reset(self) -> None:
        self.count = 0


async def retry(
    call: Callable[[], Awaitable[T]],
    *,
    when: Callable[[Exception], bool],
    tries: int,
    policy: Backoff,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """``call()``, tried up to ``tries`` times while its error is one ``when`` accepts."""
    attempts = Attempts(policy)
    while True:
        try:
            return await call()
        except Exception as err:
            if attempts.count + 1 >= tries or not when(err):
                raise
            await sleep(attempts.fail())
