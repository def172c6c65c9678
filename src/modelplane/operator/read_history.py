"""What one stack's reconciles remember of their reads, for ``plan.trust``.

When the target was last read directly (for --relist), and how the last
reconcile ended: it wrote nothing, or its writes were all in the watches'
copy before it ended. The copy is trusted only then; right after a write
its events may still be on their way, and a stale copy would cost a
second, idle apply (``observe.writes``). Safe to lose: a new process
reads the target directly first.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

# How much later than --relist a stack's next direct read may come, as a
# share of it, drawn at each read. A shard's stacks come up together (a
# start, a restart), and unjittered their hourly reads came due together:
# 2,500 real targets read in full within some 14 minutes, 4,882 target
# reads a minute, and a change on the hub took up to 2.8 s meanwhile
# (issue 42). Drawn anew each time, the reads drift apart hour by hour;
# none comes sooner than --relist. As wait.Jitter in Kubernetes.
RELIST_JITTER = 0.5


@dataclass(frozen=True)
class Ended:
    """How a reconcile ended, as the next one needs it; both false for one that ended early."""

    acted_on_nothing: bool = False
    writes_seen: bool = False


@dataclass
class ReadHistory:
    relist_seconds: float
    clock: Callable[[], float] = time.monotonic
    rand: Callable[[], float] = random.random
    last_direct: float | None = None
    # How long after ``last_direct`` the next direct read is due.
    period: float = 0.0
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
        self.period = self.relist_seconds * (1.0 + RELIST_JITTER * self.rand())

    def direct_read_due(self) -> bool:
        return self.last_direct is None or self.clock() - self.last_direct >= self.period
