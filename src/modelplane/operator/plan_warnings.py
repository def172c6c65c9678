"""The warnings a plan carries, each said by one Warning event when it appears.

An out-of-range pin, a doubtful clientCAs entry, release drift only
reported (``--release-drift=warn``) and a refused release revision stand
until someone acts: said on every resync, they would bury the stack's other
events (``operator.announced``). Safe to lose: a new process says each once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from modelplane.actions.claim import Emit
from modelplane.operator.announced import Announced
from modelplane.plan.health import Reason
from modelplane.plan.model import Plan
from modelplane.vocabulary import EventReason


def _versions(p: Plan) -> Iterable[str]:
    return (w.message for w in p.version_warnings)


def _client_cas(p: Plan) -> Iterable[str]:
    return p.client_ca_warnings


def _release_drift(p: Plan) -> Iterable[str]:
    # Only the drift not restored: a restore says itself (stack_actions).
    return (d.message for d in p.release_drift if d.restore is None)


def _refused_revisions(p: Plan) -> Iterable[str]:
    return (h.message for h in p.health if h.reason is Reason.RELEASE_OUTSIDE_NAMESPACE)


# Each warning of a plan, and the event reason it is said with.
_WARNINGS: tuple[tuple[EventReason, Callable[[Plan], Iterable[str]]], ...] = (
    (EventReason.VERSION_OUT_OF_RANGE, _versions),
    (EventReason.CLIENT_CA_WARNING, _client_cas),
    (EventReason.RELEASE_DRIFT, _release_drift),
    (EventReason.RELEASE_REVISION_REFUSED, _refused_revisions),
)


@dataclass
class PlanWarnings:
    """What each kind of warning said last time, per stack."""

    said: dict[EventReason, Announced] = field(
        default_factory=lambda: {reason: Announced() for reason, _ in _WARNINGS}
    )

    def report(self, p: Plan, emit: Emit) -> None:
        """A Warning event for each of the plan's warnings not said last time."""
        for reason, messages in _WARNINGS:
            for message in self.said[reason].new(messages(p)):
                emit("Warning", reason, message)
