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
import enum
import logging
import re
import sys
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml

from modelplane.actions.claim import LocalRun
from modelplane.actions.helm import NO_HELM, Helm, HelmError, TargetHelm
from modelplane.actions.helm import locate as locate_helm
from modelplane.api.models import SecretType, ServingStack
from modelplane.api.status_limits import TERMINAL
from modelplane.cli.check import CheckError, endpoints_of, load_config, load_identity
from modelplane.cli.inputs import InputError, load_yaml, parse
from modelplane.cli.options import (
    AwsRegion,
    AwsStsEndpoint,
    ChartRepository,
    ChartRepositoryFor,
    GaieManifestsUrl,
    HelmTimeout,
    ImagePullSecret,
    ImageRegistryMirror,
    ManifestsUrlFor,
    NebiusTokenEndpoint,
    component_urls,
    mirror_rules,
    pull_secrets,
)
from modelplane.cli.progress import (
    Line,
    Phase,
    Progress,
    lines_of,
    progress_for,
    teardown_lines,
)
from modelplane.credentials.connect import Credentials, Identity
from modelplane.kube.address import deny_list
from modelplane.kube.answers import describe_error
from modelplane.kube.errors import ErrorKind, classify
from modelplane.operator import logs
from modelplane.operator.options import OperatorOptions
from modelplane.operator.reconciler import StackReconciler
from modelplane.operator.status import READY, Outcome, desired_status
from modelplane.pins import ComponentsMode
from modelplane.plan import Plan, decisions
from modelplane.plan.decisions import BlockedReason
from modelplane.untrusted import UntrustedInputError, printable
from modelplane.untrusted import load_yaml as load_untrusted_yaml

EXIT_NOT_DONE = 1
EXIT_USAGE = 2

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

_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


class OutputFormat(enum.StrEnum):
    TEXT = "text"
    JSON = "json"


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
    if seconds <= 0:
        raise typer.BadParameter(f"expected a positive duration, got {printable(value, 80)!r}")
    return seconds


# -- the person's kubeconfig as the session's credentials ------------------

# Fields that name a file, relative to the kubeconfig's own directory (as
# kubectl reads them). The helm run gets a copy of the kubeconfig in a
# private file elsewhere, so they are made absolute first.
_CLUSTER_FILES = ("certificate-authority",)
_USER_FILES = ("client-certificate", "client-key", "tokenFile", "token-file")


def local_kubeconfig(path: Path, context: str | None) -> str:
    """The one context of ``path`` to use, self-contained: its cluster, user and context.

    The person's own kubeconfig: its exec plugins and files are theirs to
    use (``--allow-unsafe-kubeconfig`` is the operator's guard against a
    Secret's author, not against the person running this).
    """
    try:
        doc = load_untrusted_yaml(path.read_bytes())
    except (OSError, UntrustedInputError) as err:
        raise CheckError(f"kubeconfig {path} cannot be read: {err}") from err
    if not isinstance(doc, dict):
        raise CheckError(f"kubeconfig {path} is not a YAML mapping")
    name = context or doc.get("current-context")
    ctx = _entry(doc, "contexts", "context", name, path)
    cluster = dict(_entry(doc, "clusters", "cluster", ctx.get("cluster"), path))
    user = dict(_entry(doc, "users", "user", ctx.get("user"), path))
    base = path.resolve().parent
    for fields, section in ((_CLUSTER_FILES, cluster), (_USER_FILES, user)):
        for f in fields:
            if isinstance(section.get(f), str) and section[f]:
                section[f] = str(base / Path(section[f]).expanduser())
    exec_ = user.get("exec")
    if isinstance(exec_, dict) and isinstance(exec_.get("command"), str):
        command = exec_["command"]
        # kubectl resolves a command with a path separator against the kubeconfig's directory.
        if "/" in command and not Path(command).is_absolute():
            user["exec"] = {**exec_, "command": str(base / command)}
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": ctx["cluster"], "cluster": cluster}],
            "users": [{"name": ctx["user"], "user": user}],
            "contexts": [{"name": name, "context": ctx}],
            "current-context": name,
        }
    )


def _entry(doc: dict[str, Any], section: str, inner: str, name: Any, path: Path) -> dict[str, Any]:
    for entry in doc.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(inner)
            if isinstance(value, dict):
                return value
    raise CheckError(f"kubeconfig {path} has no {inner} {printable(str(name), 253)!r}")


@dataclass(frozen=True)
class LocalCredentials:
    """The session's credentials: the person's kubeconfig and identity, not the stack's Secrets."""

    kubeconfig: str
    identity: Identity | None = None

    async def __call__(self, stack: ServingStack) -> Credentials:
        return Credentials(self.kubeconfig, self.identity)


# -- setting up ------------------------------------------------------------


@dataclass
class Run:
    """What one apply or delete works from, read and checked before anything is sent."""

    stack: ServingStack
    body: dict[str, Any]
    options: OperatorOptions
    credentials: LocalCredentials
    server: str


def _fail(message: str) -> NoReturn:
    print(f"error: {printable(message, TERMINAL)}", file=sys.stderr)
    raise typer.Exit(EXIT_USAGE)


def _prepare(
    file: Path,
    kubeconfig: Path,
    context: str | None,
    identity_type: str | None,
    identity_file: Path | None,
    deny_target_cidr: list[str] | None,
    chart_repository: str | None,
    chart_repository_for: list[str] | None,
    gaie_manifests_url: str | None,
    manifests_url_for: list[str] | None,
    helm_timeout: int,
    aws_sts_endpoint: str | None,
    aws_region: str | None,
    nebius_token_endpoint: str | None,
    image_registry_mirror: list[str] | None = None,
    image_pull_secret: list[str] | None = None,
) -> Run:
    """Read every input; exit 2 naming the first that is wrong."""
    charts = component_urls(chart_repository_for or [], "--chart-repository-for", "chart")
    manifests = component_urls(manifests_url_for or [], "--manifests-url-for", "manifests")
    try:
        deny = deny_list(deny_target_cidr)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--deny-target-cidr") from None
    try:
        body = load_yaml(file)
        stack = parse(ServingStack, body, str(file))
    except InputError as err:
        _fail(str(err))
    try:
        config = load_config(kubeconfig, context)
        endpoints = endpoints_of(aws_sts_endpoint, aws_region, nebius_token_endpoint, deny)
        # Built here only to say a bad identity flag or file before anything is sent.
        load_identity(config, identity_type, identity_file, deny, endpoints)
        text = local_kubeconfig(kubeconfig, context)
    except CheckError as err:
        _fail(str(err))
    identity = None
    if identity_type is not None and identity_file is not None:
        identity = Identity(
            SecretType(identity_type),
            identity_file.read_bytes(),
            f"--identity-file {identity_file}",
        )
    options = OperatorOptions(
        chart_repository=chart_repository,
        chart_repository_for=charts,
        gaie_manifests_url=gaie_manifests_url,
        manifests_url_for=manifests,
        # The person's own kubeconfig and identity file (see local_kubeconfig).
        allow_unsafe_kubeconfig=True,
        allow_operator_identity=True,
        deny_target_cidrs=deny,
        helm_timeout_seconds=helm_timeout,
        image_mirrors=mirror_rules(image_registry_mirror),
        image_pull_secrets=pull_secrets(image_pull_secret),
        aws_sts_endpoint=aws_sts_endpoint,
        aws_region=aws_region,
        nebius_token_endpoint=nebius_token_endpoint,
    )
    return Run(stack, body, options, LocalCredentials(text, identity), config.cluster.server)


def _helm(run: Run, home: Path) -> TargetHelm:
    try:
        binary = locate_helm()
    except HelmError as err:
        _fail(str(err))
    if binary is None and run.stack.spec.components is ComponentsMode.MANAGED:
        _fail(f"{NO_HELM}: a Managed stack installs its substrate with helm")
    helm = Helm(binary or "", home, run.options.helm_timeout_seconds)
    return TargetHelm.guarding(helm, run.options.deny_target_cidrs)


def _reconciler(run: Run, helm: Helm, progress: Progress, **extra: Any) -> StackReconciler:
    meta = run.stack.metadata
    return StackReconciler(
        None,
        helm,
        run.options,
        progress.event,
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
        progress.lines(lines_of(p, reconciler.failures, reconciler.waiting_on_webhook))

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


KubeconfigFlag = Annotated[
    Path, typer.Option("--kubeconfig", help="Kubeconfig of the target cluster.")
]
ContextFlag = Annotated[
    str | None, typer.Option("--context", help="Kubeconfig context (default: current).")
]
FileFlag = Annotated[Path, typer.Option("-f", "--file", help="The ServingStack manifest.")]
OutputFlag = Annotated[
    OutputFormat,
    typer.Option(
        "-o",
        "--output",
        help="text: a live view on a terminal, lines in a pipe; json: one JSON object per line.",
    ),
]
DenyFlag = Annotated[
    list[str] | None,
    typer.Option(
        "--deny-target-cidr",
        help="Never connect (or let helm connect) to an address in this range (repeatable; "
        "replaces the default: link-local and the cloud metadata addresses; 'default' "
        "stands for that list, 'none' for no range).",
    ),
]
IdentityTypeFlag = Annotated[
    str | None,
    typer.Option(
        "--identity-type",
        help="Authenticate as this cloud identity instead of the kubeconfig's user "
        "(as check takes it).",
    ),
]
IdentityFileFlag = Annotated[
    Path | None,
    typer.Option("--identity-file", help="The identity's credential, as its Secret would hold it."),
]
VerboseFlag = Annotated[
    bool, typer.Option("--verbose", "-v", help="Also log what the reconciler does, to stderr.")
]


def _logging(verbose: bool) -> None:
    """The operator's log on stderr with -v; otherwise its errors only: the view says the rest."""
    logs.configure(verbose)
    if not verbose:
        logging.getLogger().setLevel(logging.ERROR)


TimeoutFlag = Annotated[
    str,
    typer.Option("--timeout", help="Give up after this long (90s, 10m, 1h30m)."),
]


def apply(
    file: FileFlag,
    kubeconfig: KubeconfigFlag,
    context: ContextFlag = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Wait until the stack is Ready, also for what only the target can bring "
            "(a controller, a retried action), up to --timeout.",
        ),
    ] = False,
    timeout: TimeoutFlag = "10m",
    output: OutputFlag = OutputFormat.TEXT,
    chart_repository: ChartRepository = None,
    chart_repository_for: ChartRepositoryFor = None,
    gaie_manifests_url: GaieManifestsUrl = None,
    manifests_url_for: ManifestsUrlFor = None,
    image_registry_mirror: ImageRegistryMirror = None,
    image_pull_secret: ImagePullSecret = None,
    helm_timeout: HelmTimeout = 600,
    deny_target_cidr: DenyFlag = None,
    identity_type: IdentityTypeFlag = None,
    identity_file: IdentityFileFlag = None,
    aws_sts_endpoint: AwsStsEndpoint = None,
    aws_region: AwsRegion = None,
    nebius_token_endpoint: NebiusTokenEndpoint = None,
    verbose: VerboseFlag = False,
) -> None:
    """Install a ServingStack onto one cluster, without a hub, and follow it to Ready.

    Exit 0 when Ready, 1 with the reason it is not, 2 for bad input.
    """
    _logging(verbose)
    seconds = parse_duration(timeout)
    run = _prepare(
        file, kubeconfig, context, identity_type, identity_file, deny_target_cidr,
        chart_repository, chart_repository_for, gaie_manifests_url, manifests_url_for,
        helm_timeout, aws_sts_endpoint, aws_region, nebius_token_endpoint,
        image_registry_mirror, image_pull_secret,
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="modelplane-helm-") as home:
        helm = _helm(run, Path(home))
        progress = progress_for(
            sys.stdout,
            as_json=output is OutputFormat.JSON,
            title=f"modelplane apply: {run.stack.metadata.name} on {printable(run.server, 256)}",
        )
        try:
            verdict = _run(_apply(run, helm, progress, wait), helm, progress, seconds, "apply")
            progress.finish(verdict.done, verdict.message)
        finally:
            progress.close()
    if not verdict.done:
        raise typer.Exit(EXIT_NOT_DONE)


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

    reconciler = _reconciler(run, helm, progress, on_plan=show)
    reconciler.emit = emit
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
            waiting = f"waiting: {describe_error(err)}"
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
        progress.note(waiting)
        await asyncio.sleep(TEARDOWN_POLL_SECONDS)


def delete(
    file: FileFlag,
    kubeconfig: KubeconfigFlag,
    context: ContextFlag = None,
    timeout: TimeoutFlag = "10m",
    output: OutputFlag = OutputFormat.TEXT,
    chart_repository: ChartRepository = None,
    chart_repository_for: ChartRepositoryFor = None,
    gaie_manifests_url: GaieManifestsUrl = None,
    manifests_url_for: ManifestsUrlFor = None,
    image_registry_mirror: ImageRegistryMirror = None,
    image_pull_secret: ImagePullSecret = None,
    helm_timeout: HelmTimeout = 600,
    deny_target_cidr: DenyFlag = None,
    identity_type: IdentityTypeFlag = None,
    identity_file: IdentityFileFlag = None,
    aws_sts_endpoint: AwsStsEndpoint = None,
    aws_region: AwsRegion = None,
    nebius_token_endpoint: NebiusTokenEndpoint = None,
    verbose: VerboseFlag = False,
) -> None:
    """Remove what apply installed, in order, and release the claim last.

    Exit 0 when done, 1 naming what stays, 2 for bad input.
    """
    _logging(verbose)
    seconds = parse_duration(timeout)
    run = _prepare(
        file, kubeconfig, context, identity_type, identity_file, deny_target_cidr,
        chart_repository, chart_repository_for, gaie_manifests_url, manifests_url_for,
        helm_timeout, aws_sts_endpoint, aws_region, nebius_token_endpoint,
        image_registry_mirror, image_pull_secret,
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="modelplane-helm-") as home:
        helm = _helm(run, Path(home))
        progress = progress_for(
            sys.stdout,
            as_json=output is OutputFormat.JSON,
            title=f"modelplane delete: {run.stack.metadata.name} on {printable(run.server, 256)}",
        )
        try:
            verdict = _run(_delete(run, helm, progress), helm, progress, seconds, "delete")
            progress.finish(verdict.done, verdict.message)
        finally:
            progress.close()
    if not verdict.done:
        raise typer.Exit(EXIT_NOT_DONE)
