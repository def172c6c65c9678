"""Presenting a plan: for a person (text) or for machines (json, yaml)."""

from __future__ import annotations

import json
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from modelplane.plan.model import ObjectAction, Plan


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
            {"object": o.key, "reason": o.held_back}
            for o in p.objects
            if o.action is ObjectAction.HOLD
        ],
        "requirements": [r.model_dump(mode="json") for r in p.requirements],
        "notes": p.notes,
    }


def to_json(p: Plan) -> str:
    return json.dumps(plan_document(p), indent=2)


def to_yaml(p: Plan) -> str:
    return yaml.safe_dump(plan_document(p), sort_keys=False)


def print_text(p: Plan, console: Console) -> None:
    console.print(
        f"[bold]ServingStack {p.namespace}/{p.name}[/bold]: {p.stack} stack, components {p.mode}"
    )
    table = Table(title="Components", title_justify="left")
    for col in ("component", "mode", "chart / source", "version", "namespace", "plan"):
        table.add_column(col)
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
        table.add_row(c.name, c.mode, source, c.version, c.namespace or "-", step)
    console.print(table)

    held = [o for o in p.objects if o.action is ObjectAction.HOLD]
    if held or p.notes:
        console.print("[bold]Held back[/bold]")
        for o in held:
            console.print(f"  {o.key}: {o.held_back}")
        for note in p.notes:
            console.print(f"  note: {note}")

    unmet = p.unmet
    console.print(
        f"[bold]Requirements[/bold]: {len(p.requirements) - len(unmet)} of "
        f"{len(p.requirements)} met on the observed target"
    )
    for result in unmet:
        console.print(f"  [red]x[/red] {result.component}: {result.message}")

    console.print("[bold]Objects[/bold]")
    for o in p.objects:
        console.print(f"  {o.action:5} {o.key}")
