"""``modelplane check`` takes the token endpoints ``modelplane run`` takes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from modelplane.cli.main import app
from modelplane.cli.options import _nebius_endpoint, target_options

KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "west", "cluster": {"server": "https://127.0.0.1:1"}}],
    "users": [{"name": "u", "user": {}}],
    "contexts": [{"name": "west", "context": {"cluster": "west", "user": "u"}}],
    "current-context": "west",
}
AWS = json.dumps({"roleArn": "arn:aws:iam::111122223333:role/r", "webIdentityToken": "t"})


def _check(tmp_path: Path, *args: str) -> tuple[int, str]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(KUBECONFIG))
    identity = tmp_path / "credentials.json"
    identity.write_text(AWS)
    result = CliRunner().invoke(
        app,
        [
            "check",
            "--kubeconfig",
            str(kubeconfig),
            "--identity-type",
            "AWSWebIdentityCredentials",
            "--identity-file",
            str(identity),
            *args,
        ],
    )
    return result.exit_code, result.output


def test_the_endpoints_reach_the_providers() -> None:
    endpoints = target_options(
        Path("kubeconfig"),
        aws_sts_endpoint="https://sts.eu-west-1.amazonaws.com",
        aws_region="eu-west-1",
        nebius_token_endpoint="n:443",
    ).endpoints
    assert endpoints.aws_sts == "https://sts.eu-west-1.amazonaws.com"
    assert endpoints.aws_region == "eu-west-1"
    assert endpoints.nebius_token_exchange == "n:443"


def test_an_sts_endpoint_that_is_not_a_url_is_a_usage_error(tmp_path: Path) -> None:
    code, output = _check(tmp_path, "--aws-sts-endpoint", "sts.amazonaws.com")
    assert code == 2
    assert "'--aws-sts-endpoint'" in output and "expected a URL" in output
    assert "Traceback" not in output


@pytest.mark.parametrize("command", ["check", "run"])
def test_both_commands_take_a_nebius_endpoint_as_the_provider_does(command: str) -> None:
    # check and run share the option, and it refuses what the provider would.
    refused = CliRunner().invoke(app, [command, "--nebius-token-endpoint", "ftp://x"])
    assert refused.exit_code == 2
    assert "'--nebius-token-endpoint'" in refused.output and "host:port" in refused.output
    assert _nebius_endpoint("tokens.iam.api.nebius.cloud:443") == "tokens.iam.api.nebius.cloud:443"


def test_a_region_that_is_not_one_names_it(tmp_path: Path) -> None:
    code, output = _check(tmp_path, "--aws-region", "Europe")
    assert code == 2
    assert "IdentityInvalid" in output and "region" in output
