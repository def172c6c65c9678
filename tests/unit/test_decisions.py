"""The reconciler's decisions, case by case: input, and the value it must give.

In the style of Flux helm-controller's state_test.go: each decision is a
pure function of what was observed, so a table pins it down.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from modelplane.credentials.identity.base import IdentityFailure
from modelplane.kube.errors import ErrorKind, Fault
from modelplane.plan import decisions
from modelplane.plan.decisions import BlockedReason, ComponentState
from modelplane.vocabulary import EventReason


@dataclass(frozen=True)
class ReasonCase:
    name: str
    fault: Fault
    reconcile: BlockedReason
    teardown: BlockedReason


REASONS = [
    ReasonCase(
        "unreachable",
        Fault(ErrorKind.UNREACHABLE),
        BlockedReason.TARGET_UNREACHABLE,
        BlockedReason.TARGET_UNREACHABLE,
    ),
    ReasonCase(
        "401",
        Fault(ErrorKind.UNAUTHORIZED, status=401),
        BlockedReason.TARGET_UNAUTHORIZED,
        BlockedReason.TARGET_UNAUTHORIZED,
    ),
    ReasonCase(
        "403",
        Fault(ErrorKind.FORBIDDEN, status=403),
        BlockedReason.TARGET_UNAUTHORIZED,
        BlockedReason.TARGET_UNAUTHORIZED,
    ),
    ReasonCase(
        "a namespace being deleted is a wait, not unauthorized",
        Fault(ErrorKind.NAMESPACE_TERMINATING, status=403),
        BlockedReason.TARGET_NAMESPACE_TERMINATING,
        BlockedReason.TARGET_NAMESPACE_TERMINATING,
    ),
    ReasonCase(
        "404",
        Fault(ErrorKind.NOT_FOUND, status=404),
        BlockedReason.TARGET_ERROR,
        BlockedReason.TARGET_ERROR,
    ),
    ReasonCase(
        "409",
        Fault(ErrorKind.CONFLICT, status=409),
        BlockedReason.TARGET_ERROR,
        BlockedReason.TARGET_ERROR,
    ),
    ReasonCase(
        "429",
        Fault(ErrorKind.SETTLING, status=429),
        BlockedReason.TARGET_ERROR,
        BlockedReason.TARGET_ERROR,
    ),
    ReasonCase(
        "500",
        Fault(ErrorKind.ANSWERED, status=500),
        BlockedReason.TARGET_ERROR,
        BlockedReason.TARGET_ERROR,
    ),
    ReasonCase(
        "a collection past its budget",
        Fault(ErrorKind.OVER_BUDGET),
        BlockedReason.TARGET_COLLECTION_TOO_LARGE,
        BlockedReason.TARGET_COLLECTION_TOO_LARGE,
    ),
    ReasonCase(
        "refused address",
        Fault(ErrorKind.ADDRESS_DENIED),
        BlockedReason.TARGET_ADDRESS_DENIED,
        BlockedReason.TARGET_ADDRESS_DENIED,
    ),
    ReasonCase(
        "helm",
        Fault(ErrorKind.HELM_FAILED),
        BlockedReason.HELM_FAILED,
        BlockedReason.HELM_FAILED,
    ),
    ReasonCase(
        "claim contended",
        Fault(ErrorKind.CLAIM_CONTENDED),
        BlockedReason.CLAIM_CONTENDED,
        BlockedReason.CLAIM_CONTENDED,
    ),
    ReasonCase(
        "webhook",
        Fault(ErrorKind.WEBHOOK_NOT_READY),
        BlockedReason.WEBHOOK_NOT_READY,
        BlockedReason.WEBHOOK_NOT_READY,
    ),
    ReasonCase(
        "invalid spec",
        Fault(ErrorKind.INVALID),
        BlockedReason.INVALID_SPEC,
        BlockedReason.INVALID_SPEC,
    ),
    ReasonCase(
        "a missing Secret gives its own reason",
        Fault(ErrorKind.CREDENTIALS, reason="SecretNotFound"),
        BlockedReason.SECRET_NOT_FOUND,
        BlockedReason.SECRET_NOT_FOUND,
    ),
    ReasonCase(
        "an identity gives its own reason",
        Fault(ErrorKind.IDENTITY, reason="IdentityUnreachable"),
        BlockedReason.IDENTITY_UNREACHABLE,
        BlockedReason.IDENTITY_UNREACHABLE,
    ),
    ReasonCase(
        "unforeseen",
        Fault(ErrorKind.UNEXPECTED),
        BlockedReason.RECONCILE_ERROR,
        BlockedReason.TEARDOWN_ERROR,
    ),
]


@pytest.mark.parametrize("case", REASONS, ids=lambda c: c.name)
def test_a_fault_gives_one_reason_in_reconcile_and_teardown_alike(case: ReasonCase) -> None:
    assert decisions.blocked_reason(case.fault) is case.reconcile
    assert decisions.blocked_reason(case.fault, teardown=True) is case.teardown


def test_every_kind_has_a_reason() -> None:
    for kind in ErrorKind:
        assert isinstance(decisions.blocked_reason(Fault(kind)), BlockedReason)


@pytest.mark.parametrize(
    "reason",
    [
        "SecretNotFound",
        "SecretKeyMissing",
        "HubForbidden",
        "KubeconfigInvalid",
        "KubeconfigRefused",
        "IdentityInvalid",
        "TargetAddressDenied",
        "CrossNamespaceRefDenied",
        "CloudIdentityUnsupported",
        *(f.value for f in IdentityFailure),
    ],
)
def test_every_credentials_reason_goes_to_the_wire_as_it_is(reason: str) -> None:
    kind = ErrorKind.IDENTITY if reason.startswith("Identity") else ErrorKind.CREDENTIALS
    assert decisions.blocked_reason(Fault(kind, reason=reason)) == reason


@pytest.mark.parametrize(
    ("kind", "waits"),
    [
        (ErrorKind.NAMESPACE_TERMINATING, True),
        (ErrorKind.WEBHOOK_NOT_READY, True),
        (ErrorKind.FORBIDDEN, False),
        (ErrorKind.HELM_FAILED, False),
        (ErrorKind.UNREACHABLE, False),
    ],
)
def test_what_passes_by_itself_is_a_wait(kind: ErrorKind, waits: bool) -> None:
    assert decisions.waits(Fault(kind)) is waits


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        (ErrorKind.WEBHOOK_NOT_READY, BlockedReason.WEBHOOK_NOT_READY),
        (ErrorKind.HELM_FAILED, BlockedReason.ACTION_FAILED),
        (ErrorKind.FORBIDDEN, BlockedReason.ACTION_FAILED),
        (ErrorKind.UNEXPECTED, BlockedReason.ACTION_FAILED),
    ],
)
def test_a_components_failed_action(kind: ErrorKind, reason: BlockedReason) -> None:
    assert decisions.action_reason(Fault(kind)) is reason


@pytest.mark.parametrize(
    ("failed", "waiting", "reason"),
    [
        ({"configuration": "x"}, {"configuration"}, BlockedReason.WEBHOOK_NOT_READY),
        ({"configuration": "x", "lws": "y"}, {"configuration"}, BlockedReason.ACTION_FAILED),
        ({"lws": "y"}, set(), BlockedReason.ACTION_FAILED),
    ],
)
def test_ready_waits_on_a_webhook_only_when_every_failure_is_one(
    failed: dict[str, str], waiting: set[str], reason: BlockedReason
) -> None:
    assert decisions.failures_reason(failed, frozenset(waiting)) is reason


MISSING = BlockedReason.IMAGE_NOT_IN_MIRROR
SILENT = BlockedReason.MIRROR_UNREACHABLE


@pytest.mark.parametrize(
    ("reasons", "ready"),
    [
        # Every failure the mirror's: Ready says so, a missing image first.
        ({"lws": MISSING}, MISSING),
        ({"lws": SILENT}, SILENT),
        ({"lws": SILENT, "grove": MISSING}, MISSING),
        # Beside another failure, or with a reason unknown: a failed action.
        ({"lws": MISSING, "grove": BlockedReason.ACTION_FAILED}, BlockedReason.ACTION_FAILED),
        ({}, BlockedReason.ACTION_FAILED),
    ],
)
def test_ready_names_the_mirror_only_when_every_failure_is_its(
    reasons: dict[str, BlockedReason], ready: BlockedReason
) -> None:
    failed = {name: "x" for name in reasons} or {"lws": "x"}
    assert decisions.failures_reason(failed, frozenset(), reasons) is ready


@pytest.mark.parametrize("reason", [MISSING, SILENT])
def test_a_release_the_mirror_held_gives_its_own_event_reason(reason: BlockedReason) -> None:
    kind = ErrorKind.NOT_FOUND if reason is MISSING else ErrorKind.UNREACHABLE
    assert decisions.action_reason(Fault(kind, reason=reason.value)) is reason


CLASH = BlockedReason.CONFLICTS_FOUND


@pytest.mark.parametrize(
    ("reasons", "ready"),
    [
        # Every failure a release held back for what the target runs.
        ({"cert-manager": CLASH}, CLASH),
        ({"cert-manager": CLASH, "nvidia-dra-driver-gpu": CLASH}, CLASH),
        # Beside a failed action, or the mirror's: a failed action.
        ({"cert-manager": CLASH, "lws": BlockedReason.ACTION_FAILED}, BlockedReason.ACTION_FAILED),
        ({"cert-manager": CLASH, "lws": MISSING}, BlockedReason.ACTION_FAILED),
    ],
)
def test_ready_names_conflicts_only_when_every_failure_is_one(
    reasons: dict[str, BlockedReason], ready: BlockedReason
) -> None:
    failed = {name: "x" for name in reasons}
    assert decisions.failures_reason(failed, frozenset(), reasons) is ready


def test_a_release_held_back_for_a_conflict_says_so_in_ready_and_its_event() -> None:
    fault = Fault(ErrorKind.INVALID, reason=CLASH.value)
    assert decisions.action_reason(fault) is CLASH
    assert decisions.action_event(fault) is EventReason.CONFLICTS_FOUND
    # Any other refused action stays a failed action.
    assert decisions.action_event(Fault(ErrorKind.INVALID)) is EventReason.ACTION_FAILED


@pytest.mark.parametrize(
    ("component", "state"),
    [
        ("configuration", ComponentState.WAITING_FOR_WEBHOOK),
        ("lws", ComponentState.FAILED),
        ("cert-manager", None),
    ],
)
def test_a_failed_components_state(component: str, state: ComponentState | None) -> None:
    failed = {"configuration": "webhook", "lws": "install failed"}
    assert decisions.component_state(component, failed, frozenset({"configuration"})) == state


def test_component_states_keep_their_wire_strings() -> None:
    assert [str(s) for s in ComponentState] == ["Failed", "WaitingForWebhook", "Proving"]


@pytest.mark.parametrize(
    ("kind", "delays"),
    [
        (ErrorKind.HELM_FAILED, [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]),
        # A webhook answers soon after its chart: tried at least every minute.
        (ErrorKind.WEBHOOK_NOT_READY, [5.0, 10.0, 20.0, 40.0, 60.0, 60.0, 60.0, 60.0]),
    ],
)
def test_a_failed_action_backs_off(kind: ErrorKind, delays: list[float]) -> None:
    assert [decisions.action_retry_delay(n, Fault(kind)) for n in range(1, 9)] == delays


@pytest.mark.parametrize(
    ("resync", "rand", "delays"),
    [
        (300.0, 0.0, [10.0, 20.0, 40.0, 80.0, 120.0, 120.0]),
        # The resync period caps it when shorter, and 10 s is the floor of the cap.
        (20.0, 0.0, [10.0, 20.0, 20.0, 20.0, 20.0, 20.0]),
        (1.0, 0.0, [10.0, 10.0, 10.0, 10.0, 10.0, 10.0]),
        # Up to a tenth off, so that stacks that failed together spread out.
        (300.0, 1.0, [9.0, 18.0, 36.0, 72.0, 108.0, 108.0]),
    ],
)
def test_a_blocked_stack_backs_off(resync: float, rand: float, delays: list[float]) -> None:
    got = [decisions.blocked_retry_delay(n, resync, lambda: rand) for n in range(1, 7)]
    assert got == pytest.approx(delays)


@pytest.mark.parametrize(
    ("not_before", "now", "due"),
    [(None, 0.0, True), (10.0, 9.9, False), (10.0, 10.0, True), (10.0, 11.0, True)],
)
def test_an_action_is_due_once_its_backoff_ends(
    not_before: float | None, now: float, due: bool
) -> None:
    assert decisions.due(not_before, now) is due


@pytest.mark.parametrize(
    ("now", "not_before", "failed", "after"),
    [
        (0.0, {}, {}, None),
        (0.0, {"a": 30.0, "b": 10.0}, {"a": "x", "b": "y"}, 10.0),
        # A backoff of a component that no longer fails is no reason to wake.
        (0.0, {"a": 30.0, "b": 10.0}, {"a": "x"}, 30.0),
        # Never a sleep so short it spins; a deadline passed is due now.
        (9.5, {"b": 10.0}, {"b": "y"}, 1.0),
        (10.5, {"b": 10.0}, {"b": "y"}, None),
    ],
)
def test_the_next_retry(
    now: float, not_before: dict[str, float], failed: dict[str, str], after: float | None
) -> None:
    assert decisions.next_retry(now, not_before, failed) == after


@pytest.mark.parametrize(
    ("blocked", "failed", "retry_after", "streak", "sleep"),
    [
        (False, False, None, 0, 300.0),
        (False, True, 5.0, 1, 5.0),
        (False, True, 500.0, 1, 300.0),
        # Nothing says when it may work: the blocked backoff decides.
        (False, True, None, 1, 10.0),
        (True, False, None, 1, 10.0),
        (True, False, None, 3, 40.0),
    ],
)
def test_how_long_a_stack_sleeps_after_a_reconcile(
    blocked: bool, failed: bool, retry_after: float | None, streak: int, sleep: float
) -> None:
    got = decisions.sleep_after(
        blocked=blocked,
        failed=failed,
        retry_after=retry_after,
        resync_seconds=300.0,
        streak=streak,
        rand=lambda: 0.0,
    )
    assert got == sleep


@pytest.mark.parametrize(("rand", "sleep"), [(0.0, 300.0), (0.5, 315.0), (0.999, 329.97)])
def test_a_quiet_resync_is_jittered_late_by_a_tenth_at_most(rand: float, sleep: float) -> None:
    got = decisions.sleep_after(
        blocked=False,
        failed=False,
        retry_after=None,
        resync_seconds=300.0,
        streak=0,
        rand=lambda: rand,
    )
    assert got == pytest.approx(sleep)


@pytest.mark.parametrize(
    ("last", "current", "new"),
    [
        (None, "Secret a/b does not exist", True),
        ("Secret a/b does not exist", "Secret a/b does not exist", False),
        (("SecretNotFound", "m"), ("SecretNotFound", "m"), False),
        (("SecretNotFound", "m"), ("HelmFailed", "m"), True),
        ((3, None), (3, "2026-01-01T00:00:00Z"), True),
    ],
)
def test_only_a_change_is_news(last: object, current: object, new: bool) -> None:
    assert decisions.is_new(last, current) is new


@pytest.mark.parametrize(
    ("connected", "read_for", "generation", "wrong", "relist", "read"),
    [
        # A no-op resync: the credentials and the connection serve it.
        (True, 3, 3, False, False, False),
        (False, None, 3, False, False, True),
        (True, 3, 4, False, False, True),
        (True, 3, 3, True, False, True),
        (True, 3, 3, False, True, True),
    ],
    ids=["resync", "first", "new-spec", "after-a-failure", "relist"],
)
def test_when_the_secrets_are_read_again(
    connected: bool, read_for: int | None, generation: int, wrong: bool, relist: bool, read: bool
) -> None:
    got = decisions.read_credentials(
        connected=connected,
        read_for_generation=read_for,
        generation=generation,
        last_went_wrong=wrong,
        direct_read_due=relist,
    )
    assert got is read
