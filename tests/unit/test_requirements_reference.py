"""``modelplane requirements`` against the published requirements document."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from typer.testing import CliRunner

from modelplane.catalog.reference import requirements_markdown
from modelplane.cli.main import app

from .conftest import REQUIREMENTS_DOC

SECTIONS = ("On every stack", "Standard stack", "Dynamo stack")
BULLET = "\u2022"


@dataclass
class Entry:
    section: str
    installs: str
    checked: list[str] = field(default_factory=list)


def parse_document(text: str) -> dict[str, Entry]:
    """Per component heading of the requirements page: section, install line, checked list."""
    lines = [line.rstrip() for line in text.splitlines()]
    entries: dict[str, Entry] = {}
    section = ""
    current: Entry | None = None
    in_checked = False
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped in SECTIONS:
            section, current, in_checked = stripped, None, False
        elif stripped == "What Modelplane still installs":
            break
        elif stripped.startswith("Managed mode "):
            heading = next(x.strip() for x in reversed(lines[:i]) if x.strip())
            current = entries[heading] = Entry(section, stripped)
            in_checked = False
        elif current is not None and stripped.endswith(":") and not stripped.startswith(BULLET):
            in_checked = stripped == "Checked:"
        elif in_checked and stripped.startswith(BULLET):
            assert current is not None
            current.checked.append(stripped.removeprefix(BULLET).strip())
    return entries


def parse_markdown(text: str) -> dict[str, Entry]:
    entries: dict[str, Entry] = {}
    section = ""
    current: Entry | None = None
    in_checked = False
    for line in text.splitlines():
        if line.startswith("## "):
            section, current = line[3:], None
        elif line.startswith("### "):
            current = entries[line[4:]] = Entry(section, "")
            in_checked = False
        elif current is not None and line.startswith("Managed mode "):
            current.installs = line
        elif current is not None and line.endswith(":") and not line.startswith("- "):
            in_checked = line == "Checked:"
        elif in_checked and line.startswith("- "):
            assert current is not None
            current.checked.append(line[2:])
    return entries


def _generated() -> dict[str, Entry]:
    result = CliRunner().invoke(app, ["requirements"])
    assert result.exit_code == 0, result.output
    return parse_markdown(result.stdout)


def test_generated_reference_shape() -> None:
    entries = _generated()
    assert entries["cert-manager"].checked == ["CRD certificates.cert-manager.io serving v1"]
    assert entries["nvidia-dra-driver-gpu"].checked == [
        "DeviceClass gpu.nvidia.com (resource.k8s.io/v1)"
    ]
    assert entries["leader-worker-set"].section == "Standard stack"
    assert entries["grove"].section == "Dynamo stack"
    assert "modelexpress-crds" not in entries  # the product's own configuration


def test_generated_reference_matches_the_document() -> None:
    if not REQUIREMENTS_DOC.exists():
        pytest.skip(f"the requirements document is not at {REQUIREMENTS_DOC} (no ../shared/spec)")
    expected = parse_document(REQUIREMENTS_DOC.read_text())
    # Sanity of the parser: the page has 13 components and 17 checked entries.
    assert len(expected) == 13
    assert sum(len(e.checked) for e in expected.values()) == 17
    generated = _generated()
    assert sorted(generated) == sorted(expected)
    for name, entry in expected.items():
        got = generated[name]
        assert got.section == entry.section, name
        assert got.checked == entry.checked, name
        assert got.installs == entry.installs, name


@pytest.mark.parametrize(("stack", "absent"), [("Standard", "grove"), ("Dynamo", "lws")])
def test_reference_per_stack(stack: str, absent: str) -> None:
    from modelplane.pins import Stack

    text = requirements_markdown(Stack(stack))
    assert "cert-manager" in text
    assert f"chart {absent} " not in text
    assert f"chart {'lws' if absent == 'grove' else 'grove-charts'} " in text
