"""When a stack may start an upgrade: the fleet's staged rollout, as pure decisions.

An upgrade is a change of a stack's installed versions, from a spec edit or
from new default pins after an operator upgrade; a first install is not one.
Each stack's place in the rollout is kept in its own status on the hub (the
``UpToDate`` condition and ``status.rollout``), so the fleet's state is what
the stacks' statuses say, and a restarted operator, or a new leader, reads
it back from there: there is no other object to lose or to keep in step.

The rules: at most ``max_concurrent`` stacks upgrade at once, and the ones
that waited longest are woken first. The canaries, the stacks of the hub
namespaces the hub admin names (never a label the stack's owner sets), go
first: a stack that is not one waits while any canary that wants one of the
upgrades it wants has not finished it. A failed upgrade (a failed action, or
not Ready within the timeout) pauses the upgrades of its own hub namespace
(its team's), and a failed canary's pauses the whole shard, since a canary
is there to try an upgrade for everyone; either until the stack is Ready
again or a person resumes past it (an annotation on it). Nothing a waiting
stack says names a stack of another namespace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from modelplane.api.spec import ServingStackSpec
from modelplane.catalog.components import BY_NAME, installed_for
from modelplane.catalog.types import DisruptionClass
from modelplane.pins import ComponentsMode
from modelplane.plan import mirror_images
from modelplane.plan.model import Plan
from modelplane.untrusted import timestamp
from modelplane.vocabulary import BlockedReason, ConditionType, UpToDateReason

UP_TO_DATE = ConditionType.UP_TO_DATE
# The UpToDate condition's reasons, by their short name here.
Reason = UpToDateReason
# The reasons of a stack that waits for its upgrade to start.
WAITING_REASONS = frozenset(
    {Reason.PENDING, Reason.PAUSED, Reason.IMAGE_NOT_IN_MIRROR, Reason.MIRROR_UNREACHABLE}
)
# Set on the stack that paused the rollout, by a person, to let the rest go on.
RESUME_ANNOTATION = "modelplane.ai/resume-rollout"


class Phase(StrEnum):
    """A stack's place in the rollout, as ``status.rollout.phase`` keeps it."""

    UP_TO_DATE = "UpToDate"
    # Behind, and not let go yet (a slot, the canaries, or a pause).
    PENDING = "Pending"
    UPGRADING = "Upgrading"
    # Its upgrade failed or was not Ready in time: the rollout is paused by it.
    FAILED = "Failed"
    # Failed, and a person resumed the rollout past it: it no longer pauses
    # the rest, nor holds a slot, and keeps retrying its upgrade.
    RESUMED = "Resumed"


@dataclass(frozen=True)
class Policy:
    """The fleet-wide rollout policy, as ``modelplane run`` was given it."""

    max_concurrent: int = 1
    # The hub namespaces whose stacks are canaries (--canary-namespace): the
    # hub admin's choice, where a label would be the stack owner's.
    canary_namespaces: frozenset[str] = frozenset()
    ready_timeout: timedelta = timedelta(minutes=10)

    def canary(self, key: str) -> bool:
        """Whether the stack ``namespace/name`` is a canary."""
        return namespace_of(key) in self.canary_namespaces


# One upgrade a stack wants: a component, and the version it is to run.
Upgrade = tuple[str, str]


@dataclass(frozen=True)
class Member:
    """One stack as the rollout sees it."""

    key: str  # namespace/name
    phase: Phase
    canary: bool = False
    # The upgrades it is behind on: an installed version differs from these.
    wants: frozenset[Upgrade] = frozenset()
    # Every version it is set to run: what an upgrade in flight moves to.
    aims: frozenset[Upgrade] = frozenset()

    @property
    def behind(self) -> bool:
        return bool(self.wants)

    @property
    def namespace(self) -> str:
        return namespace_of(self.key)

    @property
    def waiting(self) -> bool:
        """Behind and not started: a canary like this has not finished."""
        return self.behind and self.phase in (Phase.UP_TO_DATE, Phase.PENDING)


def namespace_of(key: str) -> str:
    return key.partition("/")[0]


@dataclass(frozen=True)
class Verdict:
    """May this stack start its upgrade now, and if not, what it waits for."""

    start: bool
    reason: Reason = Reason.PENDING
    message: str = ""
    # The stack of its own namespace whose failure pauses it; None when the
    # pause is another namespace's (a canary's), which it does not name.
    paused_by: str | None = None


def next_up(pending: Iterable[Member], free: int, since: Mapping[str, Any]) -> list[str]:
    """The waiting stacks to wake when ``free`` slots open: canaries first, then FIFO.

    ``since``: an orderable mark of when each began to wait. Only as many as
    could start, not the whole fleet: each one woken is a reconcile. The rest
    look again at their own resync, or at the next slot. Not by name: a
    stack named ``a-...`` would otherwise always jump the queue.
    """
    ranked = sorted(pending, key=lambda m: (not m.canary, since[m.key], m.key))
    return [m.key for m in ranked[: max(free, 0)]]


def pauses(failed: Member, me: Member) -> bool:
    """Whether ``failed``'s failed upgrade pauses ``me``'s.

    Within its own hub namespace: a team's failure says nothing of another
    team's stacks, and only the team (or the hub admin) can resume past it.
    A canary's, everywhere: the hub admin chose it to try upgrades for all.
    """
    return failed.phase is Phase.FAILED and (failed.canary or failed.namespace == me.namespace)


def holds_back(canary: Member, me: Member) -> frozenset[Upgrade]:
    """The upgrades ``me`` wants that ``canary`` wants too and has not finished."""
    if me.canary or not canary.canary:
        return frozenset()
    if canary.phase is Phase.UPGRADING:
        return me.wants & canary.aims
    if canary.waiting:
        return me.wants & canary.wants
    return frozenset()


def may_start(me: Member, fleet: Iterable[Member], policy: Policy) -> Verdict:
    """Whether ``me``, behind and not upgrading yet, may start its upgrade now.

    ``fleet`` must hold every stack that wants an upgrade (the canaries read
    afresh, see operator.rollout), not only the ones seen so far.
    """
    others = [m for m in fleet if m.key != me.key]
    failed = [m for m in others if pauses(m, me)]
    if failed:
        return _paused(me, failed)
    upgrading = sum(m.phase is Phase.UPGRADING for m in others)
    if upgrading >= policy.max_concurrent:
        return Verdict(
            start=False,
            # Not naming who holds the slots: the message would change with
            # every upgrade of the fleet, and so would every waiting status.
            message=f"waiting for a slot: at most {policy.max_concurrent} upgrade(s) at once",
        )
    ahead = [m for m in others if holds_back(m, me)]
    if ahead:
        return Verdict(
            start=False,
            message=f"waiting for {len(ahead)} canary upgrade(s) elsewhere to finish first",
        )
    return Verdict(start=True, reason=Reason.UPGRADING)


# What a mirror verdict that holds an upgrade makes of its UpToDate reason.
_MIRROR_REASONS = {
    BlockedReason.IMAGE_NOT_IN_MIRROR: Reason.IMAGE_NOT_IN_MIRROR,
    BlockedReason.MIRROR_UNREACHABLE: Reason.MIRROR_UNREACHABLE,
}


def with_mirror(verdict: Verdict, mirror: mirror_images.Verdict | None) -> Verdict:
    """A stack let go waits instead while the mirror holds an image its upgrade runs back.

    Asked before the upgrade takes a slot, not at its first helm run: there,
    the missing image would fail the upgrade and pause the rollout of the
    namespace at the first cluster, with the slot taken. Every stack that
    wants the same upgrade meets the same answer (the answers are shared),
    so the rollout of that upgrade waits before any cluster until the image
    is copied in; a canary held so holds its followers back as a waiting
    canary does. A stack that waits anyway keeps its own reason.
    """
    if not verdict.start or mirror is None or not mirror.hold or mirror.reason is None:
        return verdict
    return Verdict(
        start=False,
        reason=_MIRROR_REASONS.get(mirror.reason, Reason.PENDING),
        message=f"waiting before the upgrade starts: {mirror.message}",
    )


def _paused(me: Member, failed: list[Member]) -> Verdict:
    mine = sorted(m.key for m in failed if m.namespace == me.namespace)
    if mine:
        return Verdict(
            start=False,
            reason=Reason.PAUSED,
            message=f"the rollout of this namespace is paused by {mine[0]}, whose upgrade "
            f"failed: it goes on once that stack is Ready again, or once "
            f"{RESUME_ANNOTATION} is set on it",
            paused_by=mine[0],
        )
    return Verdict(
        start=False,
        reason=Reason.PAUSED,
        message=f"the rollout is paused by {len(failed)} failed canary upgrade(s) elsewhere: "
        "it goes on once they are Ready again, or once the hub admin resumes past them",
    )


@dataclass(frozen=True)
class Progress:
    """What one reconcile of a stack at its desired versions says of its upgrade."""

    behind: bool  # some component still has work at its desired version
    ready: bool  # the Ready condition is True
    failed: str | None = None  # a failed action (not a wait), or None


def after_upgrade(
    phase: Phase, progress: Progress, started: datetime | None, now: datetime, policy: Policy
) -> tuple[Phase, str]:
    """The phase after one reconcile of an upgrading (or failed) stack, and why."""
    if progress.ready and not progress.behind:
        return Phase.UP_TO_DATE, "every component runs its desired version"
    if phase is Phase.RESUMED:
        return phase, "its upgrade failed and the rollout was resumed past it; it is retried"
    if progress.failed is not None:
        return Phase.FAILED, f"the upgrade failed: {progress.failed}"
    if phase is Phase.FAILED:
        return phase, "the upgrade failed, and the stack is not Ready yet; it is retried"
    if started is not None and now - started > policy.ready_timeout:
        return Phase.FAILED, (
            f"not Ready within {_seconds(policy.ready_timeout)} of the upgrade's start"
        )
    return Phase.UPGRADING, "upgrading to the desired versions"


def _seconds(delta: timedelta) -> str:
    return f"{delta.total_seconds():g}s"


def condition_of(
    phase: Phase, current: bool, waits: Reason = Reason.PENDING
) -> tuple[bool, Reason]:
    """``UpToDate``'s status and reason; ``current``: every component runs its desired version.

    ``waits``: what a pending stack waits for, as its turn's verdict said.
    """
    if phase is Phase.UP_TO_DATE:
        return (True, Reason.UP_TO_DATE) if current else (False, Reason.INSTALLING)
    if phase is Phase.UPGRADING:
        return False, Reason.UPGRADING
    if phase in (Phase.FAILED, Phase.RESUMED):
        return False, Reason.FAILED
    return False, waits


def behind(desired: Mapping[str, str], installed: Mapping[str, str | None]) -> bool:
    """Whether an installed component runs another version than its desired one."""
    return bool(upgrades(desired, installed))


def upgrades(desired: Mapping[str, str], installed: Mapping[str, str | None]) -> frozenset[Upgrade]:
    """The upgrades a stack wants: each installed component at another version than desired.

    A component never installed (a first install, a component just enabled)
    is not behind: installing it is not an upgrade.
    """
    return frozenset(
        (name, version)
        for name, version in desired.items()
        if installed.get(name) is not None and installed[name] != version
    )


def installed_after(
    plan: Plan, failures: Mapping[str, str], before: Mapping[str, str | None]
) -> dict[str, str | None]:
    """What each component runs after a reconcile of ``plan``.

    A component with no work left and no failure runs the version it was
    planned at (held or desired); any other still runs what it ran before.
    """
    busy = plan.components_with_work | set(failures)
    return {
        c.name: before.get(c.name) if c.name in busy else (c.held_at or c.version)
        for c in plan.components
        if c.mode != str(ComponentsMode.PROVIDED)
    }


def held_versions(
    desired: Mapping[str, str], installed: Mapping[str, str | None]
) -> dict[str, str]:
    """The versions a waiting stack is reconciled at: its installed ones where it has them."""
    return {
        name: kept
        for name in desired
        if (kept := installed.get(name)) is not None and kept != desired[name]
    }


def installed_versions(status: Mapping[str, Any] | None) -> dict[str, str | None]:
    """The installed version of each component, as the stack's last status says.

    ``installedVersion`` where the status has it; a status written before
    it existed names only ``version``, which was the installed one once its
    component was Ready, so an operator upgrade finds the fleet's versions.
    """
    out: dict[str, str | None] = {}
    for entry in (status or {}).get("components") or []:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        if entry.get("mode") == "Provided":
            continue
        installed = entry.get("installedVersion")
        if (
            installed is None
            and "installedVersion" not in entry
            and entry.get("state")
            in (
                "Ready",
                "Healthy",
            )
        ):
            installed = entry.get("version")
        out[entry["name"]] = str(installed) if installed is not None else None
    return out


def phase_of(status: Mapping[str, Any] | None) -> Phase:
    """The phase the stack's status records; UpToDate when it records none."""
    rollout = (status or {}).get("rollout") or {}
    try:
        return Phase(rollout.get("phase", Phase.UP_TO_DATE))
    except ValueError:
        return Phase.UP_TO_DATE


def started_at(status: Mapping[str, Any] | None) -> datetime | None:
    """When the stack's upgrade started, as its status records it."""
    return timestamp(((status or {}).get("rollout") or {}).get("startedAt"))


def waiting_since(status: Mapping[str, Any] | None) -> datetime | None:
    """Since when the stack waits for its upgrade, as its status records it; else None.

    ``UpToDate`` turned False when it began to wait, and stays False while it
    does, so its transition time is when it joined the queue: a restarted
    operator keeps the order the last one had.
    """
    for entry in (status or {}).get("conditions") or []:
        if (
            isinstance(entry, Mapping)
            and entry.get("type") == UP_TO_DATE
            and entry.get("reason") in WAITING_REASONS
        ):
            return timestamp(entry.get("lastTransitionTime"))
    return None


def desired_versions(spec: ServingStackSpec) -> dict[str, str]:
    """The version each component the product installs should run, from spec and defaults."""
    return {c.name: c.version_for(spec) for c in installed_for(spec)}


def disrupted(upgrades: Iterable[Upgrade]) -> list[DisruptionClass]:
    """The disruption classes the upgrades touch, each once, the most disruptive first.

    Every part of each component upgraded (catalog ``Component.disruptions``):
    what ``status.rollout.disruption`` says.
    """
    kinds = {d.kind for name, _ in upgrades if name in BY_NAME for d in BY_NAME[name].disruptions}
    return sorted(kinds, key=lambda k: k.rank)


def upgrade_said(name: str, installed: str | None, desired: str) -> str:
    """One upgrade for the ``UpToDate`` message: its versions and what it disrupts."""
    known = BY_NAME.get(name)
    said = f"{name} {installed} -> {desired}"
    return f"{said} ({known.disrupts})" if known is not None else said
