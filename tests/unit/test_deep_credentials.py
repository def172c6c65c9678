"""Credentials nested thousands deep are a clear refusal, never a RecursionError."""

from __future__ import annotations

import pytest

from modelplane.credentials.connect import vetted_kubeconfig
from modelplane.credentials.identity.base import Endpoints, IdentityError, TargetInfo, json_fields
from modelplane.credentials.identity.google import minter
from modelplane.credentials.kubeconfig import KubeconfigError, parse_kubeconfig

DEEP_JSON = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
DEEP_YAML = "clusters: " + "[" * 100_000 + "]" * 100_000 + "\n"


def test_a_deep_kubeconfig_is_refused() -> None:
    with pytest.raises(KubeconfigError, match="not valid YAML"):
        parse_kubeconfig(DEEP_YAML)
    # Beside a cloud identity too: refused by the one parse, before users are emptied.
    with pytest.raises(KubeconfigError, match="not valid YAML"):
        vetted_kubeconfig(DEEP_YAML, identity=True, allow_unsafe=False)


def test_a_deep_identity_secret_is_refused() -> None:
    with pytest.raises(IdentityError, match="not a JSON object"):
        json_fields(DEEP_JSON, {"a"}, kind="AWSWebIdentityCredentials", expected="a token file")


def test_a_deep_google_key_is_refused() -> None:
    with pytest.raises(IdentityError):
        minter(DEEP_JSON, TargetInfo(cluster_name="c", server="https://x"), Endpoints())
