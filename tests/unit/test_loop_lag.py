"""operator.loop_lag: how late the event loop woke a timer, observed and told.

Issue 42: on a shard starved of CPU the first signs were deadlines missed
elsewhere (watches given up as lost, hub writes timed out), with nothing
saying the loop itself was late. The clock and the sleeps here are the
test's own: a sleep advances the clock by what the script says it took.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import REGISTRY, generate_latest

from modelplane.operator.loop_lag import WARN_SECONDS, keep_measuring, lateness


@pytest.mark.parametrize(
    ("asked", "slept", "late"),
    [
        (1.0, 1.0, 0.0),
        (1.0, 1.25, 0.25),
        # A clock that ticks coarser than the timer: early is on time.
        (1.0, 0.999, 0.0),
        (1.0, 31.0, 30.0),
    ],
)
def test_lateness_is_what_a_sleep_took_beyond_what_was_asked(
    asked: float, slept: float, late: float
) -> None:
    assert lateness(asked, slept) == pytest.approx(late)


async def test_each_timer_is_observed_by_how_late_it_woke_and_a_stall_is_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    took = iter([1.0, 1.004, 3.5, 1.0 + WARN_SECONDS + 1.0])
    now = 0.0
    observed: list[float] = []

    def clock() -> float:
        return now

    async def sleep(_seconds: float) -> None:
        nonlocal now
        try:
            now += next(took)
        except StopIteration:
            raise asyncio.CancelledError from None

    with caplog.at_level(logging.WARNING), pytest.raises(asyncio.CancelledError):
        await keep_measuring(1.0, observe=observed.append, clock=clock, sleep=sleep)
    assert observed == pytest.approx([0.0, 0.004, 2.5, WARN_SECONDS + 1.0])
    told = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(told) == 1 and f"{WARN_SECONDS + 1.0:.1f} s late" in told[0], told


def test_the_lag_is_served_with_the_operators_metrics() -> None:
    assert b"modelplane_event_loop_lag_seconds_bucket" in generate_latest(REGISTRY)
