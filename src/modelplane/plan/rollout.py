"""When a stack may start an upgrade: the fleet's staged rollout, as pure decisions.

An upgrade is a change of a stack's installed versions, from a spec edit or
from new default pins after an operator upgrade; a first install is not one.
Each stack's place in the rollout is kept in its own status on the hub (the
``UpToDate`` condition and ``status.rollout``), so the fleet's state is what
the stacks' statuses say, and a restarted operator, or a new leader, reads
it back from there: there is no other object to lose or to keep in step.

The rules: at most ``max_concurrent`` stacks upgrade at once; the canaries
go first and the rest wait until every canary has finished; a stack whose
upgrade fails, or that is not Ready within the timeout, pauses the rollout
until it is Ready again or a person resumes it (an annotation on it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from modelplane.api.spec import ServingStackSpec
from modelplane.catalog.components import installed_for
from modelplane.pins import ComponentsMode
from modelplane.plan.model import Plan

UP_TO_DATE = "UpToDate"
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


class Reason(StrEnum):
    """The ``UpToDate`` condition's reasons."""

    UP_TO_DATE = "UpToDate"
    PENDING = "UpgradePending"
    UPGRADING = "Upgrading"
    PAUSED = "RolloutPaused"
    FAILED = "UpgradeFailed"
    # A first install (or a component just enabled): not an upgrade, never held.
    INSTALLING = "Installing"


@dataclass(frozen=True)
class Policy:
    """The fleet-wide rollout policy, as ``modelplane run`` was given it."""

    max_concurrent: int = 1
    # A canonical label selector (operator.shard.normalize_selector), or None.
    canary_selector: str | None = None
    ready_timeout: timedelta = timedelta(minutes=10)


@dataclass(frozen=True)
class Member:
    """One stack as the rollout sees it."""

    key: str  # namespace/name
    phase: Phase
    canary: bool = False
    # Whether its desired versions differ from its installed ones.
    behind: bool = False

    @property
    def waiting(self) -> bool:
        """Behind and not started: a canary like this has not finished."""
        return self.behind and self.phase in (Phase.UP_TO_DATE, Phase.PENDING)


@dataclass(frozen=True)
class Verdict:
    """May this stack start its upgrade now, and if not, what it waits for."""

    start: bool
    reason: Reason = Reason.PENDING
    message: str = ""
    paused_by: str | None = None


def next_up(pending: Iterable[Member], free: int) -> list[str]:
    """The waiting stacks to wake when ``free`` slots open: canaries first, by name.

    Only as many as could start, not the whole fleet: each one woken is a
    reconcile. The rest look again at their own resync, or at the next slot.
    """
    ranked = sorted(pending, key=lambda m: (not m.canary, m.key))
    return [m.key for m in ranked[: max(free, 0)]]


def may_start(me: Member, fleet: Iterable[Member], policy: Policy) -> Verdict:
    """Whether ``me``, behind and not upgrading yet, may start its upgrade now."""
    others = sorted((m for m in fleet if m.key != me.key), key=lambda m: m.key)
    failed = [m.key for m in others if m.phase is Phase.FAILED]
    if failed:
        return Verdict(
            start=False,
            reason=Reason.PAUSED,
            message=f"the rollout is paused by {failed[0]}, whose upgrade failed: it goes on "
            f"once that stack is Ready again, or once {RESUME_ANNOTATION} is set on it",
            paused_by=failed[0],
        )
    upgrading = [m.key for m in others if m.phase is Phase.UPGRADING]
    if len(upgrading) >= policy.max_concurrent:
        return Verdict(
            start=False,
            # Not naming who holds the slots: the message would change with
            # every upgrade of the fleet, and so would every waiting status.
            message=f"waiting for a slot: at most {policy.max_concurrent} upgrade(s) at once",
        )
    canary_left = any(m.canary and (m.waiting or m.phase is Phase.UPGRADING) for m in others)
    if canary_left and not me.canary:
        return Verdict(
            start=False,
            message=f"waiting for the canaries ({policy.canary_selector}) to finish",
        )
    return Verdict(start=True, reason=Reason.UPGRADING)


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


def condition_of(phase: Phase, current: bool, paused_by: str | None = None) -> tuple[bool, Reason]:
    """``UpToDate``'s status and reason; ``current``: every component runs its desired version."""
    if phase is Phase.UP_TO_DATE:
        return (True, Reason.UP_TO_DATE) if current else (False, Reason.INSTALLING)
    if phase is Phase.UPGRADING:
        return False, Reason.UPGRADING
    if phase in (Phase.FAILED, Phase.RESUMED):
        return False, Reason.FAILED
    return False, Reason.PAUSED if paused_by is not None else Reason.PENDING


def behind(desired: Mapping[str, str], installed: Mapping[str, str | None]) -> bool:
    """Whether an installed component runs another version than its desired one.

    A component never installed (a first install, a component just enabled)
    is not behind: installing it is not an upgrade.
    """
    return any(
        installed.get(name) is not None and installed[name] != version
        for name, version in desired.items()
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
    value = ((status or {}).get("rollout") or {}).get("startedAt")
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


# -- the canary selector, matched against a stack's labels ----------------------

_SET = re.compile(r"^(?P<key>\S+) (?P<op>in|notin) \((?P<values>[^()]*)\)$")
_EQ = re.compile(r"^(?P<key>[^=!]+)(?P<op>!=|=)(?P<value>.*)$")


def selects(selector: str | None, labels: Mapping[str, str]) -> bool:
    """Whether a canonical label selector (operator.shard's form) matches ``labels``."""
    if not selector:
        return False
    return all(_requirement(r, labels) for r in split_selector(selector))


def split_selector(selector: str) -> list[str]:
    """A label selector's requirements: split on the commas that are not inside a value set."""
    parts, depth, current = [], 0, ""
    for char in selector:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


def _requirement(requirement: str, labels: Mapping[str, str]) -> bool:
    if m := _SET.match(requirement):
        values = set(m["values"].split(","))
        inside = m["key"] in labels and labels[m["key"]] in values
        return inside if m["op"] == "in" else not inside
    if m := _EQ.match(requirement):
        equal = labels.get(m["key"]) == m["value"]
        return equal if m["op"] == "=" else not equal
    if requirement.startswith("!"):
        return requirement[1:] not in labels
    return requirement in labels


def desired_versions(spec: ServingStackSpec) -> dict[str, str]:
    """The version each component the product installs should run, from spec and defaults."""
    return {c.name: c.version_for(spec) for c in installed_for(spec)}
