"""Holding a DRA driver's uninstall while pods hold its claims, up to ``spec.claimWaitTimeout``.

Two things uninstall a DRA driver's release: teardown (``operator.stack_teardown``)
and the reinstall of a first revision that never deployed (``helm.apply``).
Before either, the target's ResourceClaims are read (``observe.claims``) and
``plan.claims`` decides: go on, wait, or go on since the wait has lasted
the spec's timeout, which a Warning event says with the pods still there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lightkube import AsyncClient

from modelplane.actions.claim import Emit
from modelplane.api.grammar import duration_seconds
from modelplane.faults import ErrorKind, KnownError
from modelplane.observe.claims import claim_holders
from modelplane.plan.claims import ClaimWait, claim_wait, held_message, timed_out_message
from modelplane.vocabulary import BlockedReason, EventReason


class ClaimsHeld(KnownError):
    """A DRA driver's release not uninstalled yet: pods hold claims it allocated."""

    kind = ErrorKind.CLAIMS_HELD

    def condition_reason(self) -> str | None:
        return BlockedReason.CLAIMS_HELD


async def uninstall_wait(
    client: AsyncClient,
    release: str,
    driver: str,
    timeout: str,
    waited_seconds: float,
    emit: Emit,
) -> str | None:
    """What the uninstall of ``release`` waits for (the ``ClaimsHeld`` message); None: go on.

    ``timeout`` is the spec's ``claimWaitTimeout`` as written; past it the
    uninstall goes on, and a ``ClaimWaitTimeout`` event names who still holds.
    """
    held = await claim_holders(client, driver)
    match claim_wait(held, waited_seconds, duration_seconds(timeout)):
        case ClaimWait.WAIT:
            return held_message(release, driver, held, timeout)
        case ClaimWait.TIMED_OUT:
            message = timed_out_message(release, driver, held, timeout)
            emit("Warning", EventReason.CLAIM_WAIT_TIMEOUT, message)
    return None


@dataclass
class ReinstallWaits:
    """Since when each release's reinstall has waited for its claims; safe to lose.

    A reconcile keeps no clock of its own across rounds, so the wait starts
    when a round first finds the claims held; an operator that restarts
    starts it again (at most one timeout more).
    """

    clock: Callable[[], float] = time.monotonic
    since: dict[str, float] = field(default_factory=dict)

    def keep_only(self, reinstalling: set[str]) -> None:
        """Forget the waits of releases no longer to be reinstalled: a later one starts afresh."""
        for release in set(self.since) - reinstalling:
            del self.since[release]

    async def check(
        self, client: AsyncClient, release: str, driver: str, timeout: str, emit: Emit
    ) -> None:
        """Return when the reinstall may uninstall; raise ``ClaimsHeld`` while it waits."""
        started = self.since.setdefault(release, self.clock())
        waited = self.clock() - started
        message = await uninstall_wait(client, release, driver, timeout, waited, emit)
        if message is not None:
            raise ClaimsHeld(message)
        self.since.pop(release, None)
