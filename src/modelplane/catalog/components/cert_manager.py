"""cert-manager: issues the gateway's certificates (upstream-facts §1)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelplane.catalog.advisories import WorkloadsAvailable
from modelplane.catalog.components._common import BOTH, JETSTACK
from modelplane.catalog.images import Images, ImageSite, PullSecrets, Repository, Runs
from modelplane.catalog.types import (
    ChartSource,
    Component,
    CrdPlacement,
    CRDServes,
    Disruption,
    DisruptionClass,
    HelmHook,
    Values,
    ValuesRead,
    Workloads,
    release_name_of,
)

if TYPE_CHECKING:
    from modelplane.api.spec import ServingStackSpec

VERSION = "v1.20.2"

WORKLOADS = Workloads(
    "the cert-manager controller and webhook",
    ("jetstack/cert-manager-controller", "jetstack/cert-manager-webhook"),
)

# images.md §1 (cert-manager @ v1.20.2, deploy/charts/cert-manager/values.yaml,
# templates/_helpers.tpl "image"): a set <x>.image.repository is used whole,
# bypassing imageRegistry/imageNamespace, and the tag defaults to appVersion,
# which the release tool sets to the chart version.
IMAGES = Images(
    sites=(
        ImageSite(
            "quay.io/jetstack/cert-manager-controller:{version}", Repository("image.repository")
        ),
        ImageSite(
            "quay.io/jetstack/cert-manager-webhook:{version}",
            Repository("webhook.image.repository"),
        ),
        ImageSite(
            "quay.io/jetstack/cert-manager-cainjector:{version}",
            Repository("cainjector.image.repository"),
        ),
        ImageSite(
            "quay.io/jetstack/cert-manager-startupapicheck:{version}",
            Repository("startupapicheck.image.repository"),
            Runs.HOOK,
            "the post-install check Job",
        ),
        ImageSite(
            "quay.io/jetstack/cert-manager-acmesolver:{version}",
            Repository("acmesolver.image.repository"),
            Runs.RUNTIME,
            "started by the controller for an ACME HTTP-01 challenge (the product's own Issuers "
            "are not ACME); its pods pull with the Issuer's solver podTemplate imagePullSecrets, "
            "not the chart's",
        ),
    ),
    pull_secrets=PullSecrets(
        ("global.imagePullSecrets",),
        note="ACME HTTP-01 solver pods take theirs from the Issuer "
        "(spec.acme.solvers[].http01.*.podTemplate.spec.imagePullSecrets)",
    ),
)


# What the chart reads at the pin, of what the product can set: its fixed
# value, the image repositories and the one pull-secret list (images.md §1).
READS = ValuesRead(
    VERSION,
    (
        "crds.enabled",
        "image.repository",
        "webhook.image.repository",
        "cainjector.image.repository",
        "startupapicheck.image.repository",
        "acmesolver.image.repository",
        "global.imagePullSecrets",
    ),
)


# The startupapicheck Job and its RBAC, run after an install and deleted once
# it succeeds (templates/startupapicheck-{job,rbac,serviceaccount}.yaml).
_CHART = "cert-manager"
_STARTUPAPICHECK = f"{release_name_of(_CHART)}-startupapicheck"
_AFTER_INSTALL = ("post-install",)
_UNLESS_FAILED = ("before-hook-creation", "hook-succeeded")
HOOKS = (
    HelmHook("v1", "ServiceAccount", _STARTUPAPICHECK, True, _AFTER_INSTALL, _UNLESS_FAILED),
    *(
        HelmHook(
            "rbac.authorization.k8s.io/v1",
            kind,
            f"{_STARTUPAPICHECK}:create-cert",
            True,
            _AFTER_INSTALL,
            _UNLESS_FAILED,
        )
        for kind in ("Role", "RoleBinding")
    ),
    HelmHook("batch/v1", "Job", _STARTUPAPICHECK, True, _AFTER_INSTALL, _UNLESS_FAILED),
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
    disruptions=(
        Disruption(
            DisruptionClass.CONTROL,
            "restarts cert-manager's controller, webhook and cainjector; issued certificates "
            "keep serving",
        ),
    ),
    chart=ChartSource(_CHART, JETSTACK, crds=CrdPlacement.TEMPLATES, reads=(READS,), hooks=HOOKS),
    values=_values,
    images=IMAGES,
    wait=True,
    requirements=(
        CRDServes("certificates.cert-manager.io", "v1", "install cert-manager", "Certificate"),
    ),
    advisories=(WorkloadsAvailable(WORKLOADS, "check the cert-manager Deployments' events"),),
    not_checked=("The cert-manager controller and webhook are running and issue Certificates.",),
)
