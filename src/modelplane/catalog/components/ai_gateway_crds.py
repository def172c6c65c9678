"""The Envoy AI Gateway CRDs, a chart of their own that moves with the controller."""

from __future__ import annotations

from modelplane.catalog.components._common import AI_GATEWAY_NAMESPACE, BOTH, ENVOY_OCI
from modelplane.catalog.types import (
    ChartSource,
    Component,
    CrdPlacement,
    CRDServes,
    Disruption,
    DisruptionClass,
    ValuesRead,
)

# The AI Gateway release: these CRDs and the controller (ai_gateway) share it.
VERSION = "v1.1.0"

# The product sets no value of this chart: at the pin, anything it would set
# is refused.
READS = ValuesRead(VERSION, ())

COMPONENT = Component(
    name="ai-gateway-crds",
    summary="The Envoy AI Gateway CRDs.",
    namespace=AI_GATEWAY_NAMESPACE,
    version=VERSION,
    order=70,
    stacks=BOTH,
    disruptions=(
        Disruption(DisruptionClass.CONTROL, "updates the AI Gateway CRDs; nothing restarts"),
    ),
    chart=ChartSource(
        "ai-gateway-crds-helm", ENVOY_OCI, crds=CrdPlacement.TEMPLATES, reads=(READS,)
    ),
    wait=True,
    requirements=(
        CRDServes(
            "aigatewayroutes.aigateway.envoyproxy.io",
            "v1alpha1",
            f"install the Envoy AI Gateway {VERSION} CRDs",
            "AIGatewayRoute",
        ),
    ),
    not_checked=(
        "The AI Gateway APIs are v1alpha1 and move with the controller. A provided install "
        f"tracks the pinned {VERSION} release.",
    ),
)
