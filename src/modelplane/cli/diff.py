"""``modelplane diff``: what a reconcile of a stack would change on a target, without a hub.

It reads the target as the operator does (``observe.state``), plans, and
compares (``plan.diff``): for each release Helm's stored revision against
``helm template`` of the desired chart and values, for each object a
server-side apply dry run against the live object. Nothing is written: the
only requests that are not reads are dry runs (``dryRun=All``), and helm only
renders, with no credentials in the kubeconfig it gets.

Exit status, as ``kubectl diff``: 0 when nothing would change, 1 when
something would, the target runs something a change would clash with
(``plan.conflicts``: listed before anything changes), or the image mirror
lacks an image a change would run (``cli.mirror_check``), 2 for an error (bad
input, a target that cannot be read, or a change whose diff could not be
made: the output then says which).
"""

from __future__ import annotations

import asyncio
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from rich.console import Console
from rich.text import Text

from modelplane.actions.apply import (
    ManifestError,
    WebhookNotReady,
    dry_run_apply,
    manifest_objects,
    normalized,
)
from modelplane.actions.chart_crds import applies_chart_crds, read_chart_crd_state
from modelplane.actions.conflict_scan import gateway_class_conflicts, scan_release
from modelplane.actions.helm import Helm, HelmError, TargetHelm
from modelplane.api.models import ServingStack
from modelplane.api.status_limits import TERMINAL
from modelplane.cli.inputs import InputError, load_yaml, parse
from modelplane.cli.mirror_check import mirror_findings
from modelplane.cli.options import (
    AwsRegion,
    AwsStsEndpoint,
    ChartRepository,
    ChartRepositoryFor,
    Context,
    DenyTargetCidr,
    DeprecatedRequestTimeout,
    GaieManifestsUrl,
    IdentityFile,
    IdentityType,
    ImagePullSecret,
    ImageRegistryMirror,
    Kubeconfig,
    ManifestsUrlFor,
    NebiusTokenEndpoint,
    RequestTimeout,
    StackFile,
    TargetOptions,
    source_options,
    target_options,
)
from modelplane.cli.options import request_timeout as request_timeout_of
from modelplane.cli.output import EXIT_USAGE, TextOrJson, fail, output_option
from modelplane.cli.target import CommandError, LocalTarget, on_target, open_local, read_target
from modelplane.kube.address import AddressDenied, IPNetwork
from modelplane.kube.answers import describe_error
from modelplane.kube.client import TargetError, get_json
from modelplane.kube.discovery import Served, served
from modelplane.kube.resources import KindNotServed
from modelplane.kube.scrub import shown_url
from modelplane.observe.releases import ReleaseReadError, deployed_release, release_secret
from modelplane.observe.state import Listed, read_listed, to_observed, wanted
from modelplane.plan import plan
from modelplane.plan.conflicts import Conflict, adoption
from modelplane.plan.diff import DeployedRelease, Diff, ObjectChange, Reads, diff
from modelplane.plan.model import (
    ObjectAction,
    Plan,
    PlannedRelease,
    ReleaseAction,
)
from modelplane.plan.observed import Observed
from modelplane.plan.sources import Sources
from modelplane.untrusted import printable
from modelplane.wire import object_key, stamp

EXIT_CHANGES = 1
# helm template runs at once, each fetching its chart: a few, not one per release.
RENDERS_AT_ONCE = 4
# What --kube-version and --api-versions take from the target's answers:
# they become helm's arguments, so only what a version or a group looks like.
_KUBE_VERSION = re.compile(r"v[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,6}[0-9A-Za-z.+-]{0,40}")
_API_VERSION = re.compile(r"[A-Za-z0-9.-]{0,253}/?[A-Za-z0-9]{1,63}(/[A-Za-z0-9]{1,63})?")


def template_kubeconfig(server: str) -> str:
    """The kubeconfig ``helm template`` gets: the server alone, and no credentials.

    helm renders without contacting the cluster; it is given the server only
    because every helm run is held to the deny list by it (``TargetHelm``).
    """
    return str(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "target", "cluster": {"server": server}}],
                "users": [{"name": "none", "user": {}}],
                "contexts": [{"name": "target", "context": {"cluster": "target", "user": "none"}}],
                "current-context": "target",
            }
        )
    )


def capabilities(found: Served) -> list[str]:
    """The target's API versions, and each kind in them, as ``helm template --api-versions``."""
    out = set()
    for api_version, kind in found.plurals:
        out.add(api_version)
        out.add(f"{api_version}/{kind}")
    return sorted(v for v in out if _API_VERSION.fullmatch(v))


async def kube_version(client: AsyncClient) -> str | None:
    """The target's ``gitVersion``, when it reads as one (helm refuses anything else)."""
    try:
        answer = await get_json(client, "/version")
    except (TargetError, AddressDenied):
        return None  # helm then renders for its own default version
    version = answer.get("gitVersion") if isinstance(answer, dict) else None
    return version if isinstance(version, str) and _KUBE_VERSION.fullmatch(version) else None


def _live(listed: Listed) -> dict[str, dict[str, Any]]:
    out = {}
    for (api_version, kind), items in listed.items.items():
        for item in items:
            # List items carry no apiVersion or kind of their own.
            body = {**item, "apiVersion": api_version, "kind": kind}
            out[object_key(body)] = body
    return out


async def _release_reads(
    release: PlannedRelease,
    listed: Listed,
    observed: Observed,
    helm: Helm,
    kubeconfig: str,
    found: Served,
    version: str | None,
    limit: asyncio.Semaphore,
) -> tuple[DeployedRelease | None, str | None, list[str]]:
    problems: list[str] = []
    deployed = None
    seen = observed.releases.get(release.name)
    if seen is not None:
        secret = release_secret(listed, seen)
        if secret is None:
            problems.append(f"the Secret of revision {seen.revision} was not read")
        else:
            try:
                # Decoding is bounded, but still MiBs of JSON: off the loop.
                deployed = await asyncio.to_thread(deployed_release, secret, seen)
            except ReleaseReadError as err:
                problems.append(str(err))
    rendered = None
    async with limit:
        try:
            rendered = await helm.template(
                release,
                kubeconfig,
                kube_version=version,
                api_versions=capabilities(found),
                is_upgrade=seen is not None and release.action is not ReleaseAction.REINSTALL,
            )
        except (HelmError, AddressDenied) as err:
            problems.append(f"helm template: {describe_error(err)}")
    return deployed, rendered, problems


async def _chart_crd_reads(
    client: AsyncClient, release: PlannedRelease, helm: Helm, kubeconfig: str
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The CRDs of the chart's crds/ the apply would send, and those of them that exist."""
    if not applies_chart_crds(release):
        return [], {}
    reads = await read_chart_crd_state(helm, client, release, kubeconfig)
    return reads.desired, reads.live


async def _conflicts(
    client: AsyncClient,
    p: Plan,
    acting: list[PlannedRelease],
    rendered: dict[str, str],
    chart_crd_sets: dict[str, list[dict[str, Any]]],
    live_crds: dict[str, dict[str, Any]],
    helm: Helm,
    kubeconfig: str,
    release_problems: dict[str, str],
) -> list[Conflict]:
    """What each release and object the plan writes would clash with (``plan.conflicts``).

    From the renders and CRD reads made for the diff; a scan that could not
    be made is its release's problem.
    """
    product = frozenset((r.name, r.namespace) for r in p.releases)
    out: list[Conflict] = []
    for r in acting:
        if r.action is ReleaseAction.ROLLBACK or r.name not in rendered:
            continue
        try:
            out += await scan_release(
                helm, client, r, kubeconfig, product,
                rendered=rendered[r.name], crds=(chart_crd_sets.get(r.name, []), live_crds),
            )  # fmt: skip
        except (TargetError, HelmError, AddressDenied, ApiError, ValueError) as err:
            problem = f"the conflict scan: {describe_error(err)}"
            release_problems[r.name] = "; ".join(
                x for x in (release_problems.get(r.name), problem) if x
            )
    applied = [o for o in p.objects if o.action is ObjectAction.APPLY]
    for component in sorted({o.component for o in applied}):
        bodies = [o.object for o in applied if o.component == component]
        out += await gateway_class_conflicts(client, component, bodies)
    return out


async def gather_reads(
    client: AsyncClient,
    p: Plan,
    listed: Listed,
    observed: Observed,
    found: Served,
    helm: Helm,
    kubeconfig: str,
    deny: tuple[IPNetwork, ...],
) -> Reads:
    """Everything ``plan.diff`` compares beyond the plan: stored releases, renders, dry runs."""
    acting = [r for r in p.releases if r.action is not ReleaseAction.NONE]
    version = await kube_version(client) if acting else None
    limit = asyncio.Semaphore(RENDERS_AT_ONCE)
    results = await asyncio.gather(
        *(
            _release_reads(r, listed, observed, helm, kubeconfig, found, version, limit)
            for r in acting
        )
    )
    deployed: dict[str, DeployedRelease] = {}
    rendered: dict[str, str] = {}
    release_problems: dict[str, str] = {}
    for r, (stored, text, problems) in zip(acting, results, strict=True):
        if stored is not None:
            deployed[r.name] = stored
        if text is not None:
            rendered[r.name] = text
        if problems:
            release_problems[r.name] = "; ".join(problems)
    chart_crd_sets: dict[str, list[dict[str, Any]]] = {}
    live_crds: dict[str, dict[str, Any]] = {}
    for r in acting:
        if r.action is ReleaseAction.ROLLBACK:
            continue
        try:
            desired, existing = await _chart_crd_reads(client, r, helm, kubeconfig)
        except (HelmError, AddressDenied, ApiError, ValueError) as err:
            problem = f"the chart's CRDs: {describe_error(err)}"
            release_problems[r.name] = "; ".join(
                p for p in (release_problems.get(r.name), problem) if p
            )
            continue
        if desired:
            chart_crd_sets[r.name] = desired
            live_crds.update(existing)

    conflicts = await _conflicts(client, p, acting, rendered, chart_crd_sets, live_crds, helm,
                                 kubeconfig, release_problems)  # fmt: skip
    everything = _live(listed)
    live: dict[str, dict[str, Any]] = {}
    answers: dict[str, dict[str, Any]] = {}
    object_problems: dict[str, str] = {}

    async def read_object(body: dict[str, Any]) -> None:
        key = object_key(body)
        current = everything.get(key)
        try:
            if current is not None:
                live[key] = await normalized(client, current)
            answers[key] = await dry_run_apply(client, body)
        except ApiError as err:
            if err.status.code == 404 and current is None:
                # Its namespace does not exist yet: the reconcile makes it
                # first (a Namespace object, or a release's namespace), so
                # the body the apply sends is what would be created.
                return
            object_problems[key] = f"dry run refused: {describe_error(err)}"
        except (WebhookNotReady, KindNotServed) as err:
            object_problems[key] = f"dry run not possible: {err}"

    manifest_sets: dict[str, list[dict[str, Any]]] = {}
    manifest_problems: dict[str, str] = {}
    for m in p.manifests:
        if m.action is not ObjectAction.APPLY:
            continue
        try:
            bodies = [stamp(body, m.digest) for body in await manifest_objects(m, deny)]
        except (ManifestError, AddressDenied) as err:
            manifest_problems[m.component] = str(err)
            continue
        manifest_sets[m.component] = bodies
        for body in bodies:
            await read_object(body)
    for o in p.objects:
        if o.action is ObjectAction.APPLY:
            await read_object(o.object)
    return Reads(
        deployed=deployed,
        rendered=rendered,
        release_problems=release_problems,
        live=live,
        dry_run=answers,
        object_problems=object_problems,
        manifest_objects=manifest_sets,
        manifest_problems=manifest_problems,
        chart_crds=chart_crd_sets,
        live_crds=live_crds,
        conflicts=conflicts,
    )


async def read_diff(
    target: LocalTarget,
    options: TargetOptions,
    stack: ServingStack,
    sources: Sources,
    timeout: float,
) -> Diff:
    """Read the target, plan ``stack`` for it, and compare."""
    deny = options.deny
    async with await open_local(target, options, timeout) as opened:
        found = await served(opened.client)
        listed = await read_listed(opened.client, wanted(stack.spec), found)
        observed = to_observed(listed)
        p = plan(stack, observed, sources)
        # helm's caches for this run only: charts are fetched afresh, as the operator does.
        with tempfile.TemporaryDirectory(prefix="modelplane-diff-") as home:
            helm = TargetHelm.guarding(Helm.find(Path(home)), deny)
            reads = await gather_reads(
                opened.client,
                p,
                listed,
                observed,
                found,
                helm,
                template_kubeconfig(target.server),
                deny,
            )
        mirror = await mirror_findings(opened.client, p, sources, deny)
        reads = adopting(reads, stack.spec.adopt).model_copy(update={"mirror": mirror})
        return diff(p, reads, target.server)


def adopting(reads: Reads, adopt: Sequence[str]) -> Reads:
    """``reads`` with the conflicts ``spec.adopt`` takes over set apart (``plan.conflicts``)."""
    adopted, held = adoption(reads.conflicts, adopt)
    return reads.model_copy(update={"conflicts": held, "adopted": adopted})


# ---- output -------------------------------------------------------------------------

_LINE_STYLES = (("+++", "bold"), ("---", "bold"), ("@@", "cyan"), ("+", "green"), ("-", "red"))


def _print_diff(console: Console, text: str) -> None:
    for line in text.splitlines():
        style = next((s for prefix, s in _LINE_STYLES if line.startswith(prefix)), None)
        console.print(Text(line, style=style or ""))


def _line(text: object) -> str:
    return printable(text, TERMINAL)


def _print_object(console: Console, o: ObjectChange) -> None:
    console.print(Text(_line(f"{o.object}: {o.change}"), style="bold"))
    if o.drift:
        console.print(Text(_line(f"  drift: {', '.join(o.drift)}"), style="yellow"))
    if o.problem:
        console.print(Text(_line(f"  error: {o.problem}"), style="red"))
    _print_diff(console, o.diff)


def problems_of(d: Diff) -> list[str]:
    """Every change whose diff could not be made, and why, one line each."""
    objects = [*d.objects, *(o for m in d.manifests for o in m.objects)]
    return (
        [f"release {r.release}: {r.problem}" for r in d.releases if r.problem]
        + [f"manifests of {m.component}: {m.problem}" for m in d.manifests if m.problem]
        + [f"{o.object}: {o.problem}" for o in objects if o.problem]
    )


def print_conflicts(conflicts: list[Conflict], console: Console) -> None:
    """Each clash with what the target runs, by component: held back until it is gone."""
    for c in conflicts:
        console.print(Text(_line(f"conflict: {c.component}: {c.message}"), style="bold red"))
    if conflicts:
        held = sorted({c.component for c in conflicts})
        console.print(
            Text(
                _line(
                    f"Held back for what the cluster runs: {', '.join(held)} (the others "
                    "install). Remove or reconfigure what each line names, adopt an object "
                    "no release of the product owns (spec.adopt), or install the component "
                    "yourself (Provided mode)."
                ),
                style="bold red",
            )
        )


def print_adopted(adopted: list[Conflict], console: Console) -> None:
    """What each adopted release takes over and from whom, before anything else is shown."""
    for c in adopted:
        console.print(Text(_line(f"adopts: {c.component}: {c.adopted}"), style="bold yellow"))


def print_text(d: Diff, console: Console) -> None:
    """The diff as ``kubectl diff`` shows one: a heading per change, then its unified diff.

    What spec.adopt takes over comes first: the owner reads it before the changes.
    """
    print_adopted(d.adopted, console)
    for r in d.releases:
        versions = (
            f"{r.old_version} -> {r.new_version}"
            if r.old_version and r.old_version != r.new_version
            else r.new_version
        )
        head = f"release {r.namespace}/{r.release} ({r.chart}): {r.change} {versions}"
        if r.disruption:
            head += f" ({'; '.join(str(p) for p in r.disruption)})"
        if r.action is ReleaseAction.ROLLBACK:
            head += " (after a rollback of the pending revision)"
        console.print(Text(_line(head), style="bold"))
        if r.waiting_for:
            console.print(Text(_line(f"  after {', '.join(r.waiting_for)}")))
        if r.problem:
            console.print(Text(_line(f"  error: {r.problem}"), style="red"))
        if r.crds:
            console.print(Text(_line(f"  CRDs of crds/ first: {', '.join(r.crds)}")))
        for what in r.destructive:
            console.print(Text(_line(f"  destructive: {what}"), style="bold red"))
        _print_diff(console, r.values_diff)
        _print_diff(console, r.manifest_diff)
    for m in d.manifests:
        applied = f"manifests of {m.component} {m.version}: apply {shown_url(m.url)}"
        console.print(Text(_line(applied), style="bold"))
        if m.problem:
            console.print(Text(_line(f"  error: {m.problem}"), style="red"))
        for o in m.objects:
            _print_object(console, o)
    for o in d.objects:
        _print_object(console, o)
    for h in d.held:
        console.print(Text(_line(f"held back: {h.object}: {h.reason}"), style="dim"))
    print_conflicts(d.conflicts, console)
    for found in d.mirror:
        style = "bold red" if found.held else "yellow"
        console.print(Text(_line(f"mirror: {found.what}: {found.message}"), style=style))
    if d.drift:
        console.print(
            Text(
                _line(
                    f"drift: {len(d.drift)} object{'s' if len(d.drift) != 1 else ''} "
                    "changed by hand, which the reconcile takes back"
                ),
                style="yellow",
            )
        )
    if not d.changes:
        console.print("No changes.")
    else:
        counts = [
            (len(d.releases), "release"),
            (len(d.manifests), "manifest set"),
            (len(d.objects), "object"),
        ]
        shown = ", ".join(f"{n} {what}{'s' if n != 1 else ''}" for n, what in counts if n)
        console.print(Text(f"Would change: {shown}.", style="bold"))
        if d.disrupts:
            disrupts = ", ".join(k.words for k in d.disrupts)
            console.print(Text(f"The upgrades disrupt: {disrupts}.", style="bold"))
        if d.destructive:
            console.print(
                Text("Some changes are destructive: read the lines marked so.", style="bold red")
            )


def diff_command(
    file: StackFile,
    kubeconfig: Kubeconfig,
    context: Context = None,
    output: Annotated[TextOrJson, output_option()] = TextOrJson.TEXT,
    request_timeout: RequestTimeout = None,
    timeout: DeprecatedRequestTimeout = None,
    deny_target_cidr: DenyTargetCidr = None,
    identity_type: IdentityType = None,
    identity_file: IdentityFile = None,
    aws_sts_endpoint: AwsStsEndpoint = None,
    aws_region: AwsRegion = None,
    nebius_token_endpoint: NebiusTokenEndpoint = None,
    chart_repository: ChartRepository = None,
    chart_repository_for: ChartRepositoryFor = None,
    gaie_manifests_url: GaieManifestsUrl = None,
    manifests_url_for: ManifestsUrlFor = None,
    image_registry_mirror: ImageRegistryMirror = None,
    image_pull_secret: ImagePullSecret = None,
) -> None:
    """Show what a reconcile of the stack would change on the target; never writes to it.

    Exit 0 when nothing would change, 1 when something would, 2 on errors.
    """
    options = target_options(
        kubeconfig, context, identity_type, identity_file, deny_target_cidr,
        aws_sts_endpoint, aws_region, nebius_token_endpoint,
    )  # fmt: skip
    seconds = request_timeout_of(request_timeout, timeout)
    # The operator's image rules change the releases' values, so a diff
    # without them would show every mirrored value as a change.
    sources = source_options(
        chart_repository, chart_repository_for, gaie_manifests_url, manifests_url_for,
        image_registry_mirror, image_pull_secret,
    ).sources()  # fmt: skip
    try:
        stack = parse(ServingStack, load_yaml(file), str(file))
    except InputError as err:
        fail(str(err))
    try:
        target = read_target(options)
        d = on_target(
            target.server, read_diff(target, options, stack, sources, seconds), doing="read"
        )
    except CommandError as err:
        fail(str(err))
    if output is TextOrJson.JSON:
        print(d.model_dump_json(indent=2))
    else:
        print_text(d, Console(highlight=False, soft_wrap=True, emoji=False))
    problems = problems_of(d)
    if problems:
        for problem in problems:
            print(f"error: {_line(problem)}", file=sys.stderr)
        raise typer.Exit(EXIT_USAGE)
    # A conflict or an image the mirror lacks holds its component back, an
    # adoption writes: never "nothing to do".
    if d.changes or d.conflicts or d.adopted or any(m.held for m in d.mirror):
        raise typer.Exit(EXIT_CHANGES)
