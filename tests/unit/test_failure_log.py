"""A blocked stack's failure is logged when it changes, not on every retry."""

from __future__ import annotations

import logging

import pytest

from modelplane.operator.handlers import FailureLog
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
