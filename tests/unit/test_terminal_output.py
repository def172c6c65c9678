"""What a target holds never reaches a terminal raw: render and check print it printable."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from modelplane.api.models import ServingStack
from modelplane.cli import check, output, render
from modelplane.cli.main import app
from modelplane.pins import Stack
from modelplane.plan import Observed, plan
from modelplane.plan.model import GatewayReport, RequirementResult, RequirementStatus, Severity

from .conftest import manifest

ESC = "\x1b[2J\x1b]8;;http://evil\x1b\\"
# Anything a terminal acts on but a newline: C0/C1 controls, bidi overrides.
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _observed(tmp_path: Path) -> Path:
    path = tmp_path / "observed.json"
    facts = {
        "gateway_addresses": [f"{ESC}addr\u202e"],
        # A CRD the target serves at a version of its own naming: the unmet
        # requirement's message names the versions it found.
        "apis": {"cert-manager.io": {"certificates": [f"v0{ESC}"]}},
        "releases": {
            "mp-cert-manager": {
                "name": "mp-cert-manager",
                "namespace": "cert-manager",
                "revision": 1,
                "status": f"deployed{ESC}",
            }
        },
    }
    path.write_text(json.dumps(facts))
    return path


@pytest.mark.parametrize("components", ["Managed", "Provided"])
def test_render_text_shows_observed_escapes_escaped(tmp_path: Path, components: str) -> None:
    stack = tmp_path / "stack.yaml"
    stack.write_text(json.dumps(manifest(components=components)))
    result = CliRunner().invoke(
        app, ["render", "-f", str(stack), "--observed", str(_observed(tmp_path))]
    )
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout
    assert not CONTROL.search(result.stdout)
    # Shown, escaped, not dropped: a person sees what the target holds.
    assert "\\u001b[2J\\u001b]8;;http://evil" in result.stdout


def _results() -> list[RequirementResult]:
    return [
        RequirementResult(
            component=f"envoy-gateway{ESC}",
            requirement=f"a Deployment{ESC}",
            status=RequirementStatus.WARNING,
            message=f"Deployment ns/eg{ESC} runs image{ESC}",
            severity=Severity.ADVISORY,
        ),
        RequirementResult(
            component="cert-manager",
            requirement="CRD served",
            status=RequirementStatus.UNMET,
            message=f"served versions v0{ESC}",
        ),
    ]


def test_check_table_shows_observed_escapes_escaped() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, highlight=False)
    check.print_table(Stack.STANDARD, f"https://x{ESC}", _results(), console, None)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())  # the console's own colours
    assert "\x1b" not in text
    assert not CONTROL.search(text)
    assert "\\u001b]8;;http://evil" in text


def test_check_errors_show_escapes_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit):
        output.fail(f"the API server at https://x answered 500 {ESC}")
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert err.startswith("error: the API server at https://x answered 500 \\u001b")


def test_render_says_why_the_ca_is_not_published() -> None:
    stack = ServingStack.model_validate(manifest(gateway={"hostname": "west.example.com"}))
    p = plan(stack, Observed())
    problem = f"the Bundle's ConfigMap holds a block that is not a CERTIFICATE{ESC}"
    p = p.model_copy(update={"gateway": GatewayReport(ca_problem=problem)})
    out = io.StringIO()
    render.print_text(p, render.text_console(out))
    assert "CA certificate not published: the Bundle's ConfigMap holds a block" in out.getvalue()
    assert "\x1b" not in out.getvalue()
    assert render.plan_document(p)["gateway"]["caProblem"] == problem
    # Without a problem the document keeps its shape.
    assert "caProblem" not in render.plan_document(plan(stack, Observed()))["gateway"]
