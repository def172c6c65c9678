"""A blocked stack's failure is logged when it changes, not on every retry; what wakes it."""

from __future__ import annotations

import contextvars
import logging

import pytest

from modelplane.operator.handlers import FailureLog, QuietTeardownRetries, Wake, _retry
from modelplane.operator.status import Outcome

MISSING = Outcome(blocked_reason="SecretNotFound", blocked_message="Secret platform/west not found")
UNREACHABLE = Outcome(
    blocked_reason="TargetUnreachable", blocked_message="cannot reach the target API server"
)


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "modelplane.operator" and r.levelno == level
    ]


def test_a_failure_is_logged_once_over_its_retries_and_again_when_it_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="modelplane.operator")
    failures = FailureLog("platform/west")
    for retry_in in (10, 20, 40, 80, 120):
        failures.report(MISSING, retry_in, None)
    warned = _lines(caplog, logging.WARNING)
    assert warned == [
        "ServingStack platform/west: SecretNotFound: Secret platform/west not found "
        "(next try in 10s, then less often while it lasts)"
    ]
    assert len(_lines(caplog, logging.DEBUG)) == 4

    failures.report(UNREACHABLE, 10, None)
    failures.report(UNREACHABLE, 20, None)
    assert len(_lines(caplog, logging.WARNING)) == 2
    assert "TargetUnreachable" in _lines(caplog, logging.WARNING)[1]

    failures.report(Outcome(), 300, None)
    assert _lines(caplog, logging.INFO) == [
        "ServingStack platform/west: no longer blocked (was TargetUnreachable)"
    ]
    # Blocked again after a clean reconcile: a new failure, told again.
    failures.report(MISSING, 10, None)
    assert len(_lines(caplog, logging.WARNING)) == 3


def test_an_unexpected_error_brings_its_traceback_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="modelplane.operator")
    failures = FailureLog("platform/west")
    crashed = Outcome(blocked_reason="ReconcileError", blocked_message="KeyError: 'spec'")
    for _ in range(3):
        try:
            raise KeyError("spec")
        except KeyError as err:
            failures.report(crashed, 10, err)
    with_traceback = [r for r in caplog.records if r.exc_info]
    assert len(with_traceback) == 1 and with_traceback[0].levelno == logging.WARNING


async def test_only_a_new_spec_or_a_deletion_wakes_a_stack() -> None:
    wake = Wake((3, None))
    wake.see((3, None))  # our own status write, coming back as an event
    assert not wake.event.is_set()
    wake.see((4, None))  # a new spec
    assert wake.event.is_set()
    wake.event.clear()
    wake.see((4, "2026-12-01T00:00:00Z"))  # the stack is being deleted
    assert wake.event.is_set()


def test_a_stack_that_leaves_the_watch_stops_its_task() -> None:
    wake = Wake((3, None))
    wake.leave()  # deleted, or relabelled into another shard
    assert wake.gone and wake.event.is_set()


def _kopf_error(message: str) -> logging.LogRecord:
    return logging.LogRecord("kopf.objects", logging.ERROR, __file__, 1, message, None, None)


def test_only_the_retry_teardown_raised_is_demoted() -> None:
    quiet = QuietTeardownRetries()

    def in_a_handlers_task() -> list[int]:
        # What kopf logs in the task that ran the handler, after it raised.
        _retry("waiting for Gateway x to be deleted", 2.0)
        first, second = _kopf_error("about that retry"), _kopf_error("something else")
        passed = [quiet.filter(first), quiet.filter(second)]
        assert passed == [False, True]
        return [first.levelno, second.levelno]

    assert contextvars.copy_context().run(in_a_handlers_task) == [logging.DEBUG, logging.ERROR]
    # Without the handler's mark, every ERROR stays one.
    unmarked = _kopf_error("a handler crashed")
    assert quiet.filter(unmarked) is True and unmarked.levelno == logging.ERROR
