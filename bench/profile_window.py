"""Run a module as ``python -m`` would, under a profile switched on and off from outside.

    python bench/profile_window.py OUT.prof modelplane.cli.main run ...

SIGUSR1 starts profiling the main thread (where the event loop runs);
SIGUSR2 stops it and writes OUT.prof. So a benchmark profiles its window
alone, not the start-up before it.
"""

from __future__ import annotations

import cProfile
import runpy
import signal
import sys
from types import FrameType

_profile = cProfile.Profile()
_out = sys.argv[1]


def _on(_signum: int, _frame: FrameType | None) -> None:
    _profile.enable()


def _off(_signum: int, _frame: FrameType | None) -> None:
    _profile.disable()
    _profile.dump_stats(_out)


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, _on)
    signal.signal(signal.SIGUSR2, _off)
    module, sys.argv = sys.argv[2], sys.argv[2:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
