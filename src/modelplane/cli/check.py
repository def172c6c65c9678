"""``modelplane check``: the Provided-mode checks against any cluster, without a hub.

Exit status: 0 when every checked requirement is met, 1 when any is unmet, 2
for usage or connection errors (with the reason on stderr). Advisory results
(warnings, unknowns) never change the exit status.
"""

from __future__ import annotations

import asyncio
import enum
import json
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from rich.console import Console
from rich.markup import escape

from modelplane.api.models import SecretType
from modelplane.api.status_limits import TERMINAL
from modelplane.checks.checker import run_checks, summarize
from modelplane.cli.options import (
    AwsRegion,
    AwsStsEndpoint,
    ImagePullSecret,
    ImageRegistryMirror,
    NebiusTokenEndpoint,
    mirror_rules,
)
from modelplane.cli.options import pull_secrets as pull_secret_names
from modelplane.credentials.identity import providers
from modelplane.credentials.identity.base import Endpoints, IdentityError, TargetInfo
from modelplane.credentials.identity.cache import TokenSource
from modelplane.kube.address import DEFAULT_DENIED, AddressDenied, IPNetwork, deny_list
from modelplane.kube.answers import describe_error
from modelplane.kube.client import ApiStatusError, TargetError, open_target
from modelplane.pins import Stack
from modelplane.plan.images import MirrorRule
from modelplane.plan.model import RequirementResult, RequirementStatus, Severity
from modelplane.untrusted import printable

T = TypeVar("T")

EXIT_UNMET = 1
EXIT_USAGE = 2

MARKS: dict[RequirementStatus, tuple[str, str]] = {
    RequirementStatus.MET: ("✓", "green"),
    RequirementStatus.UNMET: ("✗", "red"),
    RequirementStatus.WARNING: ("!", "yellow"),
    RequirementStatus.UNKNOWN: ("?", "cyan"),
}


class CheckFormat(enum.StrEnum):
    TABLE = "table"
    JSON = "json"


class CheckError(Exception):
    """A usage or connection problem; the message is for a person."""


def _shown(value: object) -> str:
    """A value for the terminal, as markup that shows it as it is.

    What the cluster answered (messages, names, a server's words) may carry
    escapes a terminal would act on: they are shown escaped, never sent.
    """
    return escape(printable(value, TERMINAL))


def _fail(message: str) -> None:
    # The message may quote what the cluster answered.
    print(f"error: {printable(message, TERMINAL)}", file=sys.stderr)
    raise typer.Exit(EXIT_USAGE)


def load_config(path: Path, context: str | None) -> SingleConfig:
    if not path.is_file():
        raise CheckError(f"kubeconfig {path} does not exist or is not a file")
    try:
        kubeconfig = KubeConfig.from_file(str(path))
    except Exception as err:  # lightkube raises several kinds for a bad file
        raise CheckError(f"kubeconfig {path} cannot be read: {err}") from err
    try:
        config = kubeconfig.get(context_name=context)
    except Exception as err:
        what = f"context {context!r}" if context else "the current context"
        raise CheckError(f"kubeconfig {path}: {what} cannot be used: {err}") from err
    if config is None:
        raise CheckError(f"kubeconfig {path} has no current context: pass --context NAME")
    return config


IDENTITY_TYPES = [t.value for t in SecretType if t is not SecretType.KUBECONFIG]


def endpoints_of(
    aws_sts_endpoint: str | None,
    aws_region: str | None,
    nebius_token_endpoint: str | None,
    deny: tuple[IPNetwork, ...] = DEFAULT_DENIED,
) -> Endpoints:
    """The token services ``check`` sends to, as ``modelplane run`` takes them."""
    return Endpoints(
        aws_sts=aws_sts_endpoint,
        aws_region=aws_region,
        nebius_token_exchange=nebius_token_endpoint,
        deny=deny,
        # The person running check chose the identity file on their own
        # machine, so a webIdentityTokenFile there is their own token: none
        # of the operator's confused deputy, which --allow-operator-identity
        # guards against.
        allow_operator_identity=True,
    )


def load_identity(
    config: SingleConfig,
    kind: str | None,
    path: Path | None,
    deny: tuple[IPNetwork, ...] = DEFAULT_DENIED,
    endpoints: Endpoints | None = None,
) -> TokenSource | None:
    """The token source of ``--identity-type``/``--identity-file``, or None without them."""
    if kind is None and path is None:
        return None
    if kind is None or path is None:
        raise CheckError("--identity-type and --identity-file go together: give both, or neither")
    if kind not in IDENTITY_TYPES:
        raise CheckError(
            f"--identity-type {kind!r} is not a cloud identity type ({', '.join(IDENTITY_TYPES)})"
        )
    make = providers.factory(SecretType(kind))
    if make is None:
        raise CheckError(f"--identity-type {kind} is not supported by this version of modelplane")
    try:
        credential = path.read_bytes()
    except OSError as err:
        raise CheckError(f"--identity-file {path} cannot be read ({err.strerror})") from err
    info = TargetInfo(cluster_name=config.context.cluster, server=config.cluster.server)
    try:
        return TokenSource(make(credential, info, endpoints or Endpoints(deny=deny)))
    except IdentityError as err:
        raise CheckError(f"--identity-file {path}: {err.failure.value}: {err.message}") from None


async def _check(
    config: SingleConfig,
    stack: Stack,
    timeout: float,
    deny: tuple[IPNetwork, ...],
    identity: TokenSource | None = None,
    mirrors: tuple[MirrorRule, ...] = (),
    pull_secrets: tuple[str, ...] = (),
) -> list[RequirementResult]:
    target = await open_target(
        config, deny=deny, timeout=timeout, trust_env=False, identity=identity
    )
    async with target:
        if identity is not None:
            # Say a key that gives no token as such, before any request.
            await identity.token()
        return await run_checks(target.client, stack, mirrors, pull_secrets)


def run(
    config: SingleConfig,
    stack: Stack,
    timeout: float = 10.0,
    deny: tuple[IPNetwork, ...] = DEFAULT_DENIED,
    identity: TokenSource | None = None,
    mirrors: tuple[MirrorRule, ...] = (),
    pull_secrets: tuple[str, ...] = (),
) -> list[RequirementResult]:
    return on_target(
        config.cluster.server,
        _check(config, stack, timeout, deny, identity, mirrors, pull_secrets),
    )


def on_target(server: str, work: Coroutine[Any, Any, T], doing: str = "check") -> T:
    """Run ``work`` against the target at ``server``; every way it fails is a ``CheckError``."""
    try:
        return asyncio.run(work)
    except AddressDenied as err:
        raise CheckError(str(err)) from err
    except IdentityError as err:
        raise CheckError(
            f"the identity gave no token: {err.failure.value}: {err.message}"
        ) from None
    except ApiStatusError as err:
        if err.status in (401, 403):
            raise CheckError(
                f"the API server at {server} refused the credentials ({err.status} {err.reason})"
            ) from err
        raise CheckError(f"the API server at {server} answered {err}") from err
    except TargetError as err:
        raise CheckError(f"{err} ({server})") from err
    except Exception as err:  # exec plugins, TLS setup, timeouts: all "cannot connect"
        raise CheckError(
            f"cannot {doing} the cluster at {server}: {type(err).__name__}: {describe_error(err)}"
        ) from err


def document(
    stack: Stack, server: str, results: list[RequirementResult], identity: str | None = None
) -> dict[str, Any]:
    return {
        "stack": str(stack),
        "server": server,
        "identity": identity,
        "results": [
            {
                "component": r.component,
                "requirement": r.requirement,
                "status": str(r.status),
                "message": r.message,
                "severity": str(r.severity),
            }
            for r in results
        ],
        "summary": summarize(results).as_dict(),
    }


def print_table(
    stack: Stack,
    server: str,
    results: list[RequirementResult],
    console: Console,
    identity: str | None = None,
) -> None:
    who = f" as the {_shown(identity)} identity" if identity else ""
    console.print(f"[bold]modelplane check[/bold]: {stack} stack on {_shown(server)}{who}")
    component = None
    for r in results:
        if r.component != component:
            component = r.component
            console.print(f"\n[bold]{_shown(component)}[/bold]")
        mark, colour = MARKS[r.status]
        console.print(f"  [{colour}]{mark}[/{colour}] {_shown(r.requirement)}")
        if r.status is not RequirementStatus.MET:
            dim = r.severity is Severity.ADVISORY
            console.print(f"      {_shown(r.message)}", style="dim" if dim else None)
    s = summarize(results)
    verdict = (
        "[green]every checked requirement is met[/green]"
        if s.requirements_met
        else f"[red]{s.unmet} checked requirement{'s' if s.unmet != 1 else ''} unmet[/red]"
    )
    console.print(
        f"\nStatus: {verdict} ({s.met} met, {s.unmet} unmet, {s.warning} "
        f"warning{'s' if s.warning != 1 else ''}, {s.unknown} unknown)"
    )


def check(
    kubeconfig: Annotated[
        Path, typer.Option("--kubeconfig", help="Kubeconfig of the cluster to check.")
    ],
    context: Annotated[
        str | None, typer.Option("--context", help="Kubeconfig context (default: current).")
    ] = None,
    stack: Annotated[Stack, typer.Option("--stack", help="Which stack's requirements.")] = (
        Stack.STANDARD
    ),
    output: Annotated[CheckFormat, typer.Option("-o", "--output")] = CheckFormat.TABLE,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for each API request.", min=0.1)
    ] = 10.0,
    deny_target_cidr: Annotated[
        list[str] | None,
        typer.Option(
            "--deny-target-cidr",
            help="Never connect to an address in this range (repeatable; replaces the "
            "default: link-local and the cloud metadata addresses; 'default' stands for "
            "that list, 'none' for no range).",
        ),
    ] = None,
    identity_type: Annotated[
        str | None,
        typer.Option(
            "--identity-type",
            help="Authenticate as this cloud identity instead of the kubeconfig's user: "
            f"{', '.join(IDENTITY_TYPES)}. The kubeconfig then gives only server and CA.",
        ),
    ] = None,
    identity_file: Annotated[
        Path | None,
        typer.Option(
            "--identity-file",
            help="The identity's credential, as its Secret would hold it "
            "(GoogleApplicationCredentials: the service account key JSON; "
            "AWSWebIdentityCredentials: JSON with roleArn and webIdentityToken or "
            "webIdentityTokenFile; NebiusServiceAccountCredentials: the service account "
            "credentials JSON).",
        ),
    ] = None,
    aws_sts_endpoint: AwsStsEndpoint = None,
    aws_region: AwsRegion = None,
    nebius_token_endpoint: NebiusTokenEndpoint = None,
    image_registry_mirror: ImageRegistryMirror = None,
    image_pull_secret: ImagePullSecret = None,
) -> None:
    """Check a cluster against the requirements of a stack in Provided mode.

    Exit 0 when every checked requirement is met, 1 when any is unmet, 2 on
    usage or connection errors. Warnings and unknowns are advice only.
    """
    try:
        deny = deny_list(deny_target_cidr)
    except ValueError as err:
        _fail(f"--deny-target-cidr: {err}")
        return
    try:
        config = load_config(kubeconfig, context)
        endpoints = endpoints_of(aws_sts_endpoint, aws_region, nebius_token_endpoint, deny)
        identity = load_identity(config, identity_type, identity_file, deny, endpoints)
        # Checked already, as typer parsed them (cli.options).
        mirrors, names = mirror_rules(image_registry_mirror), pull_secret_names(image_pull_secret)
        results = run(config, stack, timeout, deny, identity, mirrors, names)
    except CheckError as err:
        _fail(str(err))
        return
    server = config.cluster.server
    if output is CheckFormat.JSON:
        print(json.dumps(document(stack, server, results, identity_type), indent=2))
    else:
        console = Console(highlight=False, soft_wrap=True, emoji=False)
        print_table(stack, server, results, console, identity_type)
    if not summarize(results).requirements_met:
        raise typer.Exit(EXIT_UNMET)
