"""The ModelExpress metadata CRDs its server stores peer state in (the product's own config)."""

from __future__ import annotations

from modelplane.catalog.components._common import DYNAMO
from modelplane.catalog.types import Component, CRDServes, ManifestSource

# The ModelExpress release: the server's image tag and the tag its CRDs are read at.
VERSION = "0.4.1"

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
    stacks=DYNAMO,
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
