"""The progress of ``modelplane apply`` and ``delete``: one line per component.

Fed from what the reconciler itself produces, never from its log: each
round's plan (``StackReconciler.on_plan``), each reconcile's ``Outcome`` and
the events it emits. ``lines_of`` and ``teardown_lines`` turn a plan into
the lines (pure); a ``Progress`` shows them: a live view on a terminal, and
one line per change or event in a pipe (text, or one JSON object a line).

Every message a target may have written (a failure, helm's words, an event)
passes ``untrusted.printable`` before it is shown, and the live view renders
``Text``, never markup, so nothing in it is taken for a style.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import IO, Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from modelplane.api.status_limits import TERMINAL
from modelplane.pins import ComponentsMode
from modelplane.plan.model import CONFIGURATION, ObjectAction, Plan, ReleaseState
from modelplane.untrusted import printable

# How many of the latest events the live view keeps under the components.
LIVE_EVENTS = 5
# A component's detail is cut to this in the live view; a pipe gets it whole.
LIVE_DETAIL = 160


class Phase(StrEnum):
    WAITING = "waiting"
    INSTALLING = "installing"
    READY = "ready"
    FAILED = "failed"
    REMOVING = "removing"
    REMOVED = "removed"
    # A Provided component on delete: never uninstalled.
    KEPT = "kept"


@dataclass(frozen=True)
class Line:
    """One component as the view shows it: its phase, and what it waits for or why it failed."""

    component: str
    phase: Phase
    detail: str = ""

    def describe(self) -> str:
        detail = self.detail
        match self.phase:
            case Phase.WAITING if detail.startswith("waits for "):
                return "waiting for " + detail.removeprefix("waits for ")
            case Phase.WAITING | Phase.INSTALLING | Phase.REMOVING | Phase.KEPT if detail:
                return f"{self.phase}: {detail}"
            case Phase.FAILED:
                return f"failed: {detail or 'no reason given'}"
            case _:
                return str(self.phase)


def lines_of(
    plan: Plan,
    failures: Mapping[str, str] | None = None,
    waiting_on_webhook: Iterable[str] = (),
) -> list[Line]:
    """Each component of an apply, in plan order, and the product's configuration last."""
    failures = failures or {}
    webhook = set(waiting_on_webhook)
    out: list[Line] = []
    for c in plan.components:
        failed = failures.get(c.name)
        if failed is not None:
            phase = Phase.WAITING if c.name in webhook else Phase.FAILED
            detail = f"an admission webhook: {failed}" if c.name in webhook else failed
            out.append(Line(c.name, phase, _shown(detail)))
        elif c.state in ("Ready", "Met"):
            out.append(Line(c.name, Phase.READY))
        elif c.state == "Pending":
            out.append(Line(c.name, Phase.INSTALLING, _shown(c.message)))
        else:  # Waiting (for a dependency), Unmet (a Provided requirement)
            out.append(Line(c.name, Phase.WAITING, _shown(c.message)))
    out.append(_configuration(plan, failures, webhook))
    return out


def _configuration(plan: Plan, failures: Mapping[str, str], webhook: set[str]) -> Line:
    failed = failures.get(CONFIGURATION)
    if failed is not None and CONFIGURATION not in webhook:
        return Line(CONFIGURATION, Phase.FAILED, _shown(failed))
    work = [w.what for w in plan.work if w.component == CONFIGURATION]
    if not work:
        return Line(CONFIGURATION, Phase.READY)
    applying = [
        o for o in plan.objects if o.component == CONFIGURATION and o.action is ObjectAction.APPLY
    ]
    if applying:
        count = len(applying)
        return Line(CONFIGURATION, Phase.INSTALLING, f"apply {count} object{'s' * (count != 1)}")
    return Line(CONFIGURATION, Phase.WAITING, _shown(failed or work[0]))


def teardown_lines(plan: Plan) -> list[Line]:
    """Each component of a delete: still there (removing), gone, or a Provided one left alone."""
    out: list[Line] = []
    managed = plan.mode == str(ComponentsMode.MANAGED)
    for c in plan.components:
        if c.mode == str(ComponentsMode.PROVIDED):
            out.append(Line(c.name, Phase.KEPT, "Provided: never uninstalled"))
            continue
        release = next((r for r in plan.releases if r.component == c.name), None)
        if release is not None:
            there = release.state is not ReleaseState.ABSENT
            detail = f"uninstall release {release.name}" if there else ""
            out.append(Line(c.name, Phase.REMOVING if there else Phase.REMOVED, detail))
            continue
        manifests = next((m for m in plan.manifests if m.component == c.name), None)
        there = manifests is not None and manifests.action is ObjectAction.NONE and managed
        out.append(Line(c.name, Phase.REMOVING if there else Phase.REMOVED))
    # An object of ours in place is one the plan has nothing to apply for.
    present = [
        o for o in plan.objects if o.component == CONFIGURATION and o.action is ObjectAction.NONE
    ]
    out.append(
        Line(CONFIGURATION, Phase.REMOVING, f"delete {len(present)} objects")
        if present
        else Line(CONFIGURATION, Phase.REMOVED)
    )
    return out


def _shown(text: str) -> str:
    return printable(text, TERMINAL)


@dataclass
class _Tracked:
    line: Line
    since: float
    done: float | None = None


@dataclass
class Progress:
    """What the view knows: each component's line and since when, and the result.

    Subclasses show it; this keeps the state, so a terminal and a pipe say
    the same thing.
    """

    clock: Callable[[], float] = time.monotonic
    start: float = field(default=0.0)
    tracked: dict[str, _Tracked] = field(default_factory=dict)
    # The last note, shown once however many rounds repeat it.
    last_note: str | None = None

    def __post_init__(self) -> None:
        self.start = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def lines(self, lines: Iterable[Line]) -> None:
        """A round's lines; each one that changed is shown."""
        now = self.clock()
        for line in lines:
            kept = self.tracked.get(line.component)
            if kept is not None and kept.line == line:
                continue
            done = now if line.phase in (Phase.READY, Phase.REMOVED, Phase.KEPT) else None
            since = kept.since if kept is not None else now
            if kept is not None and kept.done is not None and done is not None:
                done = kept.done
            self.tracked[line.component] = _Tracked(line, since, done)
            self._changed(line, now - self.start)
        self._shown_lines()

    def event(self, type_: str, reason: str, message: str) -> None:
        """An event the reconciler emitted, as it would go on the ServingStack."""
        self._event(_shown(type_), _shown(reason), _shown(message), self.elapsed())

    def note(self, message: str) -> None:
        """What the run as a whole waits for, or why it stopped; said again only when it changes."""
        shown = _shown(message)
        if shown == self.last_note:
            return
        self.last_note = shown
        self._note(shown, self.elapsed())

    def finish(self, ok: bool, message: str) -> None:
        self._finish(ok, _shown(message), self.elapsed())

    def close(self) -> None:
        """Stop showing (the live view's refresh); idempotent."""

    # -- shown by subclasses -------------------------------------------------

    def _changed(self, line: Line, at: float) -> None:
        pass

    def _shown_lines(self) -> None:
        """After a round's changed lines: one redraw for them all."""

    def _event(self, type_: str, reason: str, message: str, at: float) -> None:
        pass

    def _note(self, message: str, at: float) -> None:
        pass

    def _finish(self, ok: bool, message: str, at: float) -> None:
        pass


def _stamp(seconds: float) -> str:
    return f"[{seconds:6.1f}s]"


@dataclass
class LineProgress(Progress):
    """One line per change or event: for a pipe, a log, or a machine (``as_json``)."""

    out: IO[str] | None = None
    as_json: bool = False

    def _write(self, text: str, record: dict[str, Any]) -> None:
        out = self.out
        assert out is not None
        out.write((json.dumps(record) if self.as_json else text) + "\n")
        out.flush()

    def _changed(self, line: Line, at: float) -> None:
        self._write(
            f"{_stamp(at)} {line.component}: {line.describe()}",
            {
                "time": round(at, 3),
                "component": line.component,
                "state": str(line.phase),
                "detail": line.detail,
            },
        )

    def _event(self, type_: str, reason: str, message: str, at: float) -> None:
        self._write(
            f"{_stamp(at)} event {type_} {reason}: {message}",
            {
                "time": round(at, 3),
                "event": {"type": type_, "reason": reason, "message": message},
            },
        )

    def _note(self, message: str, at: float) -> None:
        self._write(f"{_stamp(at)} {message}", {"time": round(at, 3), "note": message})

    def _finish(self, ok: bool, message: str, at: float) -> None:
        self._write(
            f"{_stamp(at)} {'done' if ok else 'not done'}: {message}",
            {"time": round(at, 3), "result": "done" if ok else "not done", "message": message},
        )


STYLES = {
    Phase.WAITING: "yellow",
    Phase.INSTALLING: "cyan",
    Phase.READY: "green",
    Phase.FAILED: "red",
    Phase.REMOVING: "cyan",
    Phase.REMOVED: "green",
    Phase.KEPT: "dim",
}
MARKS = {
    Phase.WAITING: "…",
    Phase.INSTALLING: "↻",
    Phase.READY: "✓",
    Phase.FAILED: "✗",
    Phase.REMOVING: "↻",
    Phase.REMOVED: "✓",
    Phase.KEPT: "-",
}


@dataclass
class LiveProgress(Progress):
    """A live view on a terminal: the components with their elapsed time, redrawn in place."""

    console: Console | None = None
    title: str = ""
    events: list[Text] = field(default_factory=list)
    status: Text | None = None
    live: Live | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        # Redrawn four times a second, so the elapsed times tick between rounds.
        self.live = Live(
            self, console=self.console, refresh_per_second=4, transient=False, auto_refresh=True
        )
        self.live.start()

    def __rich__(self) -> RenderableType:
        now = self.clock()
        table = Table.grid(padding=(0, 1))
        table.add_column(no_wrap=True)
        table.add_column(no_wrap=True)
        table.add_column(overflow="fold")
        table.add_column(justify="right", no_wrap=True)
        for kept in self.tracked.values():
            line = kept.line
            style = STYLES[line.phase]
            ended = kept.done if kept.done is not None else now
            table.add_row(
                Text(MARKS[line.phase], style=style),
                Text(line.component, style="bold"),
                Text(printable(line.describe(), LIVE_DETAIL), style=style),
                Text(f"{ended - kept.since:.0f}s", style="dim"),
            )
        parts: list[RenderableType] = []
        if self.title:
            parts.append(Text(self.title, style="bold"))
        parts.append(table)
        parts += self.events[-LIVE_EVENTS:]
        if self.status is not None:
            parts.append(self.status)
        parts.append(Text(f"elapsed {now - self.start:.0f}s", style="dim"))
        return Group(*parts)

    def _shown_lines(self) -> None:
        self._refresh()

    def _event(self, type_: str, reason: str, message: str, at: float) -> None:
        style = "yellow" if type_ == "Warning" else "dim"
        self.events.append(Text(f"{_stamp(at)} {reason}: {message}", style=style))
        self._refresh()

    def _note(self, message: str, at: float) -> None:
        self.status = Text(message)
        self._refresh()

    def _finish(self, ok: bool, message: str, at: float) -> None:
        self.status = Text(
            f"{'done' if ok else 'not done'}: {message}", style="green" if ok else "red"
        )
        self.close()

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.refresh()

    def close(self) -> None:
        live, self.live = self.live, None
        if live is not None:
            live.refresh()
            live.stop()


def progress_for(
    out: IO[str], *, as_json: bool, title: str = "", clock: Callable[[], float] = time.monotonic
) -> Progress:
    """A live view on a terminal; one line per change (text or JSON) otherwise."""
    if as_json or not out.isatty():
        return LineProgress(clock=clock, out=out, as_json=as_json)
    console = Console(file=out, highlight=False, emoji=False)
    return LiveProgress(clock=clock, console=console, title=title)
