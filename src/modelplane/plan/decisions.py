"""The reconciler's decisions, as pure functions: the reconciler and handlers carry them out.

Which Ready reason a failure gives, when a failed action or a blocked
stack is tried again, whether a change is worth an event, a failed
component's state, and when the stack's credentials are read again. Each
takes what was observed and returns a value (an enum where the set is
closed), so a table test pins each one down.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from enum import StrEnum

from modelplane.backoff import Backoff
from modelplane.faults import ErrorKind, Fault
from modelplane.vocabulary import BlockedReason as BlockedReason
from modelplane.vocabulary import EventReason

_BY_KIND = {
    ErrorKind.UNREACHABLE: BlockedReason.TARGET_UNREACHABLE,
    ErrorKind.UNAUTHORIZED: BlockedReason.TARGET_UNAUTHORIZED,
    ErrorKind.FORBIDDEN: BlockedReason.TARGET_UNAUTHORIZED,
    ErrorKind.NAMESPACE_TERMINATING: BlockedReason.TARGET_NAMESPACE_TERMINATING,
    ErrorKind.NOT_FOUND: BlockedReason.TARGET_ERROR,
    ErrorKind.CONFLICT: BlockedReason.TARGET_ERROR,
    ErrorKind.SETTLING: BlockedReason.TARGET_ERROR,
    ErrorKind.ANSWERED: BlockedReason.TARGET_ERROR,
    ErrorKind.OVER_BUDGET: BlockedReason.TARGET_COLLECTION_TOO_LARGE,
    ErrorKind.ADDRESS_DENIED: BlockedReason.TARGET_ADDRESS_DENIED,
    ErrorKind.WEBHOOK_NOT_READY: BlockedReason.WEBHOOK_NOT_READY,
    ErrorKind.CLAIMS_HELD: BlockedReason.CLAIMS_HELD,
    ErrorKind.HELM_FAILED: BlockedReason.HELM_FAILED,
    ErrorKind.CLAIM_CONTENDED: BlockedReason.CLAIM_CONTENDED,
    ErrorKind.INVALID: BlockedReason.INVALID_SPEC,
    ErrorKind.STORAGE_TAMPERED: BlockedReason.RELEASE_STORAGE_TAMPERED,
}


def blocked_reason(fault: Fault, *, teardown: bool = False) -> BlockedReason:
    """The reason a reconcile (or a teardown) stopped by this fault reports."""
    if fault.kind in (ErrorKind.CREDENTIALS, ErrorKind.IDENTITY) and fault.reason:
        try:
            return BlockedReason(fault.reason)
        except ValueError:
            pass
    reason = _BY_KIND.get(fault.kind)
    if reason is not None:
        return reason
    return BlockedReason.TEARDOWN_ERROR if teardown else BlockedReason.RECONCILE_ERROR


def waits(fault: Fault) -> bool:
    """True for a fault that passes by itself, said as a wait rather than a failure."""
    return fault.kind in (ErrorKind.NAMESPACE_TERMINATING, ErrorKind.WEBHOOK_NOT_READY)


# The reasons a component's action gives of its own: the mirror preflight's,
# which held a release before anything was written (plan.mirror_images), and
# the conflict scan's (BlockedReason.CONFLICTS_FOUND, plan.conflicts).
_HELD_BY_MIRROR = frozenset({BlockedReason.IMAGE_NOT_IN_MIRROR, BlockedReason.MIRROR_UNREACHABLE})
_OWN_REASONS = _HELD_BY_MIRROR | {BlockedReason.CONFLICTS_FOUND, BlockedReason.NODE_AGENT_FAILED}


def action_reason(fault: Fault) -> BlockedReason:
    """The reason of one component's failed action (an apply, a release, a fetch)."""
    if fault.kind is ErrorKind.WEBHOOK_NOT_READY:
        return BlockedReason.WEBHOOK_NOT_READY
    if fault.kind is ErrorKind.CLAIMS_HELD:
        return BlockedReason.CLAIMS_HELD
    if fault.reason in _OWN_REASONS:
        return BlockedReason(fault.reason)
    return BlockedReason.ACTION_FAILED


# The reasons of a component's action that waits rather than failed: said
# once when the wait starts or what it waits for changes, and retried soon.
ACTION_WAITS = frozenset({BlockedReason.WEBHOOK_NOT_READY, BlockedReason.CLAIMS_HELD})


def action_event(fault: Fault) -> EventReason:
    """The reason of the Warning event of one component's failed action: its Ready reason.

    A release held back for what the cluster runs says so in its own event
    (``ConflictsFound``, naming each object and owner).
    """
    return EventReason(action_reason(fault))


def failures_reason(
    failed: Mapping[str, object],
    waiting_on_webhook: frozenset[str],
    reasons: Mapping[str, BlockedReason] | None = None,
) -> BlockedReason:
    """Ready's reason while components have failed.

    A webhook wait only when every failure is one: a real failure beside it
    must not read as something that passes by itself. Likewise the mirror's
    reasons (``reasons``: each failed component's action reason), only
    when every failure is the mirror's; a missing image before an
    unreachable mirror, as the one a person can mend. And ``ConflictsFound``
    only when every failure is a release held back for what the cluster
    runs: a person removes the clash or adopts it. ``ClaimsHeld`` likewise,
    when every failure is a DRA driver's reinstall waiting for its claims,
    and ``NodeAgentFailed`` when every failure is a node agent's roll
    stopped at a node.
    """
    if set(failed) <= waiting_on_webhook:
        return BlockedReason.WEBHOOK_NOT_READY
    given = [(reasons or {}).get(name) for name in failed]
    if given and all(r in _HELD_BY_MIRROR for r in given):
        if BlockedReason.IMAGE_NOT_IN_MIRROR in given:
            return BlockedReason.IMAGE_NOT_IN_MIRROR
        return BlockedReason.MIRROR_UNREACHABLE
    if given and all(r is BlockedReason.CONFLICTS_FOUND for r in given):
        return BlockedReason.CONFLICTS_FOUND
    if given and all(r is BlockedReason.CLAIMS_HELD for r in given):
        return BlockedReason.CLAIMS_HELD
    if given and all(r is BlockedReason.NODE_AGENT_FAILED for r in given):
        return BlockedReason.NODE_AGENT_FAILED
    # A scheduler that binds nothing is no action of ours that failed.
    if given and all(r is BlockedReason.SCHEDULER_NOT_BINDING for r in given):
        return BlockedReason.SCHEDULER_NOT_BINDING
    return BlockedReason.ACTION_FAILED


class ComponentState(StrEnum):
    """A component's state when its last action failed; otherwise the plan's own stands."""

    FAILED = "Failed"
    WAITING_FOR_WEBHOOK = "WaitingForWebhook"
    # Installed; its scheduler probe is out (plan.scheduler_probe).
    PROVING = "Proving"


def component_state(
    component: str,
    failed: Mapping[str, object],
    waiting_on_webhook: frozenset[str],
    proving: Mapping[str, object] | None = None,
) -> ComponentState | None:
    """The state that overrides the plan's for ``component``; None when it did not fail."""
    if component not in failed:
        return ComponentState.PROVING if component in (proving or {}) else None
    if component in waiting_on_webhook:
        return ComponentState.WAITING_FOR_WEBHOOK
    return ComponentState.FAILED


# -- when to try again ----------------------------------------------------

# A failed action: 5 s, doubling, up to 5 minutes.
ACTION_RETRY = Backoff(first=5.0, cap=300.0)
# A webhook that cannot be called yet usually answers within a minute or
# two of its chart's install; a longer wait between tries would only delay
# Ready by as much once it does.
WEBHOOK_RETRY = ACTION_RETRY.capped(60.0)
# Pods holding a DRA driver's claims go when their owner deletes them, and
# the reinstall should follow soon after: looked at again every 10 s at most.
CLAIMS_RETRY = ACTION_RETRY.capped(10.0)
# A blocked stack (credentials missing, target unreachable): after 10 s,
# twice as long each time it stays blocked, up to 2 minutes (or the resync
# period if shorter). Without it a hub of 1,000 failing stacks costs 100
# reconciles a second (bench_fleet). Jittered so that stacks that failed
# together (a hub of them after an operator restart) do not retry in lockstep.
BLOCKED_RETRY = Backoff(first=10.0, cap=120.0, jitter=0.1)
# The shortest sleep until a retry, so a deadline just passed is no spin.
MIN_RETRY_SECONDS = 1.0
# A quiet stack's resync comes this share of a period late at most, drawn
# anew each time: the stacks an operator started together (all of them, at
# its start) drift apart instead of re-planning in one burst every period,
# which held the event loop from the changes of every other stack. The
# mean period grows by half of it.
RESYNC_JITTER = 0.1

_RETRY_BY_KIND = {
    ErrorKind.WEBHOOK_NOT_READY: WEBHOOK_RETRY,
    ErrorKind.CLAIMS_HELD: CLAIMS_RETRY,
}


def action_retry_delay(attempt: int, fault: Fault) -> float:
    """Seconds before a component whose action failed ``attempt`` times in a row is tried again."""
    policy = _RETRY_BY_KIND.get(fault.kind, ACTION_RETRY)
    return policy.delay(attempt)


def blocked_retry_delay(
    streak: int, resync_seconds: float, rand: Callable[[], float] = random.random
) -> float:
    """Seconds before the ``streak``-th blocked reconcile (or teardown) in a row is retried."""
    cap = min(BLOCKED_RETRY.cap, max(resync_seconds, BLOCKED_RETRY.first))
    return BLOCKED_RETRY.capped(cap).delay(streak, rand)


def due(not_before: float | None, now: float) -> bool:
    """Whether an action held back until ``not_before`` may run at ``now``."""
    return not_before is None or not_before <= now


def next_retry(
    now: float, not_before: Mapping[str, float], failed: Mapping[str, object]
) -> float | None:
    """Seconds until the first failed component is due again; None when none waits."""
    ahead = [t - now for name, t in not_before.items() if name in failed and t > now]
    return max(MIN_RETRY_SECONDS, min(ahead)) if ahead else None


def sleep_after(
    *,
    blocked: bool,
    failed: bool,
    retry_after: float | None,
    resync_seconds: float,
    streak: int,
    rand: Callable[[], float] = random.random,
) -> float:
    """How long a stack sleeps after a reconcile, unless something wakes it.

    ``streak`` counts the consecutive blocked or failed reconciles so far.
    """
    if failed and retry_after is not None:
        # When the backoff of a failed action ends: a fixed period would
        # retry late, and observe the target for nothing until then.
        return min(retry_after, resync_seconds)
    if blocked or failed:
        # Nothing says when it may work again: back off, so that a fleet of
        # unreachable targets stays quiet.
        return blocked_retry_delay(streak, resync_seconds, rand)
    return resync_seconds * (1.0 + RESYNC_JITTER * rand())


# -- what is worth saying ---------------------------------------------------


def is_new(last: object, current: object) -> bool:
    """Whether ``current`` differs from what was last reported: an event (and a log line) is due."""
    return last != current


def read_credentials(
    *,
    connected: bool,
    read_for_generation: int | None,
    generation: int | None,
    last_went_wrong: bool,
    direct_read_due: bool,
) -> bool:
    """Whether a reconcile reads the stack's Secrets from the hub again.

    Once read, the credentials (and the connection made with them) serve the
    resyncs that follow. They are read again for a new spec, after a
    reconcile that was blocked or failed (a 401, a Secret put right), and
    with each direct read of the target (--relist), so a rotated Secret is
    taken up within that period.
    """
    return not connected or read_for_generation != generation or last_went_wrong or direct_read_due
