"""The requirements reference, generated from the catalog.

It follows the shape of the published "Serving Stack Requirements" page, so
that page could be regenerated from the code.
"""

from __future__ import annotations

from modelplane.catalog.components import COMPONENTS, MODELPLANE_NAMESPACE
from modelplane.catalog.types import Component, CRDServes, ObjectExists
from modelplane.pins import Stack


def _installs(c: Component) -> str:
    if c.chart is not None:
        return f"Managed mode installs chart {c.chart.chart} {c.version}."
    return "Managed mode applies manifests Modelplane vendors from the upstream release."


def _checked(c: Component) -> list[str]:
    out = []
    for r in c.requirements:
        if isinstance(r, CRDServes):
            out.append(f"CRD {r.crd} serving {r.version}")
        else:
            assert isinstance(r, ObjectExists)
            out.append(f"{r.kind} {r.name} ({r.api.group_version})")
    return out


def _section(c: Component) -> list[str]:
    lines = [f"### {c.name}", "", _installs(c), ""]
    for title, items in (
        ("Checked", _checked(c)),
        ("Not checked", list(c.not_checked)),
        ("Not needed", list(c.not_needed)),
    ):
        if items:
            lines += [f"{title}:", "", *[f"- {item}" for item in items], ""]
    return lines


def _source(c: Component) -> str:
    if c.chart is not None:
        return c.chart.chart
    if c.manifests is not None:
        return "(release manifests)"
    return "(objects)"


def _stacks(c: Component) -> str:
    on = [s.value for s in Stack if s in c.stacks]
    stacks = "both" if len(on) == len(Stack) else ", ".join(on)
    return f"{stacks}, {c.enabled_when}" if c.enabled_when else stacks


def _disruption(c: Component) -> str:
    """Its classes, the headline first: ``node agent, control``."""
    kinds = sorted({d.kind for d in c.disruptions}, key=lambda k: k.rank)
    return ", ".join(k.words for k in kinds)


def components_table() -> str:
    """docs/catalog.md's "What it installs" table: one row per substrate component, in order."""
    lines = [
        "| component | chart | version | namespace | stack | disruption |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for c in COMPONENTS:
        if c.role != "substrate":
            continue
        # Objects the product writes itself have no version of their own.
        version = "" if c.kind == "objects" else c.version
        lines.append(
            f"| {c.name} | {_source(c)} | {version} | {c.namespace} | {_stacks(c)} "
            f"| {_disruption(c)} |"
        )
    return "\n".join(lines) + "\n"


TABLE_START = "<!-- components: generated from the catalog by hack/catalog-docs.sh -->"
TABLE_END = "<!-- end components -->"


def with_components_table(page: str) -> str:
    """``page`` with the text between the table's markers replaced by ``components_table``."""
    head, start, rest = page.partition(TABLE_START + "\n")
    _, end, tail = rest.partition(TABLE_END)
    if not start or not end:
        raise ValueError(f"the page has no {TABLE_START} ... {TABLE_END} block")
    return head + start + components_table() + end + tail


def requirements_markdown(stack: Stack | None = None) -> str:
    substrate = [c for c in COMPONENTS if c.role == "substrate"]
    groups: list[tuple[str, list[Component]]] = [
        ("On every stack", [c for c in substrate if len(c.stacks) == len(Stack)]),
        ("Standard stack", [c for c in substrate if c.stacks == {Stack.STANDARD}]),
        ("Dynamo stack", [c for c in substrate if c.stacks == {Stack.DYNAMO}]),
    ]
    lines = ["# Serving Stack Requirements", ""]
    lines += [
        "A ServingStack with `components: Provided` installs none of these components; the "
        "cluster provides them and Modelplane checks the *checked* entries continuously, "
        "reporting what is missing through the RequirementsMet condition. The version listed "
        "is the one Managed mode installs and tests against.",
        "",
    ]
    for title, members in groups:
        if stack is not None:
            members = [c for c in members if stack in c.stacks]
        if not members:
            continue
        lines += [f"## {title}", ""]
        for c in members:
            lines += _section(c)
    lines += [
        "## What Modelplane still installs",
        "",
        f"Provided mode only skips the substrate. Modelplane still composes the "
        f"{MODELPLANE_NAMESPACE} namespace, the EnvoyProxy, GatewayClass and Gateway, and on "
        "the Dynamo stack its KAI Queue hierarchy and the ModelExpress server with its CRDs; "
        "each is applied only once the cluster serves the APIs it needs.",
        "",
    ]
    return "\n".join(lines)
