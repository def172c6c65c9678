"""Handing the allocator's free memory back (operator/heap.py), on this machine's real glibc."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

from modelplane.operator import heap

# A fresh interpreter: fragments its heap the way a LIST's parse does (chunks
# above pymalloc's 512 bytes, most freed, a few kept between them), then
# hands the free pages back once and prints what that gave.
_FRAGMENT_THEN_GIVE_BACK = textwrap.dedent(
    """
    from modelplane.operator import heap
    blocks = [bytes(4000) for _ in range(20_000)]
    kept = blocks[::16]
    del blocks
    print(heap.give_back(heap.glibc_trim()))
    """
)


def test_giving_back_frees_the_pages_between_live_chunks() -> None:
    if heap.glibc_trim() is None:
        pytest.skip("this C library has no malloc_trim (not glibc): nothing to give back")
    done = subprocess.run(
        [sys.executable, "-c", _FRAGMENT_THEN_GIVE_BACK],
        capture_output=True,
        text=True,
        check=True,
    )
    given = int(done.stdout)
    # 80 MB allocated, 75 freed in runs of 60 KB between kept 4 KB chunks:
    # glibc kept all of it (only the top is trimmed on free); whole pages of
    # the runs go back.
    assert given >= 50 * 2**20, f"gave back only {given} bytes"


def test_resident_bytes_reads_this_process() -> None:
    assert heap.resident_bytes() > 10 * 2**20


class _Stop(Exception):
    pass


def test_keep_giving_back_trims_each_round_until_cancelled() -> None:
    calls: list[int] = []

    def trim(pad: int) -> int:
        calls.append(pad)
        if len(calls) == 3:
            raise _Stop
        return 1

    with pytest.raises(_Stop):
        asyncio.run(heap.keep_giving_back(trim, every=0))
    assert calls == [0, 0, 0]


def test_without_malloc_trim_nothing_is_given_back() -> None:
    # Returns at once, rather than looping on nothing.
    assert asyncio.run(heap.keep_giving_back(None, every=0)) is None
