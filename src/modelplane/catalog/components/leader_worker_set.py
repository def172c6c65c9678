"""LeaderWorkerSet, for multi-node engines on the Standard stack."""

from __future__ import annotations

from modelplane.catalog.advisories import WorkloadsAvailable
from modelplane.catalog.components._common import STANDARD
from modelplane.catalog.images import Images, ImageSite, PullSecrets, Repository
from modelplane.catalog.types import (
    ChartSource,
    Component,
    CrdPlacement,
    CRDServes,
    Disruption,
    DisruptionClass,
    ValuesRead,
    Workloads,
)

VERSION = "v0.8.0"

WORKLOADS = Workloads("the LeaderWorkerSet controller", ("lws/lws",))

# images.md §8 (kubernetes-sigs/lws @ v0.8.0, charts/lws/values.yaml as
# hack/push-chart.sh publishes it): no registry value.
IMAGES = Images(
    sites=(ImageSite("registry.k8s.io/lws/lws:{version}", Repository("image.manager.repository")),),
    pull_secrets=PullSecrets(("imagePullSecrets",)),
)

# What the chart reads at the pin, of what the product can set (images.md §8).
READS = ValuesRead(VERSION, ("image.manager.repository", "imagePullSecrets"))

COMPONENT = Component(
    name="leader-worker-set",
    summary="LeaderWorkerSet, for multi-node engines on the Standard stack.",
    namespace="lws-system",
    version=VERSION,
    order=110,
    version_field="standard.leaderWorkerSet",
    version_description="LeaderWorkerSet chart version.",
    stacks=STANDARD,
    disruptions=(
        Disruption(
            DisruptionClass.SCHEDULER,
            "restarts the LeaderWorkerSet controller: no group is created, scaled or recreated "
            "while it is away",
        ),
    ),
    chart=ChartSource(
        "lws", "oci://registry.k8s.io/lws/charts", crds=CrdPlacement.CRDS_DIR, reads=(READS,)
    ),
    images=IMAGES,
    requirements=(
        CRDServes(
            "leaderworkersets.leaderworkerset.x-k8s.io",
            "v1",
            "install LeaderWorkerSet v0.8",
            "LeaderWorkerSet",
        ),
    ),
    advisories=(WorkloadsAvailable(WORKLOADS, "check the LeaderWorkerSet controller Deployment"),),
    not_checked=("The LeaderWorkerSet controller is running. Modelplane composes against v0.8.",),
)
