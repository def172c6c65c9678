"""Whether the workloads a release runs are healthy: the rules, as pure functions.

What a release installed is read from Helm's stored manifest
(``manifest_workloads``); each Deployment, DaemonSet, StatefulSet and Job
among it is judged from its own status and its pods' (``judge``), and a
component's health is the worst of its workloads' (``component_health``).
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

Every value read from a target is hostile: ``from_object`` takes any JSON
value, turns a field of the wrong type into "missing", and cuts every string
it keeps with ``printable`` at the status limits.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import Field

from modelplane.api.status_limits import string_limit
from modelplane.plan.frozen import Frozen
from modelplane.untrusted import DEFAULT, Limits, UntrustedInputError, load_yaml_all, printable

# A name as it lands in a component's status; a namespace is a DNS label.
MAX_NAME = string_limit("components[].name")
# A component's message: several workloads' words together.
MAX_MESSAGE = string_limit("components[].message")
# One value a target wrote (a scheduler's message, a waiting message): long
# enough for the scheduler's "0/12 nodes are available: ..." summary, short
# enough that a few of them fit in one component's message.
MAX_PART = 1024
# A reason string as a container or condition gives it (CamelCase words).
MAX_REASON = 128
# Containers and conditions read from one object; more are ignored. A pod
# with more containers than this is not one anybody runs.
MAX_ITEMS = 64
# The most workloads a component's message names before "and N more".
MAX_NAMED = 3
# A count above this is not a count the API server would hold (int32).
MAX_COUNT = 2**31 - 1

# kstatus's ScheduleWindow: a pod unschedulable for less is still being placed.
SCHEDULE_WINDOW = timedelta(seconds=15)
# How long a workload short of its target is Progressing before Degraded,
# when no pod says why. A rollout of a few images takes well under this.
GRACE = timedelta(minutes=2)


class Kind(StrEnum):
    DEPLOYMENT = "Deployment"
    DAEMON_SET = "DaemonSet"
    STATEFUL_SET = "StatefulSet"
    JOB = "Job"


# The API group each kind is a workload in: a custom resource that happens
# to be called "Deployment" in another group is not one.
GROUPS: Mapping[Kind, str] = {
    Kind.DEPLOYMENT: "apps",
    Kind.DAEMON_SET: "apps",
    Kind.STATEFUL_SET: "apps",
    Kind.JOB: "batch",
}


class State(StrEnum):
    HEALTHY = "Healthy"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"


class Reason(StrEnum):
    """Why a workload (and the component running it) is in its state: stable, on the wire."""

    AVAILABLE = "Available"
    # Short of its target, within the grace period.
    PROGRESSING = "Progressing"
    # Short of its target past the grace period, and no pod says why.
    WORKLOAD_UNAVAILABLE = "WorkloadUnavailable"
    # In the release's manifest, not on the target.
    WORKLOAD_MISSING = "WorkloadMissing"
    # Scaled to zero while the release asks for replicas.
    WORKLOAD_SCALED_DOWN = "WorkloadScaledDown"
    PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
    POD_CRASH_LOOPING = "PodCrashLooping"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    # CreateContainerConfigError and its kin: a ConfigMap, Secret or key missing.
    CONTAINER_CONFIG_ERROR = "ContainerConfigError"
    UNSCHEDULABLE = "Unschedulable"
    JOB_FAILED = "JobFailed"
    # The release's stored revision installs a workload outside the release's
    # namespace: refused, none of its workloads judged or restored.
    RELEASE_OUTSIDE_NAMESPACE = "ReleaseOutsideNamespace"


# Worst first: the reason a component gives when its workloads give several.
# A missing workload first (nothing else about it can be said), then what a
# pod says, most specific first, then the counts alone.
_RANK: tuple[Reason, ...] = (
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
_STATE_RANK = (State.DEGRADED, State.PROGRESSING, State.HEALTHY)

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


# ---- reading hostile objects ------------------------------------------------------------


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value[:MAX_ITEMS] if isinstance(value, list) else []


def _count(value: object) -> int | None:
    # bool is an int to Python, and never a count to Kubernetes.
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    return None


def _generation(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
        return value
    return None


def _text(value: object, limit: int) -> str:
    return printable(value, limit) if isinstance(value, str) else ""


def _time(value: object) -> datetime | None:
    """An RFC 3339 time as the API server writes it; None for anything else."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


class WorkloadKey(Frozen):
    kind: Kind
    namespace: str
    name: str

    @property
    def shown(self) -> str:
        """``Kind namespace/name``, for a person."""
        return f"{self.kind} {self.namespace}/{self.name}"


class Condition(Frozen):
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition: datetime | None = None

    @classmethod
    def from_object(cls, obj: object) -> Condition | None:
        item = _map(obj)
        kind = _text(item.get("type"), MAX_REASON)
        if not kind:
            return None
        return cls(
            type=kind,
            status=_text(item.get("status"), 16),
            reason=_text(item.get("reason"), MAX_REASON),
            message=_text(item.get("message"), MAX_PART),
            last_transition=_time(item.get("lastTransitionTime")),
        )


def _conditions(value: object) -> list[Condition]:
    found = (Condition.from_object(c) for c in _list(value))
    return [c for c in found if c is not None]


def _condition(conditions: Sequence[Condition], kind: str, status: str) -> Condition | None:
    return next((c for c in conditions if c.type == kind and c.status == status), None)


def _key(obj: Mapping[str, Any], kind: Kind, default_namespace: str = "") -> WorkloadKey | None:
    meta = _map(obj.get("metadata"))
    name = meta.get("name")
    namespace = meta.get("namespace", default_namespace) or default_namespace
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        return None
    return WorkloadKey(
        kind=kind, namespace=printable(namespace, MAX_NAME), name=printable(name, MAX_NAME)
    )


def _workload_kind(obj: Mapping[str, Any]) -> Kind | None:
    kind, api = obj.get("kind"), obj.get("apiVersion")
    if not isinstance(kind, str) or not isinstance(api, str):
        return None
    try:
        known = Kind(kind)
    except ValueError:
        return None
    group = api.rpartition("/")[0]
    return known if group == GROUPS[known] else None


class WorkloadStatus(Frozen):
    """The fields of a Deployment, DaemonSet, StatefulSet or Job that the rules read.

    A count the object does not carry (or carries with the wrong type) is
    None, and the rules read None as "not there yet", as kstatus reads a
    missing field as its zero default.
    """

    key: WorkloadKey
    generation: int | None = None
    observed_generation: int | None = None
    deleting: bool = False
    created: datetime | None = None
    # spec.replicas (Deployment, StatefulSet: 1 when unset).
    desired: int | None = None
    # status counts of a Deployment or StatefulSet.
    replicas: int | None = None
    updated: int | None = None
    ready: int | None = None
    available: int | None = None
    # StatefulSet only.
    on_delete: bool = False
    partition: int | None = None
    # DaemonSet only.
    desired_scheduled: int | None = None
    current_scheduled: int | None = None
    updated_scheduled: int | None = None
    number_ready: int | None = None
    number_available: int | None = None
    # Job only.
    succeeded: int | None = None
    failed: int | None = None
    completions: int | None = None
    conditions: list[Condition] = Field(default_factory=list)

    @classmethod
    def from_object(cls, obj: object) -> WorkloadStatus | None:
        """A workload as the API server sent it; None when it is not one of the four kinds."""
        item = _map(obj)
        kind = _workload_kind(item)
        key = _key(item, kind) if kind is not None else None
        if kind is None or key is None:
            return None
        meta, spec, status = (_map(item.get(f)) for f in ("metadata", "spec", "status"))
        strategy = _map(spec.get("updateStrategy"))
        desired = spec.get("replicas", 1) if kind in (Kind.DEPLOYMENT, Kind.STATEFUL_SET) else None
        parallelism = _count(spec.get("parallelism"))
        return cls(
            key=key,
            generation=_generation(meta.get("generation")),
            observed_generation=_generation(status.get("observedGeneration")),
            deleting=meta.get("deletionTimestamp") is not None,
            created=_time(meta.get("creationTimestamp")),
            desired=_count(desired),
            replicas=_count(status.get("replicas")),
            updated=_count(status.get("updatedReplicas")),
            ready=_count(status.get("readyReplicas")),
            available=_count(status.get("availableReplicas")),
            on_delete=kind is Kind.STATEFUL_SET and strategy.get("type") == "OnDelete",
            partition=_count(_map(strategy.get("rollingUpdate")).get("partition")),
            desired_scheduled=_count(status.get("desiredNumberScheduled")),
            current_scheduled=_count(status.get("currentNumberScheduled")),
            updated_scheduled=_count(status.get("updatedNumberScheduled")),
            number_ready=_count(status.get("numberReady")),
            number_available=_count(status.get("numberAvailable")),
            succeeded=_count(status.get("succeeded")),
            failed=_count(status.get("failed")),
            completions=_count(spec.get("completions", parallelism)),
            conditions=_conditions(status.get("conditions")),
        )


class ContainerSignal(Frozen):
    """What one container of a pod says about why it does not run."""

    container: str
    waiting_reason: str = ""
    waiting_message: str = ""
    # The last run's end, which says why a crash-looping container crashed.
    last_reason: str = ""
    last_exit_code: int | None = None


class PodSignal(Frozen):
    """A pod of a workload, reduced to what says why it does not serve."""

    namespace: str
    name: str
    phase: str = ""
    ready: bool = False
    created: datetime | None = None
    # PodScheduled=False with reason Unschedulable, and the scheduler's message.
    unschedulable: bool = False
    unschedulable_since: datetime | None = None
    scheduler_message: str = ""
    containers: list[ContainerSignal] = Field(default_factory=list)

    @classmethod
    def from_object(cls, obj: object) -> PodSignal | None:
        """A pod as the API server sent it; None when it has no name."""
        item = _map(obj)
        meta, status = _map(item.get("metadata")), _map(item.get("status"))
        name, namespace = meta.get("name"), meta.get("namespace", "")
        if not isinstance(name, str) or not name or not isinstance(namespace, str):
            return None
        conditions = _conditions(status.get("conditions"))
        scheduled = _condition(conditions, "PodScheduled", "False")
        unschedulable = scheduled is not None and scheduled.reason == "Unschedulable"
        statuses = [
            *_list(status.get("initContainerStatuses")),
            *_list(status.get("containerStatuses")),
        ][:MAX_ITEMS]
        return cls(
            namespace=printable(namespace, MAX_NAME),
            name=printable(name, MAX_NAME),
            phase=_text(status.get("phase"), 32),
            ready=_condition(conditions, "Ready", "True") is not None,
            created=_time(meta.get("creationTimestamp")),
            unschedulable=unschedulable,
            unschedulable_since=scheduled.last_transition if unschedulable and scheduled else None,
            scheduler_message=scheduled.message if unschedulable and scheduled else "",
            containers=[c for c in map(_container, statuses) if c is not None],
        )


def _container(obj: object) -> ContainerSignal | None:
    item = _map(obj)
    name = item.get("name")
    if not isinstance(name, str):
        return None
    waiting = _map(_map(item.get("state")).get("waiting"))
    last = _map(_map(item.get("lastState")).get("terminated"))
    code = last.get("exitCode")
    return ContainerSignal(
        container=printable(name, MAX_NAME),
        waiting_reason=_text(waiting.get("reason"), MAX_REASON),
        waiting_message=_text(waiting.get("message"), MAX_PART),
        last_reason=_text(last.get("reason"), MAX_REASON),
        last_exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
    )


# ---- the verdict --------------------------------------------------------------------------


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
    best = min(signals, key=lambda s: (not s.settled, _RANK.index(s.reason)))
    same = sum(1 for s in signals if s.reason is best.reason)
    return best, same


def _shortfall(w: WorkloadStatus) -> str | None:
    """What the workload lacks by kstatus's rules, in words; None when it has it all."""
    if w.deleting:
        return "is being deleted"
    if w.key.kind is Kind.DAEMON_SET and (w.generation is None or w.observed_generation is None):
        return "has not been observed by its controller yet"
    if (
        w.generation is not None
        and w.observed_generation is not None
        and w.observed_generation < w.generation
    ):
        return "has a change its controller has not observed yet"
    if w.key.kind is Kind.DAEMON_SET:
        return _daemon_set_shortfall(w)
    if w.key.kind is Kind.JOB:
        return None if _job_done(w) else "has not completed"
    return _replicas_shortfall(w)


def _replicas_shortfall(w: WorkloadStatus) -> str | None:
    desired = 1 if w.desired is None else w.desired
    replicas, ready = w.replicas or 0, w.ready or 0
    updated, available = w.updated or 0, w.available
    if replicas < desired:
        return f"has {replicas} of {desired} replicas"
    if w.key.kind is Kind.STATEFUL_SET:
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


def _daemon_set_shortfall(w: WorkloadStatus) -> str | None:
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


def _job_done(w: WorkloadStatus) -> bool:
    return any(
        _condition(w.conditions, kind, "True") is not None for kind in ("Complete", "Suspended")
    )


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
    if key.kind is Kind.JOB:
        failed = _condition(workload.conditions, "Failed", "True")
        if failed is not None:
            return verdict(
                State.DEGRADED, Reason.JOB_FAILED, "failed", failed.reason, failed.message
            )
    if key.kind is Kind.DEPLOYMENT:
        stalled = next(
            (
                c
                for c in workload.conditions
                if c.type == "Progressing" and c.reason == "ProgressDeadlineExceeded"
            ),
            None,
        )
        if stalled is not None:
            signal, same = _telling(pods, now)
            return verdict(
                State.DEGRADED,
                signal.reason if signal else Reason.PROGRESS_DEADLINE_EXCEEDED,
                "exceeded its progress deadline",
                _pod_words(signal, same) or stalled.message,
            )
    if (
        key.kind in (Kind.DEPLOYMENT, Kind.STATEFUL_SET)
        and workload.desired == 0
        and manifest_replicas
    ):
        return verdict(
            State.DEGRADED,
            Reason.WORKLOAD_SCALED_DOWN,
            f"is scaled to 0 replicas, and the release asks for {manifest_replicas}",
        )
    if (
        key.kind is Kind.DAEMON_SET
        and nodes_expected is not None
        and workload.desired_scheduled is not None
        and workload.desired_scheduled < nodes_expected
    ):
        return verdict(
            State.DEGRADED,
            Reason.UNSCHEDULABLE,
            f"runs on {workload.desired_scheduled} of {nodes_expected} nodes it should run on "
            "(its tolerations or node selector keep it off the others)",
        )
    shortfall = _shortfall(workload)
    if shortfall is None:
        return verdict(State.HEALTHY, Reason.AVAILABLE, "available")
    signal, same = _telling(pods, now)
    if signal is not None and signal.settled:
        return verdict(State.DEGRADED, signal.reason, shortfall, _pod_words(signal, same))
    started = _since(workload, since, now)
    if key.kind is Kind.JOB or now - started < grace:
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


# ---- a component ----------------------------------------------------------------------------


class ComponentHealth(Frozen):
    component: str
    state: State
    reason: Reason
    message: str
    workloads: list[Health] = Field(default_factory=list)


def component_health(component: str, judged: Sequence[Health]) -> ComponentHealth:
    """A component is as healthy as its least healthy workload.

    Its reason is the worst workload's (``_RANK``); its message names that
    workload's words first, then the others not healthy, up to
    ``MAX_NAMED``. A component that runs no workload (CRDs, RBAC) is healthy.
    """
    name = printable(component, MAX_NAME)
    if not judged:
        return ComponentHealth(
            component=name, state=State.HEALTHY, reason=Reason.AVAILABLE, message="no workloads"
        )
    ordered = sorted(
        judged, key=lambda h: (_STATE_RANK.index(h.state), _RANK.index(h.reason), h.key.shown)
    )
    worst = ordered[0]
    if worst.state is State.HEALTHY:
        message = f"{len(judged)} workloads available" if len(judged) > 1 else worst.message
        return ComponentHealth(
            component=name,
            state=State.HEALTHY,
            reason=Reason.AVAILABLE,
            message=printable(message, MAX_MESSAGE),
            workloads=list(judged),
        )
    unhealthy = [h for h in ordered if not h.healthy]
    named = [h.message for h in unhealthy[:MAX_NAMED]]
    rest = len(unhealthy) - len(named)
    if rest:
        named.append(f"and {rest} more workloads not available")
    return ComponentHealth(
        component=name,
        state=worst.state,
        reason=worst.reason,
        message=printable("; ".join(named), MAX_MESSAGE),
        workloads=list(judged),
    )


# ---- what a release runs ---------------------------------------------------------------------


class ManifestWorkload(Frozen):
    key: WorkloadKey
    # spec.replicas as the release's manifest gives it; None when unset
    # (the chart leaves it to an autoscaler, or the kind has none).
    replicas: int | None = None


# RFC 1123: a namespace is a label, a workload's name a subdomain.
# Matched whole (``fullmatch``: ``$`` would let a trailing newline through).
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def manifest_workloads(
    manifest: str | bytes, namespace: str, limits: Limits = DEFAULT
) -> list[ManifestWorkload]:
    """The workloads a release's stored manifest installs, in manifest order.

    ``manifest`` is the text Helm keeps in the release (multi-document YAML);
    ``namespace`` the release's, which an object without one lands in. Helm
    keeps hooks out of that text (``releaseutil.SortManifests`` splits them
    into the release's ``hooks`` before the manifest is joined, in
    pkg/action/action.go ``renderResources``), so no hook annotation is read
    here: whatever is in the manifest Helm applied as a resource of the
    release, even if a post-renderer annotated it as a hook. A ``List``
    document's items count, as Helm's builder flattens them.

    Raises ``UntrustedInputError`` for text over the bounds, not YAML, or a
    workload whose name or namespace no API server would accept, naming the
    document.
    """
    out: list[ManifestWorkload] = []
    seen: set[WorkloadKey] = set()
    for number, doc in enumerate(load_yaml_all(manifest, limits), start=1):
        item = _map(doc)
        kind = item.get("kind")
        items = (
            _map_items(item.get("items"))
            if isinstance(kind, str) and kind.endswith("List")
            else [item]
        )
        for obj in items:
            found = _manifest_workload(obj, namespace, number)
            if found is not None and found.key not in seen:
                seen.add(found.key)
                out.append(found)
    return out


def _map_items(value: object) -> list[Mapping[str, Any]]:
    return [i for i in value if isinstance(i, Mapping)] if isinstance(value, list) else []


def _manifest_workload(
    obj: Mapping[str, Any], namespace: str, number: int
) -> ManifestWorkload | None:
    kind = _workload_kind(obj)
    if kind is None:
        return None
    meta = _map(obj.get("metadata"))
    name = meta.get("name")
    where = meta.get("namespace") or namespace
    if not isinstance(name, str) or len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        raise UntrustedInputError(f"document {number}: {kind} has no valid metadata.name")
    if not isinstance(where, str) or not _LABEL.fullmatch(where):
        raise UntrustedInputError(f"document {number}: {kind} {name} has no valid namespace")
    replicas = (
        _count(_map(obj.get("spec")).get("replicas"))
        if kind in (Kind.DEPLOYMENT, Kind.STATEFUL_SET)
        else None
    )
    return ManifestWorkload(
        key=WorkloadKey(kind=kind, namespace=where, name=name), replicas=replicas
    )
