"""Reconciling and Stalled beside Ready: which of Ready's reasons stall, and Ready's order."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.faults import ErrorKind, Fault
from modelplane.operator.status import READY_CAUSES, Outcome, desired_status
from modelplane.plan.progress import Progress, action_refused, progress
from modelplane.vocabulary import (
    CONDITION_REASONS,
    BlockedReason,
    ConditionType,
    ReadyReason,
    WorkloadReason,
)

# Every reason Ready is False with, and where it leaves the stack. A reason
# added to the vocabulary fails test_the_table_covers_every_reason until
# it is placed here.
B, W = BlockedReason, WorkloadReason
STALLED = [
    B.INVALID_SPEC,
    B.KUBECONFIG_INVALID,
    B.KUBECONFIG_REFUSED,
    B.CROSS_NAMESPACE_REF_DENIED,
    B.CLOUD_IDENTITY_UNSUPPORTED,
    B.IDENTITY_INVALID,
    B.TARGET_ADDRESS_DENIED,
    B.TARGET_CLAIMED,
    B.TARGET_COLLECTION_TOO_LARGE,
    B.RELEASE_STORAGE_TAMPERED,
    # A release held back for what the target runs: removed or adopted.
    B.CONFLICTS_FOUND,
    # A node agent's roll stopped at a node: a person sets a version that works.
    B.NODE_AGENT_FAILED,
    W.RELEASE_OUTSIDE_NAMESPACE,
    W.POD_CRASH_LOOPING,
    W.IMAGE_PULL_FAILED,
    W.CONTAINER_CONFIG_ERROR,
    W.UNSCHEDULABLE,
    W.JOB_FAILED,
    W.PROGRESS_DEADLINE_EXCEEDED,
    W.WORKLOAD_UNAVAILABLE,
]
RECONCILING = [
    ReadyReason.PROGRESSING,
    ReadyReason.GATEWAY_NOT_PROGRAMMED,
    ReadyReason.NODE_AGENTS_ROLLING,
    # Waits: they pass by themselves.
    B.WEBHOOK_NOT_READY,
    B.TARGET_NAMESPACE_TERMINATING,
    B.CLAIM_CONTENDED,
    # The pods holding the DRA driver's claims go, or the timeout passes.
    B.CLAIMS_HELD,
    # Retried: the cause may go (a Secret applied with the stack, a grant
    # still propagating, a target or token service back).
    B.SECRET_NOT_FOUND,
    B.SECRET_KEY_MISSING,
    B.HUB_FORBIDDEN,
    B.IDENTITY_REJECTED,
    B.IDENTITY_UNREACHABLE,
    B.TARGET_UNREACHABLE,
    B.TARGET_UNAUTHORIZED,
    B.TARGET_ERROR,
    B.ACTION_FAILED,
    B.HELM_FAILED,
    B.RECONCILE_ERROR,
    B.STATUS_REFUSED,
    # An image copied into the mirror, the mirror back.
    B.IMAGE_NOT_IN_MIRROR,
    B.MIRROR_UNREACHABLE,
    # A scheduler mended in place binds the probe pod left for it.
    B.SCHEDULER_NOT_BINDING,
    W.WORKLOAD_MISSING,
    W.WORKLOAD_SCALED_DOWN,
]


def test_the_table_covers_every_reason() -> None:
    placed = [*STALLED, *RECONCILING, ReadyReason.RECONCILED]
    assert sorted(placed) == sorted(CONDITION_REASONS[ConditionType.READY])


@pytest.mark.parametrize(
    ("reason", "expected"),
    [(r, Progress.STALLED) for r in STALLED] + [(r, Progress.RECONCILING) for r in RECONCILING],
)
def test_where_a_reason_leaves_the_stack(reason: str, expected: Progress) -> None:
    assert progress(False, reason) is expected


@pytest.mark.parametrize(
    ("ready", "reason", "refused", "expected"),
    [
        (True, ReadyReason.RECONCILED, False, Progress.CURRENT),
        # A refused action (a chart CRD upgrade) is said as ActionFailed.
        (False, B.ACTION_FAILED, True, Progress.STALLED),
        (False, B.ACTION_FAILED, False, Progress.RECONCILING),
        # A refusal behind a stop is not what Ready says: the stop decides.
        (False, B.TARGET_UNREACHABLE, True, Progress.RECONCILING),
    ],
)
def test_a_refused_action_stalls_only_where_ready_says_an_action_failed(
    ready: bool, reason: str, refused: bool, expected: Progress
) -> None:
    assert progress(ready, reason, refused) is expected


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_only_invalid_input_refuses_an_action_for_good(kind: ErrorKind) -> None:
    assert action_refused(Fault(kind)) is (kind is ErrorKind.INVALID)


# ---- in the status ------------------------------------------------------------------------


def _conditions(outcome: Outcome) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in desired_status(outcome, 4)["conditions"]}


def test_ready_keeps_its_causes_in_the_declared_order() -> None:
    assert [name for name, _ in READY_CAUSES] == [
        "blocked",
        "failed",
        "progressing",
        "proving",
        "unhealthy",
        "not serving",
    ]


@pytest.mark.parametrize(
    ("outcome", "reason", "reconciling", "stalled"),
    [
        (Outcome(blocked_reason=B.INVALID_SPEC, blocked_message="spec.x"), "InvalidSpec", 0, 1),
        (Outcome(blocked_reason=B.TARGET_UNREACHABLE), "TargetUnreachable", 1, 0),
        (Outcome(failures={"grove": "boom"}), "ActionFailed", 1, 0),
        (
            Outcome(failures={"grove": "CRD refused"}, refused=frozenset({"grove"})),
            "ActionFailed",
            0,
            1,
        ),
        # A stop comes before a failure: it is what Ready (and Stalled) say.
        (
            Outcome(blocked_reason=B.TARGET_CLAIMED, failures={"grove": "boom"}),
            "TargetClaimed",
            0,
            1,
        ),
    ],
)
def test_reconciling_and_stalled_follow_ready(
    outcome: Outcome, reason: str, reconciling: int, stalled: int
) -> None:
    conditions = _conditions(outcome)
    assert conditions["Ready"]["reason"] == reason
    for name, expected in (("Reconciling", reconciling), ("Stalled", stalled)):
        c = conditions[name]
        assert (c["status"], c["reason"], c["observedGeneration"]) == (
            "True" if expected else "False",
            reason,
            4,
        )
        # The True one says what Ready says; kstatus shows its message.
        if expected:
            assert c["message"] == conditions["Ready"]["message"]


def test_nothing_is_said_before_anything_was_planned() -> None:
    assert set(_conditions(Outcome())) == set()
