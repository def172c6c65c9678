"""The flags the commands share: one declaration, one help text, one refusal, one read."""

from __future__ import annotations

import builtins
import io
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from modelplane.cli.main import app
from modelplane.cli.options import request_timeout

from .conftest import manifest

TARGET_COMMANDS = ["check", "diff", "apply", "delete"]
# Every flag more than one command takes, and the commands that take it.
SHARED = {
    "--file": ["render", "diff", "apply", "delete"],
    "--verbose": ["run", "apply", "delete"],
    "--kubeconfig": TARGET_COMMANDS,
    "--context": TARGET_COMMANDS,
    "--identity-type": TARGET_COMMANDS,
    "--identity-file": TARGET_COMMANDS,
    "--deny-target-cidr": ["run", *TARGET_COMMANDS],
    "--aws-sts-endpoint": ["run", *TARGET_COMMANDS],
    "--aws-region": ["run", *TARGET_COMMANDS],
    "--nebius-token-endpoint": ["run", *TARGET_COMMANDS],
    "--chart-repository": ["run", "diff", "apply", "delete"],
    "--chart-repository-for": ["run", "diff", "apply", "delete"],
    "--gaie-manifests-url": ["run", "diff", "apply", "delete"],
    "--manifests-url-for": ["run", "diff", "apply", "delete"],
    "--image-registry-mirror": ["render", "run", *TARGET_COMMANDS],
    "--image-pull-secret": ["render", "run", *TARGET_COMMANDS],
    "--helm-timeout": ["run", "apply", "delete"],
    "--request-timeout": ["check", "diff"],
}


def _option(command: str, flag: str) -> typer.core.TyperOption:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    for param in group.commands[command].params:
        if isinstance(param, typer.core.TyperOption) and flag in param.opts:
            return param
    raise AssertionError(f"{command} takes no {flag}")


@pytest.mark.parametrize("flag", sorted(SHARED))
def test_a_shared_flag_reads_the_same_in_every_command(flag: str) -> None:
    options = [_option(command, flag) for command in SHARED[flag]]
    helps = {o.help for o in options}
    assert len(helps) == 1 and None not in helps, helps
    kinds = {(o.multiple, o.required, o.min, str(o.type_descriptor.annotation)) for o in options}
    assert len(kinds) == 1, kinds


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--deny-target-cidr", "10.0.0.1/8"),
        ("--chart-repository-for", "nosuch=https://c.example"),
        ("--manifests-url-for", "nosuch=https://m.example"),
        ("--image-registry-mirror", "no-equals-sign"),
        ("--aws-sts-endpoint", "sts.amazonaws.com"),
    ],
)
def test_a_bad_shared_value_is_refused_alike_by_every_command(
    tmp_path: Path, flag: str, value: str
) -> None:
    stack = tmp_path / "stack.yaml"
    stack.write_text(yaml.safe_dump(manifest()))
    said = {}
    for command in [c for c in SHARED[flag] if c != "render"]:
        args = [command, flag, value]
        if command != "run":
            args += ["--kubeconfig", str(tmp_path / "nope")]
        if command in ("diff", "apply", "delete"):
            args += ["-f", str(stack)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, (command, result.output)
        # The refusal, without the usage line that names the command.
        said[command] = result.output.split("Error", 1)[1]
    assert len(set(said.values())) == 1, said
    assert flag in next(iter(said.values()))


# -- one name per meaning ---------------------------------------------------------------


def test_the_request_timeout_is_a_duration_and_defaults_to_ten_seconds() -> None:
    assert request_timeout(None) == 10.0
    assert request_timeout("2.5") == 2.5
    assert request_timeout("1m") == 60.0
    # --request-timeout wins over the old spelling when both are given.
    assert request_timeout("5s", "30") == 5.0
    assert request_timeout(None, "30") == 30.0


@pytest.mark.parametrize("command", ["check", "diff"])
def test_the_old_timeout_of_check_and_diff_still_works_and_says_it_is_deprecated(
    tmp_path: Path, command: str
) -> None:
    stack = tmp_path / "stack.yaml"
    stack.write_text(yaml.safe_dump(manifest()))
    base = [command, "--kubeconfig", str(tmp_path / "nope")]
    if command == "diff":
        base += ["-f", str(stack)]
    old = CliRunner().invoke(app, [*base, "--timeout", "3"])
    # It gets as far as the kubeconfig, which does not exist.
    assert old.exit_code == 2 and "does not exist" in old.stderr, old.output
    assert "--timeout is deprecated" in old.stderr and "--request-timeout" in old.stderr
    new = CliRunner().invoke(app, [*base, "--request-timeout", "3s"])
    assert new.exit_code == 2 and "does not exist" in new.stderr
    assert "deprecated" not in new.stderr
    bad = CliRunner().invoke(app, [*base, "--request-timeout", "soon"])
    assert bad.exit_code == 2 and "expected a duration" in bad.output
    # The whole run's --timeout is shown in the help of apply and delete only.
    assert not _option(command, "--timeout").help
    assert _option("apply", "--timeout").help == _option("delete", "--timeout").help


# -- the kubeconfig is read once per run ------------------------------------------------


def _kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                # Nothing listens on port 1: every command fails to connect, at once.
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


@pytest.mark.parametrize(
    ("command", "code"), [("check", 2), ("diff", 2), ("apply", 1), ("delete", 1)]
)
def test_a_run_reads_the_kubeconfig_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, code: int
) -> None:
    kubeconfig = _kubeconfig(tmp_path).resolve()
    stack = tmp_path / "stack.yaml"
    # Provided: apply and delete need no helm, and go on to connect.
    stack.write_text(yaml.safe_dump(manifest(components="Provided")))
    opened: Counter[Path] = Counter()
    real_open = io.open

    def counting_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, Path)):
            opened[Path(file).resolve()] += 1
        return real_open(file, *args, **kwargs)

    # pathlib opens through io.open, lightkube and yaml through the builtin.
    monkeypatch.setattr(io, "open", counting_open)
    monkeypatch.setattr(builtins, "open", counting_open)
    args = [command, "--kubeconfig", str(kubeconfig), "--deny-target-cidr", "none"]
    if command != "check":
        args += ["-f", str(stack), "--timeout" if command != "diff" else "--request-timeout", "20s"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == code, result.output
    # It got as far as connecting, and said why it could not.
    assert "connect" in result.output.lower() + result.stderr.lower(), result.output
    assert opened[kubeconfig] == 1
