"""The operator pod's own projected token is an AWS identity only with --allow-operator-identity.

A Secret that names ``webIdentityTokenFile`` asks the operator to hand STS
its own IRSA token, so the stack would act as the operator's IAM role. Whoever
can write a Secret and a ServingStack in a watched namespace could do that,
so the operator refuses it unless its operator chose to allow it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelplane.api.spec import SecretType
from modelplane.credentials.connect import Credentials, CredentialsError, Identity, connect
from modelplane.credentials.identity import aws
from modelplane.credentials.identity.base import (
    Endpoints,
    IdentityError,
    IdentityFailure,
    TargetInfo,
)
from modelplane.credentials.identity.cache import TokenCache
from modelplane.operator.options import OperatorOptions

ROLE = "arn:aws:iam::111122223333:role/modelplane"
IRSA = json.dumps({"roleArn": ROLE, "webIdentityTokenFile": aws.IRSA_TOKEN_FILE}).encode()
TARGET = TargetInfo(cluster_name="west", server="https://west.example.com")

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: west, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {}}]
contexts: [{name: west, context: {cluster: west, user: u}}]
current-context: west
"""


def test_the_pod_token_is_refused_by_default_naming_the_flag(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    projected = tmp_path / "token"
    projected.write_text("pod-token")
    monkeypatch.setattr(aws, "IRSA_TOKEN_FILE", str(projected))
    value = json.dumps({"roleArn": ROLE, "webIdentityTokenFile": str(projected)}).encode()
    with pytest.raises(IdentityError) as err:
        aws.minter(value, TARGET, Endpoints())
    assert err.value.failure is IdentityFailure.INVALID
    assert "--allow-operator-identity" in err.value.message
    assert "webIdentityTokenFile" in err.value.message


def test_the_pod_token_is_accepted_with_the_flag() -> None:
    minter = aws.minter(IRSA, TARGET, Endpoints(allow_operator_identity=True))
    assert minter.cluster == "west"


def test_a_token_in_the_secret_needs_no_flag() -> None:
    value = json.dumps({"roleArn": ROLE, "webIdentityToken": "eyJa.eyJb.c"}).encode()
    assert aws.minter(value, TARGET, Endpoints()).cluster == "west"


def test_the_operator_option_reaches_the_provider() -> None:
    assert OperatorOptions().endpoints().allow_operator_identity is False
    assert OperatorOptions(allow_operator_identity=True).endpoints().allow_operator_identity


async def test_the_operator_gives_identity_invalid_without_reading_the_file() -> None:
    credentials = Credentials(
        KUBECONFIG,
        Identity(SecretType.AWS_WEB_IDENTITY_CREDENTIALS, IRSA, "Secret t/aws key 'k'"),
    )
    with pytest.raises(CredentialsError) as err:
        await connect(
            credentials,
            tokens=TokenCache(),
            endpoints=OperatorOptions().endpoints(),
        )
    assert err.value.reason == "IdentityInvalid"
    assert "--allow-operator-identity" in str(err.value)
    assert "Secret t/aws key 'k'" in str(err.value)
