"""Whether an installed scheduler schedules: its probe pod, as a pure decision.

A scheduler's pod can be Running and Ready while it binds nothing: a KAI
upgrade once left every gang unscheduled for 48 minutes with its pod Ready
(https://github.com/kai-scheduler/KAI-Scheduler/issues/1536). So once the
product installed or upgraded KAI, it asks the scheduler to do its one job:
a pod that asks for nothing, with ``schedulerName: kai-scheduler`` in a queue
of its own, must be bound to a node (``spec.nodeName`` set) within a bound.
Until it is, the component is not Ready; past the bound its upgrade failed.

One probe per installed version, not one per reconcile: the version last
proven is recorded on the target (the probe queue's annotation, see
``operator.scheduler_probe``), and the probe pod carries the version it was
made for and when the operator made it, by the operator's own clock, so a
restarted operator judges the same probe by the same bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from modelplane.catalog.components import kai_scheduler
from modelplane.catalog.configuration import KAI_PROBE_QUEUE, NS
from modelplane.untrusted import timestamp
from modelplane.wire import MANAGED_BY, MANAGED_BY_LABEL

# The probe pod, one per cluster: read back by name (one GET), never listed.
POD_NAME = "modelplane-scheduler-probe"
POD_NAMESPACE = NS
# On the probe pod: the version it proves, and when the operator made it.
VERSION_ANNOTATION = "modelplane.ai/probe-version"
STARTED_ANNOTATION = "modelplane.ai/probe-started"
# On the probe queue: the scheduler version last proven on this cluster.
PROVEN_ANNOTATION = "modelplane.ai/scheduler-proven"
# The container never needs to run: the pod is deleted once bound. Tiny,
# and moved by the mirror rules like every image the product names.
IMAGE = "registry.k8s.io/pause:3.10"
# How often a probe within its bound is looked at again, and a failed one:
# a failed probe stays, so a scheduler mended by hand is seen binding it.
POLL_SECONDS = 5.0
FAILED_POLL_SECONDS = 30.0


@dataclass(frozen=True)
class Probe:
    """What a scheduler is probed with: its component, its name, the queue it binds from."""

    component: str
    scheduler: str
    queue_label: str
    queue: str


KAI = Probe(
    component=kai_scheduler.COMPONENT.name,
    scheduler=kai_scheduler.SCHEDULER_NAME,
    queue_label=kai_scheduler.QUEUE_LABEL,
    queue=KAI_PROBE_QUEUE,
)


class PodState(StrEnum):
    ABSENT = "Absent"
    PENDING = "Pending"  # not bound to a node yet
    BOUND = "Bound"


@dataclass(frozen=True)
class ProbePod:
    """The probe pod as read: its state, the version it proves, since when (None: unknown)."""

    state: PodState
    version: str | None = None
    since: datetime | None = None


ABSENT = ProbePod(PodState.ABSENT)


class Step(StrEnum):
    # Nothing settled to prove: the component is not installed at a version yet.
    IDLE = "Idle"
    # The installed version was proven before.
    PROVEN_BEFORE = "ProvenBefore"
    # A probe is out (made now, or within its bound): not Ready yet.
    WAIT = "Wait"
    # Bound: record the version proven.
    PROVEN = "Proven"
    # Not bound within the bound: the component is not Ready, its upgrade failed.
    FAILED = "Failed"


@dataclass(frozen=True)
class Decision:
    step: Step
    message: str = ""
    # Delete the probe pod (bound, stale, or left behind), then make one.
    delete: bool = False
    create: bool = False
    # Seconds until the probe is worth looking at again; None: not before a change.
    check_in: float | None = None


def decide(
    probe: Probe,
    installed: str | None,
    proven: str | None,
    pod: ProbePod,
    now: datetime,
    bound: timedelta,
) -> Decision:
    """What to do about the scheduler's probe, from what the target holds and the clock.

    ``installed``: the version the component runs with no work left, None
    while it has some (an install, an upgrade, a failed action); ``proven``:
    the version last proven on this cluster.
    """
    if installed is None:
        return Decision(Step.IDLE)
    if installed == proven:
        return Decision(Step.PROVEN_BEFORE, delete=pod.state is not PodState.ABSENT)
    waiting = (
        f"waiting for {probe.scheduler} {installed} to bind its probe pod "
        f"{POD_NAMESPACE}/{POD_NAME} (up to {_seconds(bound)})"
    )
    if pod.state is PodState.ABSENT:
        return Decision(Step.WAIT, waiting, create=True, check_in=POLL_SECONDS)
    if pod.version != installed or pod.since is None:
        # Made for another version (the one before an upgrade), or not by
        # this rule: it proves nothing of this one.
        return Decision(Step.WAIT, waiting, delete=True, create=True, check_in=POLL_SECONDS)
    if pod.state is PodState.BOUND:
        return Decision(
            Step.PROVEN,
            f"{probe.scheduler} {installed} bound its probe pod: it schedules",
            delete=True,
        )
    elapsed = max(now - pod.since, timedelta(0))
    if elapsed < bound:
        left = (bound - elapsed).total_seconds()
        return Decision(Step.WAIT, waiting, check_in=min(POLL_SECONDS, max(left, 1.0)))
    return Decision(
        Step.FAILED,
        f"the scheduler {probe.scheduler} {installed} did not bind the probe pod "
        f"{POD_NAMESPACE}/{POD_NAME} (schedulerName {probe.scheduler}, queue {probe.queue}, "
        f"asking for nothing) within {_seconds(bound)}, though its pods may be Ready: pods "
        f"that ask for {probe.scheduler} stay Pending; see the scheduler's log in namespace "
        f"{kai_scheduler.COMPONENT.namespace}",
        check_in=FAILED_POLL_SECONDS,
    )


def _seconds(delta: timedelta) -> str:
    return f"{delta.total_seconds():g}s"


def installed_version(
    probe: Probe, components: list[Any], busy: set[str] | frozenset[str]
) -> str | None:
    """The version ``probe``'s component runs, settled; None when it is not.

    ``components``: the plan's (``ComponentPlan``); ``busy``: the components
    with work left or a failed action. Only a Managed one: a provided
    scheduler is its owner's to prove, and the product never upgrades it.
    """
    for c in components:
        if c.name == probe.component and c.mode == "Managed" and c.name not in busy:
            return str(c.held_at or c.version)
    return None


def pod_body(probe: Probe, version: str, now: datetime, image: str = IMAGE) -> dict[str, Any]:
    """The probe pod: no requests, tolerating every NoSchedule taint, for ``probe``'s scheduler.

    A cluster whose only nodes are tainted GPU nodes still has somewhere to
    bind it; NoExecute taints (a node not ready) are not tolerated. Deleted
    at once once bound, so its container need never start.
    """
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": POD_NAME,
            "namespace": POD_NAMESPACE,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, probe.queue_label: probe.queue},
            "annotations": {
                VERSION_ANNOTATION: version,
                STARTED_ANNOTATION: stamp(now),
            },
        },
        "spec": {
            "schedulerName": probe.scheduler,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "probe", "image": image}],
        },
    }


def stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_pod(body: dict[str, Any] | None) -> ProbePod:
    """The probe pod as the decision reads it, from its body as the target answered it."""
    if body is None:
        return ABSENT
    metadata = body.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, dict):
        annotations = {}
    version = annotations.get(VERSION_ANNOTATION)
    bound = bool((body.get("spec") or {}).get("nodeName"))
    return ProbePod(
        PodState.BOUND if bound else PodState.PENDING,
        version if isinstance(version, str) else None,
        timestamp(annotations.get(STARTED_ANNOTATION)),
    )
