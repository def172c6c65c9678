"""Run a module as ``python -m`` would, its Python allocations traced from a signal on.

    python bench/heap_window.py OUT.snap FRAMES modelplane.cli.main run ...

The first SIGUSR1 starts tracing allocations, FRAMES deep (``tracemalloc``);
each later one writes a snapshot of what is allocated now and was
allocated since, to OUT.snap. So a benchmark sees by allocation site what a
step it takes (more targets) added and still holds, without tracing the
start-up before it. Tracing costs memory and time of its own: the process's
RSS under it is not the figure.
"""

from __future__ import annotations

import gc
import os
import runpy
import signal
import sys
import tracemalloc
from types import FrameType

_out = sys.argv[1]
_frames = int(sys.argv[2])


def _on_signal(_signum: int, _frame: FrameType | None) -> None:
    if not tracemalloc.is_tracing():
        tracemalloc.start(_frames)
        return
    gc.collect()
    # Renamed once whole: the benchmark waits for the file to appear.
    tracemalloc.take_snapshot().dump(_out + ".part")
    os.replace(_out + ".part", _out)


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, _on_signal)
    module, sys.argv = sys.argv[3], sys.argv[3:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
