"""``modelplane check``: the Provided-mode checks against any cluster, without a hub.

Exit status: 0 when every checked requirement is met, 1 when any is unmet, 2
for usage or connection errors (with the reason on stderr). Advisory results
(warnings, unknowns) never change the exit status.
"""

from __future__ import annotations

import enum
import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from modelplane.api.status_limits import TERMINAL
from modelplane.checks.checker import run_checks, summarize
from modelplane.cli.options import (
    AwsRegion,
    AwsStsEndpoint,
    Context,
    DenyTargetCidr,
    DeprecatedRequestTimeout,
    IdentityFile,
    IdentityType,
    ImagePullSecret,
    ImageRegistryMirror,
    Kubeconfig,
    NebiusTokenEndpoint,
    RequestTimeout,
    TargetOptions,
    source_options,
    target_options,
)
from modelplane.cli.options import request_timeout as request_timeout_of
from modelplane.cli.output import fail, output_option
from modelplane.cli.target import CommandError, LocalTarget, on_target, open_local, read_target
from modelplane.pins import Stack
from modelplane.plan.model import RequirementResult, RequirementStatus, Severity
from modelplane.plan.sources import Sources
from modelplane.untrusted import printable

EXIT_UNMET = 1

MARKS: dict[RequirementStatus, tuple[str, str]] = {
    RequirementStatus.MET: ("✓", "green"),
    RequirementStatus.UNMET: ("✗", "red"),
    RequirementStatus.WARNING: ("!", "yellow"),
    RequirementStatus.UNKNOWN: ("?", "cyan"),
}


class CheckFormat(enum.StrEnum):
    TABLE = "table"
    JSON = "json"


def _shown(value: object) -> str:
    """A value for the terminal, as markup that shows it as it is.

    What the cluster answered (messages, names, a server's words) may carry
    escapes a terminal would act on: they are shown escaped, never sent.
    """
    return escape(printable(value, TERMINAL))


async def _check(
    target: LocalTarget,
    options: TargetOptions,
    stack: Stack,
    timeout: float,
    sources: Sources | None = None,
) -> list[RequirementResult]:
    async with await open_local(target, options, timeout) as opened:
        return await run_checks(opened.client, stack, sources)


def run(
    target: LocalTarget,
    options: TargetOptions,
    stack: Stack,
    timeout: float = 10.0,
    sources: Sources | None = None,
) -> list[RequirementResult]:
    return on_target(target.server, _check(target, options, stack, timeout, sources))


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
    kubeconfig: Kubeconfig,
    context: Context = None,
    stack: Annotated[Stack, typer.Option("--stack", help="Which stack's requirements.")] = (
        Stack.STANDARD
    ),
    output: Annotated[CheckFormat, output_option()] = CheckFormat.TABLE,
    request_timeout: RequestTimeout = None,
    timeout: DeprecatedRequestTimeout = None,
    deny_target_cidr: DenyTargetCidr = None,
    identity_type: IdentityType = None,
    identity_file: IdentityFile = None,
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
    options = target_options(
        kubeconfig, context, identity_type, identity_file, deny_target_cidr,
        aws_sts_endpoint, aws_region, nebius_token_endpoint,
    )  # fmt: skip
    seconds = request_timeout_of(request_timeout, timeout)
    sources = source_options(
        image_registry_mirror=image_registry_mirror, image_pull_secret=image_pull_secret
    ).sources()
    try:
        target = read_target(options)
        results = run(target, options, stack, seconds, sources)
    except CommandError as err:
        fail(str(err))
    server = target.server
    if output is CheckFormat.JSON:
        print(json.dumps(document(stack, server, results, identity_type), indent=2))
    else:
        console = Console(highlight=False, soft_wrap=True, emoji=False)
        print_table(stack, server, results, console, identity_type)
    if not summarize(results).requirements_met:
        raise typer.Exit(EXIT_UNMET)
