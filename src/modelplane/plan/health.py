"""Whether the workloads a release runs are healthy: the rules, as pure functions.

What a release installed is read from Helm's stored manifest
(``plan.manifest``); each Deployment, DaemonSet, StatefulSet and Job
among it is judged from its own status and its pods' (``judge``), and a
component's health is the worst of its workloads' (``plan.component_health``).
Nothing here reads a cluster or a clock: the caller passes the objects it
watched and ``now``.

The rules are kstatus's (sigs.k8s.io/cli-utils, pkg/kstatus/status, core.go
and generic.go), which Flux's helm-controller waits on for a release's
health:

- every kind: ``status.observedGeneration`` has caught up with
  ``metadata.generation``, and the object is not being deleted;
- Deployment (``deploymentConditions``): a ``Progressing`` condition with
  reason ``ProgressDeadlineExceeded`` is a failure; otherwise status
  replicas, updated, available and ready all reach ``spec.replicas`` (1 when
  unset) and no old pod is left terminating;
- StatefulSet (``stsConditions``): replicas and ready reach ``spec.replicas``;
  with a partition only the replicas above it must be updated; with the
  ``OnDelete`` strategy updates are the user's to make, so only readiness
  counts (kstatus takes it as current outright; a StatefulSet whose pods
  are not ready does not serve, so we keep that part);
- DaemonSet (``daemonsetConditions``): generation and observedGeneration
  must both be set, then current, updated, available and ready pods reach
  ``desiredNumberScheduled``;
- Job (``jobConditions``): ``Complete=True`` is done, ``Failed=True`` is a
  failure, ``Suspended=True`` is not in progress; a Job still running is in
  progress, never a failure by time alone (its own ``backoffLimit`` and
  ``activeDeadlineSeconds`` turn it Failed). A hook Job that succeeded is
  therefore healthy.

Where kstatus looks at pods (``podConditions``), a container waiting in
``CrashLoopBackOff`` is a failure at once, and a pod ``PodScheduled=False``
with reason ``Unschedulable`` is one once it has been so for
``SCHEDULE_WINDOW`` (kstatus's ``ScheduleWindow``, 15 s). We add the other
waiting reasons the kubelet gives for a pod that will not start by waiting
(image pulls, a missing ConfigMap or Secret), and name what the pods say in
the message, so that the person reading it knows what to fix.

Anything else short of its target is ``Progressing`` for ``grace`` after it
started to be (``since``, which the caller keeps; else the latest
``lastTransitionTime`` of a condition of the workload that turned False;
else ``now``), and
``Degraded`` after.

Each kind's rules are one row of ``RULES`` (kstatus's per-kind table): what
fails it outright before its counts are read, what it lacks by its counts,
and whether being short turns Degraded after the grace period. A new kind is
a new row. The objects are read, within bounds, by ``plan.workloads``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import NamedTuple

from modelplane.api.status_limits import string_limit
from modelplane.plan.frozen import Frozen
from modelplane.plan.workloads import Kind, PodSignal, WorkloadKey, WorkloadStatus, find_condition
from modelplane.untrusted import printable
from modelplane.vocabulary import WorkloadReason

# A component's message: several workloads' words together.
MAX_MESSAGE = string_limit("components[].message")

# kstatus's ScheduleWindow: a pod unschedulable for less is still being placed.
SCHEDULE_WINDOW = timedelta(seconds=15)
# How long a workload short of its target is Progressing before Degraded,
# when no pod says why. A rollout of a few images takes well under this.
GRACE = timedelta(minutes=2)


class State(StrEnum):
    HEALTHY = "Healthy"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"


# Why a workload is in its state: the vocabulary's, by its short name here.
Reason = WorkloadReason

# Worst first: the reason a component gives when its workloads give several.
# A missing workload first (nothing else about it can be said), then what a
# pod says, most specific first, then the counts alone. Every Reason has a
# place: a test checks it, as ``RANK.index`` raises for one left out.
RANK: tuple[Reason, ...] = (
    Reason.RELEASE_STORAGE_TAMPERED,
    Reason.RELEASE_OUTSIDE_NAMESPACE,
    Reason.WORKLOAD_MISSING,
    Reason.POD_CRASH_LOOPING,
    Reason.IMAGE_PULL_FAILED,
    Reason.CONTAINER_CONFIG_ERROR,
    Reason.UNSCHEDULABLE,
    Reason.JOB_FAILED,
    Reason.PROGRESS_DEADLINE_EXCEEDED,
    Reason.WORKLOAD_SCALED_DOWN,
    Reason.WORKLOAD_UNAVAILABLE,
    Reason.PROGRESSING,
    Reason.AVAILABLE,
)
STATE_RANK = (State.DEGRADED, State.PROGRESSING, State.HEALTHY)

# Waiting reasons the kubelet gives a container that will not start by
# waiting (pkg/kubelet/images and kuberuntime), and what they mean here.
_WAITING: Mapping[str, Reason] = {
    "CrashLoopBackOff": Reason.POD_CRASH_LOOPING,
    "ImagePullBackOff": Reason.IMAGE_PULL_FAILED,
    "ErrImagePull": Reason.IMAGE_PULL_FAILED,
    "ErrImageNeverPull": Reason.IMAGE_PULL_FAILED,
    "InvalidImageName": Reason.IMAGE_PULL_FAILED,
    "CreateContainerConfigError": Reason.CONTAINER_CONFIG_ERROR,
    "CreateContainerError": Reason.CONTAINER_CONFIG_ERROR,
    "RunContainerError": Reason.CONTAINER_CONFIG_ERROR,
}
# Transient on a first pull (the kubelet retries it, and says ImagePullBackOff
# once it backs off): a failure only once the pod has been at it a while.
_TRANSIENT_WAITING = frozenset({"ErrImagePull"})


# ---- a workload's verdict, and what its pods say ----------------------------------------


class Health(Frozen):
    key: WorkloadKey
    state: State
    reason: Reason
    message: str

    @property
    def healthy(self) -> bool:
        return self.state is State.HEALTHY


class _Signal(Frozen):
    reason: Reason
    words: str
    # Whether it is a failure yet (an unschedulable pod within its window is not).
    settled: bool


def _pod_signals(pods: Sequence[PodSignal], now: datetime) -> Iterator[_Signal]:
    for pod in pods:
        where = f"pod {pod.name}"
        for c in pod.containers:
            reason = _WAITING.get(c.waiting_reason)
            if reason is None:
                continue
            words = f"{where} container {c.container}: {c.waiting_reason}"
            if c.waiting_message:
                words += f": {c.waiting_message}"
            if reason is Reason.POD_CRASH_LOOPING and c.last_reason:
                code = f", exit code {c.last_exit_code}" if c.last_exit_code is not None else ""
                words += f" (last run ended {c.last_reason}{code})"
            settled = c.waiting_reason not in _TRANSIENT_WAITING or _older_than(
                pod.created, now, SCHEDULE_WINDOW
            )
            yield _Signal(reason=reason, words=words, settled=settled)
        if pod.unschedulable:
            words = f"{where} is unschedulable"
            if pod.scheduler_message:
                words += f": {pod.scheduler_message}"
            since = pod.unschedulable_since or pod.created
            yield _Signal(
                reason=Reason.UNSCHEDULABLE,
                words=words,
                settled=_older_than(since, now, SCHEDULE_WINDOW),
            )


def _older_than(since: datetime | None, now: datetime, window: timedelta) -> bool:
    # An unknown start is taken as old: a hostile or odd object must not
    # hold a failure back forever.
    return since is None or now - since >= window


def _telling(pods: Sequence[PodSignal], now: datetime) -> tuple[_Signal | None, int]:
    """The most telling pod signal, and how many pods say the same."""
    signals = list(_pod_signals(pods, now))
    if not signals:
        return None, 0
    best = min(signals, key=lambda s: (not s.settled, RANK.index(s.reason)))
    same = sum(1 for s in signals if s.reason is best.reason)
    return best, same


# ---- the rules of each kind -------------------------------------------------------------


@dataclass(frozen=True)
class _Seen:
    """One workload as its rules see it: its status, its pods, the clock, the release's asks."""

    workload: WorkloadStatus
    pods: Sequence[PodSignal]
    now: datetime
    manifest_replicas: int | None
    nodes_expected: int | None


class _Failure(NamedTuple):
    """A workload's failure: the reason and the words after its name."""

    reason: Reason
    words: tuple[str, ...]


# A rule that fails a workload whatever its counts say; None when it does not.
FailureRule = Callable[[_Seen], _Failure | None]


@dataclass(frozen=True)
class KindRules:
    """The rules of one kind of workload: kstatus's per-kind function, in parts."""

    # Checked in order before the counts are read: the first that speaks decides.
    failures: tuple[FailureRule, ...]
    # What the workload lacks by its counts, in words; None when it has it all.
    shortfall: Callable[[WorkloadStatus], str | None]
    # Whether a workload short of its target turns Degraded after the grace
    # period. A Job runs as long as it needs: its own limits turn it Failed.
    times_out: bool = True


def _job_failed(seen: _Seen) -> _Failure | None:
    failed = find_condition(seen.workload.conditions, "Failed", "True")
    if failed is None:
        return None
    return _Failure(Reason.JOB_FAILED, ("failed", failed.reason, failed.message))


def _progress_deadline_exceeded(seen: _Seen) -> _Failure | None:
    stalled = next(
        (
            c
            for c in seen.workload.conditions
            if c.type == "Progressing" and c.reason == "ProgressDeadlineExceeded"
        ),
        None,
    )
    if stalled is None:
        return None
    signal, same = _telling(seen.pods, seen.now)
    return _Failure(
        signal.reason if signal else Reason.PROGRESS_DEADLINE_EXCEEDED,
        ("exceeded its progress deadline", _pod_words(signal, same) or stalled.message),
    )


def _scaled_down(seen: _Seen) -> _Failure | None:
    if not (seen.workload.desired == 0 and seen.manifest_replicas):
        return None
    return _Failure(
        Reason.WORKLOAD_SCALED_DOWN,
        (f"is scaled to 0 replicas, and the release asks for {seen.manifest_replicas}",),
    )


def _kept_off_nodes(seen: _Seen) -> _Failure | None:
    scheduled, expected = seen.workload.desired_scheduled, seen.nodes_expected
    if expected is None or scheduled is None or scheduled >= expected:
        return None
    return _Failure(
        Reason.UNSCHEDULABLE,
        (
            f"runs on {scheduled} of {expected} nodes it should run on "
            "(its tolerations or node selector keep it off the others)",
        ),
    )


def _shortfall(w: WorkloadStatus) -> str | None:
    """What the workload lacks by kstatus's rules, in words; None when it has it all."""
    if w.deleting:
        return "is being deleted"
    if (
        w.generation is not None
        and w.observed_generation is not None
        and w.observed_generation < w.generation
    ):
        return "has a change its controller has not observed yet"
    return RULES[w.key.kind].shortfall(w)


class _Counts(NamedTuple):
    """A Deployment's or StatefulSet's counts, a missing one as kstatus reads it."""

    desired: int  # spec.replicas, 1 when unset
    replicas: int
    ready: int
    updated: int
    available: int | None  # None: not reported (a StatefulSet before 1.22)


def _counts(w: WorkloadStatus) -> _Counts:
    desired = 1 if w.desired is None else w.desired
    return _Counts(desired, w.replicas or 0, w.ready or 0, w.updated or 0, w.available)


def _deployment_shortfall(w: WorkloadStatus) -> str | None:
    desired, replicas, ready, updated, available = _counts(w)
    if replicas < desired:
        return f"has {replicas} of {desired} replicas"
    if updated < desired:
        return f"{updated} of {desired} replicas updated"
    if replicas > desired:
        return f"{replicas - desired} old replicas still terminating"
    # Ready before available (kstatus asks the other way round): a pod is
    # available once ready for minReadySeconds, so "ready" is the shortfall
    # a person can look for, and the verdict is the same.
    if ready < desired:
        return f"{ready} of {desired} replicas ready"
    if (available or 0) < desired:
        return f"{available or 0} of {desired} replicas available"
    return None


def _stateful_set_shortfall(w: WorkloadStatus) -> str | None:
    desired, replicas, ready, updated, available = _counts(w)
    if replicas < desired:
        return f"has {replicas} of {desired} replicas"
    # A StatefulSet reports availableReplicas since Kubernetes 1.22; an
    # older one only readiness.
    serving = ready if available is None else min(ready, available)
    if serving < desired:
        return f"{serving} of {desired} replicas ready"
    if replicas > desired:
        return f"{replicas - desired} old replicas still terminating"
    if w.on_delete:
        return None
    target = desired - min(w.partition or 0, desired)
    if updated < target:
        return f"{updated} of {target} replicas updated"
    return None


def _daemon_set_shortfall(w: WorkloadStatus) -> str | None:
    # Both must be set before a DaemonSet's counts mean anything (kstatus):
    # the generic generation check passes over a missing one.
    if w.generation is None or w.observed_generation is None:
        return "has not been observed by its controller yet"
    desired = w.desired_scheduled
    if desired is None:
        return "has not counted the nodes it should run on yet"
    for count, what in (
        (w.current_scheduled, "scheduled"),
        (w.updated_scheduled, "updated"),
        (w.number_ready, "ready"),
        (w.number_available, "available"),
    ):
        if (count or 0) < desired:
            return f"{count or 0} of {desired} nodes {what}"
    return None


def _job_shortfall(w: WorkloadStatus) -> str | None:
    return None if _job_done(w) else "has not completed"


def _job_done(w: WorkloadStatus) -> bool:
    return any(
        find_condition(w.conditions, kind, "True") is not None for kind in ("Complete", "Suspended")
    )


# Every kind's rules; a test checks that every Kind has a row.
RULES: Mapping[Kind, KindRules] = {
    Kind.DEPLOYMENT: KindRules(
        failures=(_progress_deadline_exceeded, _scaled_down), shortfall=_deployment_shortfall
    ),
    Kind.STATEFUL_SET: KindRules(failures=(_scaled_down,), shortfall=_stateful_set_shortfall),
    Kind.DAEMON_SET: KindRules(failures=(_kept_off_nodes,), shortfall=_daemon_set_shortfall),
    Kind.JOB: KindRules(failures=(_job_failed,), shortfall=_job_shortfall, times_out=False),
}


# ---- the verdict --------------------------------------------------------------------------


def _since(w: WorkloadStatus, since: datetime | None, now: datetime) -> datetime:
    if since is not None:
        return since
    # Only a condition that turned False dates the trouble: Progressing
    # stays True through a rollout, its transition as old as the workload.
    times = [
        c.last_transition
        for c in w.conditions
        if c.status == "False" and c.last_transition is not None
    ]
    return max(times) if times else now


def _message(*parts: str) -> str:
    return printable(": ".join(p for p in parts if p), MAX_MESSAGE)


def judge(
    key: WorkloadKey,
    workload: WorkloadStatus | None,
    pods: Sequence[PodSignal] = (),
    *,
    now: datetime,
    since: datetime | None = None,
    grace: timedelta = GRACE,
    manifest_replicas: int | None = None,
    nodes_expected: int | None = None,
) -> Health:
    """The health of the workload ``key`` names, from its status and its pods'.

    ``workload`` is None when it is not on the target. ``since`` is when the
    caller first saw it short of its target (None: the latest transition of
    a condition that is False, else ``now``). ``manifest_replicas`` is the replicas the
    release's manifest asks for, so that a hand scale to zero is seen (a
    workload at zero of zero is otherwise whole). ``nodes_expected`` is how
    many nodes a DaemonSet must run on (e.g. the GPU nodes, for a driver):
    its controller does not count the nodes whose taints it does not
    tolerate, so without it a DaemonSet kept off every GPU node looks whole.
    A time without a zone is taken as UTC, as the API server writes them.
    """

    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)

    def verdict(state: State, reason: Reason, *parts: str) -> Health:
        return Health(key=key, state=state, reason=reason, message=_message(key.shown, *parts))

    if workload is None:
        return verdict(
            State.DEGRADED,
            Reason.WORKLOAD_MISSING,
            "is in the release's manifest and not on the target",
        )
    rules = RULES[key.kind]
    seen = _Seen(workload, pods, now, manifest_replicas, nodes_expected)
    for rule in rules.failures:
        failure = rule(seen)
        if failure is not None:
            return verdict(State.DEGRADED, failure.reason, *failure.words)
    shortfall = _shortfall(workload)
    if shortfall is None:
        return verdict(State.HEALTHY, Reason.AVAILABLE, "available")
    signal, same = _telling(pods, now)
    if signal is not None and signal.settled:
        return verdict(State.DEGRADED, signal.reason, shortfall, _pod_words(signal, same))
    started = _since(workload, since, now)
    if not rules.times_out or now - started < grace:
        return verdict(State.PROGRESSING, Reason.PROGRESSING, shortfall, _pod_words(signal, same))
    return verdict(
        State.DEGRADED,
        Reason.WORKLOAD_UNAVAILABLE,
        f"{shortfall} for {_duration(now - started)}",
        _pod_words(signal, same),
    )


def _pod_words(signal: _Signal | None, same: int) -> str:
    if signal is None:
        return ""
    more = f" (and {same - 1} more like it)" if same > 1 else ""
    return signal.words + more


def _duration(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
