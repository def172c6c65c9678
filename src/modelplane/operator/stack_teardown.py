"""One ServingStack's teardown on its target, step by step, as the plan orders it.

An object ``StackReconciler`` keeps: teardown reads the stack's
credentials, plans, and removes what the plan installed, in
``plan.teardown``'s order, over the reconciler's connection, release
records and events, which it is given when it is made.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from modelplane.actions import claim
from modelplane.actions.apply import delete_object
from modelplane.actions.claim import Emit
from modelplane.actions.claim_wait import uninstall_wait
from modelplane.actions.helm import Helm, HelmError
from modelplane.api.models import ServingStack
from modelplane.kube.client import Target
from modelplane.kube.errors import ErrorKind, KnownError
from modelplane.observe.hooks import find_hooks
from modelplane.observe.state import read_listed, to_observed, wanted
from modelplane.operator.options import OperatorOptions
from modelplane.operator.release_records import ReleaseRecords, StorageTamperedError
from modelplane.operator.scheduler_probe import remove_pod
from modelplane.operator.session import TargetSession
from modelplane.operator.stack_text import first_error, without_status
from modelplane.pins import ComponentsMode, Stack
from modelplane.plan import Plan, plan
from modelplane.plan.release_trust import TamperedRelease
from modelplane.plan.teardown import (
    DeleteHookObjects,
    DeleteObjects,
    TeardownStep,
    UninstallRelease,
    hooks_to_find,
    teardown_steps,
)
from modelplane.vocabulary import BlockedReason, EventReason, TeardownReason

log = logging.getLogger("modelplane.operator")


@dataclass(frozen=True)
class Waiting:
    """What a pass of teardown waits for, as the Teardown condition says it, and its reason."""

    message: str
    reason: BlockedReason | TeardownReason = TeardownReason.WAITING

    def __str__(self) -> str:
        return self.message


class InvalidSpecError(KnownError):
    """The stored spec does not validate, so there is no plan to tear down by."""

    kind = ErrorKind.INVALID


@dataclass(frozen=True)
class _ClaimWait:
    """How long a DRA driver's uninstall may wait for its claims, and how long it has."""

    timeout: str  # spec.claimWaitTimeout as written
    waited_seconds: float


def _probed(stack: ServingStack) -> bool:
    """Whether the stack's target may hold a scheduler probe pod (operator.scheduler_probe)."""
    spec = stack.spec
    return spec.stack is Stack.DYNAMO and spec.components is ComponentsMode.MANAGED


@dataclass
class StackTeardown:
    """One stack's teardown; what it works through is the reconciler's, shared."""

    helm: Helm
    options: OperatorOptions
    emit: Emit
    # The stack's connection to its target (its credentials, how it opens).
    session: TargetSession
    # Held to before helm uninstalls anything (operator.release_records).
    release_records: ReleaseRecords
    # Without a hub: who claims the target (``claim.LocalRun``).
    claimant: claim.Claimant | None = None

    async def run(
        self,
        body: dict[str, Any],
        waited_seconds: float,
        on_plan: Callable[[Plan], None] | None = None,
    ) -> Waiting | None:
        """One pass of teardown. Returns what it still waits for, or None when done.

        ``on_plan`` is shown the plan torn down by, as a reconcile's are.
        ``waited_seconds``: since the deletion began, which both the wait for
        objects to go (``--teardown-wait-seconds``) and a DRA driver's wait
        for its claims (``spec.claimWaitTimeout``) are measured from.
        """
        try:
            stack = ServingStack.model_validate(without_status(body))
        except ValidationError as err:
            raise InvalidSpecError(first_error(err)) from err
        self.release_records.seed_records(body.get("status"))
        target = await self.session.open(await self.session.read(stack))
        try:
            if not await claim.before_teardown(target.client, stack, self.emit, self.claimant):
                return None  # another stack's target: this one installed nothing there
            # Before the queue it names goes; only where the probe runs (Managed KAI).
            if _probed(stack) and await remove_pod(target.client):
                log.info("teardown: deleted the scheduler probe pod")

            want = wanted(stack.spec)
            # helm uninstall deletes all that the newest revision lists: only
            # one the operator wrote (operator.release_records).
            listed, tampered = await self.release_records.trust_storage(
                target, await read_listed(target.client, want), want.release_namespaces
            )
            observed = to_observed(listed).model_copy(update={"tampered_releases": tampered})
            current = await asyncio.to_thread(plan, stack, observed, self.options.sources())
            if on_plan is not None:
                on_plan(current)
            found = await find_hooks(target.client, hooks_to_find(current, observed))
            steps = teardown_steps(current, observed, found)
            give_up = waited_seconds > self.options.teardown_wait_seconds
            claims = _ClaimWait(stack.spec.claim_wait_timeout, waited_seconds)
            waiting = await self._carry_out(steps, target, give_up, tampered, claims)
            if waiting is None:
                await claim.after_teardown(target.client, stack, self.emit, self.claimant)
        finally:
            await target.close()
        return waiting

    async def _carry_out(
        self,
        steps: list[TeardownStep],
        target: Target,
        give_up: bool,
        tampered: Sequence[TamperedRelease] = (),
        claims: _ClaimWait | None = None,
    ) -> Waiting | None:
        """Do the steps in order, up to the first whose objects are still there.

        A DRA driver's release waits, before its uninstall, for the pods that
        hold claims it allocated (actions.claim_wait), as long as ``claims`` says.
        """
        for step in steps:
            if isinstance(step, UninstallRelease):
                if step.dra_driver is not None and claims is not None:
                    held = await uninstall_wait(
                        target.client,
                        step.release,
                        step.dra_driver,
                        claims.timeout,
                        claims.waited_seconds,
                        self.emit,
                    )
                    if held is not None:
                        return Waiting(held, BlockedReason.CLAIMS_HELD)
                await self._uninstall(step, target, tampered)
                continue
            if isinstance(step, DeleteHookObjects):
                await self._delete_hooks(step, target)
                continue
            remaining = await self._delete(step, target)
            if not (step.wait and remaining):
                continue
            if not give_up:
                return Waiting(f"waiting for {', '.join(remaining)} to be deleted")
            self.emit(
                "Warning",
                EventReason.TEARDOWN_TIMEOUT,
                f"gave up waiting for {', '.join(remaining)}; going on",
            )
        return None

    async def _delete(self, step: DeleteObjects | DeleteHookObjects, target: Target) -> list[str]:
        """Delete the step's objects; the ones still there (finalizers may hold them)."""
        remaining = []
        for ref in step.objects:
            still_there = await delete_object(target.client, ref.body())
            log.info("teardown: deleted %s", ref)
            if still_there:
                remaining.append(str(ref))
        return remaining

    async def _delete_hooks(self, step: DeleteHookObjects, target: Target) -> None:
        # Not waited for: nothing after needs them gone. Named, as a person
        # who knows the chart may look for them after the release is gone.
        await self._delete(step, target)
        self.emit(
            "Normal",
            EventReason.HOOK_OBJECTS_DELETED,
            f"deleted what the hooks of release {step.release} left: "
            + ", ".join(str(ref) for ref in step.objects),
        )

    async def _uninstall(
        self, step: UninstallRelease, target: Target, tampered: Sequence[TamperedRelease]
    ) -> None:
        found = next((t for t in tampered if t.release == step.release), None)
        if found is not None:
            # What the revision lists is not what the operator installed:
            # uninstalled, it would be deleted with the operator's credentials.
            raise StorageTamperedError(
                f"release {step.release} is not uninstalled: {found.message}; or annotate "
                "the ServingStack to delete it without touching the target"
            )
        await self.release_records.verify_storage(step.release, step.namespace, target)
        kubeconfig = await target.helm_kubeconfig()
        try:
            await self.helm.uninstall(step.release, step.namespace, kubeconfig)
        except HelmError as err:
            # helm's words seldom name the release; the Teardown condition should.
            raise HelmError(f"uninstall of release {step.release}: {err}") from err
        log.info("teardown: uninstalled release %s", step.release)
        self.emit(
            "Normal",
            EventReason.UNINSTALLED,
            f"uninstalled release {step.release} from {step.namespace}",
        )
