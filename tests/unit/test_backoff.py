"""The one backoff policy: each policy's delays, the run of failures, and ``retry``."""

from __future__ import annotations

import pytest

from modelplane.backoff import Attempts, Backoff, retry
from modelplane.kube.client import (
    CRD_STORAGE_TRIES,
    CRD_STORAGE_WAIT,
    ApiStatusError,
    waiting_out_429,
)
from modelplane.kube.reflector import WATCH_BACKOFF


@pytest.mark.parametrize(
    ("policy", "attempts", "expected"),
    [
        # doubling from the first delay, then held at the cap
        (Backoff(first=1.0, cap=10.0), [1, 2, 3, 4, 5, 6], [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]),
        # attempt 0 (nothing failed yet) is the first delay, never less
        (Backoff(first=1.0, cap=10.0), [0], [1.0]),
        # another factor
        (Backoff(first=1.0, cap=100.0, factor=3.0), [1, 2, 3], [1.0, 3.0, 9.0]),
        # a first delay above the cap is capped
        (Backoff(first=5.0, cap=2.0), [1, 2], [2.0, 2.0]),
        # a watch the server refuses: 0.5 s, doubling, at most 30 s
        (WATCH_BACKOFF, [1, 2, 3, 7, 20], [0.5, 1.0, 2.0, 30.0, 30.0]),
        # a CRD's storage still initialising: a steady quarter of a second
        (CRD_STORAGE_WAIT, [1, 2, 19], [0.25, 0.25, 0.25]),
        # a run that never resets stays at the cap past any float's power
        (Backoff(first=1.0, cap=10.0), [1025, 10**6], [10.0, 10.0]),
        # ``capped`` keeps everything but the cap
        (Backoff(first=1.0, cap=10.0, factor=2.0).capped(3.0), [1, 2, 3], [1.0, 2.0, 3.0]),
    ],
)
def test_delays(policy: Backoff, attempts: list[int], expected: list[float]) -> None:
    assert [policy.delay(a) for a in attempts] == expected


@pytest.mark.parametrize(
    ("jitter", "rand", "expected"),
    [
        (0.0, 0.99, 8.0),  # no jitter: the draw does not matter
        (0.5, 0.0, 8.0),  # the smallest draw takes nothing off
        (0.5, 1.0, 4.0),  # the largest takes off the whole jitter share
        (0.25, 0.5, 7.0),
    ],
)
def test_jitter_takes_at_most_its_share_off(jitter: float, rand: float, expected: float) -> None:
    policy = Backoff(first=1.0, cap=60.0, jitter=jitter)
    assert policy.delay(4, rand=lambda: rand) == expected


def test_attempts_count_one_run_of_failures_and_start_over_on_reset() -> None:
    attempts = Attempts(Backoff(first=1.0, cap=10.0))
    assert [attempts.fail() for _ in range(3)] == [1.0, 2.0, 4.0]
    attempts.reset()
    assert attempts.count == 0 and attempts.fail() == 1.0


class Flaky:
    """Fails with ``error`` ``times`` times, then answers."""

    def __init__(self, times: int, error: Exception) -> None:
        self.times, self.error, self.calls = times, error, 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.times:
            raise self.error
        return "ok"


@pytest.mark.parametrize(
    ("failures", "tries", "when", "calls", "answers", "slept"),
    [
        (0, 3, True, 1, True, []),
        (2, 3, True, 3, True, [1.0, 2.0]),  # the last try answers
        (3, 3, True, 3, False, [1.0, 2.0]),  # out of tries: the error stands
        (2, 3, False, 1, False, []),  # an error ``when`` refuses is not retried
    ],
)
async def test_retry(
    failures: int, tries: int, when: bool, calls: int, answers: bool, slept: list[float]
) -> None:
    call = Flaky(failures, ValueError("no"))
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    policy = Backoff(first=1.0, cap=10.0)
    if answers:
        assert await retry(call, when=lambda _e: when, tries=tries, policy=policy, sleep=sleep)
    else:
        with pytest.raises(ValueError):
            await retry(call, when=lambda _e: when, tries=tries, policy=policy, sleep=sleep)
    assert call.calls == calls and sleeps == slept


@pytest.mark.parametrize(
    ("status", "failures", "calls"),
    [
        (429, 5, 6),  # the storage comes up after five 429s
        (429, CRD_STORAGE_TRIES, CRD_STORAGE_TRIES),  # ... or never: the last 429 stands
        (403, 1, 1),  # any other answer is not waited out
    ],
)
async def test_waiting_out_429(status: int, failures: int, calls: int) -> None:
    call = Flaky(failures, ApiStatusError(status, "/apis/x/v1/ys", "not yet"))
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    if calls > failures:
        assert await waiting_out_429(call, sleep=sleep) == "ok"
    else:
        with pytest.raises(ApiStatusError) as err:
            await waiting_out_429(call, sleep=sleep)
        assert err.value.status == status
    assert call.calls == calls
    assert sleeps == [0.25] * (calls - 1)
