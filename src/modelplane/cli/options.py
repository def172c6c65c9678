"""Options the commands share, declared once so each reads and refuses them alike.

Three groups: the target (which cluster, as whom, and where its requests
may go), the sources (where charts, manifests and images come from) and
helm. Each flag is one ``Annotated`` alias that every command taking it
includes, and each group is one frozen object built by one function, which
refuses a bad value with a ``BadParameter`` naming the flag. A value is
refused while typer parses (the aliases' callbacks), before any command runs.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import typer

from modelplane.api.spec import SecretType
from modelplane.catalog.images import ImageError
from modelplane.catalog.overrides import unknown_components
from modelplane.credentials.identity import nebius
from modelplane.credentials.identity.base import Endpoints, IdentityError
from modelplane.kube.address import IPNetwork, deny_list
from modelplane.kube.scrub import redact
from modelplane.plan.images import MirrorRule, check_secret_names, parse_rules
from modelplane.plan.sources import SourceFlags
from modelplane.untrusted import printable

# -- durations -----------------------------------------------------------------

_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def parse_duration(value: str) -> float:
    """``90``, ``90s``, ``10m``, ``1h30m``: seconds, as kubectl and helm take a timeout."""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        match = _DURATION.fullmatch(text)
        if not text or match is None or not any(match.groups()):
            raise typer.BadParameter(
                f"expected a duration such as 90s, 10m or 1h30m, got {printable(value, 80)!r}"
            ) from None
        hours, minutes, secs = (float(g) if g else 0.0 for g in match.groups())
        seconds = hours * 3600 + minutes * 60 + secs
    if not seconds > 0 or seconds == float("inf"):
        raise typer.BadParameter(f"expected a positive duration, got {printable(value, 80)!r}")
    return seconds


def _checked_duration(value: str | None) -> str | None:
    if value is not None:
        parse_duration(value)
    return value


# The whole run of apply or delete.
RunTimeout = Annotated[
    str,
    typer.Option(
        "--timeout",
        help="Give up after this long (90s, 10m, 1h30m).",
        callback=_checked_duration,
    ),
]

DEFAULT_REQUEST_TIMEOUT = "10s"
# Before --request-timeout, check and diff called it --timeout, which apply
# and delete use for the whole run: one name, two meanings.
_OLD_REQUEST_TIMEOUT = (
    "warning: --timeout is deprecated for check and diff and will be removed in the next "
    "release: use --request-timeout (apply and delete keep --timeout, for the whole run)"
)


def _deprecated_timeout(value: str | None) -> str | None:
    if value is not None:
        print(_OLD_REQUEST_TIMEOUT, file=sys.stderr)
        parse_duration(value)
    return value


RequestTimeout = Annotated[
    str | None,
    typer.Option(
        "--request-timeout",
        help="How long to wait for each API request (10s, 1m; a number alone is seconds; "
        f"default {DEFAULT_REQUEST_TIMEOUT}).",
        callback=_checked_duration,
    ),
]
DeprecatedRequestTimeout = Annotated[
    str | None,
    typer.Option("--timeout", hidden=True, callback=_deprecated_timeout),
]


def request_timeout(value: str | None, deprecated: str | None = None) -> float:
    """Seconds per request: ``--request-timeout``, else the old ``--timeout``, else 10."""
    return parse_duration(value or deprecated or DEFAULT_REQUEST_TIMEOUT)


# -- the staged rollout of upgrades (modelplane run) -----------------------------

MaxConcurrentUpgrades = Annotated[
    int,
    typer.Option(
        "--max-concurrent-upgrades",
        min=1,
        help="At most this many ServingStacks upgrade at once (within this operator's "
        "shard); the rest are reconciled at their installed versions until a slot frees.",
    ),
]
CanaryNamespaces = Annotated[
    list[str] | None,
    typer.Option(
        "--canary-namespace",
        help="The ServingStacks of this hub namespace are canaries (repeat for more): they "
        "upgrade first, and a stack elsewhere waits while a canary that wants the same "
        "upgrade has not finished it. A canary's failed upgrade pauses every upgrade of the "
        "shard; any other stack's, only those of its own namespace.",
    ),
]


def _removed_canary_selector(value: str | None) -> str | None:
    if value is not None:
        raise typer.BadParameter(
            "a stack's labels are its owner's to set, so they no longer make it a canary: "
            "name the canary namespaces with --canary-namespace",
            param_hint="--canary-selector",
        )
    return value


RemovedCanarySelector = Annotated[
    str | None,
    typer.Option("--canary-selector", hidden=True, callback=_removed_canary_selector),
]


def canary_namespaces(
    canaries: list[str], watched: list[str], all_namespaces: bool
) -> tuple[str, ...]:
    """``--canary-namespace``, checked: each one a namespace this operator serves."""
    if watched and not all_namespaces:
        outside = sorted(set(canaries) - set(watched))
        if outside:
            raise typer.BadParameter(
                f"{', '.join(outside)}: not watched by this operator (--namespace), so its "
                "stacks are not in this operator's rollout",
                param_hint="--canary-namespace",
            )
    return tuple(sorted(set(canaries)))


UpgradeReadyTimeout = Annotated[
    str,
    typer.Option(
        "--upgrade-ready-timeout",
        help="An upgraded ServingStack counts as done once it is Ready within this long "
        "(90s, 10m); one that is not pauses the rollout.",
        callback=_checked_duration,
    ),
]

NodeAgentMaxUnavailable = Annotated[
    int,
    typer.Option(
        "--node-agent-max-unavailable",
        min=1,
        help="After an upgrade of a node agent (the DRA kubelet plugin, the NFD worker), "
        "its pods are restarted a node at a time: at most this many nodes without a Ready "
        "agent at once.",
    ),
]
NodeAgentTimeout = Annotated[
    str,
    typer.Option(
        "--node-agent-timeout",
        help="A node whose agent is not Ready, and its node served again (ResourceSlices, "
        "NFD labels), within this long of its restart (90s, 5m) stops that stack's upgrade.",
        callback=_checked_duration,
    ),
]

# The words that turn the scheduler probe off.
_PROBE_OFF = frozenset({"0", "off"})


def _checked_probe(value: str | None) -> str | None:
    if value is not None and value.strip() not in _PROBE_OFF:
        parse_duration(value)
    return value


def probe_seconds(value: str) -> float:
    """--scheduler-probe-timeout in seconds; 0 when the probe is off."""
    return 0.0 if value.strip() in _PROBE_OFF else parse_duration(value)


SchedulerProbeTimeout = Annotated[
    str,
    typer.Option(
        "--scheduler-probe-timeout",
        help="Once Managed KAI is installed or upgraded, its scheduler must bind a probe pod "
        "within this long (90s, 2m) or its upgrade fails; 0 or off turns the probe off.",
        callback=_checked_probe,
    ),
]


# -- what every command that acts on a stack takes -------------------------------

StackFile = Annotated[Path, typer.Option("-f", "--file", help="The ServingStack manifest.")]
Verbose = Annotated[
    bool, typer.Option("--verbose", "-v", help="Log more of what the operator does, to stderr.")
]


# -- the target ----------------------------------------------------------------

IDENTITY_TYPES = [t.value for t in SecretType if t is not SecretType.KUBECONFIG]


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


def deny_ranges(values: list[str] | None) -> tuple[IPNetwork, ...]:
    """The ``--deny-target-cidr`` ranges, or a BadParameter naming the bad one."""
    try:
        return deny_list(values)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--deny-target-cidr") from None


def _checked_deny(values: list[str] | None) -> list[str] | None:
    deny_ranges(values)
    return values


Kubeconfig = Annotated[Path, typer.Option("--kubeconfig", help="Kubeconfig of the target cluster.")]
Context = Annotated[
    str | None, typer.Option("--context", help="Kubeconfig context (default: current).")
]
IdentityType = Annotated[
    str | None,
    typer.Option(
        "--identity-type",
        help="Authenticate as this cloud identity instead of the kubeconfig's user: "
        f"{', '.join(IDENTITY_TYPES)}. The kubeconfig then gives only server and CA.",
    ),
]
IdentityFile = Annotated[
    Path | None,
    typer.Option(
        "--identity-file",
        help="The identity's credential, as its Secret would hold it "
        "(GoogleApplicationCredentials: the service account key JSON; "
        "AWSWebIdentityCredentials: JSON with roleArn and webIdentityToken or "
        "webIdentityTokenFile; NebiusServiceAccountCredentials: the service account "
        "credentials JSON).",
    ),
]
DenyTargetCidr = Annotated[
    list[str] | None,
    typer.Option(
        "--deny-target-cidr",
        help="Never send a target's requests (nor let helm connect) to an address in this "
        "range (repeatable). Replaces the default: link-local (169.254.0.0/16, fe80::/10), "
        "the cloud metadata addresses and the unspecified ones (0.0.0.0/8, ::); 'default' "
        "stands for that list, 'none' for no range.",
        callback=_checked_deny,
    ),
]
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


@dataclass(frozen=True)
class TargetOptions:
    """The target group: one kubeconfig context, maybe a cloud identity, the deny list."""

    kubeconfig: Path
    context: str | None = None
    # Checked as a pair, with the file, when the target is read (cli.target).
    identity_type: str | None = None
    identity_file: Path | None = None
    endpoints: Endpoints = field(default_factory=Endpoints)

    @property
    def deny(self) -> tuple[IPNetwork, ...]:
        return self.endpoints.deny


def target_options(
    kubeconfig: Path,
    context: str | None = None,
    identity_type: str | None = None,
    identity_file: Path | None = None,
    deny_target_cidr: list[str] | None = None,
    aws_sts_endpoint: str | None = None,
    aws_region: str | None = None,
    nebius_token_endpoint: str | None = None,
) -> TargetOptions:
    """The target group of the command line; a BadParameter for a value that is wrong."""
    return TargetOptions(
        kubeconfig=kubeconfig,
        context=context,
        identity_type=identity_type,
        identity_file=identity_file,
        endpoints=Endpoints(
            aws_sts=_sts_url(aws_sts_endpoint),
            aws_region=aws_region,
            nebius_token_exchange=_nebius_endpoint(nebius_token_endpoint),
            deny=deny_ranges(deny_target_cidr),
            # The person running the command chose the identity file on their
            # own machine, so a webIdentityTokenFile there is their own token:
            # none of the operator's confused deputy, which
            # --allow-operator-identity guards against.
            allow_operator_identity=True,
        ),
    )


# -- the sources ---------------------------------------------------------------


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


def component_urls(values: list[str] | None, flag: str, kind: str) -> dict[str, str]:
    """``COMPONENT=URL`` values as a mapping; a component the catalog lacks is refused."""
    out = {}
    for value in values or []:
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


def _checked_rules(values: list[str] | None) -> list[str] | None:
    # Refused at parse time, before the command runs; the group's function
    # parses them again into rules (cheap, and typer keeps the declared type).
    mirror_rules(values)
    return values


def _checked_secrets(values: list[str] | None) -> list[str] | None:
    pull_secrets(values)
    return values


def _checked_charts(values: list[str] | None) -> list[str] | None:
    component_urls(values, "--chart-repository-for", "chart")
    return values


def _checked_manifests(values: list[str] | None) -> list[str] | None:
    component_urls(values, "--manifests-url-for", "manifests")
    return values


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
        callback=_checked_charts,
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
        callback=_checked_manifests,
    ),
]
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


# The sources group is the planner's own (plan.sources), checked here from the flags.
SourceOptions = SourceFlags


def source_options(
    chart_repository: str | None = None,
    chart_repository_for: list[str] | None = None,
    gaie_manifests_url: str | None = None,
    manifests_url_for: list[str] | None = None,
    image_registry_mirror: list[str] | None = None,
    image_pull_secret: list[str] | None = None,
) -> SourceOptions:
    """The sources group of the command line; a BadParameter for a value that is wrong."""
    return SourceOptions(
        chart_repository=chart_repository,
        chart_repository_for=component_urls(
            chart_repository_for, "--chart-repository-for", "chart"
        ),
        gaie_manifests_url=gaie_manifests_url,
        manifests_url_for=component_urls(manifests_url_for, "--manifests-url-for", "manifests"),
        image_mirrors=mirror_rules(image_registry_mirror),
        image_pull_secrets=pull_secrets(image_pull_secret),
    )


# -- helm ----------------------------------------------------------------------

HelmTimeout = Annotated[
    int, typer.Option("--helm-timeout", help="Seconds one helm action may take.", min=1)
]


@dataclass(frozen=True)
class HelmOptions:
    """The helm group: how long one helm action may take."""

    timeout_seconds: int = 600


def helm_options(helm_timeout: int = 600) -> HelmOptions:
    return HelmOptions(timeout_seconds=helm_timeout)
