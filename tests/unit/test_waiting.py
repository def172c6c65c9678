"""The one wait helper: polls with a pause, treats an ApiError as "not yet", fails with context."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from lightkube.core.exceptions import ApiError
from tests.waiting import WaitTimeout, wait_for, wait_for_async


def _not_found() -> ApiError:
    request = httpx2.Request("GET", "https://x/api/v1/namespaces/a")
    body = {"kind": "Status", "code": 404, "message": "not found", "reason": "NotFound"}
    return ApiError(response=httpx2.Response(404, json=body, request=request))


def test_an_api_error_is_not_yet_and_the_first_truthy_answer_is_returned() -> None:
    answers: list[object] = [_not_found(), 0, "there"]

    def check() -> object:
        answer = answers.pop(0)
        if isinstance(answer, ApiError):
            raise answer
        return answer

    assert wait_for("the third answer", check, deadline=30, interval=0.001) == "there"
    assert answers == []


def test_a_missed_deadline_names_the_wait_the_last_answer_and_the_detail() -> None:
    with pytest.raises(AssertionError) as err:
        wait_for("never", lambda: [], deadline=0, detail=lambda: "log tail: nothing")
    assert "waiting for never; last: []" in str(err.value)
    assert str(err.value).endswith("\nlog tail: nothing")


@pytest.mark.parametrize("interval", [0, -1.0])
def test_a_poll_without_a_pause_between_reads_is_refused(interval: float) -> None:
    with pytest.raises(ValueError, match="interval must be > 0"):
        wait_for("anything", lambda: True, deadline=1, interval=interval)


def test_the_async_form_follows_the_same_rules() -> None:
    reads: list[int] = []

    async def check() -> bool:
        reads.append(1)
        return len(reads) >= 3

    assert asyncio.run(wait_for_async("three reads", check, deadline=30, interval=0.001))
    assert len(reads) == 3
    with pytest.raises(ValueError):
        asyncio.run(wait_for_async("anything", check, deadline=1, interval=0))


def test_not_yet_names_what_a_check_may_raise_and_anything_else_ends_the_wait() -> None:
    answers: list[object] = [ConnectionRefusedError(), True]

    def check() -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    # The testenv's form: a server not listening yet is "not yet".
    assert wait_for("a listener", check, deadline=30, interval=0.001, not_yet=(OSError,))
    # By default only an ApiError is; an OSError (a process gone) ends the wait at once.
    answers[:] = [ConnectionRefusedError(), True]
    with pytest.raises(ConnectionRefusedError):
        wait_for("a listener", check, deadline=30, interval=0.001)
    assert answers == [True]


def test_a_missed_deadline_is_a_wait_timeout_that_callers_may_turn_into_their_own() -> None:
    with pytest.raises(WaitTimeout):
        wait_for("never", lambda: False, deadline=0)
