"""Options ``check`` and ``run`` share, declared once so both read and refuse them alike."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

import typer

from modelplane.credentials.identity import nebius
from modelplane.credentials.identity.base import IdentityError


def _sts_url(value: str | None) -> str | None:
    if value is not None:
        parts = urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise typer.BadParameter(
                f"expected a URL such as https://sts.REGION.amazonaws.com, got {value!r}"
            )
    return value


def _nebius_endpoint(value: str | None) -> str | None:
    # The provider's own rule, so the flag refuses exactly what it would.
    if value is not None:
        try:
            nebius.exchange_endpoint(value)
        except IdentityError as err:
            raise typer.BadParameter(err.message) from None
    return value


AwsStsEndpoint = Annotated[
    str | None,
    typer.Option(
        "--aws-sts-endpoint",
        help="STS endpoint URL for AWSWebIdentityCredentials (regional, FIPS or private).",
        callback=_sts_url,
    ),
]
AwsRegion = Annotated[
    str | None,
    typer.Option(
        "--aws-region",
        help="AWS region of STS for AWSWebIdentityCredentials (default: the region of "
        "the kubeconfig's EKS cluster ARN, else us-east-1).",
    ),
]
NebiusTokenEndpoint = Annotated[
    str | None,
    typer.Option(
        "--nebius-token-endpoint",
        help="Token exchange endpoint for NebiusServiceAccountCredentials: host:port, "
        "https://host:port, or http:// on loopback (default tokens.iam.api.nebius.cloud:443).",
        callback=_nebius_endpoint,
    ),
]
