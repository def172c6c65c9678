"""The NVIDIA DRA driver for GPUs: ResourceSlices and the gpu.nvidia.com DeviceClass."""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelplane import pins
from modelplane.catalog.advisories import (
    CriticalPodsAdmitted,
    GpuNodesPublishSlices,
    NoNodeAdvertises,
)
from modelplane.catalog.components._common import (
    BOTH,
    GPU_DEVICE_CLASS,
    GPUS,
    NVIDIA_DRA_NAMESPACE,
    SYSTEM_CRITICAL_CLASSES,
)
from modelplane.catalog.types import ChartSource, Component, ObjectExists, Values, Workloads
from modelplane.wire import ApiRef

if TYPE_CHECKING:
    from modelplane.api.models import ServingStackSpec

# The driver's release; its critical-pods quota (dra_critical_pods_quota) goes with it.
VERSION = "0.4.1"

KUBELET_PLUGIN = Workloads(
    "the DRA driver",
    ("dra-driver-nvidia/dra-driver-nvidia-gpu", "nvidia/k8s-dra-driver-gpu"),
    kinds=("DaemonSet",),
)


def _values(spec: ServingStackSpec) -> Values:
    # gpuResourcesEnabledOverride acknowledges the chart's guard against a
    # co-existing device plugin; without it the chart refuses to render.
    values: Values = {
        "gpuResourcesEnabledOverride": True,
        "resources": {"computeDomains": {"enabled": False}},
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
    chart=ChartSource("dra-driver-nvidia-gpu", "oci://registry.k8s.io/dra-driver-nvidia/charts"),
    values=_values,
    # By name: the quota's module takes its version from this one.
    depends_on=("dra-driver-critical-pods-quota",),
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
