"""trust-manager: publishes the gateway CA certificate, without its key, for the control plane."""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelplane.catalog.advisories import WorkloadArg, WorkloadsAvailable
from modelplane.catalog.components import cert_manager
from modelplane.catalog.components._common import BOTH, JETSTACK, MODELPLANE_NAMESPACE
from modelplane.catalog.types import ChartSource, Component, CRDServes, Values, Workloads

if TYPE_CHECKING:
    from modelplane.api.models import ServingStackSpec

# The simulated test cluster runs this version too (hack/build-controllers.sh reads it).
VERSION = "v0.25.0"

WORKLOADS = Workloads("trust-manager", ("jetstack/trust-manager",))


def _values(_spec: ServingStackSpec) -> Values:
    return {
        "crds": {"enabled": True, "keep": True},
        "app": {"trust": {"namespace": MODELPLANE_NAMESPACE}},
        # The default package only serves useDefaultCAs, which the gateway PKI
        # never uses; dropping it drops an init container and its image.
        "defaultPackage": {"enabled": False},
    }


COMPONENT = Component(
    name="trust-manager",
    summary="Publishes the gateway CA certificate, without its key, for the control plane.",
    namespace=MODELPLANE_NAMESPACE,
    version=VERSION,
    order=100,
    version_field="versions.trustManager",
    version_description="trust-manager chart version.",
    stacks=BOTH,
    chart=ChartSource("trust-manager", JETSTACK),
    values=_values,
    depends_on=(cert_manager.COMPONENT.name,),
    requirements=(
        CRDServes(
            "bundles.trust.cert-manager.io",
            "v1alpha1",
            "install trust-manager",
            "Bundle",
            namespaced=False,
        ),
    ),
    advisories=(
        WorkloadArg(
            WORKLOADS,
            "--trust-namespace",
            MODELPLANE_NAMESPACE,
            "cert-manager",
            f"set the chart value app.trust.namespace={MODELPLANE_NAMESPACE}",
        ),
        WorkloadsAvailable(WORKLOADS, "check the trust-manager Deployment"),
    ),
    not_checked=(
        f"trust-manager watches {MODELPLANE_NAMESPACE} as its trust namespace, where the gateway "
        "PKI composes its Bundle.",
    ),
)
