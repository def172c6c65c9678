"""Presenting a plan: for a person (text) or for machines (json, yaml)."""

from __future__ import annotations

import json
import sys
from typing import IO, Any

import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text

from modelplane.api.status_limits import TERMINAL
from modelplane.plan.model import ObjectAction, Plan
from modelplane.untrusted import printable


def plan_document(p: Plan) -> dict[str, Any]:
    """The plan as one JSON-able document: releases as records, objects as themselves."""
    return {
        "name": p.name,
        "namespace": p.namespace,
        "stack": p.stack,
        "components": p.mode,
        "releases": [r.model_dump(mode="json") for r in p.releases],
        "manifests": [m.model_dump(mode="json") for m in p.manifests],
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
    }


def to_json(p: Plan) -> str:
    return json.dumps(plan_document(p), indent=2)


def to_yaml(p: Plan) -> str:
    return yaml.safe_dump(plan_document(p), sort_keys=False)


# Width of the text output when it does not go to a terminal: fixed, so that
# piped output (and the golden files) never depend on the environment.
TEXT_WIDTH = 160


def text_console(file: IO[str] | None = None) -> Console:
    """A console for the text output: the terminal's width and colours on a
    terminal; otherwise a fixed width, no colour and no escape codes at all,
    whatever COLUMNS, FORCE_COLOR or TERM say."""
    out = file or sys.stdout
    if out.isatty():
        return Console(file=out, highlight=False)
    return Console(
        file=out,
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


def print_text(p: Plan, console: Console) -> None:
    # Names and messages come from user input: never read them as markup.
    # Every value passes _shown: JSON and YAML escape control characters
    # themselves, a terminal would act on them.
    console.print(
        Text.assemble(
            (f"ServingStack {_shown(p.namespace)}/{_shown(p.name)}", "bold"),
            f": {p.stack} stack, components {p.mode}",
        )
    )
    table = Table(title="Components", title_justify="left")
    for col in ("component", "mode", "chart / source", "version", "namespace", "plan"):
        # Fold long repository URLs instead of cutting them off.
        table.add_column(col, overflow="fold")
    releases = {r.component: r for r in p.releases}
    manifests = {m.component: m for m in p.manifests}
    for c in p.components:
        if c.name in releases:
            r = releases[c.name]
            source = f"{r.chart} ({r.repository})"
            step = str(r.action) + (f": after {', '.join(r.waiting_for)}" if r.waiting_for else "")
        elif c.name in manifests:
            source, step = manifests[c.name].url, str(manifests[c.name].action)
        elif c.mode == "Provided":
            source, step = "provided by the cluster", f"check ({c.state.lower()})"
        else:
            source, step = "objects", c.state.lower()
        cells = (c.name, c.mode, source, c.version, c.namespace or "-", step)
        table.add_row(*(Text(_shown(cell)) for cell in cells))
    console.print(table)

    held = [o for o in p.objects if o.action is ObjectAction.HOLD]
    if held:
        console.print(Text("Held back", "bold"))
        for o in held:
            console.print(Text(f"  {_shown(o.key)}: {_shown(o.hold_reason)}"))
    # Notes are about the spec as a whole (an out-of-range pin, a withheld
    # listener, Provided mode), not about one held object.
    if p.notes:
        console.print(Text("Notes", "bold"))
        for note in p.notes:
            console.print(Text(f"  {_shown(note)}"))

    unmet = p.unmet
    console.print(
        Text.assemble(
            ("Requirements", "bold"),
            f": {len(p.requirements) - len(unmet)} of {len(p.requirements)} met on the "
            "observed target",
        )
    )
    for result in unmet:
        console.print(
            Text.assemble(
                "  ", ("x", "red"), f" {_shown(result.component)}: {_shown(result.message)}"
            )
        )

    address = _shown(p.gateway.address) if p.gateway.address else "none observed yet"
    if p.gateway.ca_problem:
        ca = f"not published: {_shown(p.gateway.ca_problem)}"
    else:
        ca = "observed" if p.gateway.ca_certificate else "not observed yet"
    console.print(Text.assemble(("Gateway", "bold"), f": address {address}; CA certificate {ca}"))

    console.print(Text("Objects", "bold"))
    for o in p.objects:
        console.print(Text(f"  {o.action:5} {_shown(o.key)}"))
