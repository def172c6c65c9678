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

# How often every object is walked again, so that cycles among frozen
# objects that died (a stack deleted, a connection closed) are freed. One
# pause an hour instead of one a minute; the operator's --gc-full-scan.
FULL_SCAN_SECONDS = 3600.0

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
    """One walk of every object: how many were frozen, freed, and how long it took."""

    thawed: int
    freed: int
    seconds: float


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
    return FullScan(thawed, freed, time.perf_counter() - started)


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
    every: float = FULL_SCAN_SECONDS, scan_all: Callable[[], FullScan] = full_scan
) -> None:
    """Freeze each full collection's survivors, walk everything every ``every`` s.

    ``every`` 0 or less leaves CPython's collections as they are. Runs until
    cancelled, then unfreezes.
    """
    if every <= 0:
        return
    start_freezing()
    try:
        while True:
            await asyncio.sleep(every)
            scan = scan_all()
            log.info(
                "garbage collection of every object: %d were frozen, %d freed, in %.0f ms",
                scan.thawed,
                scan.freed,
                scan.seconds * 1000,
            )
    finally:
        stop_freezing()
