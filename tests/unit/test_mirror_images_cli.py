"""``modelplane mirror-images``: the mirror's contents as skopeo sync sources, offline."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from modelplane.cli.main import app

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "servingstack.yaml"
RULE = ["--image-registry-mirror", "*=mirror.internal"]


def test_the_sources_are_printed_each_under_its_command() -> None:
    result = CliRunner().invoke(app, ["mirror-images", "-f", str(EXAMPLE), *RULE])
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.output) if d]
    jetstack = next(d for d in docs if "quay.io" in d)
    assert jetstack["quay.io"]["images"]["jetstack/cert-manager-controller"]
    for chunk in result.output.split("---\n"):
        command = chunk.splitlines()[0]
        assert command.startswith("# skopeo sync --src yaml --dest docker sync-")
        assert command.split()[-1].startswith("mirror.internal/")


def test_with_a_directory_the_sources_are_written_and_the_commands_printed(
    tmp_path: Path,
) -> None:
    args = ["mirror-images", "-f", str(EXAMPLE), *RULE, "--dir", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    commands = result.output.splitlines()
    files = sorted(tmp_path.iterdir())
    assert len(commands) == len(files) > 0
    for command in commands:
        *_, path, destination = command.split()
        assert Path(path).parent == tmp_path
        source = yaml.safe_load(Path(path).read_text())
        [(_registry, entry)] = source.items()
        # Every image lands at <destination>/<its last path component>.
        assert all(destination.endswith(name.rpartition("/")[0]) for name in entry["images"])


def test_without_mirror_rules_there_is_nothing_to_say_where() -> None:
    result = CliRunner().invoke(app, ["mirror-images", "-f", str(EXAMPLE)])
    assert result.exit_code == 2
    assert "--image-registry-mirror" in result.output
