"""The staged rollout's decisions (plan.rollout): who may start an upgrade, and when it is done."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from modelplane.plan import mirror_images, plan
from modelplane.plan.model import ReleaseAction
from modelplane.plan.observed import Observed
from modelplane.plan.rollout import (
    Member,
    Phase,
    Policy,
    Progress,
    Reason,
    Verdict,
    after_upgrade,
    behind,
    condition_of,
    desired_versions,
    held_versions,
    holds_back,
    installed_after,
    installed_versions,
    may_start,
    next_up,
    pauses,
    phase_of,
    started_at,
    upgrades,
    waiting_since,
    with_mirror,
)
from modelplane.vocabulary import BlockedReason

from .conftest import StackFactory, installed

KPS = "kube-prometheus-stack"
NEW = frozenset({(KPS, "2")})
OTHER = frozenset({(KPS, "3")})
ME = Member("team/me", Phase.PENDING, canary=False, wants=NEW, aims=NEW)
CANARY_ME = Member("ring/me", Phase.PENDING, canary=True, wants=NEW, aims=NEW)
ONE = Policy(max_concurrent=1)
TWO = Policy(max_concurrent=2)


def _m(
    key: str, phase: Phase, canary: bool = False, wants: frozenset[tuple[str, str]] = NEW
) -> Member:
    """``key``: a name in ``team``, or ``namespace/name``."""
    key = key if "/" in key else f"team/{key}"
    return Member(key, phase, canary=canary, wants=wants, aims=wants or NEW)


@pytest.mark.parametrize(
    ("me", "fleet", "policy", "start", "reason", "says"),
    [
        # Alone, nothing in the way.
        (ME, [], ONE, True, Reason.UPGRADING, None),
        # Its own record in the fleet is not another stack.
        (ME, [_m("me", Phase.UPGRADING)], ONE, True, Reason.UPGRADING, None),
        # The one slot is taken, by a stack of any namespace.
        (ME, [_m("a", Phase.UPGRADING)], ONE, False, Reason.PENDING, "at most 1"),
        (ME, [_m("other/a", Phase.UPGRADING)], ONE, False, Reason.PENDING, "at most 1"),
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
        # A failed upgrade of its own namespace pauses it, whatever the slots, and is named.
        (ME, [_m("a", Phase.FAILED)], TWO, False, Reason.PAUSED, "team/a"),
        # Another team's failure does not: that team's owner alone could resume it.
        (ME, [_m("other/a", Phase.FAILED)], TWO, True, Reason.UPGRADING, None),
        # A failed canary pauses the whole shard, and is not named.
        (ME, [_m("ring/c", Phase.FAILED, True)], TWO, False, Reason.PAUSED, "1 failed canary"),
        (CANARY_ME, [_m("ring2/c", Phase.FAILED, True)], TWO, False, Reason.PAUSED, "canary"),
        # Resumed past: no pause, no slot.
        (ME, [_m("a", Phase.RESUMED)], ONE, True, Reason.UPGRADING, None),
        (ME, [_m("ring/c", Phase.RESUMED, True)], ONE, True, Reason.UPGRADING, None),
        # A canary that wants the same upgrade and has not started, or is at it, holds it back.
        (ME, [_m("ring/c", Phase.PENDING, True)], TWO, False, Reason.PENDING, "1 canary"),
        (ME, [_m("ring/c", Phase.UP_TO_DATE, True)], TWO, False, Reason.PENDING, "1 canary"),
        (ME, [_m("ring/c", Phase.UPGRADING, True)], TWO, False, Reason.PENDING, "1 canary"),
        # A canary that wants another version, or is done, holds nothing back.
        (ME, [_m("ring/c", Phase.PENDING, True, OTHER)], TWO, True, Reason.UPGRADING, None),
        (
            ME,
            [_m("ring/c", Phase.UP_TO_DATE, True, frozenset())],
            ONE,
            True,
            Reason.UPGRADING,
            None,
        ),
        # A canary waits for no other canary, only for a slot.
        (CANARY_ME, [_m("ring/d", Phase.PENDING, True)], ONE, True, Reason.UPGRADING, None),
        (CANARY_ME, [_m("ring/d", Phase.UPGRADING, True)], ONE, False, Reason.PENDING, "slot"),
    ],
)
def test_may_start(
    me: Member,
    fleet: list[Member],
    policy: Policy,
    start: bool,
    reason: Reason,
    says: str | None,
) -> None:
    verdict = may_start(me, fleet, policy)
    assert verdict.start is start
    assert verdict.reason is reason
    if says is not None:
        assert says in verdict.message
    # Only a stack of its own namespace is ever named.
    assert "ring" not in verdict.message and "other/" not in verdict.message
    # A pause is named, in pausedBy too, only when its stack is of this namespace.
    named = reason is Reason.PAUSED and says is not None and says.startswith("team/")
    assert verdict.paused_by == (says if named else None)


@pytest.mark.parametrize(
    ("failed", "me", "paused"),
    [
        # Its own namespace: the team's other upgrades, whatever they want.
        (_m("a", Phase.FAILED), ME, True),
        (_m("a", Phase.FAILED, wants=OTHER), ME, True),
        # Another team's: never.
        (_m("other/a", Phase.FAILED), ME, False),
        # A canary's: everyone's, canaries of other namespaces too.
        (_m("ring/c", Phase.FAILED, True), ME, True),
        (_m("ring2/c", Phase.FAILED, True), CANARY_ME, True),
        # Not failed (or resumed past): nothing.
        (_m("a", Phase.RESUMED), ME, False),
        (_m("ring/c", Phase.UPGRADING, True), ME, False),
    ],
)
def test_the_scope_of_a_pause(failed: Member, me: Member, paused: bool) -> None:
    assert pauses(failed, me) is paused


@pytest.mark.parametrize(
    ("canary", "me", "held"),
    [
        # Waiting for the same version of the same component.
        (_m("ring/c", Phase.PENDING, True), ME, NEW),
        (_m("ring/c", Phase.UP_TO_DATE, True), ME, NEW),
        # Upgrading to it (its installed versions may already say so).
        (_m("ring/c", Phase.UPGRADING, True, frozenset()), ME, NEW),
        # Another version, or nothing left to do.
        (_m("ring/c", Phase.PENDING, True, OTHER), ME, frozenset()),
        (_m("ring/c", Phase.UP_TO_DATE, True, frozenset()), ME, frozenset()),
        # Failed pauses (see pauses) rather than holds; a canary holds back no canary.
        (_m("ring/c", Phase.FAILED, True), ME, frozenset()),
        (_m("ring/c", Phase.PENDING, True), CANARY_ME, frozenset()),
        # A stack that is not a canary holds back nobody.
        (_m("b", Phase.PENDING), ME, frozenset()),
    ],
)
def test_what_a_canary_holds_back(
    canary: Member, me: Member, held: frozenset[tuple[str, str]]
) -> None:
    assert holds_back(canary, me) == held


@pytest.mark.parametrize(
    ("namespaces", "key", "canary"),
    [
        (frozenset(), "ring/a", False),
        (frozenset({"ring"}), "ring/a", True),
        (frozenset({"ring"}), "ringer/a", False),
        (frozenset({"ring", "team"}), "team/a", True),
    ],
)
def test_a_canary_is_a_stack_of_a_canary_namespace(
    namespaces: frozenset[str], key: str, canary: bool
) -> None:
    assert Policy(canary_namespaces=namespaces).canary(key) is canary


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
    ("phase", "current", "waits", "ok", "reason"),
    [
        (Phase.UP_TO_DATE, True, Reason.PENDING, True, Reason.UP_TO_DATE),
        (Phase.UP_TO_DATE, False, Reason.PENDING, False, Reason.INSTALLING),
        (Phase.PENDING, False, Reason.PENDING, False, Reason.PENDING),
        (Phase.PENDING, False, Reason.PAUSED, False, Reason.PAUSED),
        (Phase.PENDING, False, Reason.IMAGE_NOT_IN_MIRROR, False, Reason.IMAGE_NOT_IN_MIRROR),
        (Phase.UPGRADING, False, Reason.PENDING, False, Reason.UPGRADING),
        (Phase.FAILED, False, Reason.PENDING, False, Reason.FAILED),
        (Phase.RESUMED, False, Reason.PENDING, False, Reason.FAILED),
    ],
)
def test_condition_of(phase: Phase, current: bool, waits: Reason, ok: bool, reason: Reason) -> None:
    assert condition_of(phase, current, waits) == (ok, reason)


GO = Verdict(start=True, reason=Reason.UPGRADING)
SLOT = Verdict(start=False, message="waiting for a slot: at most 1 upgrade(s) at once")
LACKS = mirror_images.Verdict(
    True, BlockedReason.IMAGE_NOT_IN_MIRROR, "the image mirror lacks m/a:v2; copy it in"
)
SILENT = mirror_images.Verdict(
    True, BlockedReason.MIRROR_UNREACHABLE, "the image mirror could not be asked"
)
UNCHECKED = mirror_images.Verdict(False, BlockedReason.MIRROR_UNREACHABLE, "goes on unchecked")


@pytest.mark.parametrize(
    ("verdict", "mirror", "start", "reason", "says"),
    [
        # Let go, and the mirror holds every image (or there was none to ask about).
        (GO, mirror_images.Verdict(False), True, Reason.UPGRADING, ""),
        (GO, None, True, Reason.UPGRADING, ""),
        # Let go, and the mirror lacks an image: it waits, its slot free, naming it.
        (GO, LACKS, False, Reason.IMAGE_NOT_IN_MIRROR, "before the upgrade starts: "
         "the image mirror lacks m/a:v2"),
        # Not asked (--mirror-preflight=require): it waits.
        (GO, SILENT, False, Reason.MIRROR_UNREACHABLE, "could not be asked"),
        # Not asked (warn): said by event, let go.
        (GO, UNCHECKED, True, Reason.UPGRADING, ""),
        # Waiting anyway: its own reason stands.
        (SLOT, LACKS, False, Reason.PENDING, "a slot"),
    ],
)  # fmt: skip
def test_the_mirror_holds_an_upgrade_before_it_starts(
    verdict: Verdict,
    mirror: mirror_images.Verdict | None,
    start: bool,
    reason: Reason,
    says: str,
) -> None:
    said = with_mirror(verdict, mirror)
    assert (said.start, said.reason) == (start, reason)
    assert says in said.message


def test_behind_is_a_change_of_an_installed_version_never_a_first_install() -> None:
    assert behind({"a": "2"}, {"a": "1"})
    assert upgrades({"a": "2", "b": "1", "c": "4"}, {"a": "1", "b": "1"}) == {("a", "2")}
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


@pytest.mark.parametrize(
    ("free", "woken"),
    [
        # Canaries first, then the longest waiting: not ``team/a`` by its name.
        (1, ["ring/z"]),
        (2, ["ring/z", "team/b"]),
        (3, ["ring/z", "team/b", "team/a"]),
        (0, []),
        (-1, []),
    ],
)
def test_a_freed_slot_wakes_only_as_many_as_could_take_one_first_come(
    free: int, woken: list[str]
) -> None:
    pending = [_m("b", Phase.PENDING), _m("ring/z", Phase.PENDING, True), _m("a", Phase.PENDING)]
    since = {"team/b": (T0, 5), "ring/z": (T0 + timedelta(hours=1), 9), "team/a": (T0, 7)}
    assert next_up(pending, free, since) == woken


@pytest.mark.parametrize(
    ("conditions", "since"),
    [
        ([], None),
        (
            [
                {
                    "type": "UpToDate",
                    "reason": "UpgradePending",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
            T0,
        ),
        (
            [
                {
                    "type": "UpToDate",
                    "reason": "RolloutPaused",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
            T0,
        ),
        # Held by the mirror before its turn: waiting all the same.
        (
            [
                {
                    "type": "UpToDate",
                    "reason": "ImageNotInMirror",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
            T0,
        ),
        # Not waiting: upgrading, done, or a condition of another type.
        (
            [
                {
                    "type": "UpToDate",
                    "reason": "Upgrading",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
            None,
        ),
        (
            [
                {
                    "type": "Ready",
                    "reason": "UpgradePending",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
            None,
        ),
        ([{"type": "UpToDate", "reason": "UpgradePending", "lastTransitionTime": "soon"}], None),
        (["junk"], None),
    ],
)
def test_waiting_since_from_status(conditions: list[Any], since: datetime | None) -> None:
    assert waiting_since({"conditions": conditions}) == since
