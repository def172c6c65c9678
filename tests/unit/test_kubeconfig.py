"""Kubeconfigs from Secrets are vetted before any client sees them."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from modelplane.credentials.kubeconfig import KubeconfigError, parse_kubeconfig


def kubeconfig(user: dict[str, Any] | None = None, cluster: dict[str, Any] | None = None) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "target",
            "contexts": [{"name": "target", "context": {"cluster": "c", "user": "u"}}],
            "clusters": [
                {
                    "name": "c",
                    "cluster": cluster
                    or {"server": "https://127.0.0.1:6443", "certificate-authority-data": "Q0E="},
                }
            ],
            "users": [{"name": "u", "user": user or {"token": "secret-token"}}],
        }
    )


def test_embedded_token_is_accepted() -> None:
    config = parse_kubeconfig(kubeconfig())
    assert config.cluster.server == "https://127.0.0.1:6443"


@pytest.mark.parametrize(
    ("user", "cluster", "words"),
    [
        ({"exec": {"command": "gke-gcloud-auth-plugin"}}, None, "'exec'"),
        ({"auth-provider": {"name": "gcp"}}, None, "'auth-provider'"),
        (
            {"client-certificate": "/etc/x.crt", "client-key-data": "a2V5"},
            None,
            "'client-certificate'",
        ),
        ({"client-certificate-data": "Y2VydA==", "client-key": "/etc/x.key"}, None, "'client-key'"),
        ({"tokenFile": "/var/run/token"}, None, "'tokenFile'"),
        (
            None,
            {"server": "https://x", "certificate-authority": "/etc/ca.crt"},
            "'certificate-authority'",
        ),
    ],
    ids=["exec", "auth-provider", "cert-file", "key-file", "token-file", "ca-file"],
)
def test_plugins_and_file_paths_are_refused(
    user: dict[str, Any] | None, cluster: dict[str, Any] | None, words: str
) -> None:
    with pytest.raises(KubeconfigError) as err:
        parse_kubeconfig(kubeconfig(user, cluster))
    assert words in str(err.value)
    # The message names the field, never a credential.
    assert "secret-token" not in str(err.value)


def test_unsafe_is_allowed_only_when_asked() -> None:
    text = kubeconfig(
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "true"}}
    )
    with pytest.raises(KubeconfigError, match="'exec'"):
        parse_kubeconfig(text)
    config = parse_kubeconfig(text, allow_unsafe=True)
    assert config.user.exec is not None and config.user.exec.command == "true"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("clusters: [unclosed", "not valid YAML"),
        ("- a list", "not a YAML mapping"),
        (yaml.safe_dump({"clusters": []}), "no current-context"),
        (
            kubeconfig().replace("current-context: target", "current-context: other"),
            "no context 'other'",
        ),
        (kubeconfig(cluster={"certificate-authority-data": "Q0E="}), "has no server"),
    ],
    ids=["not-yaml", "not-mapping", "no-current-context", "unknown-context", "no-server"],
)
def test_broken_kubeconfigs_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(KubeconfigError) as err:
        parse_kubeconfig(text)
    assert words in str(err.value)


def test_a_context_named_like_a_date_is_a_name() -> None:
    # Seen live: ReconcileError "ValueError: month must be in 1..12".
    text = kubeconfig().replace("target", "2001-13-01")
    assert parse_kubeconfig(text).context_name == "2001-13-01"


def test_a_kubeconfig_no_constructor_can_build_is_refused_as_such() -> None:
    text = kubeconfig().replace("current-context: target", "current-context: !!int twelve")
    with pytest.raises(KubeconfigError, match="not valid YAML"):
        parse_kubeconfig(text)
