"""trust-manager: publishes the gateway CA certificate, without its key, for the control plane."""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelplane.catalog.advisories import WorkloadArg, WorkloadsAvailable
from modelplane.catalog.components import cert_manager
from modelplane.catalog.components._common import BOTH, JETSTACK, MODELPLANE_NAMESPACE
from modelplane.catalog.images import Images, ImageSite, PullSecrets, Repository, Runs
from modelplane.catalog.types import (
    ChartSource,
    Component,
    CrdPlacement,
    CRDServes,
    Disruption,
    DisruptionClass,
    Values,
    ValuesRead,
    Workloads,
)

if TYPE_CHECKING:
    from modelplane.api.spec import ServingStackSpec

# The simulated test cluster runs this version too (hack/build-controllers.sh reads it).
VERSION = "v0.25.0"

WORKLOADS = Workloads("trust-manager", ("jetstack/trust-manager",))

# images.md §7 (cert-manager/trust-manager, read at v0.24.0 and main, whose
# chart is byte-identical; v0.25.0 was not among the tags read): cert-manager's
# image helper, a set repository used whole. The default package's tag is
# 20250419.1 in every commit read, 20250419.2 by one third-party quote of the
# v0.25.0 notes (open point 2); the product turns the package off.
IMAGES = Images(
    sites=(
        ImageSite("quay.io/jetstack/trust-manager:{version}", Repository("image.repository")),
        ImageSite(
            "quay.io/jetstack/trust-pkg-debian-trixie:20250419.1",
            Repository("defaultPackageImage.repository"),
            Runs.OFF,
            "defaultPackage.enabled (the product turns it off)",
        ),
    ),
    pull_secrets=PullSecrets(
        ("imagePullSecrets",),
        note="set on the ServiceAccount only, which the API server copies into each pod",
    ),
)


# What the chart reads at the pin, of what the product can set (images.md §7;
# the pinned v0.25.0 was built from the v0.24.0 chart sources,
# shared/fixtures/charts/README.md). No global.imagePullSecrets: global holds
# only rbac.
READS = ValuesRead(
    VERSION,
    (
        "crds.enabled",
        "crds.keep",
        "app.trust.namespace",
        "defaultPackage.enabled",
        "image.repository",
        "defaultPackageImage.repository",
        "imagePullSecrets",
    ),
)


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
    # Its chart's documented install, beside cert-manager (upstream-facts §10).
    also_installed_in=("cert-manager",),
    version=VERSION,
    order=100,
    version_field="versions.trustManager",
    version_description="trust-manager chart version.",
    stacks=BOTH,
    disruptions=(
        Disruption(
            DisruptionClass.CONTROL, "restarts trust-manager; the published CA bundle stays"
        ),
    ),
    chart=ChartSource("trust-manager", JETSTACK, crds=CrdPlacement.TEMPLATES, reads=(READS,)),
    values=_values,
    images=IMAGES,
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
