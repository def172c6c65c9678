"""The one way tests wait: poll a check until it holds or a required deadline passes.

A deadline is a bound on how long a test may hang, never a claim about speed:
tests assert what happened, benchmarks (bench/) measure how fast. Every poll
pauses between reads (``interval``, never zero), so a waiting test does not
hammer the API server it is testing or starve the operator of the two cores
it shares with it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from lightkube import Client
from lightkube.core.exceptions import ApiError

T = TypeVar("T")

POLL_SECONDS = 0.1
# What a check may raise to mean "not yet": a 404 while an object does not exist.
NOT_YET: tuple[type[BaseException], ...] = (ApiError,)


class WaitTimeout(AssertionError):
    """The deadline passed before the check held (an assertion failure in a test)."""


class _Polls:
    """One wait's deadline and last answer, shared by the sync and async forms."""

    def __init__(
        self, what: str, deadline: float, interval: float, detail: Callable[[], str] | None
    ) -> None:
        if interval <= 0:
            raise ValueError(f"wait_for({what!r}): interval must be > 0, not {interval}")
        self.what, self.deadline, self.interval, self.detail = what, deadline, interval, detail
        self.end = time.monotonic() + deadline
        self.last: Any = None

    def settled(self, value: Any) -> bool:
        self.last = value
        return bool(value) and not isinstance(value, BaseException)

    def give_up_if_late(self) -> None:
        if time.monotonic() < self.end:
            return
        message = f"timed out after {self.deadline}s waiting for {self.what}; last: {self.last!r}"
        if self.detail is not None:
            message += f"\n{self.detail()}"
        raise WaitTimeout(message)


def wait_for(
    what: str,
    check: Callable[[], T],
    *,
    deadline: float,
    interval: float = POLL_SECONDS,
    detail: Callable[[], str] | None = None,
    not_yet: tuple[type[BaseException], ...] = NOT_YET,
) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``deadline`` seconds.

    An exception of ``not_yet`` from ``check`` (by default an ``ApiError``: a
    404 while an object does not exist yet) counts as "not yet" and is shown
    if the deadline passes, with ``detail()`` (an operator's log tail, say)
    after it; any other propagates at once (a process that exited).
    ``interval`` is the pause between two reads: shorten it only where the
    test must act within moments of the condition (a change made right as a
    stack turns Ready).
    """
    polls = _Polls(what, deadline, interval, detail)
    while True:
        try:
            value: Any = check()
        except not_yet as err:
            value = err
        if polls.settled(value):
            return value  # type: ignore[no-any-return]
        polls.give_up_if_late()
        time.sleep(interval)


async def wait_for_async(
    what: str,
    check: Callable[[], Awaitable[T]],
    *,
    deadline: float,
    interval: float = POLL_SECONDS,
    detail: Callable[[], str] | None = None,
    not_yet: tuple[type[BaseException], ...] = NOT_YET,
) -> T:
    """``wait_for`` for an async check: the same rules, awaiting between reads."""
    polls = _Polls(what, deadline, interval, detail)
    while True:
        try:
            value: Any = await check()
        except not_yet as err:
            value = err
        if polls.settled(value):
            return value  # type: ignore[no-any-return]
        polls.give_up_if_late()
        await asyncio.sleep(interval)


def gone(client: Client, kind: type[Any], name: str, namespace: str | None = None) -> bool:
    """Whether the object is gone: its GET answers 404 (a check for ``wait_for``).

    Another refusal is "not gone yet" rather than an error, so a wait on a
    deletion rides out the server's passing 5xx or 429.
    """
    try:
        client.get(kind, name, namespace=namespace)
    except ApiError as err:
        return err.status.code == 404
    return False
