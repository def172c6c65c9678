"""``--image-registry-mirror`` and ``--image-pull-secret``: refused clearly, carried to the plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from modelplane.cli.main import app
from modelplane.operator import process
from modelplane.operator.options import OperatorOptions
from modelplane.plan.images import parse_rules

from .conftest import manifest


@pytest.mark.parametrize("command", ["run", "render"])
@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--image-registry-mirror", "quay.io", "expected FROM=TO"),
        ("--image-registry-mirror", "quay=mirror.internal", "FROM must start with a registry"),
        ("--image-registry-mirror", "*=mirror", "TO must start with a registry"),
        ("--image-pull-secret", "Not_A_Name", "is not a Secret name"),
    ],
)
def test_a_bad_value_is_refused_naming_the_flag(
    tmp_path: Path, command: str, flag: str, value: str, says: str
) -> None:
    args = [command, flag, value]
    if command == "render":
        path = tmp_path / "stack.yaml"
        path.write_text(yaml.safe_dump(manifest()))
        args += ["-f", str(path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert flag in result.output
    assert "Traceback" not in result.output


def test_two_rules_for_one_registry_are_refused() -> None:
    result = CliRunner().invoke(
        app,
        [
            "run",
            *("--image-registry-mirror", "quay.io=a.internal"),
            *("--image-registry-mirror", "quay.io=b.internal"),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "two mirror rules" in result.output


def test_run_hands_the_rules_and_secrets_to_the_operator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[OperatorOptions] = []

    async def operator(options: OperatorOptions) -> None:
        seen.append(options)

    monkeypatch.setattr(process, "run", operator)
    result = CliRunner().invoke(
        app,
        [
            "run",
            *("--image-registry-mirror", "*=mirror.internal"),
            *("--image-pull-secret", "pull", "--image-pull-secret", "pull"),
        ],
    )
    assert result.exit_code == 0, result.output
    [options] = seen
    sources = options.sources()
    assert [str(r) for r in sources.image_mirrors] == ["*=mirror.internal"]
    assert sources.image_pull_secrets == ("pull",)


def test_the_options_carry_them_into_the_sources() -> None:
    options = OperatorOptions(
        image_mirrors=parse_rules(["quay.io=mirror.internal/quay"]), image_pull_secrets=("p",)
    )
    assert options.sources().image_mirrors == parse_rules(["quay.io=mirror.internal/quay"])
    assert options.sources().image_pull_secrets == ("p",)
    assert OperatorOptions().sources().image_mirrors == ()


def _render(tmp_path: Path, *extra: str) -> dict[str, Any]:
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(manifest(stack="Dynamo")))
    result = CliRunner().invoke(app, ["render", "-f", str(path), "-o", "json", *extra])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_render_plans_with_the_mirror(tmp_path: Path) -> None:
    doc = _render(
        tmp_path, "--image-registry-mirror", "*=mirror.internal", "--image-pull-secret", "pull"
    )
    releases = {r["component"]: r["values"] for r in doc["releases"]}
    assert releases["kai-scheduler"]["global"]["registry"] == (
        "mirror.internal/kai-scheduler/kai-scheduler"
    )
    assert releases["cert-manager"]["global"]["imagePullSecrets"] == [{"name": "pull"}]
    [proxy] = [o for o in doc["objects"] if o["kind"] == "EnvoyProxy"]
    deployment = proxy["spec"]["provider"]["kubernetes"]["envoyDeployment"]
    assert deployment["container"]["image"].startswith("mirror.internal/envoyproxy/envoy:")
    bare = _render(tmp_path)
    assert {r["component"]: r["digest"] for r in bare["releases"]} != {
        r["component"]: r["digest"] for r in doc["releases"]
    }
