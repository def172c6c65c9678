"""Run a module as ``python -m`` would; on SIGUSR2, write a census of its live objects.

    python bench/live_census.py OUT.txt modelplane.cli.main run ...

Each SIGUSR2 writes to OUT.txt what the process holds now, from what the
garbage collector tracks and everything they refer to (strings, numbers
and the small tuples it stops tracking included):

- bytes and counts by type;
- the plain data (dicts, lists, tuples, strings, bytes, numbers) by the
  attribute of the object that holds it: ``Request.headers`` is every
  header an httpx2 Request holds, ``Body._src`` kopf's copy of a body; a
  slot's value goes under its name as an attribute's does.
  Data is counted once, under the first holder the walk meets.

First it writes the RSS, then hands glibc's free pages back
(``malloc_trim(0)``) and writes the RSS again and how long that took: the
difference is free memory glibc held, not anything the process holds.

Unlike a tracemalloc trace (bench/heap_window.py) it costs nothing until
the signal, so the process's RSS beside it is the figure; unlike a trace
it says what holds the memory, not what allocated it, and it does not see
what C code allocates for itself (OpenSSL's, the allocators' free lists).
The walk holds the event loop for tens of seconds at 1,000 targets.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import os
import runpy
import signal
import sys
import time
import types
from typing import Any

_out = sys.argv[1]

_DATA = (dict, list, tuple, str, bytes, int, float, bool, type(None))
_LEAVES = (str, bytes, int, float, bool)
# Not walked into: what every object of a kind shares, not what one holds.
_SHARED = (type, types.ModuleType, types.FunctionType, types.CodeType)


def _instance_dicts(roots: list[Any]) -> dict[int, str]:
    """id of each instance's ``__dict__`` -> its class's name."""
    owners: dict[int, str] = {}
    for o in roots:
        if isinstance(o, type):
            continue
        try:
            attrs = object.__getattribute__(o, "__dict__")
        except Exception:  # a proxy raises what it likes
            continue
        if type(attrs) is dict:
            owners[id(attrs)] = type(o).__name__
    return owners


def _slots(kind: type) -> list[str]:
    """The names of ``kind``'s slots, its bases' included."""
    names: list[str] = []
    for klass in kind.__mro__:
        declared = klass.__dict__.get("__slots__", ())
        if isinstance(declared, str):
            declared = (declared,)
        for name in declared:
            if name in ("__dict__", "__weakref__"):
                continue
            # A private slot is stored under its mangled name.
            private = name.startswith("__") and not name.endswith("__")
            names.append(f"_{klass.__name__.lstrip('_')}{name}" if private else name)
    return names


def census() -> tuple[collections.Counter[str], collections.Counter[str], dict[str, int]]:
    """(bytes by type, bytes of plain data by holder, objects by holder).

    No closure, comprehension or generator here: its cells would be among
    the roots, and the walk would count its own bookkeeping.
    """
    roots = gc.get_objects()
    owners = _instance_dicts(roots)
    seen: set[int] = set()
    by_type: collections.Counter[str] = collections.Counter()
    by_holder: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    stack: list[tuple[Any, str]] = [(o, "(no holder)") for o in roots]
    del roots
    while stack:
        o, holder = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        kind = type(o)
        size = sys.getsizeof(o, 0)
        by_type[kind.__name__] += size
        if kind not in _DATA:
            if isinstance(o, _SHARED):
                continue
            below = kind.__name__
            # Referents first, slots after: a slot's value is popped first,
            # so it is counted under the slot's name.
            for r in gc.get_referents(o):
                stack.append((r, below))
            for slot in _slots(kind):
                value = getattr(o, slot, None)
                if value is not None:
                    stack.append((value, f"{below}.{slot}"))
            continue
        elif id(o) in owners:
            # An instance's attributes: each one's data goes under its name.
            by_holder[f"{owners[id(o)]}.__dict__"] += size
            counts[f"{owners[id(o)]}.__dict__"] += 1
            for k, v in o.items():
                stack.append((v, f"{owners[id(o)]}.{k}"))
            continue
        else:
            by_holder[holder] += size
            counts[holder] += 1
            if kind in _LEAVES:
                continue
            below = holder
        for r in gc.get_referents(o):
            stack.append((r, below))
    return by_type, by_holder, counts


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _trimmed() -> str:
    """RSS before and after glibc gives back the free pages of its heaps."""
    before = _rss_kib()
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return f"rss: {before / 1024:.1f} MiB (no glibc malloc_trim)"
    start = time.perf_counter()
    trim(0)
    took = (time.perf_counter() - start) * 1000
    return (
        f"rss: {before / 1024:.1f} MiB, after malloc_trim(0) {_rss_kib() / 1024:.1f} MiB"
        f" (the trim took {took:.1f} ms)"
    )


def _on_signal(_signum: int, _frame: types.FrameType | None) -> None:
    trimmed = _trimmed()
    by_type, by_holder, counts = census()
    with open(_out + ".part", "w") as out:
        print(trimmed, file=out)
        print(f"all: {sum(by_type.values()) / 2**20:.1f} MiB", file=out)
        for name, size in by_type.most_common(40):
            print(f"type {size / 2**20:9.2f} MiB  {name}", file=out)
        print(f"plain data: {sum(by_holder.values()) / 2**20:.1f} MiB", file=out)
        for name, size in by_holder.most_common(60):
            print(f"held {size / 2**20:9.2f} MiB {counts[name]:9d}  {name}", file=out)
    # Renamed once whole: the benchmark waits for the file to appear.
    os.replace(_out + ".part", _out)


if __name__ == "__main__":
    signal.signal(signal.SIGUSR2, _on_signal)
    module, sys.argv = sys.argv[2], sys.argv[2:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
