"""kopf logs in to the hub of the kubeconfig given, read once: never by way of $KUBECONFIG."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path

import kopf
import pytest
import yaml
from typer.testing import CliRunner

from modelplane.cli.main import app
from modelplane.operator import process
from modelplane.operator.hub import (
    HUB_CONNECTIONS,
    bounded_session,
    connection_info,
    kopf_watches,
    load_config,
)
from modelplane.operator.options import OperatorOptions


def _kubeconfig(directory: Path, user: dict[str, object]) -> Path:
    path = directory / "hub.kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "hub",
                        "cluster": {
                            "server": "https://hub.example:6443",
                            "certificate-authority": "ca.crt",
                        },
                    }
                ],
                "users": [{"name": "op", "user": user}],
                "contexts": [
                    {"name": "hub", "context": {"cluster": "hub", "user": "op", "namespace": "ops"}}
                ],
                "current-context": "hub",
            }
        )
    )
    return path


def test_kopf_gets_the_cluster_and_user_of_the_file_given(tmp_path: Path) -> None:
    path = _kubeconfig(
        tmp_path, {"client-certificate": "certs/op.crt", "client-key": "/abs/op.key"}
    )
    info = connection_info(load_config(path))
    assert info.server == "https://hub.example:6443"
    # Relative names are the kubeconfig's own directory's, as kubectl reads them.
    assert info.ca_path == str(tmp_path / "ca.crt")
    assert info.certificate_path == str(tmp_path / "certs/op.crt")
    assert info.private_key_path == "/abs/op.key"
    assert info.token is None
    assert info.default_namespace == "ops"


def test_a_token_file_is_read_again_at_every_login(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    config = load_config(_kubeconfig(tmp_path, {"tokenFile": "token"}))
    assert connection_info(config).token == "first"
    # A projected ServiceAccount token is rotated in place; kopf logs in
    # again after a 401 and must get the new one.
    token.write_text("second\n")
    assert connection_info(config).token == "second"


@pytest.mark.parametrize(
    ("user", "token"),
    [
        ({"token": "inline"}, "inline"),
        (
            {"auth-provider": {"name": "oidc", "config": {"access-token": "from-provider"}}},
            "from-provider",
        ),
        ({"username": "u", "password": "p"}, None),
    ],
)
def test_the_token_kopf_gets(tmp_path: Path, user: dict[str, object], token: str | None) -> None:
    assert connection_info(load_config(_kubeconfig(tmp_path, user))).token == token


def test_run_passes_the_kubeconfig_on_and_leaves_the_environment_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "someone-elses.kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(elsewhere))
    seen: list[OperatorOptions] = []

    async def operator(options: OperatorOptions) -> None:
        seen.append(options)
        # What the operator would find in its environment while it runs.
        seen_env.append(os.environ.get("KUBECONFIG"))

    seen_env: list[str | None] = []
    monkeypatch.setattr(process, "run", operator)
    hub = _kubeconfig(tmp_path, {"token": "t"})
    result = CliRunner().invoke(app, ["run", "--kubeconfig", str(hub)])
    assert result.exit_code == 0, result.output
    assert [o.hub_kubeconfig for o in seen] == [hub]
    assert seen_env == [str(elsewhere)]
    assert os.environ["KUBECONFIG"] == str(elsewhere)


def test_kopf_session_opens_a_bounded_number_of_connections_to_the_hub(tmp_path: Path) -> None:
    # kopf's own session has no limit: an operator starting over thousands
    # of stacks opened a connection to the hub for each.
    info = connection_info(load_config(_kubeconfig(tmp_path, {"token": "secret-token"})))
    # The system's CAs: the kubeconfig's CA file is a name only here.
    info = dataclasses.replace(info, ca_path=None)

    async def built() -> tuple[object, int, str | None, str, str | None]:
        context = bounded_session(info, watches=1)
        session = context.aiohttp_session
        try:
            limit = session.connector.limit if session.connector is not None else 0
            return (
                context,
                limit,
                session.headers.get("Authorization"),
                context.server,
                context.default_namespace,
            )
        finally:
            await session.close()

    context, limit, authorization, server, namespace = asyncio.run(built())
    assert isinstance(context, kopf.AiohttpSession)
    # One connection for kopf's watch, HUB_CONNECTIONS for the rest.
    assert limit == HUB_CONNECTIONS + 1 > 1
    assert authorization == "Bearer secret-token"
    assert (server, namespace) == ("https://hub.example:6443", "ops")


@pytest.mark.parametrize(
    ("namespaces", "clusterwide", "watches"),
    [
        ([], True, 1),
        (["a"], True, 1),
        (["a"], False, 1),
        ([f"team-{i}" for i in range(30)], False, 30),
    ],
)
def test_each_of_kopfs_watches_has_a_connection_besides_the_bound(
    namespaces: list[str], clusterwide: bool, watches: int
) -> None:
    # A watch holds its connection while it runs: thirty watched namespaces
    # under a bound of twenty would leave kopf no connection to patch with.
    assert kopf_watches(namespaces, clusterwide) == watches
