"""The Gateway API Inference Extension CRDs (InferencePool), applied from the upstream release."""

from __future__ import annotations

from modelplane.catalog.components._common import BOTH, INFERENCE_POOL
from modelplane.catalog.types import (
    Component,
    CRDServes,
    Disruption,
    DisruptionClass,
    ManifestSource,
)

# The Inference Extension release whose manifests carry InferencePool v1;
# upstream Modelplane vendors this one.
VERSION = "v1.0.1"

COMPONENT = Component(
    name="gaie-crds",
    summary="The Gateway API Inference Extension CRDs (InferencePool).",
    namespace="",
    version=VERSION,
    order=90,
    stacks=BOTH,
    disruptions=(
        Disruption(DisruptionClass.CONTROL, "updates the InferencePool CRDs; nothing restarts"),
    ),
    manifests=ManifestSource(
        "https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases/download",
        "{version}/manifests.yaml",
        # The v1.0.1 release's CRDs besides InferencePool v1 (upstream-facts §9).
        other_crds=(
            "inferencepools.inference.networking.x-k8s.io",
            "inferenceobjectives.inference.networking.x-k8s.io",
        ),
    ),
    requirements=(
        CRDServes(
            f"{INFERENCE_POOL.resource}.{INFERENCE_POOL.group}",
            INFERENCE_POOL.version,
            f"install the Gateway API Inference Extension CRDs ({VERSION} or newer)",
            "InferencePool",
        ),
    ),
)
