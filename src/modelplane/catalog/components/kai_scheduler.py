"""The KAI Scheduler: gang-schedules Grove's PodCliqueSets against a Queue."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelplane.catalog.advisories import (
    MET,
    WARNING,
    WorkloadsAvailable,
    flag_value,
    observed,
    ref,
)
from modelplane.catalog.components._common import DYNAMO
from modelplane.catalog.facts import ClusterFacts, Fact
from modelplane.catalog.images import Images, ImageSite, Prefix, PullSecrets, Runs
from modelplane.catalog.types import (
    ChartSource,
    Component,
    CrdPlacement,
    CRDServes,
    Disruption,
    DisruptionClass,
    Finding,
    ValuesRead,
    Workloads,
)

if TYPE_CHECKING:
    from modelplane.api.spec import ServingStackSpec

VERSION = "v0.16.8"

SCHEDULER_NAME = "kai-scheduler"
# The pod label that puts a pod in a Queue (upstream-facts §13: DefaultQueueLabel,
# the chart's podgrouper.queueLabelKey at v0.16.8).
QUEUE_LABEL = "kai.scheduler/queue"
WORKLOADS = Workloads(
    "the KAI operator and scheduler", ("kai-scheduler/operator", "kai-scheduler/scheduler")
)
SCHEDULER_WORKLOADS = Workloads("the KAI scheduler", ("kai-scheduler/scheduler",))


def _kai(name: str, runs: Runs = Runs.ALWAYS, note: str = "") -> ImageSite:
    return ImageSite(
        f"ghcr.io/kai-scheduler/kai-scheduler/{name}:{{version}}",
        Prefix("global.registry"),
        runs,
        note,
    )


# images.md §9 (kai-scheduler/KAI-Scheduler @ v0.16.8, deployments/kai-scheduler/
# values.yaml as the release workflow publishes it, templates/_helpers.tpl,
# pkg/apis/kai/v1/common/image.go): every image is <global.registry>/<name>:<tag>,
# the operator starting all but its own from the kai-config Config it is given;
# the mirror keeps the flat <prefix>/<name> layout.
IMAGES = Images(
    sites=(
        _kai("operator"),
        _kai("admission"),
        _kai("binder"),
        _kai("podgrouper"),
        _kai("podgroupcontroller"),
        _kai("queuecontroller"),
        _kai("scheduler"),
        _kai("crd-upgrader", Runs.HOOK, "the CRD upgrade, config deployer and cleanup Jobs"),
        _kai("resourcereservation", Runs.RUNTIME, "GPU-sharing reservation pods"),
        _kai("nodescaleadjuster", Runs.OFF, "global.clusterAutoscaling"),
        _kai("scalingpod", Runs.OFF, "global.clusterAutoscaling"),
        _kai("numa-placement-exporter", Runs.OFF, "a SchedulingShard with the numa plugin"),
    ),
    # Also handed to every operand through kai-config's additionalImagePullSecrets.
    pull_secrets=PullSecrets(("global.imagePullSecrets",)),
)

# What the chart reads at the pin, of what the product can set (images.md §9):
# the one prefix every image hangs from and the one pull-secret list.
READS = ValuesRead(VERSION, ("global.registry", "global.imagePullSecrets"))

# ---- its advisory kinds --------------------------------------------------------


@dataclass(frozen=True)
class SchedulerName:
    """A scheduler answers to ``name``: its Deployment is ``<name>-<shard>``.

    KAI's operator names each shard's scheduler Deployment after the
    schedulerName it serves; a ``--scheduler-name`` argument, where present,
    says it directly.
    """

    workloads: Workloads
    name: str
    flag: str
    fix: str

    @property
    def title(self) -> str:
        return f"a scheduler answers to schedulerName {self.name}"

    def needs(self) -> tuple[Fact, ...]:
        return self.workloads.facts()

    def evaluate(
        self, component: Component, spec: ServingStackSpec, facts: ClusterFacts
    ) -> Finding:
        found = observed(
            self.workloads,
            facts,
            f"the schedulerName {self.workloads.describe} answers to",
            component,
        )
        if not isinstance(found, list):
            return found
        others: list[str] = []
        for w in found:
            name = flag_value(w.args, self.flag)
            if name is None:
                # The operator names each shard's Deployment <schedulerName>-<shard>.
                name = self.name if w.name.startswith(self.name + "-") else None
            if name == self.name:
                return MET, f"{ref(w)} answers to {self.name}"
            others.append(
                f"{ref(w)} answers to {name}"
                if name
                else f"{ref(w)} is not named {self.name}-<shard> and sets no {self.flag}"
            )
        return WARNING, f"{'; '.join(others)}; pods requesting {self.name} stay Pending: {self.fix}"


COMPONENT = Component(
    name="kai-scheduler",
    summary="Gang-schedules Grove's PodCliqueSets against a Queue.",
    namespace="kai-scheduler",
    version=VERSION,
    order=120,
    version_field="dynamo.kaiScheduler",
    version_description="KAI Scheduler chart version.",
    stacks=DYNAMO,
    disruptions=(
        Disruption(
            DisruptionClass.SCHEDULER,
            "restarts the KAI scheduler: no pod asking for kai-scheduler is bound while it is away",
        ),
    ),
    chart=ChartSource(
        "kai-scheduler",
        "oci://ghcr.io/kai-scheduler/kai-scheduler",
        crds=CrdPlacement.CRDS_DIR,
        # Its own configs, shards and topologies, beside the Queue's group.
        crd_groups=("kai.scheduler",),
        reads=(READS,),
    ),
    images=IMAGES,
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
