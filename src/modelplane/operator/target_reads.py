"""How many of one operator's stacks connect to their target and read it in full at once.

A new operator pod starts every stack of its shard in the same moment, and
each one's first reconcile opens a connection, reads discovery and lists
some twenty collections. Thousands of them at once saturate the event
loop: every request then waits its turn long enough to time out, and the
retries add to the load (at 10,000 targets over 4 shards, thousands of
hub writes timed out). Bounded, as controller-runtime bounds a
controller's reconciles, the reads that wait cost nothing but their place
in line, and the ones admitted finish in the time their requests take.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

from modelplane.kube.deadline import reads_within
from modelplane.operator import metrics
from modelplane.vocabulary import BlockedReason, ConditionType

# How long a reconcile holds its slot, at most, from connecting to the
# target through its first full read: every request made meanwhile ends by
# then (``kube.deadline``). A healthy target's full read takes seconds; a
# target that answers a byte at a time, or not at all, gives the slot back
# after this, and its reconcile fails as a target that cannot be reached.
READ_DEADLINE_SECONDS = 120.0

# The pool of targets last found unreachable: a tenth of the shared one.
UNREACHABLE_SHARE = 10


def blocked_on_hub(status: object) -> str | None:
    """Ready's reason in a stack's status on the hub, when Ready is False.

    What the last operator found, for the first reconcile after a restart.
    The status is the hub's copy, read as untrusted shapes.
    """
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for c in conditions if isinstance(conditions, list) else ():
        if not isinstance(c, Mapping) or c.get("type") != ConditionType.READY:
            continue
        reason = c.get("reason")
        return reason if c.get("status") == "False" and isinstance(reason, str) else None
    return None


def reads_apart(last_blocked: str | None) -> bool:
    """Whether a stack reads its target from the pool of unreachable ones.

    ``last_blocked``: why its last reconcile was blocked (None: it was not,
    or there was none yet), as Ready's reason on the hub says after a
    restart. Only an unreachable target: one whose credentials are missing
    fails before it connects and holds its slot for no time.
    """
    return last_blocked == BlockedReason.TARGET_UNREACHABLE


class TargetReads:
    """A bound on full reads of targets, shared by the stacks of one operator."""

    def __init__(self, limit: int, deadline: float = READ_DEADLINE_SECONDS) -> None:
        self.limit = limit
        self.unreachable_limit = max(1, limit // UNREACHABLE_SHARE)
        self.deadline = deadline
        self._gate = asyncio.Semaphore(limit)
        self._unreachable_gate = asyncio.Semaphore(self.unreachable_limit)

    def slot(self, *, apart: bool = False) -> Slot:
        """One slot, waited for (counted in the metrics meanwhile) when entered.

        ``apart``: from the pool of targets last found unreachable
        (``reads_apart``). The requests to targets made while it is held
        end by its deadline.
        """
        return Slot(self._unreachable_gate if apart else self._gate, self.deadline)


class Slot:
    """Held from ``__aenter__`` to ``__aexit__``, and only then given back.

    A class, not a generator: a slot whose holder forgot to give it back is
    not returned by the garbage collector behind the holder's back, so a
    test of the holder sees the leak.
    """

    def __init__(self, gate: asyncio.Semaphore, deadline: float) -> None:
        self._gate = gate
        self._deadline = deadline
        self._within = contextlib.ExitStack()

    async def __aenter__(self) -> None:
        metrics.TARGET_READS_WAITING.inc()
        try:
            await self._gate.acquire()
        finally:
            metrics.TARGET_READS_WAITING.dec()
        # From when the slot is held, not while waiting for it.
        self._within.enter_context(reads_within(self._deadline))

    async def __aexit__(self, *_exc: object) -> None:
        try:
            self._within.close()
        finally:
            self._gate.release()
