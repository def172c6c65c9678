"""Golden files of ``modelplane render``, text and json.

Every ``inputs/<case>.yaml`` is rendered (with ``inputs/<case>.observed.yaml``
as ``--observed`` when that file exists, and the flags in ``inputs/<case>.args``,
one a line, when that one does) and compared byte for byte with
``expected/<case>.txt`` and ``expected/<case>.json``. After an intended change,
regenerate them and review the diff:

    UPDATE_GOLDEN=1 python -m pytest tests/golden
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from modelplane.cli.main import app

HERE = Path(__file__).parent
INPUTS = HERE / "inputs"
EXPECTED = HERE / "expected"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

CASES = sorted(p.stem for p in INPUTS.glob("*.yaml") if not p.stem.endswith(".observed"))
FORMATS = {"text": "txt", "json": "json"}


def render(case: str, output: str, env: dict[str, str] | None = None) -> str:
    args = ["render", "-f", str(INPUTS / f"{case}.yaml"), "-o", output]
    observed = INPUTS / f"{case}.observed.yaml"
    if observed.exists():
        args += ["--observed", str(observed)]
    flags = INPUTS / f"{case}.args"
    if flags.exists():
        args += [line for line in flags.read_text().splitlines() if line]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    # The file names in the output, if any, must not depend on the checkout.
    return str(result.stdout).replace(str(HERE), "tests/golden")


def test_cases_cover_the_issue() -> None:
    for required in (
        "standard-managed",
        "standard-provided",
        "dynamo-managed",
        "dynamo-provided",
        "standard-managed-hostname",
        "standard-managed-hostname-clientcas",
        "dynamo-managed-hostname-clientcas",
        "standard-provided-hostname-clientcas",
        "dynamo-provided-hostname-clientcas",
        "standard-managed-gke",
        "dynamo-managed-mirror",
        "standard-provided-mirror",
    ):
        assert required in CASES


@pytest.mark.parametrize("output", sorted(FORMATS))
@pytest.mark.parametrize("case", CASES)
def test_render_matches_golden(case: str, output: str) -> None:
    got = render(case, output)
    path = EXPECTED / f"{case}.{FORMATS[output]}"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(got)
    assert path.exists(), f"no golden file {path}; run with UPDATE_GOLDEN=1"
    assert got == path.read_text(), f"{path} differs; run with UPDATE_GOLDEN=1 and review"


def test_no_stale_golden_files() -> None:
    expected = {f"{case}.{ext}" for case in CASES for ext in FORMATS.values()}
    assert {p.name for p in EXPECTED.iterdir()} == expected


def test_text_output_ignores_the_environment() -> None:
    case = "dynamo-managed-hostname-clientcas"
    noisy = {"COLUMNS": "40", "LINES": "10", "FORCE_COLOR": "1", "TERM": "xterm-256color"}
    assert render(case, "text", env=noisy) == render(case, "text")
    assert "\x1b" not in render(case, "text", env=noisy)
