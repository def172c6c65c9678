"""``modelplane render``'s text output: what it says offline, and that it fits.

A Managed stack rendered offline shows the install order, not requirements a
Managed install meets itself; requirements show where they decide something
(Provided mode, or facts given with ``--observed``); nothing says "observed"
when nothing was. Piped, every line fits 80 columns; on a terminal, its width.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.terminal import on_a_pty
from typer.testing import CliRunner

from modelplane.cli.main import app

from .conftest import CA_PEM, manifest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "servingstack.yaml"
GOLDEN_INPUTS = ROOT / "tests" / "golden" / "inputs"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _write(tmp_path: Path, data: Any, name: str = "stack.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _text(*args: str) -> str:
    result = CliRunner().invoke(app, ["render", *args])
    assert result.exit_code == 0, result.output
    return str(result.stdout)


def _section(out: str, title: str) -> list[str]:
    """The indented lines under a section title (a line starting with it)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith(" "):
            break
        body.append(line)
    return body


def test_offline_managed_shows_install_order_not_requirements() -> None:
    out = _text("-f", str(EXAMPLE))
    assert "Requirements" not in out
    assert "observed" not in out.lower()
    steps = " ".join(_section(out, "Install order"))
    steps = re.sub(r"\s+", " ", steps)
    # Waves from the catalog's dependencies: nothing before what it waits for.
    first, second, third = (re.search(rf"\b{n}\. (.*?)(?= \d\. |$| then )", steps) for n in "123")
    assert first and second and third, steps
    for name in ("cert-manager", "kube-prometheus-stack", "ai-gateway-crds", "gaie-crds"):
        assert name in first.group(1)
    assert "envoy-gateway (after cert-manager)" in second.group(1)
    assert "trust-manager (after cert-manager)" in second.group(1)
    assert "ai-gateway (after ai-gateway-crds, envoy-gateway)" in third.group(1)
    assert "envoy-gateway" not in first.group(1)


def test_offline_install_order_follows_an_objects_dependency(tmp_path: Path) -> None:
    # On GKE the DRA driver waits for its ResourceQuota, a component made of objects.
    stack = GOLDEN_INPUTS / "standard-managed-gke.yaml"
    steps = re.sub(r"\s+", " ", " ".join(_section(_text("-f", str(stack)), "Install order")))
    assert "1. " in steps and "dra-driver-critical-pods-quota" in steps.split("2. ")[0]
    assert "nvidia-dra-driver-gpu (after dra-driver-critical-pods-quota)" in steps


def test_offline_provided_shows_requirements_without_claiming_a_read(tmp_path: Path) -> None:
    out = _text("-f", str(_write(tmp_path, manifest(components="Provided"))))
    assert "Install order" not in out
    assert "observed" not in out.lower()
    body = _section(out, "Requirements")
    joined = re.sub(r"\s+", " ", " ".join(body))
    assert "cert-manager: CRD certificates.cert-manager.io serving v1" in joined
    # Offline nothing was read, so nothing is "not served" and nothing is crossed.
    assert "not served" not in joined and " x " not in f" {joined} "


def test_observed_shows_requirements(tmp_path: Path) -> None:
    stack = _write(tmp_path, manifest())
    # The same Managed stack: offline its requirements decide nothing...
    assert "Requirements" not in _text("-f", str(stack))
    # ...against facts they do.
    facts = {"apis": {"cert-manager.io": {"certificates": ["v1"]}}}
    out = _text("-f", str(stack), "--observed", str(_write(tmp_path, facts, "observed.yaml")))
    assert re.search(r"^Requirements: 1 of \d+ met on the observed target", out, re.M), out
    assert "x kube-prometheus-stack: CRD podmonitors.monitoring.coreos.com" in out


def test_offline_gateway_line_claims_no_read() -> None:
    out = _text("-f", str(EXAMPLE))
    line = next(line for line in out.splitlines() if line.startswith("Gateway"))
    assert "observed" not in line and "none" not in line
    assert "once" in line  # says what will happen


def _stacks() -> list[Path]:
    return [EXAMPLE, *sorted(p for p in GOLDEN_INPUTS.glob("*.yaml") if ".observed" not in p.name)]


@pytest.mark.parametrize("stack", _stacks(), ids=lambda p: p.stem)
def test_every_line_fits_80_columns_in_a_pipe(stack: Path) -> None:
    args = ["-f", str(stack)]
    observed = stack.with_name(f"{stack.stem}.observed.yaml")
    if observed.exists():
        args += ["--observed", str(observed)]
    out = _text(*args)
    too_wide = [line for line in out.splitlines() if len(line) > 80]
    assert not too_wide, "\n".join(too_wide)


def test_a_dynamo_stack_fits_80_columns(tmp_path: Path) -> None:
    data = manifest(
        stack="Dynamo",
        gateway={"hostname": "a.example", "clientCAs": [{"name": "fleet", "certificate": CA_PEM}]},
    )
    out = _text("-f", str(_write(tmp_path, data)))
    assert "grove (after kai-scheduler)" in re.sub(r"\s+", " ", out)
    assert max(len(line) for line in out.splitlines()) <= 80


@pytest.mark.parametrize(("columns", "wide"), [(80, False), (159, False), (160, True)])
def test_on_a_terminal_it_fits_the_width_and_has_colour(columns: int, wide: bool) -> None:
    render = [sys.executable, "-m", "modelplane.cli.main", "render", "-f", str(EXAMPLE)]
    raw = on_a_pty(render, columns=columns)
    assert "\x1b[" in raw  # colour and bold on a terminal
    out = ANSI.sub("", raw)
    assert max(len(line) for line in out.splitlines()) <= columns
    assert "Install order" in out
    # Like kubectl's printers: the chart source is a column only where it
    # fits, and its own section below the table otherwise.
    header = next(line for line in out.splitlines() if "COMPONENT" in line)
    assert ("SOURCE" in header) is wide
    assert ("Sources" in out) is not wide


@pytest.mark.parametrize("stack", _stacks(), ids=lambda p: p.stem)
def test_no_line_ends_in_padding_in_a_pipe(stack: Path) -> None:
    # Tables pad their cells to the column width; in a log or a README that
    # is trailing whitespace, which editors and diffs flag.
    out = _text("-f", str(stack))
    padded = [line for line in out.splitlines() if line != line.rstrip()]
    assert not padded, "\n".join(repr(line) for line in padded[:5])
