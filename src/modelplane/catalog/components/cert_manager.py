"""cert-manager: issues the gateway's certificates (upstream-facts §1)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelplane.catalog.advisories import WorkloadsAvailable
from modelplane.catalog.components._common import BOTH, JETSTACK
from modelplane.catalog.types import ChartSource, Component, CRDServes, Values, Workloads

if TYPE_CHECKING:
    from modelplane.api.models import ServingStackSpec

VERSION = "v1.20.2"

WORKLOADS = Workloads(
    "the cert-manager controller and webhook",
    ("jetstack/cert-manager-controller", "jetstack/cert-manager-webhook"),
)


def _values(_spec: ServingStackSpec) -> Values:
    # CRDs are kept on uninstall so finalizers on composed Certificates and
    # Issuers can still be released (upstream-facts §1).
    return {"crds": {"enabled": True}}


COMPONENT = Component(
    name="cert-manager",
    summary="Issues the gateway's certificates.",
    namespace="cert-manager",
    version=VERSION,
    order=10,
    version_field="versions.certManager",
    version_description="cert-manager chart version.",
    stacks=BOTH,
    chart=ChartSource("cert-manager", JETSTACK),
    values=_values,
    wait=True,
    requirements=(
        CRDServes("certificates.cert-manager.io", "v1", "install cert-manager", "Certificate"),
    ),
    advisories=(WorkloadsAvailable(WORKLOADS, "check the cert-manager Deployments' events"),),
    not_checked=("The cert-manager controller and webhook are running and issue Certificates.",),
)
