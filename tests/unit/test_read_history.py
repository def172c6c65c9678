"""What a stack's reconciles remember of their reads (operator.read_history)."""

from __future__ import annotations

from modelplane.operator.read_history import Ended, ReadHistory


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_direct_read_is_due_first_and_again_after_the_relist_period() -> None:
    clock = Clock()
    reads = ReadHistory(relist_seconds=60.0, clock=clock)
    assert reads.direct_read_due()
    reads.read_directly()
    clock.now += 59.0
    assert not reads.direct_read_due()
    clock.now += 1.0
    assert reads.direct_read_due()


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
