"""Hand the allocator's free memory back to the system, so RSS is what the shard holds.

A target brought up reads collections whole (a real Standard target's CRD
LIST is megabytes of JSON) and keeps an outline of them: the JSON, the
parse and the whole objects are freed, the outline stays. Parts of the
parse larger than pymalloc's 512 bytes come from glibc's malloc, and glibc
gives memory back to the system only from the top of each heap: free
chunks between live ones stay in the process's RSS for ever, and a
kubelet counts RSS against the shard's memory limit. On a settled shard of
600 targets with the upstream CRDs, 54 MiB of 413 (13 %) was such free
memory (docs/sizing.md).

``malloc_trim(0)`` hands back every whole free page of every arena, not
only the tops (glibc 2.8 and later, ``man 3 malloc_trim``). It is called
in a worker thread (ctypes lets go of the GIL for a foreign call, so the
event loop goes on), every ``GIVE_BACK_SECONDS``: a trim of a heap with
nothing to give back costs one walk of its free lists. Elsewhere than
glibc (musl has no ``malloc_trim``) there is nothing to call and nothing
is done.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import resource
from collections.abc import Callable

log = logging.getLogger("modelplane.operator.heap")

# How often the free memory is handed back. A shard brings a target up in
# well under this, so a burst of them is handed back within a minute of it.
GIVE_BACK_SECONDS = 60.0

Trim = Callable[[int], int]


def glibc_trim() -> Trim | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def resident_bytes() -> int:
    """This process's RSS now (``/proc/self/statm``), 0 where there is none."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


def give_back(trim: Trim) -> int:
    """Hand the free pages back once; the bytes of RSS it gave back (0 if none)."""
    before = resident_bytes()
    trim(0)
    return max(0, before - resident_bytes())


async def keep_giving_back(trim: Trim | None, every: float = GIVE_BACK_SECONDS) -> None:
    """Hand free pages back every ``every`` seconds until cancelled; nothing without glibc."""
    if trim is None:
        log.debug("no malloc_trim in this C library: free memory stays with the allocator")
        return
    while True:
        await asyncio.sleep(every)
        given = await asyncio.to_thread(give_back, trim)
        if given:
            log.debug("gave %d KiB of free heap back to the system", given // 1024)
