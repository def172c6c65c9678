"""How late the operator's event loop runs what is due: a shard's measure of being starved.

Every target watch, reconcile and hub write of a shard shares one event
loop. When the loop is starved (a shard over more targets than its CPU
serves, a neighbour on the same cores, a long pause of the garbage
collector), everything on it runs late together, and the first sign is a
deadline missed elsewhere: a watch given up as lost, a status write timed
out. A timer due every ``EVERY_SECONDS`` and how late the loop woke it
tells the cause apart from its effects: ``modelplane_event_loop_lag_seconds``,
and a warning each time the loop ran ``WARN_SECONDS`` late or more.
As Node's ``monitorEventLoopDelay`` and Go's scheduler latency metrics
measure the same.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from modelplane.operator import metrics

log = logging.getLogger("modelplane.operator.loop")

# One timer a second: a lag shorter than the loop's own turn is noise, and
# a stall of a second or more is seen within the second after it.
EVERY_SECONDS = 1.0
# A target watch is given its timeout and 30 s more (``kube.deadline``): a
# loop this late is a fraction of that, and already news.
WARN_SECONDS = 5.0


def lateness(asked: float, slept: float) -> float:
    """How much longer than ``asked`` a sleep of it took (never below 0)."""
    return max(0.0, slept - asked)


async def keep_measuring(
    every: float = EVERY_SECONDS,
    *,
    observe: Callable[[float], None] = metrics.EVENT_LOOP_LAG.observe,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Observe how late each ``every``-second timer was woken, until cancelled."""
    while True:
        start = clock()
        await sleep(every)
        late = lateness(every, clock() - start)
        observe(late)
        if late >= WARN_SECONDS:
            log.warning(
                "the event loop ran %.1f s late: the operator is short of CPU for its "
                "stacks (target watches and hub writes wait as long)",
                late,
            )
