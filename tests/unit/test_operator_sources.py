"""``--chart-repository-for`` and ``--manifests-url-for`` take only components that exist.

A typo in a component name would otherwise be ignored, and that component's
chart or manifests fetched from the public upstream the mirror was meant to
replace.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from modelplane.cli.main import app
from modelplane.operator.options import OperatorOptions


@pytest.mark.parametrize(
    ("flag", "value", "known"),
    [
        ("--chart-repository-for", "certmanager=https://mirror.example/jetstack", "cert-manager"),
        # A component made of fetched manifests has no chart to take from a repository.
        ("--chart-repository-for", "gaie-crds=https://mirror.example/gaie", "cert-manager"),
        ("--manifests-url-for", "modelexpress=https://mirror.example/mx", "modelexpress-crds"),
        ("--manifests-url-for", "cert-manager=https://mirror.example/cm", "gaie-crds"),
    ],
)
def test_run_refuses_an_unknown_component_and_lists_the_known_ones(
    flag: str, value: str, known: str
) -> None:
    result = CliRunner().invoke(app, ["run", flag, value])
    assert result.exit_code == 2, result.output
    name = value.partition("=")[0]
    assert repr(name) in result.output
    assert known in result.output
    assert "Traceback" not in result.output


def test_the_options_refuse_unknown_components_however_they_are_built() -> None:
    with pytest.raises(ValidationError, match="certmanager"):
        OperatorOptions(chart_repository_for={"certmanager": "https://mirror.example"})
    with pytest.raises(ValidationError, match="modelexpress"):
        OperatorOptions(manifests_url_for={"modelexpress": "https://mirror.example"})
    ok = OperatorOptions(
        chart_repository_for={"cert-manager": "https://mirror.example/jetstack"},
        manifests_url_for={"modelexpress-crds": "https://mirror.example/mx"},
    )
    assert ok.sources().chart_repository_for == {"cert-manager": "https://mirror.example/jetstack"}
