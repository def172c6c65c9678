"""Grove: runs a multi-node engine as a gang-scheduled PodCliqueSet."""

from __future__ import annotations

from modelplane.catalog.advisories import ImageTag, WorkloadsAvailable
from modelplane.catalog.components import kai_scheduler
from modelplane.catalog.components._common import DYNAMO
from modelplane.catalog.images import EnvEntry, Images, ImageSite, PullSecrets, Repository, Runs
from modelplane.catalog.types import (
    ChartSource,
    Component,
    CrdPlacement,
    CRDServes,
    Disruption,
    DisruptionClass,
    ValuesRead,
    VersionRange,
    Workloads,
)

VERSION = "v0.1.0-alpha.12-rc2"

WORKLOADS = Workloads("the Grove operator", ("grove/grove-operator",))

# images.md §10 (ai-dynamo/grove, read at v0.1.0-alpha.12-rc1 and main, rc2 not
# among the tags read: operator/charts/values.yaml as push-artifacts.yaml
# publishes it, internal/controller/podclique/components/pod/initcontainer.go).
# No registry value. grove-initc's repository is the GROVE_INIT_CONTAINER_IMAGE
# entry of deployment.env, the chart's only one, so the list is written back
# whole; its tag is always the operator's own build version.
IMAGES = Images(
    sites=(
        ImageSite(
            "ghcr.io/ai-dynamo/grove/grove-operator:{version}", Repository("image.repository")
        ),
        ImageSite(
            "ghcr.io/ai-dynamo/grove/grove-initc:{version}",
            EnvEntry("deployment.env", "GROVE_INIT_CONTAINER_IMAGE"),
            Runs.RUNTIME,
            "injected into workload pods with startsAfter; the tag is fixed to the operator's "
            "version, and the pods pull with the workload's own pull secrets",
        ),
        ImageSite(
            "ghcr.io/ai-dynamo/grove/grove-install-crds:{version}",
            Repository("crdInstaller.image.repository"),
            Runs.OFF,
            "crdInstaller.enabled",
        ),
    ),
    # main reads it (grove#745, the operator pod); rc1 has no pull-secret value
    # at all, and the pin reads none (READS): the plan refuses to set it there.
    pull_secrets=PullSecrets(("imagePullSecrets",)),
)

# What the chart reads at the pin, of what the product can set: its image
# settings (IMAGES). The pinned rc2 was built from the rc1 sources (rc2 is not
# tagged among the tags read; shared/fixtures/charts/README.md), and at rc1 no
# template reads imagePullSecrets (images.md §10), so it is not here: under
# --image-pull-secret the operator pod pulls without one, and the plan says so.
READS = ValuesRead(
    VERSION,
    ("image.repository", "deployment.env", "crdInstaller.image.repository"),
)

COMPONENT = Component(
    name="grove",
    summary="Runs a multi-node engine as a gang-scheduled PodCliqueSet.",
    namespace="grove-system",
    version=VERSION,
    order=130,
    version_field="dynamo.grove",
    version_description="Grove chart version. v0.1.0-alpha.12-rc2 or later (grove#753).",
    # ServingStack reference, dynamo.grove; upstream-facts §12 (grove#753).
    supported=VersionRange(
        "v0.1.0-alpha.12-rc2",
        why="earlier releases append Grove's own env vars after the template's instead of "
        "prepending them (grove#753), so MODELPLANE_LEADER_ADDRESS cannot be aliased to them",
    ),
    stacks=DYNAMO,
    disruptions=(
        Disruption(
            DisruptionClass.SCHEDULER,
            "restarts the Grove operator: no PodCliqueSet is created, scaled or gang-scheduled "
            "while it is away",
        ),
    ),
    chart=ChartSource(
        "grove-charts",
        "oci://ghcr.io/ai-dynamo/grove",
        crds=CrdPlacement.CRDS_DIR,
        # PodGang, which the scheduler side reads.
        crd_groups=("scheduler.grove.io",),
        reads=(READS,),
    ),
    images=IMAGES,
    depends_on=(kai_scheduler.COMPONENT.name,),
    requirements=(
        CRDServes("podcliquesets.grove.io", "v1alpha1", f"install Grove {VERSION}", "PodCliqueSet"),
    ),
    advisories=(
        ImageTag(WORKLOADS, f"install Grove {VERSION} (Managed mode pins it)"),
        WorkloadsAvailable(WORKLOADS, "check the grove-operator Deployment"),
    ),
    not_checked=(
        "Grove's API is v1alpha1 with no compatibility promise, so a provided install must run "
        "exactly the pinned version; a CRD check cannot tell alpha revisions apart.",
    ),
)
