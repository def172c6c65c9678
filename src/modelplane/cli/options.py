"""Options the commands share, declared once so each reads and refuses them alike."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

import typer

from modelplane.catalog.images import ImageError
from modelplane.credentials.identity import nebius
from modelplane.credentials.identity.base import IdentityError
from modelplane.kube.scrub import redact
from modelplane.operator.options import unknown_components
from modelplane.plan.images import MirrorRule, check_secret_names, parse_rules


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


def mirror_rules(values: list[str] | None) -> tuple[MirrorRule, ...]:
    """The ``--image-registry-mirror`` rules, or a BadParameter naming what is wrong."""
    try:
        return parse_rules(values or [])
    except ImageError as err:
        raise typer.BadParameter(str(err), param_hint="--image-registry-mirror") from None


def pull_secrets(values: list[str] | None) -> tuple[str, ...]:
    """The ``--image-pull-secret`` names, checked and deduplicated."""
    try:
        return check_secret_names(values or [])
    except ImageError as err:
        raise typer.BadParameter(str(err), param_hint="--image-pull-secret") from None


def _checked_rules(values: list[str] | None) -> list[str] | None:
    # Refused at parse time, before the command runs; the command parses
    # them again into rules (cheap, and typer keeps the declared type).
    mirror_rules(values)
    return values


def _checked_secrets(values: list[str] | None) -> list[str] | None:
    pull_secrets(values)
    return values


ImageRegistryMirror = Annotated[
    list[str] | None,
    typer.Option(
        "--image-registry-mirror",
        metavar="FROM=TO",
        help="Pull images from a mirror (repeatable): FROM is a registry or registry/path "
        "prefix, or * for any registry; TO the registry (and path) that replaces it, e.g. "
        "'*=mirror.internal' or 'quay.io/jetstack=mirror.internal/jetstack'. The most "
        "specific rule wins; tags and digests are kept.",
        callback=_checked_rules,
    ),
]
ImagePullSecret = Annotated[
    list[str] | None,
    typer.Option(
        "--image-pull-secret",
        metavar="NAME",
        help="A Secret every pod of the stack pulls images with (repeatable); it must exist "
        "on the target in each component's namespace.",
        callback=_checked_secrets,
    ),
]


def component_urls(values: list[str], flag: str, kind: str) -> dict[str, str]:
    """``COMPONENT=URL`` values as a mapping; a component the catalog lacks is refused."""
    out = {}
    for value in values:
        name, sep, url = value.partition("=")
        if not sep or not name or not url:
            # A URL given without its COMPONENT= is quoted without its userinfo.
            got = redact(value)
            raise typer.BadParameter(f"expected COMPONENT=URL, got {got!r}", param_hint=flag)
        out[name] = url
    problem = unknown_components(out, kind)
    if problem:
        raise typer.BadParameter(problem, param_hint=flag)
    return out


ChartRepository = Annotated[
    str | None,
    typer.Option(
        "--chart-repository",
        help="Take every chart from this Helm repository "
        "(https://... with an index.yaml, or an oci:// prefix), e.g. a mirror.",
    ),
]
ChartRepositoryFor = Annotated[
    list[str] | None,
    typer.Option(
        "--chart-repository-for",
        help="COMPONENT=URL: one component's chart repository (repeatable).",
    ),
]
GaieManifestsUrl = Annotated[
    str | None,
    typer.Option(
        "--gaie-manifests-url",
        help="Base URL of the Gateway API Inference "
        "Extension release manifests (<base>/<version>/manifests.yaml).",
    ),
]
ManifestsUrlFor = Annotated[
    list[str] | None,
    typer.Option(
        "--manifests-url-for",
        help="COMPONENT=BASE_URL for other fetched manifests (modelexpress-crds).",
    ),
]
# run's --helm-timeout, for apply and delete (run keeps its own declaration,
# which allows any integer).
HelmTimeout = Annotated[
    int, typer.Option("--helm-timeout", help="Seconds one helm action may take.", min=1)
]
