"""Carrying out one round's plan on the target: objects, manifests, drift, releases.

An object ``StackReconciler`` keeps, given the failures and release
records it shares with the reconciler. Each action is one component's,
guarded (``ComponentFailures``): a failure is recorded and backed off, and
the rest of the round goes on. What was applied is noted in ``Writes``, so
the reconcile can tell when the watch copy shows it (``observe.writes``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from modelplane.actions.apply import apply_object, create_namespace, manifest_objects
from modelplane.actions.chart_crds import applies_chart_crds, apply_chart_crds
from modelplane.actions.claim import Emit
from modelplane.actions.claim_wait import ReinstallWaits
from modelplane.actions.helm import Helm
from modelplane.actions.restore import restore_object
from modelplane.api.spec import CLAIM_WAIT_TIMEOUT
from modelplane.kube.client import Target
from modelplane.observe.writes import Writes
from modelplane.operator import conflicts, metrics
from modelplane.operator.component_failures import ComponentFailures
from modelplane.operator.mirror_preflight import MirrorPreflight
from modelplane.operator.node_agents import NodeAgentRolls
from modelplane.operator.options import OperatorOptions
from modelplane.operator.release_records import ReleaseRecords
from modelplane.plan import Plan
from modelplane.plan.conflicts import Ours
from modelplane.plan.mirror_images import object_lookups, pulling_namespaces
from modelplane.plan.model import (
    ObjectAction,
    PlannedManifests,
    PlannedObject,
    PlannedRelease,
    ReleaseAction,
)
from modelplane.plan.teardown import dra_driver_of
from modelplane.vocabulary import EventReason
from modelplane.wire import stamp

DRIFT_CORRECTED = EventReason.DRIFT_CORRECTED
RELEASE_DRIFT = EventReason.RELEASE_DRIFT
# A helm run that succeeded: its event, and the verb its message says.
SUCCEEDED: dict[ReleaseAction, tuple[EventReason, str]] = {
    ReleaseAction.INSTALL: (EventReason.INSTALL_SUCCEEDED, "Install"),
    ReleaseAction.UPGRADE: (EventReason.UPGRADE_SUCCEEDED, "Upgrade"),
    ReleaseAction.REINSTALL: (EventReason.REINSTALL_SUCCEEDED, "Reinstall"),
    ReleaseAction.ROLLBACK: (EventReason.ROLLBACK_SUCCEEDED, "Rollback"),
}

log = logging.getLogger("modelplane.operator")


# The release actions that run helm: the others leave the release as it is.
IDLE_RELEASE = (ReleaseAction.NONE, ReleaseAction.WAIT)


def may_write(p: Plan) -> bool:
    """Whether ``StackActions.act`` would write anything to the target for this plan.

    Its conditions, less the failed components' backoff: a component that
    waits out its backoff still counts, so the claim is read before a plan
    that writes now or later in the same reconcile.
    """
    return (
        any(m.action is ObjectAction.APPLY for m in p.manifests)
        or any(o.action is ObjectAction.APPLY for o in p.objects)
        or any(d.restore is not None for d in p.release_drift)
        or any(r.action not in IDLE_RELEASE for r in p.releases)
    )


@dataclass
class StackActions:
    """Carries out a round's plan for one stack; keeps the manifest sets it fetched."""

    helm: Helm
    options: OperatorOptions
    emit: Emit
    # The stack, for the metrics.
    label: str
    # Each action is guarded by it: failed, backed off, and said.
    component_failures: ComponentFailures
    # Held to before helm runs, and told what it wrote (operator.release_records).
    release_records: ReleaseRecords
    # Asked before helm installs or upgrades a release: whether the image
    # mirror holds its images (operator.mirror_preflight); None: not asked.
    mirror: MirrorPreflight | None = None
    # The manifest sets fetched, by URL: a pinned URL's content does not
    # change; safe to lose.
    manifests: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Since when a DRA driver's reinstall has waited for the pods holding its claims.
    reinstall_waits: ReinstallWaits = field(default_factory=ReinstallWaits)
    # The node agents rolled a node at a time after their upgrade; None: not rolled.
    rolls: NodeAgentRolls | None = None

    async def act(
        self,
        p: Plan,
        target: Target,
        writes: Writes,
        adopt: frozenset[str] = frozenset(),
        claim_wait_timeout: str = CLAIM_WAIT_TIMEOUT,
    ) -> bool:
        """Carry out what the plan says now, noting it in ``writes``; True if anything changed.

        ``adopt``: the components whose release may take over what it finds
        (``spec.adopt``, operator.conflicts). ``claim_wait_timeout``: how long
        a DRA driver's reinstall waits for the pods holding its claims
        (``spec.claimWaitTimeout``, actions.claim_wait).
        """
        changed = False
        failures = self.component_failures
        for m in p.manifests:
            if m.action is ObjectAction.APPLY and failures.due(m.component):
                changed |= await failures.guard(
                    m.component, self._apply_manifests(m, target, writes)
                )
        held = await self._held_objects(p, target)
        for o in p.objects:
            if (
                o.action is ObjectAction.APPLY
                and o.component not in held
                and failures.due(o.component)
            ):
                if not await self._images_there(o, p, target):
                    continue
                applied = await failures.guard(o.component, self._apply(target, o.object, writes))
                if applied and o.drift:
                    # Field paths only, never values: a value may be a secret.
                    self.emit(
                        "Normal", DRIFT_CORRECTED, f"restored {o.shown}: {', '.join(o.drift)}"
                    )
                changed |= applied
        for d in p.release_drift:
            if d.restore is not None and failures.due(d.component):
                # From the release's stored manifest, not by running helm: a
                # patch of the fields the manifest sets, as Helm's upgrade
                # sends (see actions.restore).
                restored = await failures.guard(
                    d.component,
                    self._restore(target, d.restore, writes),
                    what=f"restore of {d.shown}",
                )
                if restored:
                    self.emit("Normal", RELEASE_DRIFT, d.message)
                    metrics.record_drift_corrected(self.label, d.component)
                changed |= restored
        self.reinstall_waits.keep_only(
            {r.name for r in p.releases if r.action is ReleaseAction.REINSTALL}
        )
        releases = [
            r for r in p.releases if r.action not in IDLE_RELEASE and failures.due(r.component)
        ]
        writes.untracked |= bool(releases)
        # Releases the plan lets go now do not depend on each other.
        product = conflicts.ours(p)
        results = await asyncio.gather(
            *(self._release(r, target, product, adopt, claim_wait_timeout) for r in releases)
        )
        if self.rolls is not None and await self.rolls.act(p, target):
            # A pod deleted: its DaemonSet's controller writes what follows.
            writes.untracked = True
            changed = True
        return changed or any(results)

    async def _images_there(self, o: PlannedObject, p: Plan, target: Target) -> bool:
        """Whether the object may be applied for its images: the mirror holds them, or no check.

        The product's own objects (the ModelExpress Deployment, the
        EnvoyProxy) run images as a release does, applied without helm:
        looked up first, a hold recorded as the object's component's failure.
        """
        images = object_lookups(o.object, p.images) if self.mirror is not None else ()
        if self.mirror is None or not images:
            return True
        components = sorted({u.component for u in p.images if u.mirrored in images})
        namespace = (o.object.get("metadata") or {}).get("namespace")
        check = self.mirror.check_images(
            images, pulling_namespaces(components, namespace), target, self.emit,
            o.shown, f"the apply of {o.shown}",
        )  # fmt: skip
        return await self.component_failures.check(
            o.component, check, what=f"the image check before the apply of {o.shown}"
        )

    async def _held_objects(self, p: Plan, target: Target) -> set[str]:
        """The components whose objects the plan applies that would clash with the target's.

        Checked before any of a component's objects is written, through the
        component's guard: a clash is its failure (``ConflictsFound``).
        """
        failures = self.component_failures
        applying = [
            o for o in p.objects if o.action is ObjectAction.APPLY and failures.due(o.component)
        ]
        held: set[str] = set()
        for component in sorted({o.component for o in applying}):
            bodies = [o.object for o in applying if o.component == component]
            if not await failures.check(
                component,
                conflicts.hold_back_objects(target, component, bodies),
                what=f"the apply of {component}'s objects",
            ):
                held.add(component)
        return held

    @staticmethod
    async def _apply(target: Target, body: dict[str, Any], writes: Writes) -> None:
        writes.applied(body, await apply_object(target.client, body))

    @staticmethod
    async def _restore(target: Target, body: dict[str, Any], writes: Writes) -> None:
        writes.applied(body, await restore_object(target.client, body))

    async def _apply_manifests(self, m: PlannedManifests, target: Target, writes: Writes) -> None:
        if m.url not in self.manifests:
            # Vetted before it is cached: a refused set is fetched afresh next time.
            self.manifests[m.url] = await manifest_objects(m, self.options.deny_target_cidrs)
        for body in self.manifests[m.url]:
            await self._apply(target, stamp(body, m.digest), writes)

    async def _release(
        self,
        release: PlannedRelease,
        target: Target,
        product: Ours,
        adopt: frozenset[str],
        claim_wait_timeout: str,
    ) -> bool:
        succeeded, verb = SUCCEEDED[release.action]
        # Before anything is written, and before helm: a missing image holds the release.
        if self.mirror is not None and not await self.component_failures.check(
            release.component,
            self.mirror.check(release, target, self.emit),
            what=f"the image check before the {verb.lower()} of release {release.name}",
        ):
            return False
        if not await self._claims_let_go(release, target, claim_wait_timeout):
            return False
        # Minted (or taken from the cache) per release: helm gets a token
        # fresh enough for its run, never the identity's key.
        kubeconfig = await target.helm_kubeconfig()

        async def carry_out() -> None:
            # Before anything of the release is written (operator.conflicts).
            adopted = await conflicts.hold_back(
                self.helm, target, release, kubeconfig, product, adopt
            )
            if release.action in (ReleaseAction.INSTALL, ReleaseAction.REINSTALL):
                # Made here rather than by helm's --create-namespace, labelled
                # as ours, so that teardown removes the namespace with the
                # release; one that is there already is the owner's and stays.
                await create_namespace(target.client, release.namespace)
            if release.action is not ReleaseAction.ROLLBACK:
                await self._chart_crds(release, target, kubeconfig)
            await self.release_records.verify_base(release, target)
            self.release_records.forget_base(release)
            try:
                output = await self.helm.apply(release, kubeconfig, take_ownership=bool(adopted))
            except Exception:
                # A failed run may have written a revision (failed, or
                # pending): the operator's, recorded so it is not taken for
                # a forgery. Helm's error is what the status says.
                try:
                    await self.release_records.record_release(release, target, None)
                except Exception as err:
                    log.warning("release %s: not recorded: %s", release.name, err)
                raise
            await self.release_records.record_release(release, target, output)
            if adopted:
                # Once: what was taken over is the release's own from now on.
                self.emit(
                    "Normal", EventReason.ADOPTED, conflicts.adopted_message(release, adopted)
                )

        started = time.monotonic()
        ok = await self.component_failures.guard(
            release.component, carry_out(), what=f"{verb.lower()} of release {release.name}"
        )
        metrics.record_helm_action(
            self.label,
            release.component,
            release.action.value,
            "succeeded" if ok else "failed",
            time.monotonic() - started,
        )
        if ok:
            self.emit(
                "Normal",
                succeeded,
                f"{verb.lower()} of {release.name} {release.chart} {release.version} "
                f"in {release.namespace} succeeded",
            )
        return ok

    async def _claims_let_go(
        self, release: PlannedRelease, target: Target, claim_wait_timeout: str
    ) -> bool:
        """Whether a reinstall may uninstall the release: a DRA driver's waits for its claims.

        A reinstall starts with ``helm uninstall``; the driver's kubelet
        plugin goes with it, and pods holding claims it allocated could not
        be unprepared (plan.claims). The wait is the component's failure
        (``ClaimsHeld``), retried soon, until the pods are gone or the
        timeout has passed.
        """
        driver = dra_driver_of(release)
        if release.action is not ReleaseAction.REINSTALL or driver is None:
            return True
        check = self.reinstall_waits.check(
            target.client, release.name, driver, claim_wait_timeout, self.emit
        )
        return await self.component_failures.check(
            release.component,
            check,
            what=f"the claims check before the reinstall of {release.name}",
        )

    async def _chart_crds(self, release: PlannedRelease, target: Target, kubeconfig: str) -> None:
        """Apply the CRDs Helm would leave at their first version, before Helm runs."""
        if not applies_chart_crds(release):
            return
        applied = await apply_chart_crds(self.helm, target.client, release, kubeconfig)
        written = applied.written
        if written:
            self.emit(
                "Normal",
                EventReason.CRDS_APPLIED,
                f"{release.chart} {release.version}: "
                + ", ".join(f"{c.name} ({c.action.value.lower()})" for c in written),
            )
        for name in applied.kept:
            self.emit(
                "Warning",
                EventReason.CRD_KEPT,
                f"{release.chart} {release.version} no longer ships CRD {name}; it is kept, "
                "since deleting it would delete every object of its kind",
            )
