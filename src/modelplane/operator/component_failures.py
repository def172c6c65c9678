"""One ServingStack's failed components: what each failure says, and its backoff.

A component's action that fails is recorded (its message, made safe for
the status, an event and the log), and is not tried again before its
backoff ends; ``plan.decisions`` says how long. ``StackReconciler`` keeps
one, and guards each action of a round's plan with it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2
import yaml
from lightkube.core.exceptions import ApiError

from modelplane.actions.apply import WebhookNotReady
from modelplane.actions.chart_crds import CrdUpgradeRefused
from modelplane.actions.claim import Emit
from modelplane.actions.claim_wait import ClaimsHeld
from modelplane.actions.conflict_scan import ConflictsFound
from modelplane.actions.helm import HelmError
from modelplane.api.status_limits import LOG_MESSAGE
from modelplane.kube.answers import describe_error
from modelplane.kube.errors import classify
from modelplane.plan import Plan, decisions, progress
from modelplane.plan.mirror_images import MirrorPreflightError
from modelplane.plan.node_agents import NodeAgentFailed
from modelplane.untrusted import printable
from modelplane.vocabulary import BlockedReason

log = logging.getLogger("modelplane.operator")

# The errors one component's action may end in; anything else stops the reconcile.
ACTION_ERRORS = (
    WebhookNotReady,
    HelmError,
    CrdUpgradeRefused,
    ConflictsFound,
    ClaimsHeld,
    ApiError,
    # Fetching manifests from an upstream release or a mirror.
    httpx2.HTTPError,
    yaml.YAMLError,
    ValueError,
    # A release the mirror preflight held (plan.mirror_images): nothing written.
    MirrorPreflightError,
    # A node agent's roll stopped at a node (plan.node_agents).
    NodeAgentFailed,
)


@dataclass
class ComponentFailures:
    """One stack's failed components and their backoff; safe to lose."""

    emit: Emit
    clock: Callable[[], float] = time.monotonic
    failures: dict[str, str] = field(default_factory=dict)
    # Per failed component: failures in a row, and when it may be tried again.
    attempts: dict[str, int] = field(default_factory=dict)
    not_before: dict[str, float] = field(default_factory=dict)
    # The failed components whose failure is a webhook the target cannot call yet.
    waiting_on_webhook: set[str] = field(default_factory=set)
    # The failed components whose failure no retry clears (plan.progress).
    refused: set[str] = field(default_factory=set)
    # Each failed component's reason (decisions.action_reason), for Ready's.
    reasons: dict[str, BlockedReason] = field(default_factory=dict)

    def retry_after(self) -> float | None:
        """Seconds until the first failed component is due again; None when none waits.

        The daemon sleeps this long rather than a fixed period, so a retry
        comes when its backoff ends, and nothing is observed in between.
        """
        return decisions.next_retry(self.clock(), self.not_before, self.failures)

    def forget_finished(self, p: Plan) -> None:
        """Drop the failures (and backoff) of components with no work left.

        A failure stands only while its component still has something to do:
        a pin put back, or a component the spec no longer has, clears it.
        """
        for finished in set(self.failures) - p.components_with_work:
            self._succeeded(finished)

    def due(self, component: str) -> bool:
        """Whether the component's action may be tried now: its backoff, if any, is over."""
        return decisions.due(self.not_before.get(component), self.clock())

    def _succeeded(self, component: str) -> None:
        self.failures.pop(component, None)
        self.attempts.pop(component, None)
        self.not_before.pop(component, None)
        self.waiting_on_webhook.discard(component)
        self.refused.discard(component)
        self.reasons.pop(component, None)

    async def guard(self, component: str, action: Any, what: str | None = None) -> bool:
        """Carry out one component's action; a failure is recorded and backed off."""
        try:
            await action
        except ACTION_ERRORS as err:
            self._failed(component, err, what)
            return False
        self._succeeded(component)
        return True

    async def check(self, component: str, check: Any, what: str) -> bool:
        """Run a check before a component's action; a failure is recorded as the action's.

        Unlike ``guard``, a check that passes clears nothing: the action
        after it has not succeeded yet, and its backoff must keep growing.
        """
        try:
            await check
        except ACTION_ERRORS as err:
            self._failed(component, err, what)
            return False
        return True

    def _failed(self, component: str, err: Exception, what: str | None) -> None:
        fault = classify(err)
        reason = decisions.action_reason(fault)
        waits = reason in decisions.ACTION_WAITS
        # Helm's output and a target's answers are the target's words: made
        # printable and cut before they reach the status, an event or the log.
        message = printable(
            str(err) if waits else f"{what or component} failed: {describe_error(err)}",
            LOG_MESSAGE,
        )
        changed = decisions.is_new(self.failures.get(component), message)
        self.failures[component] = message
        self.reasons[component] = reason
        if reason is BlockedReason.WEBHOOK_NOT_READY:
            self.waiting_on_webhook.add(component)
        else:
            self.waiting_on_webhook.discard(component)
        if progress.action_refused(fault):
            self.refused.add(component)
        else:
            self.refused.discard(component)
        attempt = self.attempts[component] = self.attempts.get(component, 0) + 1
        delay = decisions.action_retry_delay(attempt, fault)
        self.not_before[component] = self.clock() + delay
        if waits:
            # One event when the wait starts or its cause changes, not one per
            # retry; the status carries it meanwhile. Logged likewise; each
            # retry only at DEBUG.
            if changed:
                self.emit("Warning", decisions.action_event(fault), message)
            log.log(
                logging.INFO if changed else logging.DEBUG,
                "%s; retry %d in %.0fs",
                message,
                attempt,
                delay,
            )
            return
        self.emit("Warning", decisions.action_event(fault), message)
        # A failure that repeats on each backed-off retry is logged once.
        log.log(logging.WARNING if changed else logging.DEBUG, "%s", message)
