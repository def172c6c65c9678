"""A workload and its pods as a target holds them: hostile JSON in, bounded values out.

Every value read from a target is hostile: ``from_object`` takes any JSON
value, turns a field of the wrong type into "missing", and cuts every string
it keeps with ``printable`` at the status limits. What the values mean is
``plan.health``'s to say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from modelplane.api.status_limits import string_limit
from modelplane.plan.frozen import Frozen
from modelplane.untrusted import printable, timestamp

# A name as it lands in a component's status; a namespace is a DNS label.
MAX_NAME = string_limit("components[].name")
# One value a target wrote (a scheduler's message, a waiting message): long
# enough for the scheduler's "0/12 nodes are available: ..." summary, short
# enough that a few of them fit in one component's message.
MAX_PART = 1024
# A reason string as a container or condition gives it (CamelCase words).
MAX_REASON = 128
# Containers and conditions read from one object; more are ignored. A pod
# with more containers than this is not one anybody runs.
MAX_ITEMS = 64
# A count above this is not a count the API server would hold (int32).
MAX_COUNT = 2**31 - 1


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


# ---- reading hostile objects ------------------------------------------------------------


def as_map(value: object) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one: a field of the wrong type is missing."""
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value[:MAX_ITEMS] if isinstance(value, list) else []


def as_count(value: object) -> int | None:
    """``value`` when it is a count the API server could hold, else None."""
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
        item = as_map(obj)
        kind = _text(item.get("type"), MAX_REASON)
        if not kind:
            return None
        return cls(
            type=kind,
            status=_text(item.get("status"), 16),
            reason=_text(item.get("reason"), MAX_REASON),
            message=_text(item.get("message"), MAX_PART),
            last_transition=timestamp(item.get("lastTransitionTime")),
        )


def _conditions(value: object) -> list[Condition]:
    found = (Condition.from_object(c) for c in _list(value))
    return [c for c in found if c is not None]


def find_condition(conditions: Sequence[Condition], kind: str, status: str) -> Condition | None:
    """The first condition of that type and status; None when there is none."""
    return next((c for c in conditions if c.type == kind and c.status == status), None)


def _key(obj: Mapping[str, Any], kind: Kind, default_namespace: str = "") -> WorkloadKey | None:
    meta = as_map(obj.get("metadata"))
    name = meta.get("name")
    namespace = meta.get("namespace", default_namespace) or default_namespace
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        return None
    return WorkloadKey(
        kind=kind, namespace=printable(namespace, MAX_NAME), name=printable(name, MAX_NAME)
    )


def workload_kind(obj: Mapping[str, Any]) -> Kind | None:
    """The workload kind of an object, by its kind and its API group; None for any other."""
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
        item = as_map(obj)
        kind = workload_kind(item)
        key = _key(item, kind) if kind is not None else None
        if kind is None or key is None:
            return None
        meta, spec, status = (as_map(item.get(f)) for f in ("metadata", "spec", "status"))
        strategy = as_map(spec.get("updateStrategy"))
        desired = spec.get("replicas", 1) if kind in (Kind.DEPLOYMENT, Kind.STATEFUL_SET) else None
        parallelism = as_count(spec.get("parallelism"))
        return cls(
            key=key,
            generation=_generation(meta.get("generation")),
            observed_generation=_generation(status.get("observedGeneration")),
            deleting=meta.get("deletionTimestamp") is not None,
            created=timestamp(meta.get("creationTimestamp")),
            desired=as_count(desired),
            replicas=as_count(status.get("replicas")),
            updated=as_count(status.get("updatedReplicas")),
            ready=as_count(status.get("readyReplicas")),
            available=as_count(status.get("availableReplicas")),
            on_delete=kind is Kind.STATEFUL_SET and strategy.get("type") == "OnDelete",
            partition=as_count(as_map(strategy.get("rollingUpdate")).get("partition")),
            desired_scheduled=as_count(status.get("desiredNumberScheduled")),
            current_scheduled=as_count(status.get("currentNumberScheduled")),
            updated_scheduled=as_count(status.get("updatedNumberScheduled")),
            number_ready=as_count(status.get("numberReady")),
            number_available=as_count(status.get("numberAvailable")),
            succeeded=as_count(status.get("succeeded")),
            failed=as_count(status.get("failed")),
            completions=as_count(spec.get("completions", parallelism)),
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
        item = as_map(obj)
        meta, status = as_map(item.get("metadata")), as_map(item.get("status"))
        name, namespace = meta.get("name"), meta.get("namespace", "")
        if not isinstance(name, str) or not name or not isinstance(namespace, str):
            return None
        conditions = _conditions(status.get("conditions"))
        scheduled = find_condition(conditions, "PodScheduled", "False")
        unschedulable = scheduled is not None and scheduled.reason == "Unschedulable"
        statuses = [
            *_list(status.get("initContainerStatuses")),
            *_list(status.get("containerStatuses")),
        ][:MAX_ITEMS]
        return cls(
            namespace=printable(namespace, MAX_NAME),
            name=printable(name, MAX_NAME),
            phase=_text(status.get("phase"), 32),
            ready=find_condition(conditions, "Ready", "True") is not None,
            created=timestamp(meta.get("creationTimestamp")),
            unschedulable=unschedulable,
            unschedulable_since=scheduled.last_transition if unschedulable and scheduled else None,
            scheduler_message=scheduled.message if unschedulable and scheduled else "",
            containers=[c for c in map(_container, statuses) if c is not None],
        )


def _container(obj: object) -> ContainerSignal | None:
    item = as_map(obj)
    name = item.get("name")
    if not isinstance(name, str):
        return None
    waiting = as_map(as_map(item.get("state")).get("waiting"))
    last = as_map(as_map(item.get("lastState")).get("terminated"))
    code = last.get("exitCode")
    return ContainerSignal(
        container=printable(name, MAX_NAME),
        waiting_reason=_text(waiting.get("reason"), MAX_REASON),
        waiting_message=_text(waiting.get("message"), MAX_PART),
        last_reason=_text(last.get("reason"), MAX_REASON),
        last_exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
    )
