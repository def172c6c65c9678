"""Run a module as ``python -m`` would, each of its full garbage collections logged.

    python bench/gc_pauses.py OUT.log modelplane.cli.main run ...

Every collection of the oldest generation (a full one: it scans every
object the collector tracks, with the event loop stopped) is appended to
OUT.log as a line: the wall-clock time it ended, how long it took in
milliseconds, and how many objects it found to be garbage. So a benchmark
sees how often a shard stops for the collector, and for how long, as its
heap grows.
"""

from __future__ import annotations

import gc
import runpy
import sys
import time
from typing import Any

_out = open(sys.argv[1], "a", buffering=1)  # noqa: SIM115 - open for the process's life
_started = [0.0]


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    if info["generation"] != 2:
        return
    if phase == "start":
        _started[0] = time.perf_counter()
        return
    took = (time.perf_counter() - _started[0]) * 1000
    _out.write(f"{time.time():.3f} {took:.1f} {info['collected']}\n")


if __name__ == "__main__":
    gc.callbacks.append(_on_collection)
    module, sys.argv = sys.argv[2], sys.argv[2:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
