"""The NVIDIA DRA driver for GPUs: ResourceSlices and the gpu.nvidia.com DeviceClass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelplane import pins
from modelplane.catalog.advisories import (
    MET,
    UNKNOWN,
    WARNING,
    cannot,
    kinds_of,
    listed,
    matching,
    observed,
    ref,
)
from modelplane.catalog.components._common import (
    BOTH,
    GPU_DEVICE_CLASS,
    GPUS,
    NVIDIA_DRA_NAMESPACE,
    SYSTEM_CRITICAL_CLASSES,
)
from modelplane.catalog.facts import (
    ClusterFacts,
    Fact,
    Nodes,
    Quotas,
    ResourceSlices,
    WorkloadsOfKind,
)
from modelplane.catalog.gpu_nodes import each_gpu_node, gpu_node_unavailable, gpu_nodes
from modelplane.catalog.images import Images, ImageSite, PullSecrets, Repository
from modelplane.catalog.placement import Placement
from modelplane.catalog.types import (
    ChartSource,
    Component,
    CrdPlacement,
    Disruption,
    DisruptionClass,
    Finding,
    GpuNodes,
    NodeAgent,
    NodeProof,
    ObjectExists,
    Values,
    ValuesRead,
    Workloads,
)
from modelplane.wire import ApiRef

if TYPE_CHECKING:
    from modelplane.api.spec import ServingStackSpec

# The driver's release; its critical-pods quota (dra_critical_pods_quota) goes with it.
VERSION = "0.4.1"

KUBELET_PLUGIN = Workloads(
    "the DRA driver",
    ("dra-driver-nvidia/dra-driver-nvidia-gpu", "nvidia/k8s-dra-driver-gpu"),
    kinds=("DaemonSet",),
)


# images.md §4 (kubernetes-sigs/dra-driver-nvidia-gpu @ v0.4.1, deployments/helm/
# .../values.yaml, _helpers.tpl fullimage): no registry value; the one image
# also reaches the pods the driver starts itself through IMAGE_NAME.
IMAGES = Images(
    sites=(
        ImageSite(
            "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v{version}",
            Repository("image.repository"),
            note="also the compute-domain and MPS daemons the driver starts",
        ),
    ),
    pull_secrets=PullSecrets(
        ("imagePullSecrets",),
        note="MPS control-daemon pods get none (the chart's template has no field for them)",
    ),
)


# ---- its advisory kinds --------------------------------------------------------


@dataclass(frozen=True)
class NoNodeAdvertises:
    """No Node advertises the GPU extended resource (a device plugin next to DRA)."""

    gpus: GpuNodes
    fix: str

    @property
    def title(self) -> str:
        return f"no node advertises {self.gpus.resource} through a device plugin"

    def needs(self) -> tuple[Fact, ...]:
        return (Nodes(),)

    def evaluate(
        self, component: Component, spec: ServingStackSpec, facts: ClusterFacts
    ) -> Finding:
        if facts.nodes is None:
            return cannot(facts, "nodes")
        r = self.gpus.resource
        offenders = [n.name for n in facts.nodes if n.allocatable.get(r, "0") not in ("0", "")]
        if offenders:
            return WARNING, (
                f"{listed(offenders)} advertise{'s' if len(offenders) == 1 else ''} {r}: a "
                f"device plugin hands out the same GPUs behind DRA's back: {self.fix}"
            )
        return MET, f"no node advertises {r} ({len(facts.nodes)} nodes)"


@dataclass(frozen=True)
class GpuNodesPublishSlices:
    """Every GPU node has a ResourceSlice of the driver."""

    gpus: GpuNodes
    fix: str

    @property
    def title(self) -> str:
        return f"GPU nodes publish ResourceSlices of {self.gpus.driver}"

    def needs(self) -> tuple[Fact, ...]:
        return (Nodes(), ResourceSlices())

    def evaluate(
        self, component: Component, spec: ServingStackSpec, facts: ClusterFacts
    ) -> Finding:
        if facts.nodes is None:
            return cannot(facts, "nodes")
        if facts.resource_slices is None:
            return cannot(facts, "resourceslices")
        driver = self.gpus.driver
        published = set(facts.resource_slices.get(driver, []))
        return each_gpu_node(
            self.gpus,
            facts,
            lacks=lambda n: n.name not in published,
            lack=("has", "have"),
            what=f"no ResourceSlice of {driver}, so GPU claims cannot be allocated there: "
            f"{self.fix}",
            done=f"publish ResourceSlices of {driver}",
        )


@dataclass(frozen=True)
class PluginOnEveryGpuNode:
    """The kubelet plugin's DaemonSet runs, available, on at least every GPU node.

    Judged from the DaemonSet's own status (nodes it should run on, nodes
    where it is available) against the GPU nodes the facts show, so it costs
    no LIST of Pods: a DaemonSet scheduled on fewer nodes than there are GPU
    nodes (a missing toleration of the GPU taint, a node selector NFD's
    labels do not meet) misses some, and one not available everywhere it is
    scheduled has pods that do not run. It cannot say which node lacks the
    plugin when the counts agree but the nodes differ; the ResourceSlices
    check says which node publishes nothing.
    """

    workloads: Workloads
    gpus: GpuNodes
    fix: str

    @property
    def title(self) -> str:
        return f"{self.workloads.describe}'s kubelet plugin runs on every GPU node"

    def needs(self) -> tuple[Fact, ...]:
        # Slices too: a node that publishes them is a GPU node without any label.
        return (Nodes(), ResourceSlices(), WorkloadsOfKind("DaemonSet"))

    def evaluate(
        self, component: Component, spec: ServingStackSpec, facts: ClusterFacts
    ) -> Finding:
        if facts.nodes is None:
            return cannot(facts, "nodes")
        found = observed(self.workloads, facts, "where the kubelet plugin runs", component)
        if not isinstance(found, list):
            return found
        gpu = len(gpu_nodes(self.gpus, facts.nodes, facts.resource_slices))
        if not gpu:
            return UNKNOWN, "no node shows a sign of a GPU: nothing to check"
        problems: list[str] = []
        for w in found:
            if w.scheduled is None or w.available_on is None:
                problems.append(f"{ref(w)} reports no scheduled nodes yet")
            elif w.scheduled < gpu:
                problems.append(
                    f"{ref(w)} is scheduled on {w.scheduled} node(s), fewer than the {gpu} "
                    "GPU node(s)"
                )
            elif w.available_on < w.scheduled:
                problems.append(
                    f"{ref(w)} is available on {w.available_on} of the {w.scheduled} node(s) "
                    "it is scheduled on"
                )
        if problems:
            return WARNING, f"{'; '.join(problems)}: {self.fix}"
        return MET, f"{', '.join(ref(w) for w in found)} available on all {gpu} GPU node(s)"


def plugin_placements(workloads: Workloads, facts: ClusterFacts) -> list[Placement] | None:
    """Where the kubelet plugin DaemonSets' pods may run; None when none was observed."""
    if facts.workloads is None:
        return None
    found = [w.placement for w in matching(workloads, facts.workloads) if w.kind == "DaemonSet"]
    return found or None


@dataclass(frozen=True)
class GpuNodesSchedulable:
    """No GPU node is cordoned, or kept from the kubelet plugin by a taint or its selection.

    Either way its GPUs take no new pod: a drain for maintenance
    (``maintenance=true:NoExecute``) evicts the plugin, and the DaemonSet
    then reports 0 desired and 0 ready, healthy by its own account; a GPU
    node the plugin's node affinity leaves out (no NFD PCI label it names)
    is not counted by the DaemonSet at all.
    """

    workloads: Workloads
    gpus: GpuNodes
    fix: str

    @property
    def title(self) -> str:
        return "GPU nodes are schedulable and admit the kubelet plugin"

    def needs(self) -> tuple[Fact, ...]:
        return (Nodes(), ResourceSlices(), WorkloadsOfKind("DaemonSet"))

    def evaluate(
        self, component: Component, spec: ServingStackSpec, facts: ClusterFacts
    ) -> Finding:
        if facts.nodes is None:
            return cannot(facts, "nodes")
        gpu = gpu_nodes(self.gpus, facts.nodes, facts.resource_slices)
        if not gpu:
            return UNKNOWN, "no node shows a sign of a GPU: nothing to check"
        plugins = plugin_placements(self.workloads, facts)
        out: dict[str, list[str]] = {}
        for node in gpu:
            why = gpu_node_unavailable(node, plugins)
            if why is not None:
                out.setdefault(why, []).append(node.name)
        if out:
            said = "; ".join(
                f"GPU node{'s' if len(names) > 1 else ''} {listed(names)}: {why}"
                for why, names in sorted(out.items())
            )
            return WARNING, f"{said}: their GPUs are not available to new pods: {self.fix}"
        return MET, f"all {len(gpu)} GPU nodes are schedulable"


@dataclass(frozen=True)
class CriticalPodsAdmitted:
    """Where quota restricts system-critical pods, the driver's namespace admits them.

    A ResourceQuota scoped to these PriorityClasses in ``restricted_in`` (GKE's
    ``gcp-critical-pods`` in kube-system) is the sign of the restriction; the
    driver's namespace is where ``workloads`` runs.
    """

    workloads: Workloads
    classes: tuple[str, ...]
    restricted_in: str
    fix: str

    @property
    def title(self) -> str:
        return f"{self.workloads.describe}'s namespace admits system-critical pods"

    def needs(self) -> tuple[Fact, ...]:
        return (Quotas(), *self.workloads.facts())

    def evaluate(
        self, component: Component, spec: ServingStackSpec, facts: ClusterFacts
    ) -> Finding:
        if facts.quotas is None:
            return cannot(facts, "resourcequotas")
        quotas = facts.quotas

        def admits(classes: list[str]) -> bool:
            return "*" in classes or any(c in classes for c in self.classes)

        restricting = [
            q for q in quotas if q.namespace == self.restricted_in and admits(q.priority_classes)
        ]
        if not restricting:
            return MET, (
                f"no PriorityClass-scoped ResourceQuota in {self.restricted_in} (GKE's "
                "gcp-critical-pods is one), the sign of a cluster restricting system-critical "
                "pods by quota; nothing to admit"
            )
        sign = f"ResourceQuota {self.restricted_in}/{restricting[0].name} restricts them"
        if facts.workloads is None:
            return cannot(facts, "workloads")
        found = matching(self.workloads, facts.workloads)
        if not found:
            return UNKNOWN, (
                f"{sign}, but no {kinds_of(self.workloads)} runs "
                f"{' or '.join(self.workloads.images)}, so the driver's namespace is not known"
            )
        namespaces = sorted({w.namespace for w in found})
        bare = [
            ns
            for ns in namespaces
            if not any(q.namespace == ns and admits(q.priority_classes) for q in quotas)
        ]
        if bare:
            return WARNING, (
                f"{sign}, and namespace {', '.join(bare)} has no ResourceQuota admitting them, "
                f"so the kubelet plugin's pods are never created: {self.fix}"
            )
        return MET, f"{sign}; namespace {', '.join(namespaces)} has a ResourceQuota admitting them"


# What the chart reads at the pin, of what the product can set: its fixed
# values (nvidiaDriverRoot only off the default root) and images.md §4.
READS = ValuesRead(
    VERSION,
    (
        "gpuResourcesEnabledOverride",
        "resources.computeDomains.enabled",
        "nvidiaDriverRoot",
        "image.repository",
        "imagePullSecrets",
        "kubeletPlugin.updateStrategy",
    ),
)


# A product decision: the operator, not the chart, rolls the kubelet plugin.
# The chart's default (values.yaml at 0.4.1, kubeletPlugin.updateStrategy:
# RollingUpdate, maxUnavailable "100%") takes the plugin off every GPU node
# at once, and a plugin that fails leaves every node without one. OnDelete
# lets helm change the template and restart nothing; the operator restarts
# the pods a node at a time (plan.node_agents). The chart renders the value
# whole into the DaemonSet (templates/kubeletplugin.yaml). The null drops
# the default's rollingUpdate, which Helm would otherwise merge in beside
# OnDelete, as NFD's values.yaml says of its own worker.updateStrategy.
ON_DELETE: Values = {"type": "OnDelete", "rollingUpdate": None}

# The kubelet plugin's DaemonSet (the chart names it without the release).
NODE_AGENT = NodeAgent("dra-driver-nvidia-gpu-kubelet-plugin", NodeProof.SLICES, GPUS)


def _values(spec: ServingStackSpec) -> Values:
    # gpuResourcesEnabledOverride acknowledges the chart's guard against a
    # co-existing device plugin; without it the chart refuses to render.
    values: Values = {
        "gpuResourcesEnabledOverride": True,
        "resources": {"computeDomains": {"enabled": False}},
        "kubeletPlugin": {"updateStrategy": ON_DELETE},
    }
    if spec.nvidia_driver_root != pins.NVIDIA_DRIVER_ROOT:
        values["nvidiaDriverRoot"] = spec.nvidia_driver_root
    return values


COMPONENT = Component(
    name="nvidia-dra-driver-gpu",
    summary="Publishes GPUs as DRA ResourceSlices and the gpu.nvidia.com DeviceClass.",
    namespace=NVIDIA_DRA_NAMESPACE,
    version=VERSION,
    order=50,
    version_field="versions.nvidiaDraDriver",
    version_description="NVIDIA DRA driver chart version.",
    stacks=BOTH,
    # ComputeDomains are off, so the chart runs no controller: the plugin is all.
    disruptions=(
        Disruption(
            DisruptionClass.NODE_AGENT,
            "restarts the kubelet plugin on every GPU node, a node at a time (the "
            "operator's roll): no GPU claim is prepared on a node while it is away",
            NODE_AGENT,
        ),
    ),
    chart=ChartSource(
        "dra-driver-nvidia-gpu",
        "oci://registry.k8s.io/dra-driver-nvidia/charts",
        crds=CrdPlacement.CRDS_DIR,
        # ComputeDomain and ComputeDomainClique (its requirement is a DeviceClass).
        crd_groups=("resource.nvidia.com",),
        reads=(READS,),
    ),
    values=_values,
    images=IMAGES,
    # By name: the quota's module takes its version from this one.
    depends_on=("dra-driver-critical-pods-quota",),
    dra_driver=GPUS.driver,
    requirements=(
        ObjectExists(
            ApiRef("resource.k8s.io", "v1", "deviceclasses"),
            "DeviceClass",
            GPU_DEVICE_CLASS,
            "install the NVIDIA DRA driver for GPUs (Kubernetes 1.34+ serves resource.k8s.io/v1)",
        ),
    ),
    advisories=(
        NoNodeAdvertises(
            GPUS,
            "disable the NVIDIA device plugin (GPU Operator: devicePlugin.enabled=false); DRA "
            "allocates the GPUs",
        ),
        GpuNodesPublishSlices(
            GPUS,
            "check that the DRA driver's kubelet plugin runs on the node (NVIDIA driver, NFD "
            "labels, tolerations)",
        ),
        GpuNodesSchedulable(
            KUBELET_PLUGIN,
            GPUS,
            "uncordon the node, or remove the taint, once its maintenance is over (or let "
            "the kubelet plugin's DaemonSet tolerate a taint the GPU pool keeps); a node its "
            "node affinity leaves out needs NFD's PCI label of its GPU "
            "(feature.node.kubernetes.io/pci-0302_10de.present and the like)",
        ),
        PluginOnEveryGpuNode(
            KUBELET_PLUGIN,
            GPUS,
            "check the kubelet plugin's DaemonSet events: it must tolerate the GPU nodes' "
            "taint and match their labels, and its pods must be admitted",
        ),
        CriticalPodsAdmitted(
            KUBELET_PLUGIN,
            SYSTEM_CRITICAL_CLASSES,
            "kube-system",
            "create a ResourceQuota scoped to PriorityClass system-node-critical and "
            "system-cluster-critical in the driver's namespace",
        ),
    ),
    not_checked=(
        "The NVIDIA kernel driver and Container Toolkit on every GPU node.",
        "The driver's kubelet plugin publishes each GPU node's devices as ResourceSlices.",
        "No device plugin advertising nvidia.com/gpu: a second allocator would hand out the "
        "same GPUs behind DRA's back.",
    ),
    not_needed=("ComputeDomains (multi-node NVLink) and their prerequisites are disabled.",),
)
