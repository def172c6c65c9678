"""Node Feature Discovery: labels GPU nodes so the DRA driver's kubelet plugin targets them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelplane.catalog.advisories import WorkloadsAvailable
from modelplane.catalog.components._common import BOTH, GPU_TAINT_KEY, GPUS
from modelplane.catalog.facts import ClusterFacts, Fact, Nodes, ResourceSlices
from modelplane.catalog.gpu_nodes import each_gpu_node, is_nfd_vendor_label
from modelplane.catalog.images import Images, ImageSite, PullSecrets, Repository
from modelplane.catalog.types import (
    ChartSource,
    Component,
    CrdPlacement,
    CRDServes,
    Disruption,
    DisruptionClass,
    Finding,
    GpuNodes,
    HelmHook,
    NodeAgent,
    NodeProof,
    Values,
    ValuesRead,
    Workloads,
    release_name_of,
)

if TYPE_CHECKING:
    from modelplane.api.spec import ServingStackSpec

VERSION = "0.19.0"

WORKLOADS = Workloads("the NFD master", ("nfd/node-feature-discovery",))


# images.md §3 (node-feature-discovery @ v0.19.0, deployment/helm/.../values.yaml):
# no registry value, one image for master, worker, gc and the prune Job,
# tagged with appVersion (the chart version with a v).
IMAGES = Images(
    sites=(
        ImageSite(
            "registry.k8s.io/nfd/node-feature-discovery:v{version}", Repository("image.repository")
        ),
    ),
    pull_secrets=PullSecrets(("imagePullSecrets",)),
)


# ---- its advisory kinds --------------------------------------------------------


@dataclass(frozen=True)
class GpuNodesLabelled:
    """Every GPU node carries NFD's PCI vendor label."""

    gpus: GpuNodes
    fix: str

    @property
    def title(self) -> str:
        return f"GPU nodes carry NFD's PCI vendor label ({self.gpus.pci_vendor})"

    def needs(self) -> tuple[Fact, ...]:
        # Slices too: a node that publishes them is a GPU node without any label.
        return (Nodes(), ResourceSlices())

    def evaluate(
        self, component: Component, spec: ServingStackSpec, facts: ClusterFacts
    ) -> Finding:
        label = f"{self.gpus.nfd_label_prefix}*{self.gpus.pci_vendor}*.present"
        return each_gpu_node(
            self.gpus,
            facts,
            lacks=lambda n: (
                not any(is_nfd_vendor_label(self.gpus, k, v) for k, v in n.labels.items())
            ),
            lack=("lacks", "lack"),
            what=f"a {label} label, so the DRA driver's kubelet plugin never schedules there: "
            f"{self.fix}",
            done=f"carry {label}",
        )


# What the chart reads at the pin, of what the product can set (images.md §3).
# imagePullSecrets wins over global.imagePullSecrets, so the product sets it.
READS = ValuesRead(
    VERSION,
    ("worker.tolerations", "worker.updateStrategy", "image.repository", "imagePullSecrets"),
)


# The prune Job that clears NFD's node labels once the release is uninstalled,
# and its RBAC (templates/post-delete-job.yaml), deleted once it succeeds.
_CHART = "node-feature-discovery"
_PRUNE = f"{release_name_of(_CHART)}-prune"
_AFTER_DELETE = ("post-delete",)
_UNLESS_FAILED = ("before-hook-creation", "hook-succeeded")
_RBAC = "rbac.authorization.k8s.io/v1"
HOOKS = (
    HelmHook("v1", "ServiceAccount", _PRUNE, True, _AFTER_DELETE, _UNLESS_FAILED),
    HelmHook(_RBAC, "ClusterRole", _PRUNE, False, _AFTER_DELETE, _UNLESS_FAILED),
    HelmHook(_RBAC, "ClusterRoleBinding", _PRUNE, False, _AFTER_DELETE, _UNLESS_FAILED),
    HelmHook("batch/v1", "Job", _PRUNE, True, _AFTER_DELETE, _UNLESS_FAILED),
)


# A product decision, as for the DRA kubelet plugin: the operator rolls the
# worker a node at a time and checks, after each, that the node keeps the
# PCI labels the DRA plugin's node affinity selects on (a worker that drops
# them takes the plugin off the node). The chart's default is RollingUpdate
# at maxUnavailable "10%" (values.yaml at 0.19.0, worker.updateStrategy,
# whose comment says OnDelete needs rollingUpdate set to null, since Helm
# merges maps; a null deletes the key).
ON_DELETE: Values = {"type": "OnDelete", "rollingUpdate": None}

# The worker's DaemonSet: <release>-worker (templates/worker.yaml).
NODE_AGENT = NodeAgent(f"{release_name_of(_CHART)}-worker", NodeProof.LABELS, GPUS)


def _values(_spec: ServingStackSpec) -> Values:
    # Without the toleration the worker never labels tainted GPU nodes, the
    # DRA kubelet plugin never schedules there, and claims stay pending.
    return {
        "worker": {
            "tolerations": [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "updateStrategy": ON_DELETE,
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
    disruptions=(
        Disruption(
            DisruptionClass.NODE_AGENT,
            "restarts the NFD worker on every node, a node at a time (the operator's roll), "
            "which relabels it: the DRA kubelet plugin selects GPU nodes by those labels",
            NODE_AGENT,
        ),
        Disruption(DisruptionClass.CONTROL, "restarts the NFD master and its garbage collector"),
    ),
    chart=ChartSource(
        _CHART,
        "https://kubernetes-sigs.github.io/node-feature-discovery/charts",
        crds=CrdPlacement.CRDS_DIR,
        reads=(READS,),
        hooks=HOOKS,
    ),
    values=_values,
    images=IMAGES,
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
