"""Keep CPython's full garbage collections to what is new since the last one.

A full collection (the oldest generation's) walks every container object
the collector tracks, with every coroutine stopped: the event loop answers
nothing until it ends. A settled shard holds millions of them (each
stack's body, outlines and watches) and makes a full collection every
minute or two, each longer as the shard grows: 0.72 to 0.75 s at 1,000
targets with real CRDs (docs/sizing.md), so a change that arrives during
one reaches the hub that much later.

Nearly everything such a collection walks survived the one before, and
will survive the next. ``gc.freeze()`` moves every tracked object into a
permanent generation that collections do not walk, so freezing at the end
of each full collection leaves the next one only what survived since.
Reference counting frees frozen objects as before; what it cannot free is
a cycle among them, which only a walk of everything finds. So every
``FULL_SCAN_SECONDS`` everything is thawed (``gc.unfreeze()``) and
collected once, with the pause that costs, and the cycles that died in the
meantime are freed and counted in the log.

That pause is as long as a full collection was before, and longer the
larger the shard: 9 and 17 s on two shards of 2,500 real targets sharing
2 cores at a load of 13 (docs/sizing.md). It is only worth paying when
there can be much to free. A cycle that dies frozen stays counted in the
frozen generation, while what reference counting frees leaves it; so
unless the live heap shrank meanwhile (stacks deleted), the frozen count
has grown by at least what died in cycles. While it has grown by less than
``GROWTH_TO_WALK`` since the last walk's survivors, a due walk is
skipped: a settled shard whose heap holds steady is not stopped again,
and one that grows is walked at most once a period, once it grew by a
tenth. What cycles can hold dead is bounded so by a tenth of the heap
(more after a shrink, until the heap grows back past the mark).

``gc.freeze`` is documented for a process about to fork ("ignore them in
all the future collections"); here it is used for what that sentence
says, and only between two full scans.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("modelplane.operator.collector")

# How often a walk of every object is considered, so that cycles among
# frozen objects that died (a stack deleted, a connection closed) are
# freed: at most one pause an hour, not one a minute, and none while the
# heap holds steady (GROWTH_TO_WALK); the operator's --gc-full-scan.
FULL_SCAN_SECONDS = 3600.0

# How much the frozen generation must have grown since the last walk's
# survivors for a due walk to happen: what dead cycles can hold is at
# most that.
GROWTH_TO_WALK = 0.1

OLDEST = 2  # the generation a full collection collects


def freezes_after(phase: str, info: dict[str, Any]) -> bool:
    """Whether a collector callback is the end of a full collection."""
    return phase == "stop" and info.get("generation") == OLDEST


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    # Run by the collector after each collection. At the end of a full one
    # the young generations are empty and every tracked object has just
    # survived a walk: freezing keeps the next walks off them.
    if freezes_after(phase, info):
        gc.freeze()


@dataclass(frozen=True)
class FullScan:
    """One walk of every object: how many were frozen, freed, kept, and how long it took."""

    thawed: int
    freed: int
    kept: int
    seconds: float


def walks_everything(frozen: int, kept_at_last_walk: int) -> bool:
    """Whether the frozen generation grew enough since the last walk to walk it again."""
    return frozen > kept_at_last_walk * (1 + GROWTH_TO_WALK)


def full_scan() -> FullScan:
    """Thaw everything frozen and collect once; frozen again by the callback."""
    thawed = gc.get_freeze_count()
    started = time.perf_counter()
    gc.unfreeze()
    freed = gc.collect()
    # The collector schedules the next full collection for when a quarter
    # as many objects as this one kept have aged into the oldest
    # generation, and would walk them all. Now frozen, they are not walked:
    # a second collection, of nothing, makes that a quarter of nothing.
    gc.collect()
    return FullScan(thawed, freed, gc.get_freeze_count(), time.perf_counter() - started)


def start_freezing() -> None:
    """Freeze the survivors of every full collection from now on."""
    if _freeze_survivors not in gc.callbacks:
        gc.callbacks.append(_freeze_survivors)


def stop_freezing() -> None:
    """Back to CPython's own collections: nothing frozen, nothing freezes."""
    if _freeze_survivors in gc.callbacks:
        gc.callbacks.remove(_freeze_survivors)
    gc.unfreeze()


async def keep_collections_short(
    every: float = FULL_SCAN_SECONDS,
    scan_all: Callable[[], FullScan] = full_scan,
    frozen: Callable[[], int] = gc.get_freeze_count,
) -> None:
    """Freeze each full collection's survivors; every ``every`` s walk everything if it grew.

    ``every`` 0 or less leaves CPython's collections as they are. Runs until
    cancelled, then unfreezes.
    """
    if every <= 0:
        return
    start_freezing()
    kept = 0  # no walk yet: the first one due happens
    try:
        while True:
            await asyncio.sleep(every)
            now = frozen()
            if not walks_everything(now, kept):
                log.debug(
                    "no garbage collection of every object: %d frozen, %d after the last",
                    now,
                    kept,
                )
                continue
            scan = scan_all()
            kept = scan.kept
            log.info(
                "garbage collection of every object: %d were frozen, %d freed, in %.0f ms",
                scan.thawed,
                scan.freed,
                scan.seconds * 1000,
            )
    finally:
        stop_freezing()
