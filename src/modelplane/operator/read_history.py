"""What one stack's reconciles remember of their reads, for ``plan.trust``.

When the target was last read directly (for --relist), and how the last
reconcile ended: it wrote nothing, or its writes were all in the watches'
copy before it ended. The copy is trusted only then; right after a write
its events may still be on their way, and a stale copy would cost a
second, idle apply (``observe.writes``). Safe to lose: a new process
reads the target directly first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Ended:
    """How a reconcile ended, as the next one needs it; both false for one that ended early."""

    acted_on_nothing: bool = False
    writes_seen: bool = False


@dataclass
class ReadHistory:
    relist_seconds: float
    clock: Callable[[], float] = time.monotonic
    last_direct: float | None = None
    last: Ended = Ended()

    def begin(self) -> Ended:
        """How the last reconcile ended, forgotten: this one leaves it unsaid until it ends."""
        last, self.last = self.last, Ended()
        return last

    def end(self, *, acted: bool, writes_seen: bool) -> None:
        """This reconcile went through its rounds: whether it acted, and saw its writes."""
        self.last = Ended(acted_on_nothing=not acted, writes_seen=writes_seen)

    def read_directly(self) -> None:
        """The target was read directly (or the watches listed it all) now."""
        self.last_direct = self.clock()

    def direct_read_due(self) -> bool:
        return self.last_direct is None or self.clock() - self.last_direct >= self.relist_seconds
