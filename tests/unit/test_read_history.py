"""What a stack's reconciles remember of their reads (operator.read_history)."""

from __future__ import annotations

import pytest

from modelplane.operator.read_history import RELIST_JITTER, Ended, ReadHistory


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_direct_read_is_due_first_and_again_after_the_relist_period() -> None:
    clock = Clock()
    reads = ReadHistory(relist_seconds=60.0, clock=clock, rand=lambda: 0.0)
    assert reads.direct_read_due()
    reads.read_directly()
    clock.now += 59.0
    assert not reads.direct_read_due()
    clock.now += 1.0
    assert reads.direct_read_due()


@pytest.mark.parametrize(
    ("drawn", "not_yet", "due"),
    [
        # The draw at the read sets how much past --relist the next comes.
        (0.0, 59.9, 60.0),
        (0.5, 60.0 * (1 + RELIST_JITTER / 2) - 0.1, 60.0 * (1 + RELIST_JITTER / 2)),
        (0.999, 60.0 * (1 + RELIST_JITTER) - 0.1, 60.0 * (1 + RELIST_JITTER)),
    ],
)
def test_the_next_direct_read_comes_a_drawn_share_past_the_relist_period(
    drawn: float, not_yet: float, due: float
) -> None:
    clock = Clock()
    reads = ReadHistory(relist_seconds=60.0, clock=clock, rand=lambda: drawn)
    reads.read_directly()
    start = clock.now
    clock.now = start + not_yet
    assert not reads.direct_read_due()
    clock.now = start + due
    assert reads.direct_read_due()


def test_stacks_read_together_come_due_apart() -> None:
    # A shard's stacks, all read at one start: their next reads spread over
    # the jitter's span, not all in the same moment an hour later.
    clock = Clock()
    draws = iter(i / 100 for i in range(100))
    stacks = [
        ReadHistory(relist_seconds=3600.0, clock=clock, rand=lambda: next(draws))
        for _ in range(100)
    ]
    for reads in stacks:
        reads.read_directly()
    clock.now += 3600.0
    assert sum(r.direct_read_due() for r in stacks) == 1
    clock.now += 3600.0 * RELIST_JITTER / 2
    assert 45 <= sum(r.direct_read_due() for r in stacks) <= 55
    clock.now += 3600.0 * RELIST_JITTER / 2
    assert all(r.direct_read_due() for r in stacks)


def test_a_reconcile_that_ends_early_leaves_the_copy_untrusted() -> None:
    reads = ReadHistory(relist_seconds=60.0, clock=Clock())
    reads.end(acted=False, writes_seen=False)
    assert reads.begin() == Ended(acted_on_nothing=True, writes_seen=False)
    # This one never reaches its end (blocked, failed): the next learns nothing of it.
    assert reads.begin() == Ended()


def test_how_the_rounds_ended_is_kept_for_the_next_reconcile() -> None:
    reads = ReadHistory(relist_seconds=60.0, clock=Clock())
    reads.end(acted=True, writes_seen=True)
    assert reads.last == Ended(acted_on_nothing=False, writes_seen=True)
    assert reads.begin().writes_seen
