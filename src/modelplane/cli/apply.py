"""``modelplane apply`` and ``delete``: one stack onto one cluster, without a hub.

Both run the operator's own ``StackReconciler`` (the same plan, actions,
claim and teardown); only where the target's credentials come from differs:
the person's kubeconfig (and, as for ``check``, an identity file) instead of
the stack's Secrets on a hub. The claim names the run (``cli:user@host``),
so a target a hub's ServingStack holds is refused, and a hub refuses a
target a laptop holds.

Exit status: 0 when the stack is Ready (``apply``) or gone (``delete``), 1
with the reason it is not, 2 for bad input (a stack or kubeconfig that
cannot be read, a bad flag), with the reason on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import tempfile
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import typer

from modelplane.actions.claim import Emit, LocalRun
from modelplane.actions.helm import NO_HELM, Helm, HelmError, TargetHelm
from modelplane.actions.helm import locate as locate_helm
from modelplane.api.models import ServingStack
from modelplane.cli.inputs import InputError, load_yaml, parse
from modelplane.cli.options import (
    AwsRegion,
    AwsStsEndpoint,
    ChartRepository,
    ChartRepositoryFor,
    Context,
    DenyTargetCidr,
    GaieManifestsUrl,
    HelmOptions,
    HelmTimeout,
    IdentityFile,
    IdentityType,
    ImagePullSecret,
    ImageRegistryMirror,
    Kubeconfig,
    ManifestsUrlFor,
    NebiusTokenEndpoint,
    RunTimeout,
    SourceOptions,
    StackFile,
    TargetOptions,
    Verbose,
    helm_options,
    parse_duration,
    source_options,
    target_options,
)
from modelplane.cli.output import TextOrJson, fail, output_option
from modelplane.cli.progress import (
    Line,
    Phase,
    Progress,
    lines_of,
    progress_for,
    teardown_lines,
)
from modelplane.cli.target import CommandError, LocalCredentials, credentials_of, read_target
from modelplane.kube.answers import describe_error
from modelplane.kube.errors import ErrorKind, classify
from modelplane.operator import (
    READY,
    OperatorOptions,
    Outcome,
    StackReconciler,
    Waiting,
    configure_logging,
    desired_status,
)
from modelplane.pins import ComponentsMode
from modelplane.plan import Plan, decisions
from modelplane.plan.decisions import BlockedReason
from modelplane.untrusted import printable

EXIT_NOT_DONE = 1

# Blocked reasons that are a wait whether or not --wait was given: the
# namespace of a stack just deleted is going away, or the claim changed
# hands under us.
WAITS = frozenset({BlockedReason.TARGET_NAMESPACE_TERMINATING, BlockedReason.CLAIM_CONTENDED})
# Blocked reasons no wait can change: it stops at once, --wait or not.
FINAL = frozenset({BlockedReason.TARGET_CLAIMED, BlockedReason.INVALID_SPEC})
# With --wait and nothing to do but wait, the target is looked at again
# after this long, unless its watches wake the run sooner.
POLL_SECONDS = 5.0
# Faults a teardown pass waits out rather than ends on.
TEARDOWN_WAITS = frozenset({ErrorKind.NAMESPACE_TERMINATING, ErrorKind.CLAIM_CONTENDED})
# Between teardown passes that wait for objects to go (as the operator's).
TEARDOWN_POLL_SECONDS = 2.0


# -- setting up ------------------------------------------------------------


@dataclass
class Run:
    """What one apply or delete works from, read and checked before anything is sent."""

    stack: ServingStack
    body: dict[str, Any]
    options: OperatorOptions
    credentials: LocalCredentials
    server: str


def _prepare(file: Path, target: TargetOptions, sources: SourceOptions, helm: HelmOptions) -> Run:
    """Read every input; exit 2 naming the first that is wrong."""
    try:
        body = load_yaml(file)
        stack = parse(ServingStack, body, str(file))
    except InputError as err:
        fail(str(err))
    try:
        local = read_target(target)
    except CommandError as err:
        fail(str(err))
    endpoints = target.endpoints
    options = OperatorOptions(
        **sources.operator_fields(),
        # The person's own kubeconfig and identity file (see cli.target).
        allow_unsafe_kubeconfig=True,
        allow_operator_identity=endpoints.allow_operator_identity,
        deny_target_cidrs=endpoints.deny,
        aws_sts_endpoint=endpoints.aws_sts,
        aws_region=endpoints.aws_region,
        nebius_token_endpoint=endpoints.nebius_token_exchange,
        helm_timeout_seconds=helm.timeout_seconds,
    )
    return Run(stack, body, options, credentials_of(local), local.server)


def _helm(run: Run, home: Path) -> TargetHelm:
    try:
        binary = locate_helm()
    except HelmError as err:
        fail(str(err))
    if binary is None and run.stack.spec.components is ComponentsMode.MANAGED:
        fail(f"{NO_HELM}: a Managed stack installs its substrate with helm")
    helm = Helm(binary or "", home, run.options.helm_timeout_seconds)
    return TargetHelm.guarding(helm, run.options.deny_target_cidrs)


def _reconciler(
    run: Run,
    helm: Helm,
    progress: Progress,
    emit: Emit | None = None,
    **extra: Any,
) -> StackReconciler:
    meta = run.stack.metadata
    return StackReconciler(
        None,
        helm,
        run.options,
        emit or progress.event,
        credentials=run.credentials,
        claimant=LocalRun.here(),
        label=f"{meta.namespace}/{meta.name}",
        **extra,
    )


# -- apply -----------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    done: bool
    message: str


def ready(outcome: Outcome) -> tuple[bool, str]:
    """The operator's Ready for this outcome: whether it holds, and its reason and message."""
    condition = next(c for c in desired_status(outcome, None)["conditions"] if c["type"] == READY)
    return condition["status"] == "True", f"{condition['reason']}: {condition['message']}"


def judge(outcome: Outcome, *, wait: bool, acted_on_nothing: bool) -> Verdict | None:
    """Ready, or why the run stops now; None to go on.

    Ready is the operator's own rule (``desired_status``). Without ``wait``
    the run stops once a reconcile found nothing it could do: what is left
    waits for something else (a failed action, a controller on the
    target); with it, only a reason no wait can change stops it early.
    """
    ok, message = ready(outcome)
    if ok:
        return Verdict(True, message)
    blocked = outcome.blocked_reason
    if blocked in FINAL:
        return Verdict(False, message)
    if blocked in WAITS or wait:
        return None
    if blocked is not None:
        return Verdict(False, message)
    if outcome.failures and set(outcome.failures) - outcome.waiting_on_webhook:
        return Verdict(False, message)
    if acted_on_nothing and not outcome.failures:
        return Verdict(False, message)
    return None


async def _apply(run: Run, helm: TargetHelm, progress: Progress, wait: bool) -> Verdict:
    wake = asyncio.Event()
    reconciler = _reconciler(run, helm, progress, wake=wake.set)

    def show(p: Plan) -> None:
        failures = reconciler.component_failures
        progress.lines(lines_of(p, failures.failures, failures.waiting_on_webhook))

    reconciler.on_plan = show
    streak = 0
    try:
        while True:
            wake.clear()
            outcome = await reconciler.reconcile(run.body)
            if outcome.plan is not None:
                progress.lines(lines_of(outcome.plan, outcome.failures, outcome.waiting_on_webhook))
            verdict = judge(outcome, wait=wait, acted_on_nothing=reconciler.acted_on_nothing)
            if verdict is not None:
                return verdict
            progress.note(ready(outcome)[1])
            streak = streak + 1 if outcome.blocked_reason or outcome.failures else 0
            if not reconciler.acted_on_nothing and outcome.blocked_reason is None:
                # It acted: what it did may let more go at once.
                continue
            delay = decisions.sleep_after(
                blocked=outcome.blocked_reason is not None,
                failed=bool(outcome.failures),
                retry_after=outcome.retry_after,
                resync_seconds=POLL_SECONDS,
                streak=streak,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), delay)
    finally:
        await reconciler.close()


def _run(
    coro: Coroutine[Any, Any, Verdict],
    helm: TargetHelm,
    progress: Progress,
    timeout: float,
    what: str,
) -> Verdict:
    async def bounded() -> Verdict:
        try:
            async with asyncio.timeout(timeout):
                return await coro
        except TimeoutError:
            last = progress.last_note or "nothing more was said"
            return Verdict(False, f"{what} timed out after {timeout:g}s; {last}")

    try:
        return asyncio.run(bounded())
    except KeyboardInterrupt:
        return Verdict(False, f"{what} interrupted")
    except Exception as err:
        # Said as the Teardown condition (or Ready) would say it: the fault, not a traceback.
        unforeseen = classify(err).kind is ErrorKind.UNEXPECTED
        kind = f"{type(err).__name__}: " if unforeseen else ""
        return Verdict(False, f"{what} failed: {kind}{describe_error(err)}")
    finally:
        # A helm still running (cancelled at the timeout) must not go on acting.
        helm.kill_running()


def _follow(
    run: Run,
    what: str,
    output: TextOrJson,
    timeout: float,
    work: Callable[[TargetHelm, Progress], Coroutine[Any, Any, Verdict]],
) -> None:
    """Do ``work`` with a helm of its own, shown as it goes; exit 1 unless it is done."""
    with tempfile.TemporaryDirectory(prefix="modelplane-helm-") as home:
        helm = _helm(run, Path(home))
        progress = progress_for(
            sys.stdout,
            as_json=output is TextOrJson.JSON,
            title=f"modelplane {what}: {run.stack.metadata.name} on {printable(run.server, 256)}",
        )
        try:
            verdict = _run(work(helm, progress), helm, progress, timeout, what)
            progress.finish(verdict.done, verdict.message)
        finally:
            progress.close()
    if not verdict.done:
        raise typer.Exit(EXIT_NOT_DONE)


OutputFlag = Annotated[
    TextOrJson,
    output_option(
        "text: a live view on a terminal, lines in a pipe; json: one JSON object per line."
    ),
]


def _logging(verbose: bool) -> None:
    """The operator's log on stderr with -v; otherwise its errors only: the view says the rest."""
    configure_logging(verbose)
    if not verbose:
        logging.getLogger().setLevel(logging.ERROR)


def apply(
    file: StackFile,
    kubeconfig: Kubeconfig,
    context: Context = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Wait until the stack is Ready, also for what only the target can bring "
            "(a controller, a retried action), up to --timeout.",
        ),
    ] = False,
    timeout: RunTimeout = "10m",
    output: OutputFlag = TextOrJson.TEXT,
    chart_repository: ChartRepository = None,
    chart_repository_for: ChartRepositoryFor = None,
    gaie_manifests_url: GaieManifestsUrl = None,
    manifests_url_for: ManifestsUrlFor = None,
    image_registry_mirror: ImageRegistryMirror = None,
    image_pull_secret: ImagePullSecret = None,
    helm_timeout: HelmTimeout = 600,
    deny_target_cidr: DenyTargetCidr = None,
    identity_type: IdentityType = None,
    identity_file: IdentityFile = None,
    aws_sts_endpoint: AwsStsEndpoint = None,
    aws_region: AwsRegion = None,
    nebius_token_endpoint: NebiusTokenEndpoint = None,
    verbose: Verbose = False,
) -> None:
    """Install a ServingStack onto one cluster, without a hub, and follow it to Ready.

    Exit 0 when Ready, 1 with the reason it is not, 2 for bad input.
    """
    _logging(verbose)
    seconds = parse_duration(timeout)
    run = _prepare(
        file,
        target_options(
            kubeconfig, context, identity_type, identity_file, deny_target_cidr,
            aws_sts_endpoint, aws_region, nebius_token_endpoint,
        ),
        source_options(
            chart_repository, chart_repository_for, gaie_manifests_url, manifests_url_for,
            image_registry_mirror, image_pull_secret,
        ),
        helm_options(helm_timeout),
    )  # fmt: skip
    _follow(run, "apply", output, seconds, lambda helm, progress: _apply(run, helm, progress, wait))


# -- delete ----------------------------------------------------------------


async def _delete(run: Run, helm: TargetHelm, progress: Progress) -> Verdict:
    skipped: list[str] = []

    def emit(type_: str, reason: str, message: str) -> None:
        if reason == "TeardownSkipped":
            skipped.append(message)
        progress.event(type_, reason, message)

    shown: list[Line] = []

    def show(p: Plan) -> None:
        shown[:] = teardown_lines(p)
        progress.lines(shown)

    # Given when it is made: the parts it composes keep the emit they were made with.
    reconciler = _reconciler(run, helm, progress, emit, on_plan=show)
    loop = asyncio.get_running_loop()
    start = loop.time()
    while True:
        try:
            waiting = await reconciler.teardown(run.body, loop.time() - start)
        except Exception as err:
            # A namespace of an earlier run still terminating (the claim
            # cannot be made in it), or the claim changing hands: waits, as
            # the operator's teardown retries them. Anything else ends the run.
            if classify(err).kind not in TEARDOWN_WAITS:
                raise
            waiting = Waiting(f"waiting: {describe_error(err)}")
        if skipped:
            # Another owner's target: nothing of it was ours to delete.
            return Verdict(False, skipped[0])
        if waiting is None:
            # Every step of the pass was carried out: what it showed as
            # still there is gone now (or on its way, as a namespace).
            progress.lines(
                replace(line, phase=Phase.REMOVED, detail="")
                for line in shown
                if line.phase is Phase.REMOVING
            )
            return Verdict(True, "teardown finished and the claim on the target is released")
        progress.note(waiting.message)
        await asyncio.sleep(TEARDOWN_POLL_SECONDS)


def delete(
    file: StackFile,
    kubeconfig: Kubeconfig,
    context: Context = None,
    timeout: RunTimeout = "10m",
    output: OutputFlag = TextOrJson.TEXT,
    chart_repository: ChartRepository = None,
    chart_repository_for: ChartRepositoryFor = None,
    gaie_manifests_url: GaieManifestsUrl = None,
    manifests_url_for: ManifestsUrlFor = None,
    image_registry_mirror: ImageRegistryMirror = None,
    image_pull_secret: ImagePullSecret = None,
    helm_timeout: HelmTimeout = 600,
    deny_target_cidr: DenyTargetCidr = None,
    identity_type: IdentityType = None,
    identity_file: IdentityFile = None,
    aws_sts_endpoint: AwsStsEndpoint = None,
    aws_region: AwsRegion = None,
    nebius_token_endpoint: NebiusTokenEndpoint = None,
    verbose: Verbose = False,
) -> None:
    """Remove what apply installed, in order, and release the claim last.

    Exit 0 when done, 1 naming what stays, 2 for bad input.
    """
    _logging(verbose)
    seconds = parse_duration(timeout)
    run = _prepare(
        file,
        target_options(
            kubeconfig, context, identity_type, identity_file, deny_target_cidr,
            aws_sts_endpoint, aws_region, nebius_token_endpoint,
        ),
        source_options(
            chart_repository, chart_repository_for, gaie_manifests_url, manifests_url_for,
            image_registry_mirror, image_pull_secret,
        ),
        helm_options(helm_timeout),
    )  # fmt: skip
    _follow(run, "delete", output, seconds, lambda helm, progress: _delete(run, helm, progress))
