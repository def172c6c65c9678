"""Presenting a plan: for a person (text) or for machines (json, yaml)."""

from __future__ import annotations

import io
import json
import sys
from typing import IO, Any, cast

import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text

from modelplane.api.status_limits import TERMINAL
from modelplane.catalog.configuration import Hold
from modelplane.catalog.images import Runs
from modelplane.kube.scrub import shown_url
from modelplane.plan.images import ImageUse
from modelplane.plan.model import ObjectAction, Plan, PlannedObject, Severity
from modelplane.untrusted import printable


def plan_document(p: Plan) -> dict[str, Any]:
    """The plan as one JSON-able document: releases as records, objects as themselves."""
    return {
        "name": p.name,
        "namespace": p.namespace,
        "stack": p.stack,
        "components": p.mode,
        # A mirror's URL is shown without its user and password, as everywhere.
        "releases": [
            r.model_copy(update={"repository": shown_url(r.repository)}).model_dump(mode="json")
            for r in p.releases
        ],
        "manifests": [
            m.model_copy(update={"url": shown_url(m.url)}).model_dump(mode="json")
            for m in p.manifests
        ],
        "objects": [o.object for o in p.objects],
        "heldBack": [
            {"object": o.key, "reason": o.hold_reason}
            for o in p.objects
            if o.action is ObjectAction.HOLD
        ],
        "requirements": [r.model_dump(mode="json") for r in p.requirements],
        "notes": p.notes,
        "gateway": {
            "address": p.gateway.address,
            "caCertificate": p.gateway.ca_certificate,
            # Only when there is one, as the status says it only then.
            **({"caProblem": p.gateway.ca_problem} if p.gateway.ca_problem else {}),
        },
        # Every image, before and after the rules (each release's are also
        # under its record), and what a mirror must hold for them.
        "imageMirrors": p.image_mirrors,
        "images": [u.model_dump(mode="json") for u in p.images],
        "mirrorMustCarry": mirror_must_carry(p),
        "notMirrored": not_mirrored(p),
        "imagePullSecrets": p.image_pull_secrets,
        "missingPullSecrets": [m.model_dump(mode="json") for m in p.missing_pull_secrets],
    }


def image_groups(p: Plan) -> list[tuple[str, list[ImageUse]]]:
    """The plan's images by where they come from: each release, then the product's objects."""
    groups: list[tuple[str, list[ImageUse]]] = [
        (f"{r.component} (release {r.name})", list(r.images)) for r in p.releases if r.images
    ]
    charted = [u for r in p.releases for u in r.images]
    own: dict[str, list[ImageUse]] = {}
    for use in p.images:
        if use not in charted:
            own.setdefault(use.component, []).append(use)
    groups += [(f"{name} (the product's own objects)", uses) for name, uses in own.items()]
    return groups


def not_mirrored(p: Plan) -> list[str]:
    """The images that run and that no rule moves, each once."""
    return list(
        dict.fromkeys(u.image for u in p.images if not u.mirrored and u.runs is not Runs.OFF)
    )


def mirror_must_carry(p: Plan) -> list[str]:
    """The images in the mirror that run (always, in hooks, or at run time), each once."""
    return list(
        dict.fromkeys(u.mirrored for u in p.images if u.mirrored and u.runs is not Runs.OFF)
    )


def to_json(p: Plan) -> str:
    return json.dumps(plan_document(p), indent=2)


def to_yaml(p: Plan) -> str:
    return yaml.safe_dump(plan_document(p), sort_keys=False)


# Width of the text output when it does not go to a terminal: fixed, so that
# piped output (the README's example, CI logs, the golden files) never depends
# on the environment, and narrow enough for an 80-column terminal.
TEXT_WIDTH = 80

# From this width on the chart source is a column of the Components table;
# below it, a section of its own, as kubectl's printers keep their wide
# columns for wide output. The source column needs about 60 characters.
WIDE = 160


class _TrimmedLines(io.TextIOBase):
    """A text stream that drops the spaces Rich pads table cells and wrapped
    lines with at the end of a line: in a log or a README they are trailing
    whitespace, which editors and diffs flag."""

    def __init__(self, out: IO[str]) -> None:
        super().__init__()
        self._out = out
        self._partial = ""

    def write(self, s: str) -> int:
        *lines, self._partial = (self._partial + s).split("\n")
        for line in lines:
            self._out.write(line.rstrip(" ") + "\n")
        return len(s)

    def flush(self) -> None:
        # Rich ends every print with a newline; a partial line is kept whole.
        if self._partial:
            self._out.write(self._partial)
            self._partial = ""
        self._out.flush()

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True


def text_console(file: IO[str] | None = None) -> Console:
    """A console for the text output: the terminal's width and colours on a
    terminal; otherwise a fixed width, no colour and no escape codes at all,
    whatever COLUMNS, FORCE_COLOR or TERM say."""
    out = file or sys.stdout
    if out.isatty():
        # Rich takes the width from COLUMNS, else from the terminal itself.
        return Console(file=out, highlight=False)
    return Console(
        # A TextIOBase is a text stream, which typeshed's IO[str] does not say.
        file=cast(IO[str], _TrimmedLines(out)),
        width=TEXT_WIDTH,
        color_system=None,
        force_terminal=False,
        force_jupyter=False,
        force_interactive=False,
        highlight=False,
        emoji=False,
        legacy_windows=False,
        soft_wrap=False,
    )


def _shown(value: object) -> str:
    """A value for the terminal: observed facts are a target's words, and may carry
    escapes that move the cursor, retitle the window or hide text."""
    return printable(value, TERMINAL)


def _items(console: Console, rows: list[tuple[Text, Text]]) -> None:
    """Entries of a section: a marker, then text wrapped at the console's width
    with its continuation lines under the text, not under the marker. Words
    too long for a line (a URL) are folded, never cut."""
    for marker, text in rows:
        # One grid per entry, so that each marker takes its own width.
        grid = Table.grid(padding=0)
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        grid.add_row(marker, text)
        console.print(grid)


def _title(console: Console, title: str, rest: str = "") -> None:
    console.print(Text.assemble((title, "bold"), rest))


def _object_name(o: PlannedObject) -> str:
    """``Kind.group namespace/name``, as kubectl names a resource, without the
    version: the full key is in the JSON output."""
    group, _, _version = str(o.object.get("apiVersion", "")).rpartition("/")
    meta = o.object["metadata"]
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    kind = f"{o.object['kind']}.{group}" if group else str(o.object["kind"])
    return _shown(f"{kind} {where}{meta['name']}")


def install_order(p: Plan) -> list[list[tuple[str, list[str]]]]:
    """The Managed components in steps: each after every component it waits for.

    A component's step is one more than the latest step of its dependencies
    (the plan's ``depends_on``, from the catalog), so a step's components
    wait only for earlier steps. Within a step, plan order.
    """
    releases = {r.component: r for r in p.releases}
    planned = {m.component for m in p.manifests} | set(releases)
    step: dict[str, int] = {}
    steps: list[list[tuple[str, list[str]]]] = []
    # The catalog orders every dependency before its dependents.
    for c in p.components:
        if c.mode != "Managed" or (c.name not in planned and c.kind != "objects"):
            continue
        deps = releases[c.name].depends_on if c.name in releases else []
        n = 1 + max((step[d] for d in deps if d in step), default=0)
        step[c.name] = n
        while len(steps) < n:
            steps.append([])
        steps[n - 1].append((c.name, deps))
    return steps


def print_text(p: Plan, console: Console, *, observed: bool = False) -> None:
    """The plan for a person. ``observed``: whether facts about the target were
    given; without them nothing is said to be met, unmet or seen."""
    # Names and messages come from user input: never read them as markup.
    # Every value passes _shown: JSON and YAML escape control characters
    # themselves, a terminal would act on them.
    console.print(
        Text.assemble(
            (f"ServingStack {_shown(p.namespace)}/{_shown(p.name)}", "bold"),
            f": {p.stack} stack, components {p.mode}",
        )
    )
    wide = console.width >= WIDE
    releases = {r.component: r for r in p.releases}
    manifests = {m.component: m for m in p.manifests}
    sources: dict[str, str] = {}
    for name, r in releases.items():
        sources[name] = f"{r.chart} ({shown_url(r.repository)})"
    for name, m in manifests.items():
        sources[name] = shown_url(m.url)
    # A component whose mode differs from the stack's (a config-role one in
    # Provided mode) gets a MODE column where there is room; narrow, its PLAN
    # (install, apply against check) says it.
    mixed = wide and any(c.mode != p.mode for c in p.components)

    table = Table(
        title="Components",
        title_justify="left",
        title_style="bold",
        box=None,
        # Two spaces between columns and none at the edges, as kubectl prints.
        padding=(0, 1),
        pad_edge=False,
        header_style="bold",
    )
    table_rows: list[list[str]] = []
    for c in p.components:
        if c.name in releases:
            r = releases[c.name]
            source = sources[c.name]
            step = str(r.action)
            if r.waiting_for and wide:
                # Narrow, the install order below names what each waits for.
                step += f": after {', '.join(r.waiting_for)}"
        elif c.name in manifests:
            source, step = sources[c.name], str(manifests[c.name].action)
        elif c.mode == "Provided":
            # Offline nothing was checked: met or unmet would be a guess.
            state = f" ({c.state.lower()})" if observed else ""
            source, step = "provided by the cluster", f"check{state}"
        else:
            source, step = "objects", c.state.lower()
        cells = [c.name, *([c.mode] if mixed else [])]
        cells += [*([source] if wide else []), c.version, c.namespace or "-", step]
        table_rows.append([_shown(cell) for cell in cells])
    columns = ["COMPONENT", *(["MODE"] if mixed else [])]
    columns += [*(["CHART / SOURCE"] if wide else []), "VERSION", "NAMESPACE", "PLAN"]
    for col in columns[:-1]:
        # What is too wide folds (a URL, the odd long name), never cut off.
        table.add_column(col, overflow="fold")
    if wide:
        table.add_column("PLAN", overflow="fold")
    else:
        # Narrow, PLAN holds one word or two: never squeezed out by the names.
        table.add_column(
            "PLAN", no_wrap=True, min_width=max((len(r[-1]) for r in table_rows), default=4)
        )
    for row in table_rows:
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)
    if sources and not wide:
        _title(console, "Sources")
        grid = Table.grid(padding=(0, 2, 0, 0))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for c in p.components:
            if c.name in sources:
                grid.add_row(Text("  " + _shown(c.name)), Text(_shown(sources[c.name])))
        console.print(grid)

    steps = install_order(p)
    if steps:
        _title(console, "Install order")
        rows = []
        for n, members in enumerate(steps, 1):
            names = [
                f"{name} (after {', '.join(deps)})" if deps else name for name, deps in members
            ]
            rows.append((Text(f"  {n}. "), Text(_shown(", ".join(names)))))
        waiting = [o for o in p.objects if o.hold is Hold.WAITING_FOR_API]
        if waiting:
            rows.append(
                (
                    Text("  then "),
                    Text(
                        f"the {len(waiting)} object{'s' if len(waiting) > 1 else ''} "
                        "held back below, each once the target serves its API"
                    ),
                )
            )
        _items(console, rows)

    held = [o for o in p.objects if o.action is ObjectAction.HOLD]
    if held:
        _title(console, "Held back")
        rows = []
        for o in held:
            rows.append((Text("  "), Text(_object_name(o))))
            rows.append((Text("    "), Text(_shown(o.hold_reason))))
        _items(console, rows)
    # Notes are about the spec as a whole (an out-of-range pin, a withheld
    # listener, Provided mode), not about one held object.
    if p.notes:
        _title(console, "Notes")
        _items(console, [(Text("  - "), Text(_shown(note))) for note in p.notes])

    # A Managed install brings what its requirements ask for, so offline they
    # decide nothing; in Provided mode they are the whole check, and against
    # given facts they say what is missing.
    required = [r for r in p.requirements if r.severity is Severity.REQUIRED]
    if observed:
        unmet = p.unmet
        _title(
            console,
            "Requirements",
            f": {len(p.requirements) - len(unmet)} of {len(p.requirements)} met on the "
            "observed target",
        )
        _items(
            console,
            [
                (
                    Text.assemble("  ", ("x", "red"), " "),
                    Text(f"{_shown(r.component)}: {_shown(r.message)}"),
                )
                for r in unmet
            ],
        )
    elif p.mode == "Provided" and required:
        _title(
            console,
            "Requirements",
            f": {len(required)}, checked on the target by the operator or `modelplane check`",
        )
        _items(
            console,
            [
                (Text("  - "), Text(f"{_shown(r.component)}: {_shown(r.requirement)}"))
                for r in required
            ],
        )

    if observed or p.gateway.ca_problem:
        if p.gateway.address:
            address = _shown(p.gateway.address)
        else:
            address = "none observed yet" if observed else "not read offline"
        if p.gateway.ca_problem:
            ca = f"not published: {_shown(p.gateway.ca_problem)}"
        else:
            ca = "observed" if p.gateway.ca_certificate else "not observed yet"
        _title(console, "Gateway")
        _items(
            console,
            [(Text("  "), Text(f"address {address}")), (Text("  "), Text(f"CA certificate {ca}"))],
        )
    else:
        _title(
            console,
            "Gateway",
            ": address and CA certificate read from the target once it serves them",
        )

    _title(console, "Objects")
    _items(console, [(Text(f"  {o.action:5} "), Text(_object_name(o))) for o in p.objects])
    _print_images(p, console)


def _images(n: int) -> str:
    return f"{n} image{'s' if n != 1 else ''}"


# The width of an image's "runs" column: the longest of always, hook, runtime, off.
_RUNS = max(len(r) for r in Runs)


def _print_images(p: Plan, console: Console) -> None:
    """Every image, per release and for the product's own objects, before and after the rules."""
    groups = image_groups(p)
    if not groups:
        return
    rules = p.image_mirrors
    moved = sum(1 for u in p.images if u.mirrored)
    if rules:
        rest = f": {len(p.images)}, {moved} moved by the mirror rules"
    else:
        rest = f": {len(p.images)}, each from its own registry (no --image-registry-mirror)"
    _title(console, "Images", rest)
    # Each rule once, by number; an image names the one that moved it.
    number = {rule: n for n, rule in enumerate(rules, 1)}
    if rules:
        _items(
            console,
            [(Text("  rule "), Text(_shown(f"[{n}] {rule}"))) for rule, n in number.items()],
        )
    under = Text(" " * (4 + _RUNS + 1))
    to = Text(" " * (4 + _RUNS + 1 - len("to "))) + Text("to ")
    for title, uses in groups:
        rows: list[tuple[Text, Text]] = [(Text("  "), Text(_shown(title)))]
        for use in uses:
            rows.append((Text(f"    {use.runs:<{_RUNS}} "), Text(_shown(use.image))))
            if use.mirrored:
                which = f" [{number[use.rule]}]" if use.rule in number else f" ({use.rule})"
                rows.append((to, Text(_shown(f"{use.mirrored}{which}"))))
            elif rules:
                why = "" if use.settable else ": nothing the product sets moves it"
                rows.append((under, Text.assemble(("not mirrored", "yellow"), why)))
            if use.note:
                rows.append((under, Text(_shown(use.note), style="dim")))
        _items(console, rows)
    carry = mirror_must_carry(p)
    if rules and carry:
        _title(console, "The mirror must carry", f": {_images(len(carry))}")
        _items(console, [(Text("  - "), Text(_shown(image))) for image in carry])
    left = not_mirrored(p)
    if rules and left:
        _title(console, "Not mirrored", f": {_images(len(left))} that run pull from their registry")
        _items(console, [(Text("  - "), Text(_shown(image))) for image in left])
    if p.image_pull_secrets:
        _title(console, "Pull Secrets", f": {', '.join(_shown(s) for s in p.image_pull_secrets)}")
        if p.missing_pull_secrets:
            _items(
                console,
                [
                    (Text.assemble("  ", ("x", "red"), " "), Text(_shown(f"{m.component}: {m}")))
                    for m in p.missing_pull_secrets
                ],
            )
