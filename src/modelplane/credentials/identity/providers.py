"""Which provider mints tokens for each cloud identity type of ``spec.secrets``.

One line per provider: a type missing here is reported as unsupported, never
fallen back from to the kubeconfig's own credentials.
"""

from __future__ import annotations

from modelplane.api.spec import SecretType
from modelplane.credentials.identity import aws, google, nebius
from modelplane.credentials.identity.base import MinterFactory

PROVIDERS: dict[SecretType, MinterFactory] = {
    SecretType.GOOGLE_APPLICATION_CREDENTIALS: google.minter,
    SecretType.AWS_WEB_IDENTITY_CREDENTIALS: aws.minter,
    SecretType.NEBIUS_SERVICE_ACCOUNT_CREDENTIALS: nebius.minter,
}


def factory(kind: SecretType) -> MinterFactory | None:
    """The provider for ``kind``, or None when this operator has none."""
    return PROVIDERS.get(kind)
