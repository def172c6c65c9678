"""What a ServingStack chooses between, and every version it gets by default.

A leaf: the API models and the catalog both import it and it imports
neither, so neither of them has to import the other for a default.

The requirements document (the newer, main-branch one) decides where it and
the CRD reference disagree; see ../shared/spec/README.md.
"""

from enum import StrEnum


class Stack(StrEnum):
    STANDARD = "Standard"
    DYNAMO = "Dynamo"


class ComponentsMode(StrEnum):
    MANAGED = "Managed"
    PROVIDED = "Provided"


CERT_MANAGER = "v1.20.2"
KUBE_PROMETHEUS_STACK = "84.4.0"
NODE_FEATURE_DISCOVERY = "0.19.0"
NVIDIA_DRA_DRIVER = "0.4.1"
ENVOY_GATEWAY = "v1.8.4"
AI_GATEWAY = "v1.1.0"
# The Inference Extension release whose manifests carry InferencePool v1;
# upstream Modelplane vendors this one.
GATEWAY_API_INFERENCE_EXTENSION = "v1.0.1"
TRUST_MANAGER = "v0.25.0"
LEADER_WORKER_SET = "v0.8.0"
GROVE = "v0.1.0-alpha.12-rc2"
KAI_SCHEDULER = "v0.16.8"
MODEL_EXPRESS = "0.4.1"

# Not versions, but defaults the API shares with the catalog.
GATEWAY_CLASS_NAME = "envoy"
NVIDIA_DRIVER_ROOT = "/"
