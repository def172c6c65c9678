"""What ``render``, ``check`` and ``run`` say and take about cloud identities."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from modelplane.cli.main import app
from modelplane.plan import plan
from modelplane.plan.observed import Observed

from .conftest import StackFactory

KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "west", "cluster": {"server": "https://127.0.0.1:1"}}],
    "users": [
        {
            "name": "u",
            "user": {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "command": "gke-gcloud-auth-plugin",
                }
            },
        }
    ],
    "contexts": [{"name": "west", "context": {"cluster": "west", "user": "u"}}],
    "current-context": "west",
}


def test_the_plan_says_which_identity_the_spec_uses(make_stack: StackFactory) -> None:
    stack = make_stack(
        secrets=[
            {"type": "Kubeconfig", "name": "west-kubeconfig", "key": "kubeconfig"},
            {
                "type": "GoogleApplicationCredentials",
                "name": "gke-deployer",
                "key": "key.json",
                "namespace": "identities",
            },
        ]
    )
    notes = plan(stack, Observed()).notes
    assert any(
        "as the GoogleApplicationCredentials identity in Secret identities/gke-deployer "
        "(key key.json)"
        in n
        and "its own credentials are never used" in n
        for n in notes
    ), notes


def test_a_plan_without_identity_names_none(make_stack: StackFactory) -> None:
    assert not any("identity" in n for n in plan(make_stack(), Observed()).notes)


def _check(tmp_path: Path, *args: str) -> tuple[int, str]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(KUBECONFIG))
    result = CliRunner().invoke(app, ["check", "--kubeconfig", str(kubeconfig), *args])
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--identity-type", "GoogleApplicationCredentials"], "go together"),
        (["--identity-file", "x.json"], "go together"),
        (["--identity-type", "Kubeconfig", "--identity-file", "x"], "not a cloud identity type"),
        (
            ["--identity-type", "GoogleApplicationCredentials", "--identity-file", "/nonexistent"],
            "cannot be read",
        ),
    ],
)
def test_check_identity_flags_are_usage_errors_when_wrong(
    tmp_path: Path, args: list[str], words: str
) -> None:
    code, output = _check(tmp_path, *args)
    assert code == 2
    assert words in output
    assert "Traceback" not in output


def test_check_names_the_field_of_a_malformed_key(tmp_path: Path) -> None:
    key = tmp_path / "key.json"
    key.write_text('{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----"}')
    code, output = _check(
        tmp_path, "--identity-type", "GoogleApplicationCredentials", "--identity-file", str(key)
    )
    assert code == 2
    assert "IdentityInvalid" in output and "client_email" in output
    assert "BEGIN PRIVATE KEY" not in output


def test_run_refuses_a_token_endpoint_that_is_not_a_url() -> None:
    result = CliRunner().invoke(app, ["run", "--aws-sts-endpoint", "sts.amazonaws.com"])
    assert result.exit_code == 2
    assert "--aws-sts-endpoint" in result.output
