"""Node Feature Discovery: labels GPU nodes so the DRA driver's kubelet plugin targets them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelplane.catalog.advisories import GpuNodesLabelled, WorkloadsAvailable
from modelplane.catalog.components._common import BOTH, GPU_TAINT_KEY, GPUS
from modelplane.catalog.types import ChartSource, Component, CRDServes, Values, Workloads

if TYPE_CHECKING:
    from modelplane.api.models import ServingStackSpec

VERSION = "0.19.0"

WORKLOADS = Workloads("the NFD master", ("nfd/node-feature-discovery",))


def _values(_spec: ServingStackSpec) -> Values:
    # Without the toleration the worker never labels tainted GPU nodes, the
    # DRA kubelet plugin never schedules there, and claims stay pending.
    return {
        "worker": {
            "tolerations": [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
        }
    }


COMPONENT = Component(
    name="node-feature-discovery",
    summary="Labels GPU nodes so the DRA driver's kubelet plugin targets them.",
    namespace="node-feature-discovery",
    version=VERSION,
    order=30,
    version_field="versions.nodeFeatureDiscovery",
    version_description="Node Feature Discovery chart version.",
    stacks=BOTH,
    chart=ChartSource(
        "node-feature-discovery", "https://kubernetes-sigs.github.io/node-feature-discovery/charts"
    ),
    values=_values,
    requirements=(
        CRDServes(
            "nodefeatures.nfd.k8s-sigs.io",
            "v1alpha1",
            "install node-feature-discovery",
            "NodeFeature",
        ),
    ),
    advisories=(
        GpuNodesLabelled(
            GPUS,
            f"run the NFD worker on every GPU node, tolerating the {GPU_TAINT_KEY} taint",
        ),
        WorkloadsAvailable(WORKLOADS, "check the NFD master Deployment's events"),
    ),
    not_checked=(
        "The NFD worker runs on the GPU nodes, tolerating their taint, and labels them with "
        "feature.node.kubernetes.io/pci-10de and friends.",
    ),
)
