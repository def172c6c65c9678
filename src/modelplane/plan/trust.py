"""When a reconcile trusts the target watches' copy instead of reading the target.

The daemon keeps watches on each stack's target (``operator.watch``); their
copy (``observe.watches.WatchCache``) holds what a direct read would list,
so a quiet resync re-plans from it without a request. The copy is trusted
only when it is known to be current: right after a write its events may
still be on their way, and a stale copy costs a second, idle apply
(``observe.writes``). A direct read is also due every --relist period, so a
watch that silently fell behind is put right.

Nine facts decided this across the reconciler, its session and the watches;
they are here, in three decisions a reconcile takes in turn: whether it
waits for a full read's slot (before connecting), where its first round
reads from (once connected), and whether a round after its writes waits
for the copy to show them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Source(Enum):
    """Where a reconcile's first round reads the target from."""

    # A direct read: discovery and every LIST the spec needs.
    TARGET = "target"
    # The watches start now: their first LISTs are the direct read, made
    # once rather than twice.
    FIRST_LISTS = "first-lists"
    # The watches' copy, already running: no request to the target.
    COPY = "copy"


class Why(Enum):
    """Why the first read comes from where it does, for a reader of the debug log."""

    NOT_KEPT = "nothing outlives the reconcile: no watches run"
    WATCHES_START = "the watches start now; their first LISTs are the read"
    WATCHES_FOLLOW_READ = "the watches follow what only a read of the releases finds"
    OTHER_SPEC = "the watches follow another spec's objects"
    RELIST_DUE = "a direct read is due (--relist)"
    WRITES_UNSEEN = "the last reconcile wrote what the copy did not show before it ended"
    SETTLED = "the last reconcile's writes, if any, are in the copy"


@dataclass(frozen=True)
class ReadFacts:
    """What a reconcile knows, once connected, before its first read."""

    # The daemon's: the connection outlives a reconcile and carries watches.
    keeps_watches: bool
    # The watches run: their copy exists. A new connection stops them.
    watching: bool
    # What the running watches follow is what this spec wants.
    copy_covers: bool
    # Managed components: the watches follow the releases' workloads, which
    # only a read of the releases' storage finds, so they start after it.
    managed: bool
    # How the last reconcile ended: it wrote nothing, or every write it
    # made was in the copy before it ended. Both false after one that ended
    # early (blocked, failed, or out of rounds).
    acted_on_nothing: bool
    writes_seen: bool
    # The --relist period has passed since the last direct read.
    direct_read_due: bool


@dataclass(frozen=True)
class FirstRead:
    source: Source
    why: Why


def settled(*, acted_on_nothing: bool, writes_seen: bool, direct_read_due: bool) -> bool:
    """Whether the copy is known to be current, and no direct read is due."""
    return (acted_on_nothing or writes_seen) and not direct_read_due


def takes_slot(*, connected: bool, settled: bool) -> bool:
    """Whether a reconcile waits for a full read's slot (``operator.target_reads``).

    Decided before connecting: a connection kept open and a settled copy
    are expected to cost no request, so they do not wait in line.
    """
    return not (connected and settled)


def first_read(facts: ReadFacts) -> FirstRead:
    """Where a reconcile's first round reads the target from, and why.

    A read from the copy still falls back to a direct one when the copy
    has not listed everything in time; the caller sees that.
    """
    if not facts.keeps_watches:
        return FirstRead(Source.TARGET, Why.NOT_KEPT)
    if not facts.watching:
        if facts.managed:
            return FirstRead(Source.TARGET, Why.WATCHES_FOLLOW_READ)
        return FirstRead(Source.FIRST_LISTS, Why.WATCHES_START)
    if not facts.copy_covers:
        return FirstRead(Source.TARGET, Why.OTHER_SPEC)
    if facts.direct_read_due:
        return FirstRead(Source.TARGET, Why.RELIST_DUE)
    if not (facts.acted_on_nothing or facts.writes_seen):
        return FirstRead(Source.TARGET, Why.WRITES_UNSEEN)
    return FirstRead(Source.COPY, Why.SETTLED)


def copy_may_show_writes(*, copy_covers: bool, untracked: bool) -> bool:
    """Whether the round after a write waits for the copy to show it, rather than reading.

    Only writes whose answers are dated can be looked for in the copy;
    helm's are not (``observe.writes.Writes.untracked``).
    """
    return copy_covers and not untracked


def claim_read_first(source: Source) -> bool:
    """Whether a reconcile reads the target's claim before its first read, or only before a write.

    The claim keeps a stack from writing to a target another stack holds
    (``actions.claim``). A read of the copy writes nothing, so a settled
    resync leaves the claim unread unless its plan has something to write:
    at a resync every 300 s that read was a shard's only request to its
    targets (2,500 a shard: 500 reads a minute). A direct read, at least
    every --relist, reads it first, as before.
    """
    return source is not Source.COPY
