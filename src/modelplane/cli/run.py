"""``modelplane run``: the operator."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from modelplane.actions.helm import NO_HELM, HelmError
from modelplane.actions.helm import locate as locate_helm
from modelplane.cli.options import (
    AwsRegion,
    AwsStsEndpoint,
    CanaryNamespaces,
    ChartRepository,
    ChartRepositoryFor,
    DenyTargetCidr,
    GaieManifestsUrl,
    HelmTimeout,
    ImagePullSecret,
    ImageRegistryMirror,
    ManifestsUrlFor,
    MaxConcurrentUpgrades,
    NebiusTokenEndpoint,
    NodeAgentMaxUnavailable,
    NodeAgentTimeout,
    RemovedCanarySelector,
    SchedulerProbeTimeout,
    UpgradeReadyTimeout,
    Verbose,
    canary_namespaces,
    deny_ranges,
    parse_duration,
    probe_seconds,
    source_options,
)
from modelplane.cli.output import fail
from modelplane.operator import (
    LeaderElection,
    OperatorOptions,
    configure_logging,
    default_namespace,
    lease_name,
    normalize_selector,
    serve,
)
from modelplane.plan.mirror_images import PreflightMode
from modelplane.plan.release_health import DriftMode

# -- the flags only the operator takes ---------------------------------------------

HubKubeconfig = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="The hub's kubeconfig (default: $KUBECONFIG, ~/.kube/config or in-cluster).",
    ),
]
Namespaces = Annotated[
    list[str] | None,
    typer.Option("--namespace", "-n", help="Watch ServingStacks in this namespace (repeatable)."),
]
AllNamespaces = Annotated[
    bool, typer.Option("--all-namespaces", "-A", help="Watch every namespace (default).")
]
AllowUnsafeKubeconfig = Annotated[
    bool,
    typer.Option(
        "--allow-unsafe-kubeconfig",
        help="Let target kubeconfigs run exec or "
        "auth-provider plugins and read local files. Anyone who can write a "
        "Secret the operator reads can then run code as the operator.",
    ),
]
Resync = Annotated[float, typer.Option("--resync", help="Seconds between full re-checks.")]
Relist = Annotated[
    float,
    typer.Option(
        "--relist",
        help="Seconds between resyncs that read the target afresh instead of "
        "re-planning from what the watches hold (each stack's next up to half as long again, "
        "drawn at each read, so a shard's stacks do not read at once).",
    ),
]
MaxConcurrentTargetReads = Annotated[
    int,
    typer.Option(
        "--max-concurrent-target-reads",
        min=1,
        help="At most this many ServingStacks connect to their target and read it in "
        "full at once (a new operator starts its whole shard together); the rest "
        "wait their turn.",
    ),
]
GcFullScan = Annotated[
    float,
    typer.Option(
        "--gc-full-scan",
        min=0,
        help="Seconds between checks for a garbage collection that walks every object, "
        "made when the heap grew by more than a tenth since the last; between them each "
        "full collection walks only what is new since the last, so the operator does not "
        "stop for a walk of its whole heap every minute or two. 0: Python's own "
        "collections.",
    ),
]
WatchTimeout = Annotated[
    float, typer.Option("--watch-timeout", hidden=True, help="Target watch timeoutSeconds.")
]
ManageCrd = Annotated[
    bool,
    typer.Option(
        "--manage-crd/--no-manage-crd",
        help="At start, bring the hub's ServingStack CRD to this operator's with "
        "server-side apply (Helm never upgrades a chart's crds/). The CRD is never "
        "deleted.",
    ),
]
ReleaseDrift = Annotated[
    DriftMode,
    typer.Option(
        "--release-drift",
        help="Managed mode: a release's workload deleted or changed by hand on the "
        "target is restored from the release's stored manifest (correct), only "
        "reported in status and a ReleaseDrift event (warn), or not looked for (off).",
        case_sensitive=False,
    ),
]
MirrorPreflightFlag = Annotated[
    PreflightMode,
    typer.Option(
        "--mirror-preflight",
        help="With --image-registry-mirror: before a release is installed or upgraded, "
        "look each image it runs up in the mirror; a missing one holds the release. "
        "A mirror the operator cannot ask holds it too (require), is said in a "
        "MirrorUnreachable event and let go (warn), or nothing is looked up (off).",
        case_sensitive=False,
    ),
]
Selector = Annotated[
    str | None,
    typer.Option(
        "--selector",
        "-l",
        help="Serve only the ServingStacks whose labels match this selector "
        "(key=value, key!=value, key in (a,b), key notin (a,b), key, !key; comma-joined): "
        "this replica set's shard of the hub's fleet. Combines with --namespace.",
    ),
]
LeaderElect = Annotated[
    bool,
    typer.Option(
        "--leader-elect",
        help="Run as one of several replicas: only the holder of a coordination.k8s.io "
        "Lease on the hub reconciles; the others stand by and take over when it goes.",
    ),
]
LeaderElectionNamespace = Annotated[
    str | None,
    typer.Option(
        "--leader-election-namespace",
        help="Namespace of the leader Lease (default: $POD_NAMESPACE, the pod's "
        "ServiceAccount namespace, else the first --namespace, else default).",
    ),
]
LeaderElectionLease = Annotated[
    str | None,
    typer.Option(
        "--leader-election-lease",
        help="Name of the leader Lease (default: modelplane-operator, with a suffix "
        "derived from --namespace and --selector so that each shard has its own).",
    ),
]
LeaseDuration = Annotated[
    float,
    typer.Option(
        "--leader-election-lease-duration",
        help="Seconds a standby waits after the Lease's last renewal before taking it.",
    ),
]
RenewDeadline = Annotated[
    float,
    typer.Option(
        "--leader-election-renew-deadline",
        help="Seconds the leader keeps trying to renew before it steps down (exits).",
    ),
]
RetryPeriod = Annotated[
    float,
    typer.Option(
        "--leader-election-retry-period",
        help="Seconds between tries at the Lease, by leader and standbys alike.",
    ),
]
MetricsPort = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        help="Serve Prometheus metrics over HTTPS on this port, to callers whose bearer "
        "token the hub authenticates (TokenReview) and allows to get /metrics "
        "(SubjectAccessReview).",
    ),
]
MetricsCertDir = Annotated[
    Path | None,
    typer.Option(
        "--metrics-cert-dir",
        help="A directory with tls.crt and tls.key for --metrics-port (default: a "
        "self-signed certificate made at start).",
    ),
]
HealthPort = Annotated[
    int | None,
    typer.Option("--health-port", help="Serve /healthz and /readyz in plain HTTP on this port."),
]
MetricsAddress = Annotated[
    str,
    typer.Option(
        "--metrics-address",
        help="The address --metrics-port and --health-port bind (default: every "
        "interface; 127.0.0.1 keeps them to the host).",
    ),
]
NoCrossNamespaceRefs = Annotated[
    bool,
    typer.Option(
        "--no-cross-namespace-refs",
        help="Refuse cloud identity entries that name a Secret in another namespace, "
        "even one annotated modelplane.ai/allowed-namespaces.",
    ),
]
AllowOperatorIdentity = Annotated[
    bool,
    typer.Option(
        "--allow-operator-identity",
        help="Let AWSWebIdentityCredentials Secrets use webIdentityTokenFile, the "
        "operator pod's own projected token (IRSA). Anyone who can create a Secret "
        "and a ServingStack in a watched namespace can then act as the operator's "
        "IAM role.",
    ),
]


# -- checking them, a concern at a time --------------------------------------------


def check_listeners(
    metrics_address: str, metrics_port: int | None, health_port: int | None
) -> None:
    """Refuse an address that is not an IP, or one port for both probes and metrics."""
    try:
        ipaddress.ip_address(metrics_address)
    except ValueError:
        raise typer.BadParameter(
            f"expected an IP address to bind, got {metrics_address!r}",
            param_hint="--metrics-address",
        ) from None
    if metrics_port is not None and metrics_port == health_port:
        raise typer.BadParameter(
            "the probes (HTTP) and the metrics (HTTPS) need a port each",
            param_hint="--health-port",
        )


def shard_selector(selector: str | None) -> str | None:
    """``--selector`` in canonical form, or a BadParameter naming it."""
    try:
        return normalize_selector(selector) if selector is not None else None
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--selector") from None


@dataclass(frozen=True)
class Election:
    """The ``--leader-elect`` group, as given."""

    namespace: str | None
    lease: str | None
    lease_duration: float
    renew_deadline: float
    retry_period: float


def leader_election(given: Election, watched: list[str], selector: str | None) -> LeaderElection:
    """The Lease this replica takes part in, or a BadParameter naming its timing flags."""
    try:
        return LeaderElection(
            namespace=given.namespace or default_namespace(watched),
            name=given.lease or lease_name(watched, selector),
            lease_duration_seconds=given.lease_duration,
            renew_deadline_seconds=given.renew_deadline,
            retry_period_seconds=given.retry_period,
        )
    except ValidationError as err:
        problems = "; ".join(str(e["msg"]) for e in err.errors())
        raise typer.BadParameter(
            problems, param_hint="--leader-election-lease-duration/renew-deadline/retry-period"
        ) from None


def warn_without_helm() -> None:
    """Exit 2 for a helm that cannot be used; warn when there is none at all."""
    try:
        helm = locate_helm()
    except HelmError as err:
        fail(str(err))
    if helm is None:
        # A Provided-only operator needs no helm; a Managed release says it.
        logging.getLogger("modelplane.operator").warning(
            "%s: Managed components fail until one is given; Provided ones need none", NO_HELM
        )


# -- the command ---------------------------------------------------------------------


def run(
    kubeconfig: HubKubeconfig = None,
    namespace: Namespaces = None,
    all_namespaces: AllNamespaces = False,
    chart_repository: ChartRepository = None,
    chart_repository_for: ChartRepositoryFor = None,
    gaie_manifests_url: GaieManifestsUrl = None,
    manifests_url_for: ManifestsUrlFor = None,
    image_registry_mirror: ImageRegistryMirror = None,
    image_pull_secret: ImagePullSecret = None,
    allow_unsafe_kubeconfig: AllowUnsafeKubeconfig = False,
    deny_target_cidr: DenyTargetCidr = None,
    resync: Resync = 300.0,
    relist: Relist = 3600.0,
    max_concurrent_target_reads: MaxConcurrentTargetReads = 50,
    watch_timeout: WatchTimeout = 300.0,
    gc_full_scan: GcFullScan = 3600.0,
    helm_timeout: HelmTimeout = 600,
    manage_crd: ManageCrd = True,
    release_drift: ReleaseDrift = DriftMode.CORRECT,
    mirror_preflight: MirrorPreflightFlag = PreflightMode.WARN,
    selector: Selector = None,
    max_concurrent_upgrades: MaxConcurrentUpgrades = 1,
    canary_namespace: CanaryNamespaces = None,
    canary_selector: RemovedCanarySelector = None,
    upgrade_ready_timeout: UpgradeReadyTimeout = "10m",
    node_agent_max_unavailable: NodeAgentMaxUnavailable = 1,
    node_agent_timeout: NodeAgentTimeout = "5m",
    scheduler_probe_timeout: SchedulerProbeTimeout = "2m",
    leader_elect: LeaderElect = False,
    leader_election_namespace: LeaderElectionNamespace = None,
    leader_election_lease: LeaderElectionLease = None,
    leader_election_lease_duration: LeaseDuration = 15.0,
    leader_election_renew_deadline: RenewDeadline = 10.0,
    leader_election_retry_period: RetryPeriod = 2.0,
    metrics_port: MetricsPort = None,
    metrics_cert_dir: MetricsCertDir = None,
    health_port: HealthPort = None,
    metrics_address: MetricsAddress = "0.0.0.0",
    no_cross_namespace_refs: NoCrossNamespaceRefs = False,
    aws_sts_endpoint: AwsStsEndpoint = None,
    aws_region: AwsRegion = None,
    nebius_token_endpoint: NebiusTokenEndpoint = None,
    allow_operator_identity: AllowOperatorIdentity = False,
    verbose: Verbose = False,
) -> None:
    """Run the operator: reconcile every ServingStack onto its target cluster."""
    configure_logging(verbose)
    watched = namespace or []
    deny = deny_ranges(deny_target_cidr)
    sources = source_options(
        chart_repository, chart_repository_for, gaie_manifests_url, manifests_url_for,
        image_registry_mirror, image_pull_secret,
    )  # fmt: skip
    check_listeners(metrics_address, metrics_port, health_port)
    shard = shard_selector(selector)
    canaries = canary_namespaces(canary_namespace or [], watched, all_namespaces)
    election = Election(
        leader_election_namespace, leader_election_lease, leader_election_lease_duration,
        leader_election_renew_deadline, leader_election_retry_period,
    )  # fmt: skip
    options = OperatorOptions(
        hub_kubeconfig=kubeconfig,
        namespaces=watched,
        all_namespaces=all_namespaces,
        selector=shard,
        leader_election=leader_election(election, watched, shard) if leader_elect else None,
        **sources.operator_fields(),
        allow_unsafe_kubeconfig=allow_unsafe_kubeconfig,
        deny_target_cidrs=deny,
        resync_seconds=resync,
        relist_seconds=relist,
        watch_timeout_seconds=watch_timeout,
        gc_full_scan_seconds=gc_full_scan,
        max_concurrent_target_reads=max_concurrent_target_reads,
        helm_timeout_seconds=helm_timeout,
        manage_crd=manage_crd,
        release_drift=release_drift,
        mirror_preflight=mirror_preflight,
        metrics_port=metrics_port,
        metrics_address=metrics_address,
        metrics_cert_dir=metrics_cert_dir,
        health_port=health_port,
        no_cross_namespace_refs=no_cross_namespace_refs,
        aws_sts_endpoint=aws_sts_endpoint,
        aws_region=aws_region,
        nebius_token_endpoint=nebius_token_endpoint,
        allow_operator_identity=allow_operator_identity,
        max_concurrent_upgrades=max_concurrent_upgrades,
        canary_namespaces=canaries,
        upgrade_ready_timeout_seconds=parse_duration(upgrade_ready_timeout),
        node_agent_max_unavailable=node_agent_max_unavailable,
        node_agent_timeout_seconds=parse_duration(node_agent_timeout),
        scheduler_probe_seconds=probe_seconds(scheduler_probe_timeout),
    )
    warn_without_helm()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(options))
