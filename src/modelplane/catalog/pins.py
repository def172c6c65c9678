"""Every version the product installs and tests against, written once.

The requirements document (the newer, main-branch one) decides where it and
the CRD reference disagree; see ../shared/spec/README.md. The API models take
their defaults from here, and so does the catalog.
"""

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
