"""The staged rollout of upgrades, carried out: what the fleet's stacks say, and each turn.

The decisions are ``plan.rollout``'s. This keeps what they are made from:
each stack's place in the rollout, as its status on the hub says it (kept
fresh by the ServingStack watch, so a restarted operator or a new leader
starts from there), overlaid with what this process decided since, which
the watch has not brought back yet. A stack's turn is decided and recorded
with no await in between, so two stacks of this process never both take the
last slot.

The watch alone cannot say which canaries want an upgrade: kopf hands each
stack's events to a worker task of its own, so stacks edited one after the
other reach this view in any order, and a stack's reconcile starts as soon
as its own edit arrives. A stack edited after a canary could take the slot
before the canary's edit was seen (its status said UpToDate, so it held
nothing back), and went first. So a stack that is not a canary reads the
canaries afresh from the hub (``Canaries``) before it takes a slot: that
read holds every edit made before its own, whatever the watch has shown.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from modelplane.actions.registry import NOT_FOUND_SECONDS
from modelplane.api.models import ServingStack
from modelplane.operator.status import READY, Outcome, condition
from modelplane.plan import mirror_images, rollout
from modelplane.plan.rollout import Member, Phase, Policy

log = logging.getLogger("modelplane.operator")


@dataclass(frozen=True)
class Turn:
    """One reconcile's place in the rollout: what it plans at, and what it says."""

    phase: Phase
    desired: dict[str, str]
    installed: dict[str, str | None]
    # Component -> the installed version it is reconciled at instead.
    held: dict[str, str] = field(default_factory=dict)
    started: datetime | None = None
    message: str = ""
    # Held by a failed upgrade; ``paused_by`` names it when it is of this namespace.
    paused: bool = False
    paused_by: str | None = None
    # The resume annotation was taken: the caller removes it.
    resumed: bool = False
    canary: bool = False
    # What a pending stack waits for: UpToDate's reason.
    waits: rollout.Reason = rollout.Reason.PENDING
    # Seconds until its turn is worth deciding again for its own sake: held
    # by the mirror, when the mirror's answer is asked afresh; else never.
    retry_in: float = float("inf")


@dataclass(frozen=True)
class Canaries:
    """The canary stacks as the hub has them now (one LIST), or why they could not be read."""

    bodies: tuple[Mapping[str, Any], ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class MirrorAnswer:
    """The image mirror's say on the images a stack's upgrade would run, asked before its turn.

    ``verdict`` None: nothing to hold it for (no image to ask about, or the
    stack was let go without asking). ``error``: why it could not be asked.
    """

    verdict: mirror_images.Verdict | None = None
    error: str | None = None


# Asked again after the registry's answer that an image is missing expires.
MIRROR_RETRY_SECONDS = NOT_FOUND_SECONDS


def _key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _spec_versions(body: Mapping[str, Any]) -> dict[str, str]:
    try:
        stack = ServingStack.model_validate(
            {k: body[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in body}
        )
    except ValidationError:
        # Ready says what is wrong with it; the rollout holds nothing of it.
        return {}
    return rollout.desired_versions(stack.spec)


def member_of(body: Mapping[str, Any], policy: Policy) -> Member:
    """A stack as the rollout sees it, from its stored spec and status alone."""
    status = body.get("status") or {}
    desired = _spec_versions(body)
    return Member(
        key=_key(body),
        phase=rollout.phase_of(status),
        canary=policy.canary(_key(body)),
        wants=rollout.upgrades(desired, rollout.installed_versions(status)),
        aims=frozenset(desired.items()),
    )


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class Rollout:
    """The fleet's rollout, as this operator (one shard's leader) carries it out."""

    policy: Policy
    # Whether a stack's upgrade images are looked up in the mirror before its
    # turn (a mirror preflight runs): none starts without the mirror's say.
    asks_mirror: bool = False
    # From the hub, by the watch: every stack of the shard.
    seen: dict[str, Member] = field(default_factory=dict)
    # What this process decided since; it wins over the watch's copy.
    local: dict[str, Member] = field(default_factory=dict)
    wakers: dict[str, Callable[[], None]] = field(default_factory=dict)
    # When each upgrading stack of this process started its upgrade.
    started: dict[str, datetime] = field(default_factory=dict)
    # Each waiting stack's place in the queue: when it began to wait, then
    # the order this process saw it in. A freed slot goes to the first.
    queued: dict[str, tuple[datetime, int]] = field(default_factory=dict)
    clock: Callable[[], datetime] = _utcnow
    # ``fleet()`` kept up to date one stack at a time, and the keys of its
    # stacks by phase: every stack's first reconcile and status event asks
    # who waits and how many upgrade, and rebuilding the fleet for each
    # made a shard's start quadratic in its stacks (a fifth of its CPU at
    # 2,500 stacks).
    _merged: dict[str, Member] = field(default_factory=dict, init=False)
    _by_phase: dict[Phase, set[str]] = field(default_factory=dict, init=False)
    _arrivals: Iterator[int] = field(default_factory=itertools.count, init=False)

    def observe(self, body: Mapping[str, Any]) -> None:
        key = _key(body)
        member = member_of(body, self.policy)
        before = self.seen.get(key)
        if before != member:
            self.seen[key] = member
            self._merge(key, rollout.waiting_since(body.get("status")))
            self._wake_waiting(before, member)

    def forget(self, key: str) -> None:
        """A stack gone from the shard: its slot, or its pause, goes with it."""
        self.seen.pop(key, None)
        left = self.local.pop(key, None)
        self.wakers.pop(key, None)
        self.started.pop(key, None)
        self._merge(key)
        if left is not None:
            self._wake_waiting(left, None)

    def fleet(self) -> list[Member]:
        """Every stack: this process's phase where it has one, behind by either account.

        The watch's copy carries the newest spec (a canary's edit that its
        own daemon has not reconciled yet); this process's, the newest
        decision. Behind by either is behind: the safe side, for as long as
        the watch lags.
        """
        return list(self._merged.values())

    def _merge(self, key: str, since: datetime | None = None) -> None:
        """Bring ``key``'s entry of the fleet in line with ``seen`` and ``local``.

        ``since``: when its status says it began to wait, for its place in the queue.
        """
        seen, mine = self.seen.get(key), self.local.get(key)
        member = _overlay(mine, seen) if mine is not None and seen is not None else mine or seen
        old = self._merged.pop(key, None)
        if old is not None:
            self._by_phase[old.phase].discard(key)
        if member is not None:
            self._merged[key] = member
            self._by_phase.setdefault(member.phase, set()).add(key)
        if member is None or not member.waiting:
            self.queued.pop(key, None)
        elif key not in self.queued:
            self.queued[key] = (since or self.clock(), next(self._arrivals))

    def _in_phase(self, phase: Phase) -> set[str]:
        return self._by_phase.get(phase, set())

    def needs_canaries(self, body: Mapping[str, Any], now: datetime) -> bool:
        """Whether the canaries must be read afresh before this stack's turn.

        So for a stack that is not a canary and would take a slot on what
        this process has seen; never for one that waits anyway (waiting is
        the safe side), so a LIST is made about once per upgrade.
        """
        if not self.policy.canary_namespaces or self.policy.canary(_key(body)):
            return False
        return self._starts(body, now, Canaries())

    def needs_mirror(
        self, body: Mapping[str, Any], now: datetime, canaries: Canaries | None
    ) -> bool:
        """Whether the mirror must be asked about the stack's upgrade images before its turn.

        So for a stack that would take a slot now, the canaries as read:
        once an upgrade starts, its images are the release preflight's.
        """
        return self.asks_mirror and self._starts(body, now, canaries)

    def _starts(self, body: Mapping[str, Any], now: datetime, canaries: Canaries | None) -> bool:
        """Whether the stack would start its upgrade now, the mirror aside."""
        return self._turn(body, now, canaries, MirrorAnswer()).phase is Phase.UPGRADING and (
            self._phase_before(body) is not Phase.UPGRADING
        )

    def begin(
        self,
        body: Mapping[str, Any],
        now: datetime,
        canaries: Canaries | None = None,
        mirror: MirrorAnswer | None = None,
    ) -> Turn:
        """Where the stack stands before its reconcile, and the versions to plan at.

        ``canaries``: the canary stacks as just read from the hub, when
        ``needs_canaries`` said so; a stack that is not a canary starts no
        upgrade without them. ``mirror``: the mirror's say on its upgrade's
        images, when ``needs_mirror`` said so; with ``asks_mirror``, no
        upgrade starts without it.
        """
        key = _key(body)
        turn = self._turn(body, now, canaries, mirror)
        if turn.resumed:
            log.info("ServingStack %s: the rollout is resumed past its failed upgrade", key)
        if turn.phase is Phase.UPGRADING and self._phase_before(body) is not Phase.UPGRADING:
            log.info("ServingStack %s: its upgrade starts", key)
        wants = rollout.upgrades(turn.desired, turn.installed)
        member = Member(key, turn.phase, turn.canary, wants, frozenset(turn.desired.items()))
        self._record(key, member, self.local.get(key))
        if turn.phase is Phase.UPGRADING and turn.started is not None:
            self.started[key] = turn.started
        else:
            self.started.pop(key, None)
        return turn

    def _phase_before(self, body: Mapping[str, Any]) -> Phase:
        mine = self.local.get(_key(body))
        return mine.phase if mine is not None else rollout.phase_of(body.get("status"))

    def _turn(
        self,
        body: Mapping[str, Any],
        now: datetime,
        canaries: Canaries | None,
        mirror: MirrorAnswer | None,
    ) -> Turn:
        """The stack's turn, decided on the fleet, ``canaries`` and ``mirror``; nothing recorded."""
        key = _key(body)
        status = body.get("status") or {}
        desired = _spec_versions(body)
        installed = rollout.installed_versions(status)
        canary = self.policy.canary(key)
        phase = self._phase_before(body)
        # This process's own record first: the status in hand may predate it.
        started = self.started.get(key) or rollout.started_at(status)
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        resumed = phase is Phase.FAILED and rollout.RESUME_ANNOTATION in annotations
        if resumed:
            phase = Phase.RESUMED
        if phase in (Phase.UPGRADING, Phase.FAILED, Phase.RESUMED):
            # At its desired versions, until after_upgrade says it is done.
            return Turn(phase, desired, installed, started=started, resumed=resumed, canary=canary)
        wants = rollout.upgrades(desired, installed)
        if not wants:
            return Turn(Phase.UP_TO_DATE, desired, installed, canary=canary)
        me = Member(key, Phase.PENDING, canary, wants, frozenset(desired.items()))
        verdict = rollout.may_start(me, self._with(canaries), self.policy)
        if verdict.start and not canary and self.policy.canary_namespaces:
            verdict = _unless_unread(canaries) or verdict
        # Let go by the rollout, held by the mirror alone: asked again soon.
        by_mirror = verdict.start and self.asks_mirror
        if by_mirror:
            verdict = _mirror_said(verdict, mirror)
        if verdict.start:
            return Turn(Phase.UPGRADING, desired, installed, started=now, canary=canary)
        return Turn(
            Phase.PENDING,
            desired,
            installed,
            held=rollout.held_versions(desired, installed),
            message=verdict.message,
            paused=verdict.reason is rollout.Reason.PAUSED,
            paused_by=verdict.paused_by,
            canary=canary,
            waits=verdict.reason,
            retry_in=MIRROR_RETRY_SECONDS if by_mirror else float("inf"),
        )

    def _with(self, canaries: Canaries | None) -> list[Member]:
        """The fleet, each canary read afresh wanting what either account says it wants.

        The phase stays this process's (it writes every phase); what a canary
        wants comes from its spec, which its owner edits, so the newer read
        adds to it. A canary the watch has not shown at all is taken as read.
        """
        if canaries is None or not canaries.bodies:
            return self.fleet()
        fresh = {m.key: m for m in (member_of(b, self.policy) for b in canaries.bodies)}
        out = [
            m if m.key not in fresh else _overlay(m, fresh.pop(m.key))
            for m in self._merged.values()
        ]
        return [*out, *fresh.values()]

    def starting(self, body: Mapping[str, Any], turn: Turn) -> dict[str, Any] | None:
        """The status that records an upgrade's start, written before helm runs; else None.

        On the hub before the upgrade acts, the slot is held across a restart
        or a leader change in the middle of it, and ``kubectl get ss`` shows
        the stack upgrading while it does.
        """
        status = body.get("status") or {}
        if turn.phase is not Phase.UPGRADING or rollout.phase_of(status) is Phase.UPGRADING:
            return None
        generation = status.get("observedGeneration")
        said = _message(_key(body), turn.phase, turn.message, turn, turn.installed)
        kept = [
            c
            for c in status.get("conditions") or []
            if isinstance(c, Mapping) and c.get("type") != rollout.UP_TO_DATE
        ]
        return {
            "conditions": [
                *kept,
                condition(rollout.UP_TO_DATE, False, rollout.Reason.UPGRADING, said, generation),
            ],
            "rollout": _rollout_status(
                status.get("rollout"),
                {
                    "phase": str(Phase.UPGRADING),
                    "startedAt": _stamp(turn.started),
                    "pausedBy": None,
                    "disruption": _disruption(rollout.upgrades(turn.desired, turn.installed)),
                },
            ),
        }

    def judge_in(self, key: str, now: datetime) -> float:
        """Seconds until an upgrading stack's Ready timeout ends; inf for any other."""
        member, started = self.local.get(key), self.started.get(key)
        if member is None or member.phase is not Phase.UPGRADING or started is None:
            return float("inf")
        left = (started + self.policy.ready_timeout - now).total_seconds()
        return max(left, 0.0) + 0.5

    def finish(
        self, body: Mapping[str, Any], turn: Turn, outcome: Outcome, status: dict[str, Any],
        now: datetime,
    ) -> dict[str, Any]:  # fmt: skip
        """``status`` with the rollout's part: installed versions, UpToDate, status.rollout."""
        key = _key(body)
        installed = turn.installed
        if outcome.plan is not None:
            installed = rollout.installed_after(outcome.plan, outcome.failures, turn.installed)
        current = all(installed.get(n) == v for n, v in turn.desired.items())
        phase, message = turn.phase, turn.message
        if phase in (Phase.UPGRADING, Phase.FAILED, Phase.RESUMED):
            ready = any(c["type"] == READY and c["status"] == "True" for c in status["conditions"])
            failed = next(
                (
                    m
                    for name, m in sorted(outcome.failures.items())
                    if name not in outcome.waiting_on_webhook
                ),
                None,
            )
            progress = rollout.Progress(behind=not current, ready=ready, failed=failed)
            phase, message = rollout.after_upgrade(phase, progress, turn.started, now, self.policy)
            if phase is Phase.FAILED and turn.phase is not Phase.FAILED:
                log.warning("ServingStack %s: its upgrade failed, pausing the rollout", key)
        wants = rollout.upgrades(turn.desired, installed)
        member = Member(key, phase, turn.canary, wants, frozenset(turn.desired.items()))
        self._record(key, member, self.local.get(key))
        ok, reason = rollout.condition_of(phase, current, turn.waits)
        generation = status.get("observedGeneration")
        status = dict(status)
        said = _message(key, phase, message, turn, installed)
        status["conditions"] = [
            *status["conditions"],
            condition(rollout.UP_TO_DATE, ok, reason, said, generation),
        ]
        if "components" in status:
            # Left out rather than null where nothing is installed: the hub
            # drops a null, and a status that differs from the stored one by
            # it would be written again on every resync.
            status["components"] = [
                {**c, "installedVersion": installed[c["name"]]}
                if installed.get(c["name"]) is not None
                else c
                for c in status["components"]
            ]
        status["rollout"] = _rollout_status(
            (body.get("status") or {}).get("rollout"),
            {
                "phase": str(phase),
                "startedAt": _stamp(turn.started) if phase is not Phase.UP_TO_DATE else None,
                "pausedBy": turn.paused_by if phase is Phase.PENDING else None,
                "disruption": _disruption(wants) if phase is not Phase.UP_TO_DATE else None,
            },
        )
        return status

    def _record(self, key: str, member: Member, before: Member | None) -> None:
        self.local[key] = member
        self._merge(key)
        if before is None or before.phase is not member.phase:
            self._wake_waiting(before, member)

    def _wake_waiting(self, before: Member | None, after: Member | None) -> None:
        """Wake the waiting stacks a change of one stack's place concerns.

        A pause set or lifted changes what every waiting stack it pauses
        says: all of those look again. A slot freed (or a canary done) is
        for as many as could take one, the longest waiting first.
        """
        was = before is not None and before.phase is Phase.FAILED
        now = after is not None and after.phase is Phase.FAILED
        changed = after or before
        if changed is None:
            return
        pending = [
            self._merged[key]
            for key in self._in_phase(Phase.PENDING)
            if key != changed.key and key in self.wakers
        ]
        if not pending:
            return
        if was != now:
            failed = replace(changed, phase=Phase.FAILED)
            chosen = [m.key for m in pending if rollout.pauses(failed, m)]
        else:
            upgrading = len(self._in_phase(Phase.UPGRADING))
            since = {m.key: self.queued.get(m.key, _LAST) for m in pending}
            chosen = rollout.next_up(pending, self.policy.max_concurrent - upgrading, since)
        for key in chosen:
            self.wakers[key]()


# Where a stack this process has no place in the queue for goes: last.
_LAST = (datetime.max.replace(tzinfo=UTC), 0)


def _overlay(mine: Member, other: Member) -> Member:
    """This process's phase; wanting what either account says (the safe side, while one lags)."""
    return replace(mine, wants=mine.wants | other.wants, aims=mine.aims | other.aims)


def _unless_unread(canaries: Canaries | None) -> rollout.Verdict | None:
    """A stack that is not a canary waits, when the canaries were not read afresh."""
    if canaries is None:
        return rollout.Verdict(start=False, message="waiting for the canaries to be read")
    if canaries.error is not None:
        return rollout.Verdict(
            start=False,
            message=f"waiting: the canaries could not be read from the hub ({canaries.error}); "
            "retried at the next reconcile",
        )
    return None


def _mirror_said(verdict: rollout.Verdict, mirror: MirrorAnswer | None) -> rollout.Verdict:
    """A stack let go waits instead until the mirror was asked, and while it holds an image."""
    if mirror is None:
        return rollout.Verdict(
            start=False, message="waiting for the image mirror to be asked about the upgrade"
        )
    if mirror.error is not None:
        return rollout.Verdict(
            start=False,
            message=f"waiting: the upgrade's images could not be looked up ({mirror.error}); "
            "retried at the next reconcile",
        )
    return rollout.with_mirror(verdict, mirror.verdict)


def _message(
    key: str, phase: Phase, message: str, turn: Turn, installed: Mapping[str, str | None]
) -> str:
    behind = [
        f"{name} {installed.get(name)} (desired {version})"
        for name, version in sorted(turn.desired.items())
        if installed.get(name) is not None and installed.get(name) != version
    ]
    if phase is Phase.UP_TO_DATE:
        return message or (
            "every component runs its desired version"
            if not behind and all(installed.get(n) == v for n, v in turn.desired.items())
            else "a first install, not an upgrade: no rollout holds it"
        )
    runs = f"; runs {', '.join(behind)}" if behind else ""
    if phase is Phase.PENDING:
        return f"{message}{runs}"
    if phase is Phase.UPGRADING:
        moving = [
            rollout.upgrade_said(name, installed.get(name), version)
            for name, version in sorted(turn.desired.items())
            if installed.get(name) is not None and installed.get(name) != version
        ]
        return f"upgrading: {', '.join(moving)}" if moving else message
    if phase is Phase.FAILED:
        namespace, _, name = key.partition("/")
        scope = (
            "every upgrade of the shard (it is a canary)"
            if turn.canary
            else f"the upgrades of namespace {namespace}"
        )
        return (
            f"{message}{runs}; this pauses {scope} until the stack is Ready, or "
            f"until `kubectl annotate servingstack {name} -n {namespace} "
            f"{rollout.RESUME_ANNOTATION}=true` resumes it"
        )
    return f"{message}{runs}"


def _disruption(wants: frozenset[rollout.Upgrade]) -> list[str] | None:
    """``status.rollout.disruption`` for the upgrades a stack wants; None (left out) for none."""
    return [str(k) for k in rollout.disrupted(wants)] or None


RolloutField = str | list[str] | None


def _rollout_status(current: Any, wanted: dict[str, RolloutField]) -> dict[str, RolloutField]:
    """``status.rollout`` as a merge patch: null only for what the hub has and must lose.

    A null the hub does not hold would make the status differ from the
    stored one on every resync, and be written each time.
    """
    held = current if isinstance(current, Mapping) else {}
    return {k: v for k, v in wanted.items() if v is not None or held.get(k) is not None}


def _stamp(when: datetime | None) -> str | None:
    if when is None:
        return None
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
