"""One ServingStack's reconcile and teardown: observe, plan, act, report.

The reconciler holds no rule the plan could hold: it reads credentials,
observes the target, calls ``plan`` and carries out the actions it names;
what a failure means and when to try again are ``plan.decisions``. Between
reconciles it keeps backoff after failures, a cache of fetched manifests
and, for the daemon, the one connection to the target that the reconciles
and the target watches share; all are safe to lose.

Its parts are objects it keeps, each owning its state and given what it
shares with the others when the reconciler is made: the failed components
and their backoff (``operator.component_failures``), what its reads were
(``operator.read_history``, for ``plan.trust``), the warnings said once
(``operator.announced``), the records of what its helm wrote
(``operator.release_records``), carrying out a round's plan
(``operator.stack_actions``) and teardown (``operator.stack_teardown``).
What a fault says in a condition is ``operator.stack_text``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lightkube import AsyncClient
from pydantic import ValidationError

from modelplane.actions import claim
from modelplane.actions.claim import Emit
from modelplane.actions.dry_runs import DryRuns
from modelplane.actions.helm import Helm
from modelplane.api.models import ServingStack
from modelplane.api.status_limits import LOG_MESSAGE
from modelplane.catalog.components import components_for
from modelplane.catalog.facts import ClusterFacts
from modelplane.credentials.identity.cache import TokenCache
from modelplane.kube.answers import describe_error
from modelplane.kube.client import Target
from modelplane.kube.discovery import APIS
from modelplane.kube.errors import ErrorKind, Fault, classify
from modelplane.observe.facts import observe_target
from modelplane.observe.release_objects import (
    RELEASE_OWNERS,
    ReleaseManifests,
    node_facts,
    other_objects,
    refused_revisions,
    release_workloads,
    unjudged_releases,
    watches_for,
)
from modelplane.observe.release_others import collections_for, release_others
from modelplane.observe.state import (
    Listed,
    ReleaseCollection,
    ReleaseWatch,
    Wanted,
    read_listed,
    read_release_objects,
    to_observed,
    wanted,
)
from modelplane.observe.watches import LIST_WAIT_SECONDS
from modelplane.observe.writes import Writes
from modelplane.operator.announced import Announced
from modelplane.operator.component_failures import ComponentFailures
from modelplane.operator.mirror_preflight import MirrorPreflight
from modelplane.operator.node_agents import NodeAgentRolls
from modelplane.operator.options import OperatorOptions
from modelplane.operator.plan_warnings import PlanWarnings
from modelplane.operator.read_history import Ended, ReadHistory
from modelplane.operator.release_records import ReleaseRecords
from modelplane.operator.scheduler_probe import SchedulerProbe
from modelplane.operator.session import CredentialSource, TargetSession
from modelplane.operator.stack_actions import StackActions, may_write
from modelplane.operator.stack_teardown import StackTeardown, Waiting
from modelplane.operator.stack_text import explain, first_error, without_status
from modelplane.operator.status import Outcome
from modelplane.operator.target_reads import TargetReads, blocked_on_hub, reads_apart
from modelplane.pins import ComponentsMode
from modelplane.plan import Plan, decisions, plan, trust
from modelplane.plan.capacity import TargetSummary
from modelplane.plan.decisions import BlockedReason
from modelplane.plan.observed import Observed
from modelplane.plan.release_health import DriftMode
from modelplane.plan.release_trust import TamperedRelease
from modelplane.untrusted import printable
from modelplane.vocabulary import EventReason

log = logging.getLogger("modelplane.operator")


# Each round re-observes after acting, so an install that brings new APIs
# unblocks the objects waiting for them in the same reconcile.
MAX_ROUNDS = 6

INVALID_SPEC = BlockedReason.INVALID_SPEC
# A Warning event: the target connection is allowed but unsafe (Target.warnings).
INSECURE_TARGET = EventReason.INSECURE_TARGET


@dataclass
class StackReconciler:
    # None for a run without a hub (``modelplane apply``), which gives ``credentials``.
    hub: AsyncClient | None
    helm: Helm
    options: OperatorOptions
    emit: Emit
    clock: Callable[[], float] = time.monotonic
    # The plan's warnings said by event, so a resync that finds the same
    # ones stays quiet; safe to lose (a restart says them once).
    plan_warnings: PlanWarnings = field(default_factory=PlanWarnings)
    # Target.warnings said so far: each gets one Warning event when it appears.
    connection_warnings: Announced = field(default_factory=Announced)
    # This round's, for the TargetVerified condition; None until it connected.
    round_connection_warnings: tuple[str, ...] | None = None
    # The spec error last reported by event, likewise.
    invalid_spec: str | None = None
    # The last collection refused over its budget, said in an event once.
    refused_collection: str | None = None
    # The advisories' facts and the target's summary, with what they were
    # read for (the components and the served APIs): read again only with a
    # direct read of the target, or when either changed. Watching what they
    # come from (every Deployment, Node, Service and ConfigMap of the
    # cluster) would hold a copy of much of the cluster per target; so they
    # are as fresh as the last direct read (--relist), but for a change the
    # GPU checks' watches see (observe.gpu_watch), which reads them again.
    facts: tuple[tuple[str, ...], APIS, ClusterFacts, TargetSummary | None] | None = None
    # The GPU watches' generation those facts were read at (observe.gpu_watch).
    facts_generation: int | None = None
    # Cloud identity tokens, shared with the stack's target watches and kept
    # across reconciles.
    tokens: TokenCache = field(default_factory=TokenCache)
    # Called by the target watches when something on the target changed.
    # With it, the reconciler keeps its connection to the target across
    # reconciles and runs the target watches on it (the daemon); without it,
    # each reconcile opens the target and closes it (a test, a teardown).
    wake: Callable[[], None] | None = None
    label: str = ""
    # Shared by the stacks of one operator: how many may connect to their
    # target and read it in full at once (--max-concurrent-target-reads).
    # None: no bound (a CLI run reconciles one stack).
    target_reads: TargetReads | None = None
    # Whether the last reconcile was blocked or failed, and why it was
    # blocked (seeded from Ready on the hub after a restart).
    went_wrong: bool = True
    last_blocked: str | None = None
    reconciled: bool = False
    # Managed mode: the releases' workloads (from their stored manifests,
    # decoded once per revision) and what is read of them; safe to lose.
    release_manifests: ReleaseManifests = field(default_factory=ReleaseManifests)
    dry_runs: DryRuns = field(default_factory=DryRuns)
    release_watches: tuple[ReleaseWatch, ...] = ()
    release_collections: tuple[ReleaseCollection, ...] = ()
    # Without a hub: where the target's credentials come from, and who
    # claims it (``claim.LocalRun``); None for the stack's own Secrets and
    # the stack itself.
    credentials: CredentialSource | None = None
    claimant: claim.Claimant | None = None
    # Called with each round's plan before it is carried out: what a
    # progress view shows as being done now. Never changes what is done.
    on_plan: Callable[[Plan], None] | None = None
    # The mirror preflight (operator.mirror_preflight); the daemon's is shared
    # by its stacks, and without one given the options make this run's own.
    mirror: MirrorPreflight | None = None
    session: TargetSession = field(init=False)
    # The failed components, their backoff and what each failure says.
    component_failures: ComponentFailures = field(init=False)
    # When the target was last read directly, and how the last reconcile
    # ended: what trusting the watches' copy depends on (plan.trust).
    reads: ReadHistory = field(init=False)
    # Per release: what the operator's helm last wrote (operator.release_records),
    # kept on the hub in status.releases; a CLI run keeps it for the run only.
    release_records: ReleaseRecords = field(init=False)
    # Carries out each round's plan, with the same failures and records.
    actions: StackActions = field(init=False)
    # Teardown, over the same session, records and events.
    stack_teardown: StackTeardown = field(init=False)
    # The node agents rolled a node at a time after their upgrade.
    rolls: NodeAgentRolls = field(init=False)
    # Whether Managed KAI binds a pod once installed (operator.scheduler_probe).
    probe: SchedulerProbe = field(init=False)

    def __post_init__(self) -> None:
        self.session = TargetSession(
            self.hub,
            self.options,
            self.tokens,
            wake=self.wake,
            label=self.label,
            source=self.credentials,
        )
        self.reads = ReadHistory(self.options.relist_seconds, self.clock)
        self.component_failures = ComponentFailures(self.emit, self.clock)
        if self.mirror is None:
            self.mirror = MirrorPreflight.of(self.options)
        self.release_records = ReleaseRecords(self.emit)
        self.rolls = NodeAgentRolls.of(self.options, self.emit, self.component_failures)
        self.actions = StackActions(
            self.helm,
            self.options,
            self.emit,
            self.label,
            self.component_failures,
            self.release_records,
            self.mirror,
            rolls=self.rolls,
        )
        self.stack_teardown = StackTeardown(
            self.helm,
            self.options,
            self.emit,
            self.session,
            self.release_records,
            self.claimant,
        )
        self.probe = SchedulerProbe(
            self.emit, self.options.scheduler_probe_bound(), self.options.image_mirrors
        )

    @property
    def acted_on_nothing(self) -> bool:
        """Whether the last reconcile went through its rounds and found nothing to do."""
        return self.reads.last.acted_on_nothing

    # -- reconcile -----------------------------------------------------------

    async def reconcile(
        self, body: dict[str, Any], held: Mapping[str, str] | None = None
    ) -> Outcome:
        """One reconcile; the target watches' copy spares a quiet resync the reads.

        ``held``: the installed versions to reconcile components at while
        their upgrade waits for the rollout (plan.rollout).
        """
        last = self.reads.begin()
        self.release_records.seed_records(body.get("status"))
        if not self.reconciled:
            self.last_blocked = blocked_on_hub(body.get("status"))
        try:
            stack = ServingStack.model_validate(without_status(body))
        except ValidationError as err:
            # The hub's CRD refuses most bad specs; what it lets through (a
            # stack stored under an older, looser CRD) is reported here, in an
            # event once and in Ready for as long as it stands.
            message = first_error(err)
            if decisions.is_new(self.invalid_spec, message):
                self.emit("Warning", EventReason.INVALID_SPEC, message)
            self.invalid_spec = message
            return Outcome(blocked_reason=INVALID_SPEC, blocked_message=message)
        self.invalid_spec = None
        self.round_connection_warnings = None
        outcome = await self._reconcile(stack, body, last, held or {})
        outcome.connection_warnings = self.round_connection_warnings
        outcome.releases = self.release_records.status_records()
        self.went_wrong = outcome.blocked_reason is not None or bool(outcome.failures)
        self.last_blocked = outcome.blocked_reason
        self.reconciled = True
        if outcome.blocked_reason is None:
            self.refused_collection = None
        if outcome.blocked_reason is None and self.session.kept and self.session.target is not None:
            await self.session.watch(self._wanted(stack))
        return outcome

    async def connected(self, body: dict[str, Any]) -> Target:
        """The stack's target, as a reconcile connects it: the daemon's kept connection.

        For what is asked of the target before a reconcile (the pull Secrets
        an upgrade's images are looked up with, operator.upgrade_images).
        """
        assert self.session.kept, "only a daemon's connection outlives the call"
        stack = ServingStack.model_validate(without_status(body))
        return await self.session.connect(
            stack,
            (body.get("metadata") or {}).get("generation"),
            last_went_wrong=self.went_wrong,
            direct_read_due=self.reads.direct_read_due(),
        )

    def _report_refused_collection(self, fault: Fault, err: BaseException) -> None:
        """An event when a collection on the target is first refused over its budget.

        A target that holds more than the operator reads is someone's doing,
        not an outage: said once, as long as the same collection stays refused.
        """
        refused = describe_error(err) if fault.kind is ErrorKind.OVER_BUDGET else None
        if refused is not None and decisions.is_new(self.refused_collection, refused):
            self.emit("Warning", EventReason.TARGET_COLLECTION_TOO_LARGE, refused)
        self.refused_collection = refused

    async def _reconcile(
        self,
        stack: ServingStack,
        body: dict[str, Any],
        last: Ended,
        held: Mapping[str, str],
    ) -> Outcome:
        current: Plan | None = None
        due = self.reads.direct_read_due()
        settled = trust.settled(
            acted_on_nothing=last.acted_on_nothing,
            writes_seen=last.writes_seen,
            direct_read_due=due,
        )
        # Held from connecting to the target through the first round's read
        # (and the facts read with it), when that read is a full one: never
        # while the plan is carried out (helm may take minutes).
        slot = contextlib.AsyncExitStack()
        try:
            if self.target_reads is not None and trust.takes_slot(
                connected=self.session.target is not None, settled=settled
            ):
                apart = reads_apart(self.last_blocked)
                await slot.enter_async_context(self.target_reads.slot(apart=apart))
            target = await self.session.connect(
                stack,
                (body.get("metadata") or {}).get("generation"),
                last_went_wrong=self.went_wrong,
                direct_read_due=due,
            )
            self._report_connection(target)
            want = self._wanted(stack)
            # Asked once connected: a new connection stopped the old one's watches.
            running = self.session.cache
            read = trust.first_read(
                trust.ReadFacts(
                    keeps_watches=self.session.kept,
                    watching=running is not None,
                    copy_covers=running is not None and running.want == want,
                    managed=stack.spec.components is ComponentsMode.MANAGED,
                    acted_on_nothing=last.acted_on_nothing,
                    writes_seen=last.writes_seen,
                    direct_read_due=due,
                )
            )
            log.debug(
                "%s: first read from the %s: %s", self.label, read.source.value, read.why.value
            )
            # Nothing is written to a target another ServingStack holds: its
            # claim is read now, or, reading the copy, before a plan that writes.
            claim_held = False
            if trust.claim_read_first(read.source):
                if (blocked := await self._claim(target, stack, body)) is not None:
                    return blocked
                claim_held = True
            fresh = read.source is trust.Source.FIRST_LISTS
            if fresh:
                await self.session.watch(want)
            cache = self.session.cache
            from_cache = read.source is not trust.Source.TARGET
            acted = seen = False
            writes = Writes()
            # The advisories' facts are read at most once a reconcile (and
            # again only if the served APIs change): what its rounds write is
            # the product's own, and they are read again with the next direct
            # read (after a release, a write the copy did not show, or
            # --relist) or a change the GPU path's watches see. An install's
            # rounds would otherwise list the whole cluster's Nodes,
            # Deployments, ... once each.
            facts_read = False
            for _ in range(MAX_ROUNDS):
                listed = (
                    await cache.listed(target.client, within=LIST_WAIT_SECONDS)
                    if cache and from_cache
                    else None
                )
                # Watches that have just listed everything are a direct read.
                direct = listed is None or fresh
                if listed is None:
                    listed = await read_listed(target.client, want)
                if direct:
                    self.reads.read_directly()
                fresh = False
                tampered: list[TamperedRelease] = []
                if stack.spec.components is ComponentsMode.MANAGED:
                    # Before anything of a release is read or acted on: only
                    # the storage the operator wrote is (operator.release_records).
                    listed, tampered = await self.release_records.trust_storage(
                        target, listed, want.release_namespaces
                    )
                observed = to_observed(listed)
                if stack.spec.components is ComponentsMode.MANAGED:
                    observed = observed.model_copy(update={"tampered_releases": tampered})
                    observed, want = await self._release_workloads(target, listed, observed, want)
                # The silent failures the spec cannot check, in both modes:
                # a provided substrate is only reported, a managed one's
                # failures are the product's own (GPUsAvailable, Ready).
                # The APIs as discovery shared them (``kube.discovery.shared``),
                # not the observation's copy: the facts keep them till the next.
                facts, summary = await self._cluster_facts(
                    target, stack, listed.apis, direct and not facts_read
                )
                facts_read = facts_read or direct
                await slot.aclose()
                observed = observed.model_copy(update={"cluster": facts, "target": summary})
                # In a worker thread: the plan parses a tenant's ConfigMaps
                # (a MiB of YAML takes seconds), and the loop renews the
                # leader Lease and answers /healthz meanwhile.
                current = await asyncio.to_thread(
                    plan, stack, observed, self.options.sources(), held
                )
                if self.on_plan is not None:
                    self.on_plan(current)
                if not claim_held and may_write(current):
                    if (blocked := await self._claim(target, stack, body)) is not None:
                        return blocked
                    claim_held = True
                adopt, timeout = frozenset(stack.spec.adopt), stack.spec.claim_wait_timeout
                if not await self.actions.act(current, target, writes, adopt, timeout):
                    # Read after every write, from the target or a copy showing them.
                    seen = acted and from_cache
                    break
                acted = True
                # What this round wrote answers the next from the watch copy
                # once its events are in; helm's writes are never dated.
                from_cache = (
                    cache is not None
                    and trust.copy_may_show_writes(
                        copy_covers=cache.want == want, untracked=writes.untracked
                    )
                    and await cache.shows(writes.objects, within=LIST_WAIT_SECONDS)
                )
            self.reads.end(acted=acted, writes_seen=seen)
            if current is not None:
                # A component with work left is not settled at any version.
                await self.probe.run(target.client, current, current.components_with_work)
        except Exception as err:
            fault = classify(err)
            if fault.kind is ErrorKind.UNEXPECTED:
                raise  # the daemon reports it, with its traceback
            self._report_refused_collection(fault, err)
            return Outcome(
                # A plan made before the target answered so is still what it
                # is; one made before an address or an identity gave out is not.
                plan=current if fault.status is not None else None,
                blocked_reason=decisions.blocked_reason(fault),
                # What the target answered, made safe for the status, the
                # event and the log line it goes on to.
                blocked_message=printable(explain(fault, err, stack), LOG_MESSAGE),
            )
        finally:
            await slot.aclose()
            if not self.session.kept:
                await self.session.close()
        if current is not None:
            self.component_failures.forget_finished(current)
            self.plan_warnings.report(current, self.emit)
        failures = self.component_failures
        outcome = Outcome(
            plan=current,
            failures=dict(failures.failures),
            waiting_on_webhook=frozenset(failures.waiting_on_webhook),
            refused=frozenset(failures.refused),
            failure_reasons=dict(failures.reasons),
            retry_after=failures.retry_after(),
        )
        outcome = self.rolls.into(outcome)
        return self.probe.into(outcome) if current is not None else outcome

    async def _claim(
        self, target: Target, stack: ServingStack, body: dict[str, Any]
    ) -> Outcome | None:
        """Hold the target's claim; the blocked outcome when another stack holds it."""
        blocked = await claim.before_reconcile(
            target.client, stack, self.emit, body.get("status"), self.claimant
        )
        if blocked is None:
            return None
        return Outcome(
            blocked_reason=BlockedReason(blocked.reason), blocked_message=blocked.message
        )

    def _wanted(self, stack: ServingStack) -> Wanted:
        # The pull Secrets' presence is read beside the rest, so a Secret
        # that arrives wakes the stack through its watch.
        want = wanted(stack.spec, self.options.sources().image_pull_secrets)
        if stack.spec.components is not ComponentsMode.MANAGED:
            return want
        return dataclasses.replace(
            want,
            release_objects=self.release_watches,
            release_collections=self.release_collections,
        )

    async def _release_workloads(
        self, target: Target, listed: Listed, observed: Observed, want: Wanted
    ) -> tuple[Observed, Wanted]:
        """The releases' workloads, from their stored manifests and what the target holds.

        A revision that names other workloads than the watches follow (a
        first reconcile, an upgrade) has them read now, and followed from
        this reconcile's end (``session.watch``).
        """
        # Nothing of a release whose storage is not the operator's is read.
        untrusted = {t.release for t in observed.tampered_releases}
        releases = {n: r for n, r in observed.releases.items() if n not in untrusted}
        # Stored manifests are up to 1 MiB of YAML each: parsed off the loop.
        manifests = await asyncio.to_thread(self.release_manifests.read, listed, releases)
        watches = watches_for(manifests)
        others = other_objects(manifests)
        collections = collections_for(others)
        if watches != want.release_objects or collections != want.release_collections:
            want = dataclasses.replace(
                want, release_objects=watches, release_collections=collections
            )
            self.release_watches, self.release_collections = watches, collections
            await read_release_objects(target.client, want, listed)
        workloads = release_workloads(manifests, listed)
        objects = release_others(others, listed, RELEASE_OWNERS)
        if self.options.release_drift is not DriftMode.OFF:
            workloads, objects = await self.dry_runs.settle(target.client, workloads, objects)
        update = {
            "release_workloads": workloads,
            "release_objects": objects,
            "unjudged_releases": unjudged_releases(manifests),
            "refused_revisions": refused_revisions(manifests),
            "nodes": node_facts(listed.nodes),
            "observed_at": datetime.now(UTC),
        }
        return observed.model_copy(update=update), want

    async def close(self) -> None:
        """Stop the target watches and close the connection to the target."""
        await self.session.close()

    async def _cluster_facts(
        self, target: Target, stack: ServingStack, apis: APIS, direct: bool
    ) -> tuple[ClusterFacts, TargetSummary | None]:
        """The advisories' facts and the target's summary: read with each direct read.

        Else the last ones, if read for the same components and APIs.
        """
        components = components_for(stack.spec)
        names = tuple(c.name for c in components)
        kept = self.facts
        # The GPU path's watches bump this when what the GPU checks read changed.
        cache = self.session.cache
        generation = cache.facts_generation if cache is not None else None
        if (
            not direct
            and kept is not None
            and kept[0] == names
            and kept[1] == apis
            and generation == self.facts_generation
        ):
            return kept[2], kept[3]
        facts, summary = await observe_target(target.client, components, apis)
        self.facts = (names, apis, facts, summary)
        self.facts_generation = generation
        return facts, summary

    def _report_connection(self, target: Target) -> None:
        """One Warning event per unsafe trait of the connection, when it appears."""
        for message in self.connection_warnings.new(target.warnings):
            self.emit("Warning", INSECURE_TARGET, message)
        self.round_connection_warnings = tuple(sorted(frozenset(target.warnings)))

    # -- teardown ------------------------------------------------------------

    async def teardown(self, body: dict[str, Any], waited_seconds: float) -> Waiting | None:
        """One pass of teardown (``operator.stack_teardown``): what it waits for, or None."""
        return await self.stack_teardown.run(body, waited_seconds, self.on_plan)
