"""A ResourceQuota admitting the DRA driver's system-critical pods where quota restricts them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelplane import pins
from modelplane.catalog.components import nvidia_dra_driver
from modelplane.catalog.components._common import (
    BOTH,
    NVIDIA_DRA_NAMESPACE,
    SYSTEM_CRITICAL_CLASSES,
)
from modelplane.catalog.types import (
    Component,
    Disruption,
    DisruptionClass,
)

if TYPE_CHECKING:
    from modelplane.api.spec import ServingStackSpec


def _needed(spec: ServingStackSpec) -> bool:
    # The spec ties the quota to a non-default driver root: that is how the
    # cluster composition says "GKE" without the stack inspecting its cloud.
    return spec.nvidia_driver_root != pins.NVIDIA_DRIVER_ROOT


def _objects(_spec: ServingStackSpec) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NVIDIA_DRA_NAMESPACE},
        },
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "allow-critical-pods", "namespace": NVIDIA_DRA_NAMESPACE},
            "spec": {
                "hard": {"pods": "1000"},
                "scopeSelector": {
                    "matchExpressions": [
                        {
                            "operator": "In",
                            "scopeName": "PriorityClass",
                            "values": list(SYSTEM_CRITICAL_CLASSES),
                        }
                    ]
                },
            },
        },
    ]


COMPONENT = Component(
    name="dra-driver-critical-pods-quota",
    summary="Admits the DRA driver's system-critical pods where quota restricts them (GKE).",
    namespace=NVIDIA_DRA_NAMESPACE,
    version=nvidia_dra_driver.VERSION,
    order=40,
    stacks=BOTH,
    disruptions=(Disruption(DisruptionClass.CONTROL, "updates a ResourceQuota; nothing restarts"),),
    objects=_objects,
    enabled=_needed,
    enabled_when="when `nvidiaDriverRoot` is not `/`",
    not_checked=(
        "On clusters that restrict system-node-critical pods by namespace quota (GKE does), the "
        "DRA driver's namespace needs a ResourceQuota admitting them.",
    ),
)
