"""When a reconcile reads its target's claim: before a direct read, or before a write."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from modelplane.operator.stack_actions import may_write
from modelplane.plan import Plan, trust
from modelplane.plan.model import ObjectAction, ReleaseAction
from modelplane.plan.trust import Source


@pytest.mark.parametrize(
    ("source", "first"),
    [
        (Source.TARGET, True),  # a direct read, at least every --relist: the claim with it
        (Source.FIRST_LISTS, True),  # a new connection: read before the watches start
        (Source.COPY, False),  # a settled resync: only before a write
    ],
)
def test_claim_read_first(source: Source, first: bool) -> None:
    assert trust.claim_read_first(source) is first


def _plan(**lists: list[Any]) -> Plan:
    fields = {"manifests": [], "objects": [], "release_drift": [], "releases": [], **lists}
    return cast(Plan, SimpleNamespace(**fields))


def _with(action: object) -> SimpleNamespace:
    return SimpleNamespace(action=action)


@pytest.mark.parametrize(
    ("plan", "writes"),
    [
        (_plan(), False),
        (_plan(objects=[_with(ObjectAction.NONE), _with(ObjectAction.HOLD)]), False),
        (_plan(objects=[_with(ObjectAction.APPLY)]), True),
        (_plan(manifests=[_with(ObjectAction.NONE)]), False),
        (_plan(manifests=[_with(ObjectAction.APPLY)]), True),
        (_plan(release_drift=[SimpleNamespace(restore=None)]), False),  # only reported
        (_plan(release_drift=[SimpleNamespace(restore={"kind": "Deployment"})]), True),
        (_plan(releases=[_with(ReleaseAction.NONE), _with(ReleaseAction.WAIT)]), False),
        *[
            (_plan(releases=[_with(a)]), True)
            for a in ReleaseAction
            if a.name not in ("NONE", "WAIT")
        ],
    ],
)
def test_may_write(plan: Plan, writes: bool) -> None:
    assert may_write(plan) is writes
