"""The health rules, case by case: a workload and its pods in, a verdict out.

Objects are written as the API server sends them (camelCase, RFC 3339
times), and hostile ones as a tenant could write them: wrong types, missing
status, huge values, control characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from modelplane.api.status_limits import CONSTRAINTS
from modelplane.plan import health, workloads
from modelplane.plan.component_health import component_health
from modelplane.plan.health import GRACE, MAX_MESSAGE, SCHEDULE_WINDOW, Health, Reason, State, judge
from modelplane.plan.manifest import MANIFEST_LIMITS, manifest_workloads
from modelplane.plan.workloads import MAX_NAME, Kind, PodSignal, WorkloadKey, WorkloadStatus
from modelplane.untrusted import UntrustedInputError

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def stamp(ago: timedelta) -> str:
    return (NOW - ago).strftime("%Y-%m-%dT%H:%M:%SZ")


LONG_AGO = stamp(timedelta(hours=1))
JUST_NOW = stamp(timedelta(seconds=2))


def deployment(
    spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None, **meta: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "generation": 2, **meta},
        "spec": {"replicas": 2, **(spec or {})},
        "status": {
            "observedGeneration": 2,
            "replicas": 2,
            "updatedReplicas": 2,
            "readyReplicas": 2,
            "availableReplicas": 2,
            **(status or {}),
        },
    }


def stateful_set(spec: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "ns", "generation": 1},
        "spec": {"replicas": 3, **(spec or {})},
        "status": {
            "observedGeneration": 1,
            "replicas": 3,
            "updatedReplicas": 3,
            "readyReplicas": 3,
            "availableReplicas": 3,
            **status,
        },
    }


def daemon_set(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "plugin", "namespace": "ns", "generation": 1},
        "status": {
            "observedGeneration": 1,
            "desiredNumberScheduled": 3,
            "currentNumberScheduled": 3,
            "updatedNumberScheduled": 3,
            "numberReady": 3,
            "numberAvailable": 3,
            **status,
        },
    }


def job(*conditions: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "migrate", "namespace": "ns", "generation": 1},
        "spec": {"completions": 1},
        "status": {"conditions": list(conditions), **status},
    }


def pod(
    *containers: dict[str, Any], created: str = LONG_AGO, conditions: list[Any] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": "web-1", "namespace": "ns", "creationTimestamp": created},
        "status": {
            "phase": "Pending",
            "conditions": conditions or [],
            "containerStatuses": list(containers),
        },
    }


def waiting(reason: str, message: str = "", **extra: Any) -> dict[str, Any]:
    return {"name": "app", "state": {"waiting": {"reason": reason, "message": message}}, **extra}


def unschedulable(message: str, since: str = LONG_AGO) -> list[dict[str, Any]]:
    return [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastTransitionTime": since,
        }
    ]


@dataclass(frozen=True)
class Case:
    name: str
    obj: dict[str, Any]
    state: State
    reason: Reason
    # Every one of these is in the message.
    says: tuple[str, ...] = ()
    pods: tuple[dict[str, Any], ...] = ()
    since: datetime | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


CRASH = waiting(
    "CrashLoopBackOff",
    "back-off 5m0s restarting failed container=app",
    lastState={"terminated": {"reason": "Error", "exitCode": 1}},
)
STALLED_AGO = NOW - GRACE - timedelta(seconds=1)

CASES = [
    # -- Deployment (kstatus deploymentConditions)
    Case(
        "deployment available",
        deployment(),
        State.HEALTHY,
        Reason.AVAILABLE,
        ("Deployment ns/web", "available"),
    ),
    Case(
        "replicas unset means one",
        deployment(
            {"replicas": None},
            {"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1},
        ),
        State.HEALTHY,
        Reason.AVAILABLE,
    ),
    Case(
        "generation not observed",
        deployment(status={"observedGeneration": 1}),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("not observed",),
    ),
    Case(
        "too few updated",
        deployment(status={"updatedReplicas": 1}),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("1 of 2 replicas updated",),
    ),
    Case(
        "old replicas terminating",
        deployment(status={"replicas": 3}),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("1 old replicas still terminating",),
    ),
    Case(
        "too few available",
        deployment(status={"availableReplicas": 1}),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("1 of 2 replicas available",),
    ),
    Case(
        "too few ready",
        deployment(status={"readyReplicas": 0}),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("0 of 2 replicas ready",),
    ),
    Case(
        "no status at all",
        {**deployment(), "status": None},
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("0 of 2 replicas",),
    ),
    Case(
        "short past the grace period",
        deployment(status={"availableReplicas": 0}),
        State.DEGRADED,
        Reason.WORKLOAD_UNAVAILABLE,
        ("0 of 2 replicas available for 2m01s",),
        since=STALLED_AGO,
    ),
    Case(
        "grace dated by a condition turned False",
        deployment(
            status={
                "availableReplicas": 0,
                "conditions": [
                    {"type": "Available", "status": "False", "lastTransitionTime": LONG_AGO},
                    {"type": "Progressing", "status": "True", "lastTransitionTime": JUST_NOW},
                ],
            }
        ),
        State.DEGRADED,
        Reason.WORKLOAD_UNAVAILABLE,
    ),
    Case(
        "a True condition does not date the trouble",
        deployment(
            status={
                "availableReplicas": 0,
                "conditions": [
                    {"type": "Progressing", "status": "True", "lastTransitionTime": LONG_AGO}
                ],
            }
        ),
        State.PROGRESSING,
        Reason.PROGRESSING,
    ),
    Case(
        "progress deadline exceeded",
        deployment(
            status={
                "availableReplicas": 0,
                "conditions": [
                    {
                        "type": "Progressing",
                        "status": "False",
                        "reason": "ProgressDeadlineExceeded",
                        "message": 'ReplicaSet "web-1" has timed out progressing.',
                    }
                ],
            }
        ),
        State.DEGRADED,
        Reason.PROGRESS_DEADLINE_EXCEEDED,
        ("exceeded its progress deadline", "has timed out progressing"),
    ),
    Case(
        "progress deadline, and a pod says why",
        deployment(
            status={
                "conditions": [
                    {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
                ]
            }
        ),
        State.DEGRADED,
        Reason.IMAGE_PULL_FAILED,
        ("ImagePullBackOff",),
        pods=(pod(waiting("ImagePullBackOff", 'Back-off pulling image "x"')),),
    ),
    Case(
        "being deleted",
        deployment(deletionTimestamp=LONG_AGO),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("being deleted",),
    ),
    Case(
        "scaled to zero by hand",
        deployment(
            {"replicas": 0},
            {"replicas": 0, "updatedReplicas": 0, "readyReplicas": 0, "availableReplicas": 0},
        ),
        State.DEGRADED,
        Reason.WORKLOAD_SCALED_DOWN,
        ("scaled to 0", "asks for 2"),
        kwargs={"manifest_replicas": 2},
    ),
    Case(
        "at zero as the release leaves it",
        deployment(
            {"replicas": 0},
            {"replicas": 0, "updatedReplicas": 0, "readyReplicas": 0, "availableReplicas": 0},
        ),
        State.HEALTHY,
        Reason.AVAILABLE,
        kwargs={"manifest_replicas": None},
    ),
    # -- what the pods say
    Case(
        "crash looping",
        deployment(status={"availableReplicas": 1}),
        State.DEGRADED,
        Reason.POD_CRASH_LOOPING,
        (
            "1 of 2 replicas available",
            "pod web-1 container app: CrashLoopBackOff",
            "back-off 5m0s",
            "last run ended Error, exit code 1",
        ),
        pods=(pod(CRASH),),
    ),
    Case(
        "crash looping in two pods",
        deployment(status={"availableReplicas": 0}),
        State.DEGRADED,
        Reason.POD_CRASH_LOOPING,
        ("and 1 more like it",),
        pods=(pod(CRASH), pod(CRASH)),
    ),
    Case(
        "image pull back-off",
        deployment(status={"availableReplicas": 1}),
        State.DEGRADED,
        Reason.IMAGE_PULL_FAILED,
        ("ImagePullBackOff", 'pulling image "x"'),
        pods=(pod(waiting("ImagePullBackOff", 'Back-off pulling image "x"')),),
    ),
    Case(
        "a first pull failing is still early",
        deployment(status={"availableReplicas": 1}),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("ErrImagePull",),
        pods=(pod(waiting("ErrImagePull", "not found"), created=JUST_NOW),),
    ),
    Case(
        "a pull failing for a while",
        deployment(status={"availableReplicas": 1}),
        State.DEGRADED,
        Reason.IMAGE_PULL_FAILED,
        ("ErrImagePull",),
        pods=(pod(waiting("ErrImagePull", "not found")),),
    ),
    Case(
        "config missing",
        deployment(status={"availableReplicas": 1}),
        State.DEGRADED,
        Reason.CONTAINER_CONFIG_ERROR,
        ("CreateContainerConfigError", 'configmap "cfg" not found'),
        pods=(pod(waiting("CreateContainerConfigError", 'configmap "cfg" not found')),),
    ),
    Case(
        "unschedulable",
        deployment(status={"availableReplicas": 1}),
        State.DEGRADED,
        Reason.UNSCHEDULABLE,
        ("pod web-1 is unschedulable", "Insufficient nvidia.com/gpu"),
        pods=(
            pod(conditions=unschedulable("0/3 nodes are available: Insufficient nvidia.com/gpu")),
        ),
    ),
    Case(
        "unschedulable within kstatus's window",
        deployment(status={"availableReplicas": 1}),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("untolerated taint",),
        pods=(pod(conditions=unschedulable("1 node(s) had untolerated taint", JUST_NOW)),),
    ),
    Case(
        "crash looping told before unschedulable",
        deployment(status={"availableReplicas": 0}),
        State.DEGRADED,
        Reason.POD_CRASH_LOOPING,
        pods=(pod(conditions=unschedulable("taint")), pod(CRASH)),
    ),
    Case(
        "a settled signal before an early one",
        deployment(status={"availableReplicas": 0}),
        State.DEGRADED,
        Reason.UNSCHEDULABLE,
        pods=(
            pod(waiting("ErrImagePull"), created=JUST_NOW),
            pod(conditions=unschedulable("taint")),
        ),
    ),
    Case(
        "benign waiting says nothing",
        deployment(status={"availableReplicas": 1}),
        State.PROGRESSING,
        Reason.PROGRESSING,
        pods=(pod(waiting("ContainerCreating")),),
    ),
    Case(
        "pods ignored once available",
        deployment(),
        State.HEALTHY,
        Reason.AVAILABLE,
        pods=(pod(CRASH),),
    ),
    # -- StatefulSet (kstatus stsConditions)
    Case("statefulset available", stateful_set(), State.HEALTHY, Reason.AVAILABLE),
    Case(
        "statefulset too few ready",
        stateful_set(readyReplicas=2),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("2 of 3 replicas ready",),
    ),
    Case(
        "statefulset without availableReplicas",
        stateful_set(availableReplicas=None),
        State.HEALTHY,
        Reason.AVAILABLE,
    ),
    Case(
        "statefulset not updated",
        stateful_set(updatedReplicas=1),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("1 of 3 replicas updated",),
    ),
    Case(
        "statefulset partition updated above it",
        stateful_set({"updateStrategy": {"rollingUpdate": {"partition": 2}}}, updatedReplicas=1),
        State.HEALTHY,
        Reason.AVAILABLE,
    ),
    Case(
        "statefulset partition rollout under way",
        stateful_set({"updateStrategy": {"rollingUpdate": {"partition": 1}}}, updatedReplicas=1),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("1 of 2 replicas updated",),
    ),
    Case(
        "statefulset old replicas terminating",
        stateful_set(replicas=4),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("1 old replicas still terminating",),
    ),
    Case(
        "statefulset crash looping",
        stateful_set(readyReplicas=2, availableReplicas=2),
        State.DEGRADED,
        Reason.POD_CRASH_LOOPING,
        pods=(pod(CRASH),),
    ),
    Case(
        "statefulset on delete leaves updates to the user",
        stateful_set({"updateStrategy": {"type": "OnDelete"}}, updatedReplicas=0),
        State.HEALTHY,
        Reason.AVAILABLE,
    ),
    Case(
        "statefulset on delete still needs ready pods",
        stateful_set({"updateStrategy": {"type": "OnDelete"}}, readyReplicas=1),
        State.PROGRESSING,
        Reason.PROGRESSING,
    ),
    # -- DaemonSet (kstatus daemonsetConditions)
    Case("daemonset on every node", daemon_set(), State.HEALTHY, Reason.AVAILABLE),
    Case(
        "daemonset short of ready",
        daemon_set(numberReady=2),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("2 of 3 nodes ready",),
    ),
    Case(
        "daemonset short of ready for long",
        daemon_set(numberReady=2, numberAvailable=2),
        State.DEGRADED,
        Reason.WORKLOAD_UNAVAILABLE,
        ("DaemonSet ns/plugin", "2 of 3 nodes"),
        since=STALLED_AGO,
    ),
    Case(
        "daemonset not scheduled",
        daemon_set(currentNumberScheduled=1),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("1 of 3 nodes scheduled",),
    ),
    Case(
        "daemonset not updated",
        daemon_set(updatedNumberScheduled=0),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("0 of 3 nodes updated",),
    ),
    Case(
        "daemonset without observedGeneration",
        daemon_set(observedGeneration=None),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("not been observed",),
    ),
    Case(
        "daemonset not counted yet",
        daemon_set(desiredNumberScheduled="3"),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("not counted",),
    ),
    Case(
        "daemonset kept off tainted nodes",
        daemon_set(
            desiredNumberScheduled=0,
            currentNumberScheduled=0,
            updatedNumberScheduled=0,
            numberReady=0,
            numberAvailable=0,
        ),
        State.DEGRADED,
        Reason.UNSCHEDULABLE,
        ("runs on 0 of 2 nodes",),
        kwargs={"nodes_expected": 2},
    ),
    # -- Job (kstatus jobConditions)
    Case(
        "hook job succeeded",
        job({"type": "Complete", "status": "True"}, succeeded=1),
        State.HEALTHY,
        Reason.AVAILABLE,
    ),
    Case(
        "job suspended",
        job({"type": "Suspended", "status": "True"}),
        State.HEALTHY,
        Reason.AVAILABLE,
    ),
    Case(
        "job failed",
        job(
            {
                "type": "Failed",
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
            },
            failed=6,
        ),
        State.DEGRADED,
        Reason.JOB_FAILED,
        ("Job ns/migrate", "BackoffLimitExceeded", "backoff limit"),
    ),
    Case(
        "job running long is not a failure",
        job(active=1),
        State.PROGRESSING,
        Reason.PROGRESSING,
        ("has not completed",),
        since=STALLED_AGO,
    ),
    Case(
        "job whose pod crash loops",
        job(active=1),
        State.DEGRADED,
        Reason.POD_CRASH_LOOPING,
        pods=(pod(CRASH),),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_judge(case: Case) -> None:
    workload = WorkloadStatus.from_object(case.obj)
    assert workload is not None
    pods = [p for p in map(PodSignal.from_object, case.pods) if p is not None]
    verdict = judge(workload.key, workload, pods, now=NOW, since=case.since, **case.kwargs)
    assert (verdict.state, verdict.reason) == (case.state, case.reason), verdict.message
    for words in case.says:
        assert words in verdict.message
    assert verdict.message.startswith(workload.key.shown)


def test_missing_workload() -> None:
    key = WorkloadKey(kind=Kind.DEPLOYMENT, namespace="cert-manager", name="webhook")
    verdict = judge(key, None, now=NOW)
    assert (verdict.state, verdict.reason) == (State.DEGRADED, Reason.WORKLOAD_MISSING)
    assert verdict.message.startswith("Deployment cert-manager/webhook")


def test_grace_is_a_parameter() -> None:
    workload = WorkloadStatus.from_object(deployment(status={"availableReplicas": 0}))
    assert workload is not None
    since = NOW - timedelta(seconds=30)
    short = judge(workload.key, workload, now=NOW, since=since, grace=timedelta(seconds=10))
    long = judge(workload.key, workload, now=NOW, since=since)
    assert (short.state, long.state) == (State.DEGRADED, State.PROGRESSING)


def test_unschedulable_window_from_pod_creation_when_condition_undated() -> None:
    workload = WorkloadStatus.from_object(deployment(status={"availableReplicas": 1}))
    assert workload is not None
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    early = PodSignal.from_object(pod(conditions=conditions, created=JUST_NOW))
    late = PodSignal.from_object(
        pod(conditions=conditions, created=stamp(SCHEDULE_WINDOW + timedelta(seconds=1)))
    )
    assert early is not None and late is not None
    assert judge(workload.key, workload, [early], now=NOW).state is State.PROGRESSING
    assert judge(workload.key, workload, [late], now=NOW).reason is Reason.UNSCHEDULABLE


# ---- hostile objects ---------------------------------------------------------------------

HOSTILE_WORKLOADS: list[tuple[str, object]] = [
    ("not a mapping", ["Deployment"]),
    ("a string", "Deployment"),
    ("no kind", {"apiVersion": "apps/v1", "metadata": {"name": "x"}}),
    ("kind of the wrong type", {"apiVersion": "apps/v1", "kind": 3, "metadata": {"name": "x"}}),
    ("another group's Deployment", {**deployment(), "apiVersion": "example.com/v1"}),
    ("a core Job", {**job(), "apiVersion": "v1"}),
    ("a Pod", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}),
    ("no metadata", {"apiVersion": "apps/v1", "kind": "Deployment"}),
    ("name of the wrong type", {**deployment(), "metadata": {"name": ["web"]}}),
    ("empty name", {**deployment(), "metadata": {"name": ""}}),
    ("namespace of the wrong type", {**deployment(), "metadata": {"name": "w", "namespace": 1}}),
]


@pytest.mark.parametrize(("name", "obj"), HOSTILE_WORKLOADS, ids=[c[0] for c in HOSTILE_WORKLOADS])
def test_not_a_workload(name: str, obj: object) -> None:
    assert WorkloadStatus.from_object(obj) is None


WRONG_TYPES: list[tuple[str, dict[str, Any]]] = [
    ("counts as strings", {"replicas": "2", "updatedReplicas": "2", "availableReplicas": "2"}),
    ("counts as booleans", {"replicas": True, "updatedReplicas": True, "availableReplicas": True}),
    ("negative counts", {"replicas": -2, "updatedReplicas": -2, "availableReplicas": -2}),
    ("counts past int32", {"replicas": 2**40, "updatedReplicas": 2**40, "availableReplicas": 2}),
    ("counts as floats", {"replicas": 2.0, "updatedReplicas": 2.0, "availableReplicas": 2.0}),
]


@pytest.mark.parametrize(("name", "status"), WRONG_TYPES, ids=[c[0] for c in WRONG_TYPES])
def test_wrong_types_are_missing_not_healthy(name: str, status: dict[str, Any]) -> None:
    workload = WorkloadStatus.from_object(deployment(status=status))
    assert workload is not None
    assert judge(workload.key, workload, now=NOW).state is State.PROGRESSING


def test_conditions_of_the_wrong_shape_are_skipped() -> None:
    obj = deployment(
        status={"conditions": ["Available", 3, None, {"type": 7}, {"status": "True"}, {}]}
    )
    workload = WorkloadStatus.from_object(obj)
    assert workload is not None and workload.conditions == []
    assert judge(workload.key, workload, now=NOW).state is State.HEALTHY
    assert WorkloadStatus.from_object(deployment(status={"conditions": "x"})) is not None


def test_times_of_the_wrong_shape_are_unknown() -> None:
    for value in ("yesterday", 17, "9" * 10_000, None):
        obj = deployment(
            status={
                "availableReplicas": 0,
                "conditions": [
                    {"type": "Available", "status": "False", "lastTransitionTime": value}
                ],
            }
        )
        workload = WorkloadStatus.from_object(obj)
        assert workload is not None and workload.conditions[0].last_transition is None
        assert judge(workload.key, workload, now=NOW).state is State.PROGRESSING


def test_hostile_names_and_messages_are_bounded_and_escaped() -> None:
    obj = deployment(status={"availableReplicas": 0})
    obj["metadata"]["name"] = "w\x1b[2J" + "x" * 5000
    workload = WorkloadStatus.from_object(obj)
    assert workload is not None
    assert len(workload.key.name) <= MAX_NAME and "\x1b" not in workload.key.name
    scheduler = "0/3 nodes\u202e are available:\n" + "Insufficient nvidia.com/gpu, " * 5000
    pods = [
        PodSignal.from_object(pod(waiting("CrashLoopBackOff", "\x00" * 50_000))) for _ in range(200)
    ] + [PodSignal.from_object(pod(conditions=unschedulable(scheduler)))]
    verdict = judge(workload.key, workload, [p for p in pods if p], now=NOW)
    assert verdict.reason is Reason.POD_CRASH_LOOPING
    assert len(verdict.message) <= MAX_MESSAGE
    assert not any(ord(c) < 32 or c == "\u202e" for c in verdict.message)
    unsched = PodSignal.from_object(pod(conditions=unschedulable(scheduler)))
    assert unsched is not None and "\\u202e" in unsched.scheduler_message
    assert len(unsched.scheduler_message) <= workloads.MAX_PART


HOSTILE_PODS: list[tuple[str, object]] = [
    ("not a mapping", "pod"),
    ("no name", {"metadata": {}}),
    ("name of the wrong type", {"metadata": {"name": 3}}),
]


@pytest.mark.parametrize(("name", "obj"), HOSTILE_PODS, ids=[c[0] for c in HOSTILE_PODS])
def test_not_a_pod(name: str, obj: object) -> None:
    assert PodSignal.from_object(obj) is None


def test_pod_fields_of_the_wrong_type_say_nothing() -> None:
    obj = {
        "metadata": {"name": "p", "creationTimestamp": 5},
        "status": {
            "conditions": {"type": "PodScheduled"},
            "containerStatuses": [
                "app",
                {"name": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
                {"name": "a", "state": "waiting"},
                {"name": "b", "state": {"waiting": {"reason": ["CrashLoopBackOff"]}}},
                {"name": "c", "lastState": {"terminated": {"exitCode": True}}},
            ],
        },
    }
    signal = PodSignal.from_object(obj)
    assert signal is not None
    assert not signal.unschedulable
    assert [c.container for c in signal.containers] == ["a", "b", "c"]
    assert all(c.waiting_reason == "" for c in signal.containers)
    assert signal.containers[2].last_exit_code is None
    workload = WorkloadStatus.from_object(deployment(status={"availableReplicas": 0}))
    assert workload is not None
    assert judge(workload.key, workload, [signal], now=NOW).state is State.PROGRESSING


def test_containers_read_are_bounded() -> None:
    many = [waiting("CrashLoopBackOff") for _ in range(10_000)]
    signal = PodSignal.from_object(pod(*many))
    assert signal is not None and len(signal.containers) == workloads.MAX_ITEMS


def test_init_containers_count() -> None:
    obj = pod()
    obj["status"]["initContainerStatuses"] = [waiting("ImagePullBackOff")]
    signal = PodSignal.from_object(obj)
    assert signal is not None
    assert signal.containers[0].waiting_reason == "ImagePullBackOff"


# ---- a component -------------------------------------------------------------------------


def verdict(name: str, state: State, reason: Reason, kind: Kind = Kind.DEPLOYMENT) -> Health:
    key = WorkloadKey(kind=kind, namespace="ns", name=name)
    return Health(key=key, state=state, reason=reason, message=f"{key.shown}: {reason}")


OK = State.HEALTHY, Reason.AVAILABLE
WAIT = State.PROGRESSING, Reason.PROGRESSING


@pytest.mark.parametrize(
    ("judged", "state", "reason", "says"),
    [
        ([], State.HEALTHY, Reason.AVAILABLE, "no workloads"),
        ([verdict("a", *OK)], State.HEALTHY, Reason.AVAILABLE, "Deployment ns/a"),
        ([verdict("a", *OK), verdict("b", *OK)], State.HEALTHY, Reason.AVAILABLE, "2 workloads"),
        ([verdict("a", *OK), verdict("b", *WAIT)], State.PROGRESSING, Reason.PROGRESSING, "ns/b"),
        (
            [verdict("a", *WAIT), verdict("b", State.DEGRADED, Reason.WORKLOAD_UNAVAILABLE)],
            State.DEGRADED,
            Reason.WORKLOAD_UNAVAILABLE,
            "ns/b: WorkloadUnavailable; Deployment ns/a",
        ),
        (
            [
                verdict("a", State.DEGRADED, Reason.WORKLOAD_UNAVAILABLE),
                verdict("b", State.DEGRADED, Reason.POD_CRASH_LOOPING),
                verdict("c", State.DEGRADED, Reason.WORKLOAD_MISSING),
            ],
            State.DEGRADED,
            Reason.WORKLOAD_MISSING,
            "ns/c: WorkloadMissing; Deployment ns/b: PodCrashLooping",
        ),
        (
            [
                verdict("a", State.DEGRADED, Reason.UNSCHEDULABLE, Kind.DAEMON_SET),
                verdict("b", State.DEGRADED, Reason.IMAGE_PULL_FAILED),
            ],
            State.DEGRADED,
            Reason.IMAGE_PULL_FAILED,
            "ns/b",
        ),
        (
            [verdict(f"w{i}", State.DEGRADED, Reason.WORKLOAD_UNAVAILABLE) for i in range(5)],
            State.DEGRADED,
            Reason.WORKLOAD_UNAVAILABLE,
            "and 2 more workloads not available",
        ),
    ],
)
def test_component_health(judged: list[Health], state: State, reason: Reason, says: str) -> None:
    result = component_health("dra-driver", judged)
    assert (result.state, result.reason) == (state, reason)
    assert says in result.message
    assert result.workloads == judged


def test_component_message_bounded() -> None:
    long = "x" * MAX_MESSAGE
    judged = [
        Health(
            key=WorkloadKey(kind=Kind.JOB, namespace="ns", name=f"j{i}"),
            state=State.DEGRADED,
            reason=Reason.JOB_FAILED,
            message=long,
        )
        for i in range(3)
    ]
    result = component_health("c\x1b" * 500, judged)
    assert len(result.message) <= MAX_MESSAGE
    assert len(result.component) <= MAX_NAME and "\x1b" not in result.component


def test_reasons_are_condition_reasons() -> None:
    pattern = re.compile(CONSTRAINTS["conditions[].reason"]["pattern"])
    assert all(pattern.match(r.value) for r in Reason)
    assert len({r.value for r in Reason}) == len(Reason)


# ---- what a release runs -----------------------------------------------------------------

MANIFEST = """\
---
# Source: driver/templates/serviceaccount.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: driver
---
# Source: driver/templates/controller.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: controller
spec:
  replicas: 2
---
# Source: driver/templates/plugin.yaml
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kubelet-plugin
  namespace: nvidia-dra
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: store}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: init
  annotations:
    helm.sh/hook: post-install
    helm.sh/hook-delete-policy: hook-succeeded
---
apiVersion: example.com/v1
kind: Deployment
metadata: {name: not-a-workload}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: controller}
---
---
just a string
---
- a
- list
"""


def test_manifest_workloads() -> None:
    found = manifest_workloads(MANIFEST, "release-ns")
    assert [(w.key.kind, w.key.namespace, w.key.name, w.replicas) for w in found] == [
        (Kind.DEPLOYMENT, "release-ns", "controller", 2),
        (Kind.DAEMON_SET, "nvidia-dra", "kubelet-plugin", None),
        (Kind.STATEFUL_SET, "release-ns", "store", None),
        # Helm keeps hooks out of the stored manifest: one found here was
        # applied as a resource of the release, so it is followed.
        (Kind.JOB, "release-ns", "init", None),
    ]


def test_manifest_list_items_count() -> None:
    text = """\
apiVersion: v1
kind: List
items:
- {apiVersion: apps/v1, kind: Deployment, metadata: {name: a}}
- 3
- {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}
"""
    found = manifest_workloads(text, "ns")
    assert [w.key.name for w in found] == ["a"]


def test_empty_manifest() -> None:
    assert manifest_workloads("", "ns") == []


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: 3}\n", "document 1"),
        ("---\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {}\n", "document 2"),
        ('apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: "a\\nb"}\n', "metadata.name"),
        ('apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: "a\\n"}\n', "metadata.name"),
        (f"apiVersion: batch/v1\nkind: Job\nmetadata: {{name: {'a' * 254}}}\n", "metadata.name"),
        (
            'apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: a, namespace: "N S"}\n',
            "namespace",
        ),
    ],
)
def test_manifest_bad_names_refused(text: str, names: str) -> None:
    with pytest.raises(UntrustedInputError, match=names):
        manifest_workloads(text, "ns")


def test_manifest_bounds_hold() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)
    )
    with pytest.raises(UntrustedInputError, match="nodes"):
        manifest_workloads(bomb, "ns")
    with pytest.raises(UntrustedInputError, match="bytes"):
        manifest_workloads("a" * (MANIFEST_LIMITS.max_bytes + 1), "ns")
    with pytest.raises(UntrustedInputError, match="not YAML"):
        manifest_workloads("a: [\x1b", "ns")


@pytest.mark.parametrize("value", [True, 2**40, -1, 3.0, "3"], ids=repr)
def test_daemon_set_counts_of_the_wrong_type_are_missing(value: object) -> None:
    counts = (
        "desiredNumberScheduled",
        "currentNumberScheduled",
        "updatedNumberScheduled",
        "numberReady",
        "numberAvailable",
    )
    workload = WorkloadStatus.from_object(daemon_set(**dict.fromkeys(counts, value)))
    assert workload is not None and workload.desired_scheduled is None
    assert judge(workload.key, workload, now=NOW).state is State.PROGRESSING


def test_times_without_a_zone_are_utc() -> None:
    # The object's times carry a zone; a caller's "now" may not.
    condition = {"type": "Available", "status": "False", "lastTransitionTime": LONG_AGO}
    obj = deployment(status={"availableReplicas": 0, "conditions": [condition]})
    workload = WorkloadStatus.from_object(obj)
    assert workload is not None
    verdict = judge(workload.key, workload, now=NOW.replace(tzinfo=None))
    assert verdict.reason is Reason.WORKLOAD_UNAVAILABLE
    since = STALLED_AGO.replace(tzinfo=None)
    verdict = judge(workload.key, workload, now=NOW, since=since)
    assert verdict.reason is Reason.WORKLOAD_UNAVAILABLE


def test_daemon_set_says_nodes_ready() -> None:
    workload = WorkloadStatus.from_object(daemon_set(numberReady=2, numberAvailable=2))
    assert workload is not None
    assert "2 of 3 nodes ready" in judge(workload.key, workload, now=NOW).message


def test_every_reason_has_one_rank() -> None:
    # A Reason missing from RANK makes RANK.index raise when a component
    # first gives it; a reason ranked twice would have two places.
    assert sorted(health.RANK) == sorted(Reason)
    assert len(set(health.RANK)) == len(health.RANK)
    assert sorted(health.STATE_RANK) == sorted(State)


def test_every_kind_has_rules() -> None:
    # RULES[kind] is looked up for every workload read; a Kind without a row
    # would raise on the first object of that kind.
    assert set(health.RULES) == set(Kind)
