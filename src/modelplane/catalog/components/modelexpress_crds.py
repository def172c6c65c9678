"""The ModelExpress metadata CRDs its server stores peer state in (the product's own config)."""

from __future__ import annotations

from modelplane.catalog.components._common import DYNAMO
from modelplane.catalog.images import Images, ImageSite, ProductObject, PullSecrets
from modelplane.catalog.types import (
    Component,
    CRDServes,
    Disruption,
    DisruptionClass,
    ManifestSource,
)

# The ModelExpress release: the server's image tag and the tag its CRDs are read at.
VERSION = "0.4.1"

# The server the product runs itself (catalog.configuration). Engine pods
# reach it by this namespace; a contract with the workload composition.
SERVER_NAMESPACE = "default"
SERVER_REPOSITORY = "nvcr.io/nvidia/ai-dynamo/modelexpress-server"
# images.md §11 (ai-dynamo/modelexpress @ v0.4.1, helm/values.yaml image.repository).
# The repository's own references at v0.4.1 still say :0.4.0, so that
# :0.4.1 exists on nvcr.io is unconfirmed (open point 4).
SERVER = ImageSite(
    f"{SERVER_REPOSITORY}:{{version}}", ProductObject("the ModelExpress server Deployment")
)
IMAGES = Images(
    sites=(SERVER,),
    # Not a chart: the product puts them on its own Deployment, in the
    # server's namespace (the component itself has none).
    pull_secrets=PullSecrets((), namespaces=(SERVER_NAMESPACE,)),
)

COMPONENT = Component(
    name="modelexpress-crds",
    summary="The ModelExpress metadata CRDs its server stores peer state in.",
    namespace="",
    version=VERSION,
    order=140,
    version_field="dynamo.modelExpress",
    version_description="ModelExpress server image tag.",
    version_format="image",
    role="config",
    images=IMAGES,
    stacks=DYNAMO,
    disruptions=(
        Disruption(
            DisruptionClass.CONTROL, "updates the ModelExpress CRDs and restarts its server"
        ),
    ),
    # ModelExpress publishes no release asset for its CRDs; the tagged source
    # file is the upstream copy (upstream-facts §14).
    manifests=ManifestSource(
        "https://raw.githubusercontent.com/ai-dynamo/modelexpress",
        "v{version}/examples/crds.yaml",
        other_crds=("modelcacheentries.modelexpress.nvidia.com",),  # upstream-facts §14
    ),
    requirements=(
        CRDServes(
            "modelmetadatas.modelexpress.nvidia.com",
            "v1alpha1",
            "apply the ModelExpress CRDs",
            "ModelMetadata",
        ),
    ),
)
