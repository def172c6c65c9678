"""``modelplane run``: the operator."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
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
    RemovedCanarySelector,
    UpgradeReadyTimeout,
    Verbose,
    canary_namespaces,
    deny_ranges,
    parse_duration,
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
from modelplane.plan.release_health import DriftMode


def run(
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--kubeconfig",
            help="The hub's kubeconfig (default: $KUBECONFIG, ~/.kube/config or in-cluster).",
        ),
    ] = None,
    namespace: Annotated[
        list[str] | None,
        typer.Option(
            "--namespace", "-n", help="Watch ServingStacks in this namespace (repeatable)."
        ),
    ] = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="Watch every namespace (default).")
    ] = False,
    chart_repository: ChartRepository = None,
    chart_repository_for: ChartRepositoryFor = None,
    gaie_manifests_url: GaieManifestsUrl = None,
    manifests_url_for: ManifestsUrlFor = None,
    image_registry_mirror: ImageRegistryMirror = None,
    image_pull_secret: ImagePullSecret = None,
    allow_unsafe_kubeconfig: Annotated[
        bool,
        typer.Option(
            "--allow-unsafe-kubeconfig",
            help="Let target kubeconfigs run exec or "
            "auth-provider plugins and read local files. Anyone who can write a "
            "Secret the operator reads can then run code as the operator.",
        ),
    ] = False,
    deny_target_cidr: DenyTargetCidr = None,
    resync: Annotated[
        float, typer.Option("--resync", help="Seconds between full re-checks.")
    ] = 300.0,
    relist: Annotated[
        float,
        typer.Option(
            "--relist",
            help="Seconds between resyncs that read the target afresh instead of "
            "re-planning from what the watches hold.",
        ),
    ] = 3600.0,
    max_concurrent_target_reads: Annotated[
        int,
        typer.Option(
            "--max-concurrent-target-reads",
            min=1,
            help="At most this many ServingStacks connect to their target and read it in "
            "full at once (a new operator starts its whole shard together); the rest "
            "wait their turn.",
        ),
    ] = 50,
    watch_timeout: Annotated[
        float, typer.Option("--watch-timeout", hidden=True, help="Target watch timeoutSeconds.")
    ] = 300.0,
    helm_timeout: HelmTimeout = 600,
    manage_crd: Annotated[
        bool,
        typer.Option(
            "--manage-crd/--no-manage-crd",
            help="At start, bring the hub's ServingStack CRD to this operator's with "
            "server-side apply (Helm never upgrades a chart's crds/). The CRD is never "
            "deleted.",
        ),
    ] = True,
    release_drift: Annotated[
        DriftMode,
        typer.Option(
            "--release-drift",
            help="Managed mode: a release's workload deleted or changed by hand on the "
            "target is restored from the release's stored manifest (correct), only "
            "reported in status and a ReleaseDrift event (warn), or not looked for (off).",
            case_sensitive=False,
        ),
    ] = DriftMode.CORRECT,
    selector: Annotated[
        str | None,
        typer.Option(
            "--selector",
            "-l",
            help="Serve only the ServingStacks whose labels match this selector "
            "(key=value, key!=value, key in (a,b), key notin (a,b), key, !key; comma-joined): "
            "this replica set's shard of the hub's fleet. Combines with --namespace.",
        ),
    ] = None,
    max_concurrent_upgrades: MaxConcurrentUpgrades = 1,
    canary_namespace: CanaryNamespaces = None,
    canary_selector: RemovedCanarySelector = None,
    upgrade_ready_timeout: UpgradeReadyTimeout = "10m",
    leader_elect: Annotated[
        bool,
        typer.Option(
            "--leader-elect",
            help="Run as one of several replicas: only the holder of a coordination.k8s.io "
            "Lease on the hub reconciles; the others stand by and take over when it goes.",
        ),
    ] = False,
    leader_election_namespace: Annotated[
        str | None,
        typer.Option(
            "--leader-election-namespace",
            help="Namespace of the leader Lease (default: $POD_NAMESPACE, the pod's "
            "ServiceAccount namespace, else the first --namespace, else default).",
        ),
    ] = None,
    leader_election_lease: Annotated[
        str | None,
        typer.Option(
            "--leader-election-lease",
            help="Name of the leader Lease (default: modelplane-operator, with a suffix "
            "derived from --namespace and --selector so that each shard has its own).",
        ),
    ] = None,
    leader_election_lease_duration: Annotated[
        float,
        typer.Option(
            "--leader-election-lease-duration",
            help="Seconds a standby waits after the Lease's last renewal before taking it.",
        ),
    ] = 15.0,
    leader_election_renew_deadline: Annotated[
        float,
        typer.Option(
            "--leader-election-renew-deadline",
            help="Seconds the leader keeps trying to renew before it steps down (exits).",
        ),
    ] = 10.0,
    leader_election_retry_period: Annotated[
        float,
        typer.Option(
            "--leader-election-retry-period",
            help="Seconds between tries at the Lease, by leader and standbys alike.",
        ),
    ] = 2.0,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            help="Serve Prometheus metrics over HTTPS on this port, to callers whose bearer "
            "token the hub authenticates (TokenReview) and allows to get /metrics "
            "(SubjectAccessReview).",
        ),
    ] = None,
    metrics_cert_dir: Annotated[
        Path | None,
        typer.Option(
            "--metrics-cert-dir",
            help="A directory with tls.crt and tls.key for --metrics-port (default: a "
            "self-signed certificate made at start).",
        ),
    ] = None,
    health_port: Annotated[
        int | None,
        typer.Option(
            "--health-port", help="Serve /healthz and /readyz in plain HTTP on this port."
        ),
    ] = None,
    metrics_address: Annotated[
        str,
        typer.Option(
            "--metrics-address",
            help="The address --metrics-port and --health-port bind (default: every "
            "interface; 127.0.0.1 keeps them to the host).",
        ),
    ] = "0.0.0.0",
    no_cross_namespace_refs: Annotated[
        bool,
        typer.Option(
            "--no-cross-namespace-refs",
            help="Refuse cloud identity entries that name a Secret in another namespace, "
            "even one annotated modelplane.ai/allowed-namespaces.",
        ),
    ] = False,
    aws_sts_endpoint: AwsStsEndpoint = None,
    aws_region: AwsRegion = None,
    nebius_token_endpoint: NebiusTokenEndpoint = None,
    allow_operator_identity: Annotated[
        bool,
        typer.Option(
            "--allow-operator-identity",
            help="Let AWSWebIdentityCredentials Secrets use webIdentityTokenFile, the "
            "operator pod's own projected token (IRSA). Anyone who can create a Secret "
            "and a ServingStack in a watched namespace can then act as the operator's "
            "IAM role.",
        ),
    ] = False,
    verbose: Verbose = False,
) -> None:
    """Run the operator: reconcile every ServingStack onto its target cluster."""
    configure_logging(verbose)
    deny = deny_ranges(deny_target_cidr)
    sources = source_options(
        chart_repository, chart_repository_for, gaie_manifests_url, manifests_url_for,
        image_registry_mirror, image_pull_secret,
    )  # fmt: skip
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
    try:
        shard_selector = normalize_selector(selector) if selector is not None else None
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--selector") from None
    canaries = canary_namespaces(canary_namespace or [], namespace or [], all_namespaces)
    election = None
    if leader_elect:
        try:
            election = LeaderElection(
                namespace=leader_election_namespace or default_namespace(namespace or []),
                name=leader_election_lease or lease_name(namespace or [], shard_selector),
                lease_duration_seconds=leader_election_lease_duration,
                renew_deadline_seconds=leader_election_renew_deadline,
                retry_period_seconds=leader_election_retry_period,
            )
        except ValidationError as err:
            problems = "; ".join(str(e["msg"]) for e in err.errors())
            raise typer.BadParameter(
                problems, param_hint="--leader-election-lease-duration/renew-deadline/retry-period"
            ) from None
    options = OperatorOptions(
        hub_kubeconfig=kubeconfig,
        namespaces=namespace or [],
        all_namespaces=all_namespaces,
        selector=shard_selector,
        leader_election=election,
        **sources.operator_fields(),
        allow_unsafe_kubeconfig=allow_unsafe_kubeconfig,
        deny_target_cidrs=deny,
        resync_seconds=resync,
        relist_seconds=relist,
        watch_timeout_seconds=watch_timeout,
        max_concurrent_target_reads=max_concurrent_target_reads,
        helm_timeout_seconds=helm_timeout,
        manage_crd=manage_crd,
        release_drift=release_drift,
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
    )
    try:
        helm = locate_helm()
    except HelmError as err:
        fail(str(err))
    if helm is None:
        # A Provided-only operator needs no helm; a Managed release says it.
        logging.getLogger("modelplane.operator").warning(
            "%s: Managed components fail until one is given; Provided ones need none", NO_HELM
        )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(options))
