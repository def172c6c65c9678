"""The Envoy AI Gateway controller, Envoy Gateway's extension server."""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelplane.catalog.advisories import ServicePort, WorkloadsAvailable
from modelplane.catalog.components import ai_gateway_crds, envoy_gateway
from modelplane.catalog.components._common import (
    AI_GATEWAY_CONTROLLER,
    AI_GATEWAY_EXTENSION_PORT,
    AI_GATEWAY_FQDN,
    AI_GATEWAY_NAMESPACE,
    BOTH,
    ENVOY_GATEWAY_NAMESPACE,
    ENVOY_OCI,
)
from modelplane.catalog.images import Images, ImageSite, PullSecrets, Repository, Runs
from modelplane.catalog.types import (
    ChartSource,
    Component,
    Disruption,
    DisruptionClass,
    Values,
    ValuesRead,
    Workloads,
)

if TYPE_CHECKING:
    from modelplane.api.spec import ServingStackSpec

VERSION = ai_gateway_crds.VERSION

WORKLOADS = Workloads("the AI Gateway controller", ("envoyproxy/ai-gateway-controller",))

# images.md §6 (envoyproxy/ai-gateway @ v1.1.0, manifests/charts/ai-gateway-helm/
# values.yaml, templates/deployment.yaml, _helpers.tpl): no registry value.
# extProc is a controller flag (--extProcImage); its webhook injects it into
# Envoy Gateway's proxy pods, which pull it with --extProcImagePullSecrets,
# so those Secrets must be in Envoy Gateway's namespace too.
IMAGES = Images(
    sites=(
        ImageSite(
            "docker.io/envoyproxy/ai-gateway-controller:{version}",
            Repository("controller.image.repository"),
        ),
        ImageSite(
            "docker.io/envoyproxy/ai-gateway-extproc:{version}",
            Repository("extProc.image.repository"),
            Runs.RUNTIME,
            f"a sidecar the controller injects into the proxy pods in {ENVOY_GATEWAY_NAMESPACE}",
        ),
    ),
    # Each wins over global.imagePullSecrets for its own pods.
    pull_secrets=PullSecrets(
        ("controller.imagePullSecrets", "extProc.imagePullSecrets"),
        namespaces=(ENVOY_GATEWAY_NAMESPACE,),
    ),
)


# What the chart reads at the pin, of what the product can set: its fixed
# values and images.md §6 (global.imagePullSecrets is only a fallback).
READS = ValuesRead(
    VERSION,
    (
        "controller.fullnameOverride",
        "envoyGateway.namespace",
        "controller.image.repository",
        "extProc.image.repository",
        "controller.imagePullSecrets",
        "extProc.imagePullSecrets",
    ),
)


def _values(_spec: ServingStackSpec) -> Values:
    # Pin the controller's name so its Service answers at AI_GATEWAY_FQDN, and
    # bind InferencePool read access to Envoy Gateway's own namespace.
    return {
        "controller": {"fullnameOverride": AI_GATEWAY_CONTROLLER},
        "envoyGateway": {"namespace": ENVOY_GATEWAY_NAMESPACE},
    }


COMPONENT = Component(
    name="ai-gateway",
    summary="The Envoy AI Gateway controller, Envoy Gateway's extension server.",
    namespace=AI_GATEWAY_NAMESPACE,
    version=VERSION,
    order=80,
    stacks=BOTH,
    # Not traffic: its upgrade rolls no proxy (their external processor is
    # injected when a proxy pod is created).
    disruptions=(
        Disruption(
            DisruptionClass.CONTROL,
            "restarts the AI Gateway controller, Envoy Gateway's extension server: route "
            "changes wait for it, and running proxies keep the external processor it injected "
            "until they next roll",
        ),
    ),
    chart=ChartSource("ai-gateway-helm", ENVOY_OCI, reads=(READS,)),
    values=_values,
    images=IMAGES,
    depends_on=(ai_gateway_crds.COMPONENT.name, envoy_gateway.COMPONENT.name),
    advisories=(
        ServicePort(
            AI_GATEWAY_NAMESPACE,
            AI_GATEWAY_CONTROLLER,
            AI_GATEWAY_EXTENSION_PORT,
            f"install the AI Gateway chart into {AI_GATEWAY_NAMESPACE} with "
            f"controller.fullnameOverride={AI_GATEWAY_CONTROLLER}",
        ),
        WorkloadsAvailable(WORKLOADS, "check the ai-gateway-controller Deployment"),
    ),
    not_checked=(
        f"The AI Gateway controller is reachable at {AI_GATEWAY_FQDN}:{AI_GATEWAY_EXTENSION_PORT}, "
        "the address the Envoy Gateway extensionManager values point at.",
    ),
)
