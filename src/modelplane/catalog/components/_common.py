"""What several components agree on: namespaces, addresses, GPU signs, repositories.

Not a component (the catalog skips modules whose names start with ``_``).
A value lives here when two component modules need it and neither depends
on the other; everything else lives with its component.
"""

from __future__ import annotations

from modelplane.catalog.types import GpuNodes
from modelplane.pins import Stack
from modelplane.wire import ApiRef

BOTH = frozenset({Stack.STANDARD, Stack.DYNAMO})
STANDARD = frozenset({Stack.STANDARD})
DYNAMO = frozenset({Stack.DYNAMO})

# The namespace the product composes its own configuration in; trust-manager
# must watch it as its trust namespace.
MODELPLANE_NAMESPACE = "modelplane-system"

JETSTACK = "https://charts.jetstack.io"
ENVOY_OCI = "oci://docker.io/envoyproxy"

# The AI Gateway chart names its controller Deployment and Service after
# controller.fullnameOverride; Envoy Gateway's extension manager dials it.
AI_GATEWAY_NAMESPACE = "envoy-ai-gateway-system"
AI_GATEWAY_CONTROLLER = "ai-gateway-controller"
AI_GATEWAY_EXTENSION_PORT = 1063
AI_GATEWAY_FQDN = f"{AI_GATEWAY_CONTROLLER}.{AI_GATEWAY_NAMESPACE}.svc.cluster.local"

ENVOY_GATEWAY_NAMESPACE = "envoy-gateway-system"
NVIDIA_DRA_NAMESPACE = "nvidia-dra-driver"
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_DEVICE_CLASS = "gpu.nvidia.com"
SYSTEM_CRITICAL_CLASSES = ("system-node-critical", "system-cluster-critical")

INFERENCE_POOL = ApiRef("inference.networking.k8s.io", "v1", "inferencepools")

# What the advisory checks look for (upstream-facts §17). Workloads are found
# by image repository, whatever release, namespace or mirror runs them.
GPUS = GpuNodes(
    taint=GPU_TAINT_KEY,
    labels=(
        "nvidia.com/gpu.present",  # GPU Operator / GPU feature discovery
        "nvidia.com/gpu.product",
        "cloud.google.com/gke-accelerator",
        "k8s.amazonaws.com/accelerator",
    ),
    nfd_label_prefix="feature.node.kubernetes.io/pci-",
    pci_vendor="10de",
    resource="nvidia.com/gpu",
    driver=GPU_DEVICE_CLASS,
)
