"""``insecure-skip-tls-verify``: refused beside a cloud identity, said otherwise.

With the server's certificate unchecked, whoever answers at its address
(or on the path to it) is taken for the target: a cloud identity's token
would go to them, so that pairing is refused. Without an identity the
kubeconfig's own credential is at stake, which its author chose to send so;
it is allowed, and the connection carries a warning for the status.
"""

from __future__ import annotations

import pytest
import yaml

from modelplane.api.spec import SecretType
from modelplane.credentials.connect import Credentials, CredentialsError, Identity, connect
from modelplane.kube.client import INSECURE_TLS_WARNING


def kubeconfig(**cluster: object) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "x",
            "contexts": [{"name": "x", "context": {"cluster": "west", "user": "u"}}],
            "clusters": [{"name": "west", "cluster": {"server": "https://127.0.0.1:1", **cluster}}],
            "users": [{"name": "u", "user": {"token": "kubeconfig-token"}}],
        }
    )


IDENTITY = Identity(
    SecretType.GOOGLE_APPLICATION_CREDENTIALS, b"ya29.static-token", "Secret ns/gcp key 'key'"
)


async def test_skipping_tls_verification_beside_a_cloud_identity_is_refused() -> None:
    credentials = Credentials(kubeconfig(**{"insecure-skip-tls-verify": True}), IDENTITY)
    with pytest.raises(CredentialsError) as caught:
        await connect(credentials)
    assert caught.value.reason == "KubeconfigRefused"
    message = str(caught.value)
    assert "'west'" in message
    assert "insecure-skip-tls-verify" in message
    assert "certificate-authority-data" in message
    assert "ya29" not in message


async def test_a_plain_http_server_beside_a_cloud_identity_is_refused() -> None:
    credentials = Credentials(kubeconfig(server="http://127.0.0.1:1"), IDENTITY)
    with pytest.raises(CredentialsError) as caught:
        await connect(credentials)
    assert caught.value.reason == "KubeconfigRefused"
    assert "plain HTTP" in str(caught.value)
    assert "ya29" not in str(caught.value)


async def test_skipping_tls_verification_alone_connects_with_a_warning() -> None:
    target = await connect(kubeconfig(**{"insecure-skip-tls-verify": True}))
    async with target:
        assert target.warnings == (INSECURE_TLS_WARNING,)
    verified = await connect(kubeconfig())
    async with verified:
        assert verified.warnings == ()
    with_identity = await connect(Credentials(kubeconfig(), IDENTITY))
    async with with_identity:
        assert with_identity.warnings == ()
