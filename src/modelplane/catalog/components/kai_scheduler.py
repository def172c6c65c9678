"""The KAI Scheduler: gang-schedules Grove's PodCliqueSets against a Queue."""

from __future__ import annotations

from modelplane.catalog.advisories import SchedulerName, WorkloadsAvailable
from modelplane.catalog.components._common import DYNAMO
from modelplane.catalog.types import ChartSource, Component, CRDServes, Workloads

VERSION = "v0.16.8"

SCHEDULER_NAME = "kai-scheduler"
WORKLOADS = Workloads(
    "the KAI operator and scheduler", ("kai-scheduler/operator", "kai-scheduler/scheduler")
)
SCHEDULER_WORKLOADS = Workloads("the KAI scheduler", ("kai-scheduler/scheduler",))

COMPONENT = Component(
    name="kai-scheduler",
    summary="Gang-schedules Grove's PodCliqueSets against a Queue.",
    namespace="kai-scheduler",
    version=VERSION,
    order=120,
    version_field="dynamo.kaiScheduler",
    version_description="KAI Scheduler chart version.",
    stacks=DYNAMO,
    chart=ChartSource("kai-scheduler", "oci://ghcr.io/kai-scheduler/kai-scheduler"),
    wait=True,
    requirements=(
        CRDServes(
            "queues.scheduling.run.ai",
            "v2",
            "install the KAI Scheduler v0.16",
            "Queue",
            namespaced=False,
        ),
    ),
    advisories=(
        SchedulerName(
            SCHEDULER_WORKLOADS,
            SCHEDULER_NAME,
            "--scheduler-name",
            f"install KAI with its default schedulerName {SCHEDULER_NAME}",
        ),
        WorkloadsAvailable(WORKLOADS, "check the KAI Deployments in its namespace"),
    ),
    not_checked=(
        "The scheduler answers to the schedulerName kai-scheduler and its Queue webhook is "
        "serving. Modelplane composes against the v0.16 line.",
    ),
)
