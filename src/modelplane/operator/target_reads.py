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

from modelplane.operator import metrics


class TargetReads:
    """A bound on full reads of targets, shared by the stacks of one operator."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._gate = asyncio.Semaphore(limit)

    def slot(self) -> Slot:
        """One slot, waited for (counted in the metrics meanwhile) when entered."""
        return Slot(self._gate)


class Slot:
    """Held from ``__aenter__`` to ``__aexit__``, and only then given back.

    A class, not a generator: a slot whose holder forgot to give it back is
    not returned by the garbage collector behind the holder's back, so a
    test of the holder sees the leak.
    """

    def __init__(self, gate: asyncio.Semaphore) -> None:
        self._gate = gate

    async def __aenter__(self) -> None:
        metrics.TARGET_READS_WAITING.inc()
        try:
            await self._gate.acquire()
        finally:
            metrics.TARGET_READS_WAITING.dec()

    async def __aexit__(self, *_exc: object) -> None:
        self._gate.release()
