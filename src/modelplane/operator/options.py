"""How the operator was started, as one model every part reads."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from modelplane.catalog.overrides import unknown_components
from modelplane.credentials.identity.base import Endpoints
from modelplane.kube.address import DEFAULT_DENIED, IPNetwork
from modelplane.operator.leader import LeaderElection
from modelplane.plan.images import MirrorRule
from modelplane.plan.mirror_images import PreflightMode
from modelplane.plan.release_health import DriftMode
from modelplane.plan.rollout import Policy
from modelplane.plan.sources import SourceFlags, Sources


class OperatorOptions(BaseModel):
    model_config = ConfigDict(frozen=True)

    hub_kubeconfig: Path | None = None
    namespaces: list[str] = Field(default_factory=list)
    all_namespaces: bool = False
    # A label selector on ServingStacks (canonical, see operator/shard.py):
    # this operator's shard of the hub's fleet, filtered by the hub itself.
    selector: str | None = None
    # None: standalone, as one replica. Otherwise only the holder of the
    # Lease reconciles (see operator/leader.py).
    leader_election: LeaderElection | None = None
    chart_repository: str | None = None
    chart_repository_for: dict[str, str] = Field(default_factory=dict)
    gaie_manifests_url: str | None = None
    manifests_url_for: dict[str, str] = Field(default_factory=dict)
    # --image-registry-mirror and --image-pull-secret, parsed and checked.
    image_mirrors: tuple[MirrorRule, ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    # --mirror-preflight: with mirror rules, each image a release is about to
    # run is looked up in the mirror first (operator.mirror_preflight); a
    # mirror that cannot be asked holds the release (require), is said and
    # let go (warn), or nothing is looked up (off).
    mirror_preflight: PreflightMode = PreflightMode.WARN
    allow_unsafe_kubeconfig: bool = False
    # Addresses no target request may go to (the cloud metadata services and
    # link-local by default); see modelplane.kube.address.
    deny_target_cidrs: tuple[IPNetwork, ...] = DEFAULT_DENIED
    # A periodic full re-check; target watches make changes arrive sooner.
    resync_seconds: float = 300.0
    # A resync re-plans from what the target watches hold; this often, one
    # reads the target afresh instead, so a watch that silently fell behind
    # is put right.
    relist_seconds: float = 3600.0
    # The timeoutSeconds asked of each target watch (the server ends it
    # after between one and two times this; it is re-armed at once).
    watch_timeout_seconds: float = 300.0
    # Between checks for a walk of every object by the garbage collector
    # (made when the frozen heap grew by a tenth since the last walk), each
    # full collection walks only what is new since the last
    # (operator.collector); 0: CPython's own collections.
    gc_full_scan_seconds: float = 3600.0
    helm_timeout_seconds: int = 600
    # Bring the hub's ServingStack CRD to this operator's at start (Helm
    # never upgrades a chart's crds/). Off where the CRD is someone else's to
    # apply, a GitOps repository's for one.
    manage_crd: bool = True
    # --release-drift: a release's object deleted or changed by hand is
    # restored from its stored manifest (correct), only reported (warn), or
    # not looked for (off).
    release_drift: DriftMode = DriftMode.CORRECT
    target_timeout_seconds: float = 10.0
    # How long teardown waits for one wave of objects to go before it gives up
    # waiting and goes on (saying so in a condition and an event).
    teardown_wait_seconds: float = 120.0
    # /metrics, over HTTPS, for callers the hub authorizes (metrics_auth).
    metrics_port: int | None = None
    # tls.crt and tls.key for the metrics port; None: a self-signed pair.
    metrics_cert_dir: Path | None = None
    # /healthz and /readyz, in plain HTTP.
    health_port: int | None = None
    # Where both ports listen.
    metrics_address: str = "0.0.0.0"
    # Refuse identity entries that name a Secret in another namespace, even
    # one whose grant annotation names the stack's namespace.
    no_cross_namespace_refs: bool = False
    # Token service overrides for cloud identities (regional, FIPS, tests).
    aws_sts_endpoint: str | None = None
    aws_region: str | None = None
    nebius_token_endpoint: str | None = None
    # Let AWS identity Secrets name the operator pod's own projected token
    # (IRSA): off by default, since that token is the operator's IAM role.
    allow_operator_identity: bool = False
    # How many stacks connect to their target and read it in full at once
    # (operator.target_reads).
    max_concurrent_target_reads: int = Field(default=50, ge=1)
    # The staged rollout of upgrades (plan.rollout), within this shard: the
    # stacks' statuses that carry it are read from this operator's watch.
    max_concurrent_upgrades: int = Field(default=1, ge=1)
    # The hub namespaces whose stacks are canaries: the hub admin's choice.
    # None of their own labels makes a stack one (its owner sets those).
    canary_namespaces: tuple[str, ...] = ()
    upgrade_ready_timeout_seconds: float = Field(default=600.0, gt=0)
    # Node agents (the DRA kubelet plugin, the NFD worker) are restarted a
    # node at a time after their upgrade (plan.node_agents): at most this many
    # nodes without a Ready agent, and each node served again within this long.
    node_agent_max_unavailable: int = Field(default=1, ge=1)
    node_agent_timeout_seconds: float = Field(default=300.0, gt=0)
    # How long a Managed KAI scheduler has to bind its probe pod once it is
    # installed or upgraded (plan.scheduler_probe); 0 turns the probe off.
    scheduler_probe_seconds: float = Field(default=120.0, ge=0)

    # Each names components by what it gives them: a chart or fetched manifests.
    @field_validator("chart_repository_for", "manifests_url_for")
    @classmethod
    def _known_components(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        kind = "chart" if info.field_name == "chart_repository_for" else "manifests"
        problem = unknown_components(value, kind)
        if problem:
            raise ValueError(problem)
        return value

    def rollout_policy(self) -> Policy:
        return Policy(
            max_concurrent=self.max_concurrent_upgrades,
            canary_namespaces=frozenset(self.canary_namespaces),
            ready_timeout=timedelta(seconds=self.upgrade_ready_timeout_seconds),
        )

    def scheduler_probe_bound(self) -> timedelta:
        return timedelta(seconds=self.scheduler_probe_seconds)

    def endpoints(self) -> Endpoints:
        return Endpoints(
            aws_sts=self.aws_sts_endpoint,
            aws_region=self.aws_region,
            nebius_token_exchange=self.nebius_token_endpoint,
            deny=self.deny_target_cidrs,
            allow_operator_identity=self.allow_operator_identity,
        )

    def sources(self) -> Sources:
        return SourceFlags.of(self).sources(self.release_drift)
