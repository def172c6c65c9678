"""The one way tests wait: poll a check until it holds or a required deadline passes.

A deadline is a bound on how long a test may hang, never a claim about speed:
tests assert what happened, benchmarks (bench/) measure how fast.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from lightkube.core.exceptions import ApiError

T = TypeVar("T")

POLL_SECONDS = 0.1


def _settled(value: Any) -> bool:
    return bool(value) and not isinstance(value, ApiError)


def wait_for(what: str, check: Callable[[], T], *, deadline: float) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``deadline`` seconds.

    An ``ApiError`` from ``check`` (a 404 while an object does not exist yet)
    counts as "not yet" and is shown if the deadline passes.
    """
    end = time.monotonic() + deadline
    last: Any = None
    while True:
        try:
            last = check()
        except ApiError as err:
            last = err
        if _settled(last):
            return last  # type: ignore[no-any-return]
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {deadline}s waiting for {what}; last: {last!r}")
        time.sleep(POLL_SECONDS)


async def wait_for_async(what: str, check: Callable[[], Awaitable[T]], *, deadline: float) -> T:
    """``wait_for`` for an async check."""
    end = time.monotonic() + deadline
    last: Any = None
    while True:
        try:
            last = await check()
        except ApiError as err:
            last = err
        if _settled(last):
            return last  # type: ignore[no-any-return]
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {deadline}s waiting for {what}; last: {last!r}")
        await asyncio.sleep(POLL_SECONDS)
