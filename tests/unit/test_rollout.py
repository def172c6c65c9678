"""The staged rollout's decisions (plan.rollout): who may start an upgrade, and when it is done."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from modelplane.plan import plan
from modelplane.plan.model import ReleaseAction
from modelplane.plan.observed import Observed
from modelplane.plan.rollout import (
    Member,
    Phase,
    Policy,
    Progress,
    Reason,
    after_upgrade,
    behind,
    condition_of,
    desired_versions,
    held_versions,
    installed_after,
    installed_versions,
    may_start,
    next_up,
    phase_of,
    selects,
    started_at,
)

from .conftest import StackFactory, installed

ME = Member("ns/me", Phase.PENDING, canary=False, behind=True)
CANARY_ME = Member("ns/me", Phase.PENDING, canary=True, behind=True)
ONE = Policy(max_concurrent=1)
TWO = Policy(max_concurrent=2)


def _m(name: str, phase: Phase, canary: bool = False, is_behind: bool = True) -> Member:
    return Member(f"ns/{name}", phase, canary=canary, behind=is_behind)


@pytest.mark.parametrize(
    ("me", "fleet", "policy", "start", "reason", "names"),
    [
        # Alone, nothing in the way.
        (ME, [], ONE, True, Reason.UPGRADING, None),
        # Its own record in the fleet is not another stack.
        (ME, [_m("me", Phase.UPGRADING)], ONE, True, Reason.UPGRADING, None),
        # The one slot is taken.
        (ME, [_m("a", Phase.UPGRADING)], ONE, False, Reason.PENDING, "at most 1"),
        # Two slots, one taken.
        (ME, [_m("a", Phase.UPGRADING)], TWO, True, Reason.UPGRADING, None),
        (
            ME,
            [_m("a", Phase.UPGRADING), _m("b", Phase.UPGRADING)],
            TWO,
            False,
            Reason.PENDING,
            "at most 2",
        ),
        # Stacks waiting, or done, hold no slot.
        (
            ME,
            [_m("a", Phase.PENDING), _m("b", Phase.UP_TO_DATE)],
            ONE,
            True,
            Reason.UPGRADING,
            None,
        ),
        # A failed upgrade pauses everyone, whatever the slots, and is named.
        (ME, [_m("a", Phase.FAILED)], TWO, False, Reason.PAUSED, "ns/a"),
        (CANARY_ME, [_m("a", Phase.FAILED, canary=True)], TWO, False, Reason.PAUSED, "ns/a"),
        # Resumed past: no pause, no slot.
        (ME, [_m("a", Phase.RESUMED)], ONE, True, Reason.UPGRADING, None),
        # A canary that has not started, or is upgrading, holds the rest back.
        (ME, [_m("c", Phase.PENDING, canary=True)], TWO, False, Reason.PENDING, "canaries"),
        (ME, [_m("c", Phase.UP_TO_DATE, canary=True)], TWO, False, Reason.PENDING, "canaries"),
        (ME, [_m("c", Phase.UPGRADING, canary=True)], TWO, False, Reason.PENDING, "canaries"),
        # A finished canary, or one up to date, lets them go.
        (ME, [_m("c", Phase.UP_TO_DATE, True, False)], ONE, True, Reason.UPGRADING, None),
        (ME, [_m("c", Phase.RESUMED, canary=True)], ONE, True, Reason.UPGRADING, None),
        # A canary waits for no other canary, only for a slot.
        (CANARY_ME, [_m("d", Phase.PENDING, canary=True)], ONE, True, Reason.UPGRADING, None),
        (CANARY_ME, [_m("d", Phase.UPGRADING, True)], ONE, False, Reason.PENDING, "slot"),
    ],
)
def test_may_start(
    me: Member,
    fleet: list[Member],
    policy: Policy,
    start: bool,
    reason: Reason,
    names: str | None,
) -> None:
    verdict = may_start(me, fleet, policy)
    assert verdict.start is start
    assert verdict.reason is reason
    if names is not None:
        assert names in verdict.message
    assert (verdict.paused_by is not None) is (reason is Reason.PAUSED)


T0 = datetime(2026, 1, 1, tzinfo=UTC)
TIMEOUT = Policy(ready_timeout=timedelta(minutes=5))


@pytest.mark.parametrize(
    ("phase", "progress", "elapsed", "after"),
    [
        # Ready at its desired versions within the timeout: done, slot freed.
        (Phase.UPGRADING, Progress(behind=False, ready=True), 60, Phase.UP_TO_DATE),
        # Still going within the timeout.
        (Phase.UPGRADING, Progress(behind=True, ready=False), 60, Phase.UPGRADING),
        (Phase.UPGRADING, Progress(behind=False, ready=False), 299, Phase.UPGRADING),
        # Not Ready in time: failed.
        (Phase.UPGRADING, Progress(behind=False, ready=False), 301, Phase.FAILED),
        # A failed action fails it at once.
        (Phase.UPGRADING, Progress(True, False, failed="helm: no such chart"), 1, Phase.FAILED),
        # Failed stays failed (and retries) until Ready.
        (Phase.FAILED, Progress(behind=True, ready=False), 1, Phase.FAILED),
        (Phase.FAILED, Progress(behind=False, ready=True), 900, Phase.UP_TO_DATE),
        # Resumed past stays so until Ready, and never pauses again on its own.
        (Phase.RESUMED, Progress(True, False, failed="helm: no such chart"), 900, Phase.RESUMED),
        (Phase.RESUMED, Progress(behind=False, ready=True), 900, Phase.UP_TO_DATE),
    ],
)
def test_after_upgrade(phase: Phase, progress: Progress, elapsed: int, after: Phase) -> None:
    got, message = after_upgrade(phase, progress, T0, T0 + timedelta(seconds=elapsed), TIMEOUT)
    assert got is after
    assert message


def test_a_timeout_names_its_length() -> None:
    _, message = after_upgrade(
        Phase.UPGRADING, Progress(False, False), T0, T0 + timedelta(hours=1), TIMEOUT
    )
    assert "300s" in message


@pytest.mark.parametrize(
    ("phase", "current", "paused_by", "ok", "reason"),
    [
        (Phase.UP_TO_DATE, True, None, True, Reason.UP_TO_DATE),
        (Phase.UP_TO_DATE, False, None, False, Reason.INSTALLING),
        (Phase.PENDING, False, None, False, Reason.PENDING),
        (Phase.PENDING, False, "ns/a", False, Reason.PAUSED),
        (Phase.UPGRADING, False, None, False, Reason.UPGRADING),
        (Phase.FAILED, False, None, False, Reason.FAILED),
        (Phase.RESUMED, False, None, False, Reason.FAILED),
    ],
)
def test_condition_of(
    phase: Phase, current: bool, paused_by: str | None, ok: bool, reason: Reason
) -> None:
    assert condition_of(phase, current, paused_by) == (ok, reason)


def test_behind_is_a_change_of_an_installed_version_never_a_first_install() -> None:
    assert behind({"a": "2"}, {"a": "1"})
    assert not behind({"a": "1"}, {"a": "1"})
    # Never installed (a first install, a component just enabled): not an upgrade.
    assert not behind({"a": "1"}, {})
    assert not behind({"a": "1"}, {"a": None})
    assert held_versions({"a": "2", "b": "1", "c": "3"}, {"a": "1", "b": "1"}) == {"a": "1"}


def test_installed_versions_from_status_old_and_new() -> None:
    status = {
        "components": [
            {"name": "a", "mode": "Managed", "version": "2", "installedVersion": "1"},
            {"name": "b", "mode": "Managed", "version": "2", "installedVersion": None},
            # Written before installedVersion existed: version was the installed
            # one once the component was Ready.
            {"name": "c", "mode": "Managed", "version": "5", "state": "Ready"},
            {"name": "d", "mode": "Managed", "version": "5", "state": "Pending"},
            # Provided components are not installed by the product.
            {"name": "e", "mode": "Provided", "version": "5", "state": "Met"},
            "junk",
            {"mode": "Managed"},
        ]
    }
    assert installed_versions(status) == {"a": "1", "b": None, "c": "5", "d": None}
    assert installed_versions(None) == {}


def test_phase_and_start_from_status() -> None:
    assert phase_of(None) is Phase.UP_TO_DATE
    assert phase_of({"rollout": {"phase": "Upgrading"}}) is Phase.UPGRADING
    assert phase_of({"rollout": {"phase": "bogus"}}) is Phase.UP_TO_DATE
    assert started_at({"rollout": {"startedAt": "2026-01-01T00:00:00Z"}}) == T0
    assert started_at({"rollout": {"startedAt": "yesterday"}}) is None
    assert started_at({}) is None


@pytest.mark.parametrize(
    ("selector", "labels", "selected"),
    [
        (None, {"ring": "canary"}, False),
        ("ring=canary", {"ring": "canary"}, True),
        ("ring=canary", {"ring": "main"}, False),
        ("ring!=canary", {}, True),
        ("ring in (a,canary)", {"ring": "canary"}, True),
        ("ring notin (a,canary)", {"ring": "canary"}, False),
        ("ring notin (a,canary)", {}, True),
        ("ring", {"ring": ""}, True),
        ("!ring", {"ring": ""}, False),
        ("ring=canary,example.com/tier in (gold)", {"ring": "canary"}, False),
        (
            "ring=canary,example.com/tier in (gold)",
            {"ring": "canary", "example.com/tier": "gold"},
            True,
        ),
    ],
)
def test_canary_selector(selector: str | None, labels: dict[str, str], selected: bool) -> None:
    assert selects(selector, labels) is selected


def test_a_held_stack_is_planned_at_its_installed_version(
    make_stack: StackFactory, serve_everything: Callable[..., Observed]
) -> None:
    """Held at what it runs, a stack whose pin moved has nothing to upgrade."""
    before = make_stack(components="Managed", stack="Standard", versions={"prometheus": "84.4.0"})
    served = serve_everything()
    target = installed(plan(before, served), served)
    after = make_stack(components="Managed", stack="Standard", versions={"prometheus": "84.5.0"})

    moving = plan(after, target)
    kps = next(r for r in moving.releases if r.component == "kube-prometheus-stack")
    assert kps.action is ReleaseAction.UPGRADE and kps.version == "84.5.0"

    held = plan(after, target, held={"kube-prometheus-stack": "84.4.0"})
    kps = next(r for r in held.releases if r.component == "kube-prometheus-stack")
    assert kps.action is ReleaseAction.NONE and kps.version == "84.4.0"
    component = next(c for c in held.components if c.name == "kube-prometheus-stack")
    # The desired version is shown beside the one it is held at.
    assert (component.version, component.held_at) == ("84.5.0", "84.4.0")
    assert held.work == []
    # What it runs after that reconcile: the held version, not the desired one.
    now = installed_after(held, {}, {"kube-prometheus-stack": "84.4.0"})
    assert now["kube-prometheus-stack"] == "84.4.0"
    assert desired_versions(after.spec)["kube-prometheus-stack"] == "84.5.0"


def test_installed_after_keeps_the_old_version_of_what_has_work_or_failed(
    make_stack: StackFactory,
) -> None:
    stack = make_stack(components="Managed", stack="Standard", versions={"prometheus": "84.5.0"})
    before = make_stack(components="Managed", stack="Standard", versions={"prometheus": "84.4.0"})
    p = plan(stack, installed(plan(before)))
    was = {"kube-prometheus-stack": "84.4.0"}
    assert installed_after(p, {}, was)["kube-prometheus-stack"] == "84.4.0"
    done = plan(stack, installed(p))
    assert installed_after(done, {}, was)["kube-prometheus-stack"] == "84.5.0"
    failed = installed_after(done, {"kube-prometheus-stack": "helm failed"}, was)
    assert failed["kube-prometheus-stack"] == "84.4.0"
    # Provided components are not the product's to install: never reported.
    provided = make_stack(components="Provided")
    assert "kube-prometheus-stack" not in installed_after(plan(provided), {}, {})


def test_a_freed_slot_wakes_only_as_many_as_could_take_one_canaries_first() -> None:
    pending = [_m("b", Phase.PENDING), _m("z", Phase.PENDING, canary=True), _m("a", Phase.PENDING)]
    assert next_up(pending, 1) == ["ns/z"]
    assert next_up(pending, 2) == ["ns/z", "ns/a"]
    assert next_up(pending, 0) == []
    assert next_up(pending, -1) == []
