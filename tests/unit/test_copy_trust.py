"""When a reconcile trusts the watches' copy (plan.trust), case by case."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from modelplane.plan import trust
from modelplane.plan.trust import FirstRead, ReadFacts, Source, Why

# A daemon's stack whose copy covers its spec and whose last reconcile
# acted on nothing, with no direct read due: the quiet resync.
QUIET = ReadFacts(
    keeps_watches=True,
    watching=True,
    copy_covers=True,
    managed=False,
    acted_on_nothing=True,
    writes_seen=False,
    direct_read_due=False,
)


def _with(**changes: bool) -> ReadFacts:
    return dataclasses.replace(QUIET, **changes)


FIRST_READS = [
    pytest.param(QUIET, Source.COPY, Why.SETTLED, id="quiet resync"),
    pytest.param(
        _with(acted_on_nothing=False, writes_seen=True),
        Source.COPY,
        Why.SETTLED,
        id="last reconcile's writes seen in the copy",
    ),
    pytest.param(_with(managed=True), Source.COPY, Why.SETTLED, id="managed, watches running"),
    pytest.param(
        _with(acted_on_nothing=False),
        Source.TARGET,
        Why.WRITES_UNSEEN,
        id="last reconcile acted, writes not seen (or it ended early)",
    ),
    pytest.param(_with(direct_read_due=True), Source.TARGET, Why.RELIST_DUE, id="relist due"),
    pytest.param(
        _with(acted_on_nothing=False, direct_read_due=True),
        Source.TARGET,
        Why.RELIST_DUE,
        id="relist due and writes unseen: the relist is named",
    ),
    pytest.param(
        _with(copy_covers=False), Source.TARGET, Why.OTHER_SPEC, id="watches of another spec"
    ),
    pytest.param(
        _with(watching=False, copy_covers=False),
        Source.FIRST_LISTS,
        Why.WATCHES_START,
        id="provided, no watches yet: their first lists are the read",
    ),
    pytest.param(
        _with(watching=False, copy_covers=False, acted_on_nothing=False, direct_read_due=True),
        Source.FIRST_LISTS,
        Why.WATCHES_START,
        id="provided, no watches yet, whatever the last reconcile did",
    ),
    pytest.param(
        _with(watching=False, copy_covers=False, managed=True),
        Source.TARGET,
        Why.WATCHES_FOLLOW_READ,
        id="managed, no watches yet: they start after the read",
    ),
    pytest.param(
        _with(keeps_watches=False, watching=False, copy_covers=False),
        Source.TARGET,
        Why.NOT_KEPT,
        id="a CLI run or a test: nothing kept",
    ),
    pytest.param(
        _with(keeps_watches=False, watching=False, copy_covers=False, managed=True),
        Source.TARGET,
        Why.NOT_KEPT,
        id="managed, nothing kept",
    ),
]


@pytest.mark.parametrize(("facts", "source", "why"), FIRST_READS)
def test_first_read(facts: ReadFacts, source: Source, why: Why) -> None:
    assert trust.first_read(facts) == FirstRead(source, why)


@pytest.mark.parametrize("values", list(itertools.product((False, True), repeat=7)))
def test_the_copy_answers_only_when_running_covering_and_settled(
    values: tuple[bool, ...],
) -> None:
    facts = ReadFacts(*values)
    copy = trust.first_read(facts).source is Source.COPY
    assert copy == (
        facts.keeps_watches
        and facts.watching
        and facts.copy_covers
        and trust.settled(
            acted_on_nothing=facts.acted_on_nothing,
            writes_seen=facts.writes_seen,
            direct_read_due=facts.direct_read_due,
        )
    )


@pytest.mark.parametrize(
    ("acted_on_nothing", "writes_seen", "direct_read_due", "settled"),
    [
        (True, False, False, True),
        (False, True, False, True),
        (True, True, False, True),
        (False, False, False, False),
        (True, False, True, False),
        (False, True, True, False),
        (False, False, True, False),
    ],
)
def test_settled(
    acted_on_nothing: bool, writes_seen: bool, direct_read_due: bool, settled: bool
) -> None:
    assert (
        trust.settled(
            acted_on_nothing=acted_on_nothing,
            writes_seen=writes_seen,
            direct_read_due=direct_read_due,
        )
        is settled
    )


@pytest.mark.parametrize(
    ("connected", "settled", "takes"),
    [
        (True, True, False),  # a kept connection and a settled copy: no request expected
        (True, False, True),  # the target is read in full
        (False, True, True),  # connecting reads discovery
        (False, False, True),
    ],
)
def test_takes_slot(connected: bool, settled: bool, takes: bool) -> None:
    assert trust.takes_slot(connected=connected, settled=settled) is takes


@pytest.mark.parametrize(
    ("copy_covers", "untracked", "waits"),
    [
        (True, False, True),  # applies only: their answers are dated
        (True, True, False),  # helm ran: nothing dates its writes
        (False, False, False),  # the copy follows another spec's objects
        (False, True, False),
    ],
)
def test_copy_may_show_writes(copy_covers: bool, untracked: bool, waits: bool) -> None:
    assert trust.copy_may_show_writes(copy_covers=copy_covers, untracked=untracked) is waits
