"""The scheduler probe carried out on a target: read, decide (``plan.scheduler_probe``), act.

Each reconcile of a Managed Dynamo stack, once its rounds are done, asks
two GETs by name (the probe queue, for the version last proven, and the
probe pod) and does what the decision says: make the pod, delete it, or
record the version it proved. What it found goes into the reconcile's
``Outcome``: a probe out keeps the component (and the stack) from Ready;
one past its bound is the component's failure, which the staged rollout
counts as a failed upgrade.

The version proven is an annotation on the probe queue, on the target:
it belongs to the cluster whose scheduler bound the pod, so an operator
restart, a new leader or a ServingStack re-created on the hub finds it,
and it goes with the queue at teardown, so a reinstall is proven again.
The stack's status would need a field of the hub's CRD and would be lost
with the stack. The annotation is written by a merge patch under a field
manager of its own, never applied, so the queue's applied fields (what
drift is judged by) do not change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from modelplane.actions.claim import Emit
from modelplane.api.status_limits import LOG_MESSAGE
from modelplane.catalog.configuration import QUEUES
from modelplane.kube.client import collection_path, get_json
from modelplane.kube.resources import resource
from modelplane.kube.target_errors import ApiStatusError
from modelplane.operator.status import Outcome
from modelplane.plan import Plan
from modelplane.plan import scheduler_probe as sp
from modelplane.plan.images import MirrorRule, rewrite_text
from modelplane.plan.scheduler_probe import Decision, Probe, Step
from modelplane.untrusted import printable
from modelplane.vocabulary import BlockedReason, EventReason

log = logging.getLogger("modelplane.operator")

# The field manager of the annotation that records the version proven.
PROBE_MANAGER = "modelplane-scheduler-probe"


def _utcnow() -> datetime:
    return datetime.now(UTC)


async def _get(client: AsyncClient, path: str) -> dict[str, Any] | None:
    """One object by its path (a bounded GET); None when it is not there."""
    try:
        found = await get_json(client, path)
    except ApiStatusError as err:
        if err.status == 404:
            return None
        raise
    return found if isinstance(found, dict) else None


def _queue_path(probe: Probe) -> str:
    return f"{collection_path(QUEUES)}/{probe.queue}"


def _pod_path() -> str:
    return f"/api/v1/namespaces/{sp.POD_NAMESPACE}/pods/{sp.POD_NAME}"


def proven_of(queue: dict[str, Any]) -> str | None:
    """The version the probe queue records as proven; None when it records none."""
    annotations = (queue.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(sp.PROVEN_ANNOTATION) if isinstance(annotations, dict) else None
    return value if isinstance(value, str) else None


async def remove_pod(client: AsyncClient) -> bool:
    """Delete the probe pod at once (no grace: it runs nothing); whether one was there."""
    try:
        await client.delete(Pod, sp.POD_NAME, namespace=sp.POD_NAMESPACE, grace_period=0)
    except ApiError as err:
        if err.status.code == 404:
            return False
        raise
    return True


@dataclass
class SchedulerProbe:
    """One stack's scheduler probe: its events said once, and what it last decided."""

    emit: Emit
    bound: timedelta
    mirrors: tuple[MirrorRule, ...] = ()
    probe: Probe = sp.KAI
    clock: Callable[[], datetime] = _utcnow
    # The failure last said in an event: said again only when it changes.
    said: str | None = None
    last: Decision = field(default_factory=lambda: Decision(Step.IDLE))

    @property
    def enabled(self) -> bool:
        return self.bound > timedelta(0)

    async def run(self, client: AsyncClient, p: Plan, busy: set[str]) -> Decision:
        """Read the probe's state, decide, and act on it; the decision, for the outcome.

        ``busy``: the components with work left or a failed action.
        """
        installed = sp.installed_version(self.probe, list(p.components), busy)
        if not self.enabled or installed is None:
            self.last = Decision(Step.IDLE)
            return self.last
        queue = await _get(client, _queue_path(self.probe))
        if queue is None:
            # Its queue is the product's configuration, applied after KAI:
            # the plan holds the stack short of Ready until it is.
            self.last = Decision(Step.IDLE)
            return self.last
        pod = sp.read_pod(await _get(client, _pod_path()))
        now = self.clock()
        decision = sp.decide(self.probe, installed, proven_of(queue), pod, now, self.bound)
        await self._act(client, decision, installed, now)
        self._report(decision)
        self.last = decision
        return decision

    async def _act(
        self, client: AsyncClient, decision: Decision, version: str, now: datetime
    ) -> None:
        if decision.step is Step.PROVEN:
            # Recorded before the pod goes: a crash in between leaves a
            # bound pod that the next reconcile only deletes.
            await self._record(client, version)
        if decision.delete:
            await remove_pod(client)
        if decision.create:
            image = rewrite_text(sp.IMAGE, self.mirrors)
            body = sp.pod_body(self.probe, version, now, image)
            try:
                await client.create(cast(Pod, Pod.from_dict(body)), field_manager=PROBE_MANAGER)
            except ApiError as err:
                # One deleted just now may not be gone yet: made next time.
                if err.status.code != 409:
                    raise
            log.info("scheduler probe: made %s for %s", sp.POD_NAME, version)

    async def _record(self, client: AsyncClient, version: str) -> None:
        queue = resource(QUEUES.group_version, "Queue", False, QUEUES.resource)
        patch = {"metadata": {"annotations": {sp.PROVEN_ANNOTATION: version}}}
        await client.patch(
            queue, self.probe.queue, patch, patch_type=PatchType.MERGE, field_manager=PROBE_MANAGER
        )

    def _report(self, decision: Decision) -> None:
        if decision.step is Step.PROVEN:
            self.said = None
            self.emit("Normal", EventReason.SCHEDULER_PROVEN, decision.message)
            log.info("scheduler probe: %s", decision.message)
        elif decision.step is Step.FAILED and decision.message != self.said:
            self.said = decision.message
            self.emit("Warning", EventReason.SCHEDULER_NOT_BINDING, decision.message)
            log.warning("scheduler probe: %s", decision.message)

    def into(self, outcome: Outcome) -> Outcome:
        """``outcome`` with what the last probe said: a wait, a failure, or nothing."""
        decision, name = self.last, self.probe.component
        if decision.step is Step.WAIT:
            outcome.proving = {**outcome.proving, name: decision.message}
        elif decision.step is Step.FAILED and name not in outcome.failures:
            outcome.failures = {**outcome.failures, name: printable(decision.message, LOG_MESSAGE)}
            outcome.failure_reasons = {
                **outcome.failure_reasons,
                name: BlockedReason.SCHEDULER_NOT_BINDING,
            }
        if decision.check_in is not None:
            outcome.check_in = min(outcome.check_in or decision.check_in, decision.check_in)
        return outcome
