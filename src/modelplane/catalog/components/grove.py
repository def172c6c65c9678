"""Grove: runs a multi-node engine as a gang-scheduled PodCliqueSet."""

from __future__ import annotations

from modelplane.catalog.advisories import ImageTag, WorkloadsAvailable
from modelplane.catalog.components import kai_scheduler
from modelplane.catalog.components._common import DYNAMO
from modelplane.catalog.types import ChartSource, Component, CRDServes, VersionRange, Workloads

VERSION = "v0.1.0-alpha.12-rc2"

WORKLOADS = Workloads("the Grove operator", ("grove/grove-operator",))

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
    chart=ChartSource("grove-charts", "oci://ghcr.io/ai-dynamo/grove"),
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
