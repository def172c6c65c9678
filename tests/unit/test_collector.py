"""Full garbage collections kept to what is new (operator/collector.py), on this interpreter."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from modelplane.operator import collector


@pytest.mark.parametrize(
    ("phase", "info", "freezes"),
    [
        ("stop", {"generation": 2, "collected": 0, "uncollectable": 0}, True),
        ("start", {"generation": 2}, False),  # the walk has not happened yet
        ("stop", {"generation": 1}, False),  # a young collection: the old ones are not walked
        ("stop", {"generation": 0}, False),
        ("stop", {}, False),
    ],
)
def test_only_the_end_of_a_full_collection_freezes(
    phase: str, info: dict[str, Any], freezes: bool
) -> None:
    assert collector.freezes_after(phase, info) is freezes


@pytest.fixture
def freezing() -> Iterator[None]:
    collector.start_freezing()
    try:
        yield
    finally:
        collector.stop_freezing()


class _Node:
    """A container that can be part of a cycle."""

    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> _Node:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return a


@pytest.mark.usefixtures("freezing")
def test_a_full_collection_freezes_its_survivors() -> None:
    gc.collect()
    frozen = gc.get_freeze_count()
    assert frozen > 1000  # every module, function and class of this process

    kept = [_Node() for _ in range(100)]
    gc.collect()
    assert gc.get_freeze_count() >= frozen + len(kept)


@pytest.mark.usefixtures("freezing")
def test_a_frozen_cycle_that_dies_waits_for_the_full_scan() -> None:
    holder = [_cycle()]
    dead = weakref.ref(holder[0])
    gc.collect()  # the cycle is alive: it survives, and is frozen
    holder.clear()  # now only reachable from itself

    gc.collect()  # frozen: not walked, so not found
    assert dead() is not None

    scan = collector.full_scan()
    assert dead() is None
    assert scan.freed >= 2
    assert scan.thawed > 1000
    assert gc.get_freeze_count() > 1000  # the survivors frozen again


@pytest.mark.usefixtures("freezing")
def test_after_a_full_scan_full_collections_come_with_what_is_new() -> None:
    # CPython holds the next full collection until a quarter as many objects
    # as the last one kept have aged into the oldest generation. After a
    # full scan of a large heap that would be a long wait, then a long walk;
    # with the survivors frozen it should be a quarter of nothing.
    ballast = [[] for _ in range(600_000)]
    collector.full_scan()
    assert gc.get_freeze_count() > len(ballast)
    full: list[int] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info["generation"] == 2:
            full.append(info["collected"])

    thresholds = gc.get_threshold()
    # A full collection is due at the first one of the middle generation
    # (CPython waits for ten), then held by the quarter rule alone.
    gc.set_threshold(thresholds[0], thresholds[1], 0)
    gc.callbacks.insert(0, count)
    try:
        aged = [_Node() for _ in range(20_000)]  # past a collection of the middle generation
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*thresholds)
    assert full, f"no full collection while {len(aged)} objects aged past {len(ballast)} frozen"


def test_stopping_thaws_everything_and_freezes_no_more() -> None:
    collector.start_freezing()
    gc.collect()
    assert gc.get_freeze_count() > 0
    collector.stop_freezing()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gc.get_freeze_count() == 0


class _Stop(Exception):
    pass


@pytest.mark.parametrize(
    ("frozen", "kept", "walks"),
    [
        (1, 0, True),  # no walk yet
        (1_000_000, 1_000_000, False),  # settled: nothing can have died frozen
        (1_100_000, 1_000_000, False),  # a tenth: at most that is dead
        (1_100_001, 1_000_000, True),
        (600_000, 1_000_000, False),  # shrunk: reference counting freed the rest
        (0, 0, False),
    ],
)
def test_a_due_walk_happens_once_the_frozen_heap_grew_by_a_tenth(
    frozen: int, kept: int, walks: bool
) -> None:
    assert collector.walks_everything(frozen, kept) is walks


def test_a_full_scan_says_how_many_it_kept_frozen() -> None:
    kept = [_Node() for _ in range(1000)]
    assert collector.full_scan().kept == 0  # not freezing: nothing kept frozen
    collector.start_freezing()
    try:
        scan = collector.full_scan()
    finally:
        collector.stop_freezing()
    assert scan.kept >= len(kept)


def test_keep_collections_short_walks_each_round_it_grew_and_thaws_when_it_ends() -> None:
    # What the frozen generation counts at each round; each walk keeps 100.
    counts = iter([100, 105, 200, 108, 300])
    counted: list[int] = []
    walked_at: list[int] = []

    def frozen() -> int:
        counted.append(next(counts))
        return counted[-1]

    def scan_all() -> collector.FullScan:
        walked_at.append(counted[-1])
        if len(walked_at) == 3:
            raise _Stop
        return collector.FullScan(thawed=10, freed=1, kept=100, seconds=0.001)

    with pytest.raises(_Stop):
        asyncio.run(collector.keep_collections_short(every=0.001, scan_all=scan_all, frozen=frozen))
    # The first round walks; then only past a tenth more than the 100 kept.
    assert walked_at == [100, 200, 300]
    assert gc.get_freeze_count() == 0
    assert collector._freeze_survivors not in gc.callbacks


def test_zero_leaves_the_collector_as_it_is() -> None:
    assert asyncio.run(collector.keep_collections_short(every=0)) is None
    assert collector._freeze_survivors not in gc.callbacks
