"""At most a few LISTs of large collections (every CRD, every Node) under way at once.

A real Standard target's CRDs are one LIST of 6.2 MB of JSON. When a shard
starts, or a half of its stacks come in at once, every target lists them
together: on one shard of 120 simulated targets with the real CRDs, on a
loaded 2-core machine, 60 of those LISTs shared the operator so thinly
that each took past its 60 s deadline, was dropped and tried again, and
the stacks did not come up (``bench/bench_shard_memory.py``). Each page
being parsed is held against the process's total too (``kube.budget``,
estimated at some 50 MiB each): all of them at once passed it. Queued, each
LIST that starts has the CPU to finish in time, and the pages held at
once, their memory, are bounded by the slots.

A slot is held for at most ``HOLD_SECONDS``: a target that answers a byte
at a time keeps its own LIST going to its deadline, but not a slot the
other targets wait for. The slots are per event loop, shared by every
target of the process.
"""

from __future__ import annotations

import asyncio
import weakref
from types import TracebackType

from modelplane.kube.budget import Budget

MiB = 1024 * 1024

# LISTs of large collections under way at once, per process: a few keep a
# core busy parsing while the next answers arrive.
MAX_LARGE_LISTS = 4
# A collection whose budget allows this much memory is a large one: the CRDs
# and the Nodes (``kube.budget``); the product's own objects are not.
LARGE_MEMORY = 1024 * MiB
# A real target's CRDs list in well under a second on a quiet machine.
HOLD_SECONDS = 10.0


def is_large(budget: Budget) -> bool:
    """Whether a LIST within ``budget`` waits for one of the process's large-LIST slots."""
    return budget.memory >= LARGE_MEMORY


_GATES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _gate() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    gate = _GATES.get(loop)
    if gate is None:
        gate = _GATES[loop] = asyncio.Semaphore(MAX_LARGE_LISTS)
    return gate


class LargeList:
    """One LIST's slot when it is large: waited for on entry, given back once."""

    def __init__(self, budget: Budget, hold: float = HOLD_SECONDS) -> None:
        self._large = is_large(budget)
        self._hold = hold
        self._gate: asyncio.Semaphore | None = None
        self._timer: asyncio.TimerHandle | None = None

    async def __aenter__(self) -> None:
        if not self._large:
            return
        gate = _gate()
        await gate.acquire()
        self._gate = gate
        self._timer = asyncio.get_running_loop().call_later(self._hold, self._give_back)

    async def __aexit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._give_back()

    def _give_back(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.release()
