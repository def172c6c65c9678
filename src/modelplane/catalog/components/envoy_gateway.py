"""Envoy Gateway: the Gateway API implementation, wired to the AI Gateway's extension server."""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelplane.catalog.advisories import ConfigFileWired, ImageTag, WorkloadsAvailable
from modelplane.catalog.components import cert_manager
from modelplane.catalog.components._common import (
    AI_GATEWAY_EXTENSION_PORT,
    AI_GATEWAY_FQDN,
    BOTH,
    ENVOY_GATEWAY_NAMESPACE,
    ENVOY_OCI,
    INFERENCE_POOL,
)
from modelplane.catalog.images import (
    Images,
    ImageSite,
    ProductObject,
    PullSecrets,
    Reference,
    Runs,
)
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
    VersionRange,
    Workloads,
    release_name_of,
)

if TYPE_CHECKING:
    from modelplane.api.spec import ServingStackSpec

VERSION = "v1.8.4"

WORKLOADS = Workloads("the Envoy Gateway controller", ("envoyproxy/gateway",))

_GATEWAY_API_FIX = "install the Gateway API v1.5 CRDs (Envoy Gateway v1.8 ships them)"
_ENVOY_GATEWAY_FIX = "install the Envoy Gateway v1.8 CRDs"

# images.md §5 (envoyproxy/gateway, read at v1.8.3 and the release/v1.8 tip:
# charts/gateway-helm/values.tmpl.yaml, _helpers.tpl, api/v1alpha1/shared_types.go,
# internal/gatewayapi/envoyproxy_merge.go). The gateway image is a whole
# reference, and serves the controller, the certgen hook Job and the
# shutdown-manager sidecar of every proxy pod.
#
# The proxy image is chosen by the controller. The product's EnvoyProxy sets
# no mergeType, so it replaces Envoy Gateway's default EnvoyProxy spec (nil
# means Replace) and the chart's global.images.envoyProxy would be dropped:
# the image and its pull secrets go into that EnvoyProxy (catalog.configuration).
# Its tag is DefaultEnvoyProxyImage as read at v1.8.3; v1.8.4 was not among the
# tags read (images.md, open point 1), so a v1.8.4 bump of Envoy would leave
# this one tag behind.
ENVOY_PROXY = ImageSite(
    "docker.io/envoyproxy/envoy:distroless-v1.38.3",
    ProductObject("the EnvoyProxy's envoyDeployment.container.image"),
    Runs.RUNTIME,
    "the proxy pods the controller starts for the Gateway (tag read at v1.8.3)",
)
IMAGES = Images(
    sites=(
        ImageSite(
            "docker.io/envoyproxy/gateway:{version}",
            Reference("global.images.envoyGateway.image"),
            note="also the certgen hook Job and each proxy pod's shutdown-manager sidecar",
        ),
        ENVOY_PROXY,
        ImageSite(
            "docker.io/envoyproxy/ratelimit:1e50889b",
            Reference("global.images.ratelimit.image"),
            Runs.OFF,
            "global rate limiting (config.envoyGateway.rateLimit)",
        ),
    ),
    # global.imagePullSecrets wins over the per-image lists for the controller,
    # certgen and ratelimit; the proxy pods pull with the EnvoyProxy's.
    pull_secrets=PullSecrets(
        ("global.imagePullSecrets",),
        note="the proxy pods pull with the EnvoyProxy's envoyDeployment.pod.imagePullSecrets",
    ),
)


# What the chart reads at the pin, of what the product can set (images.md §5).
# config.envoyGateway is read whole: the chart renders it as the EnvoyGateway
# document of the envoy-gateway-config ConfigMap, so extensionManager, which
# its values.yaml does not list, reaches the controller all the same.
READS = ValuesRead(
    VERSION,
    (
        "config.envoyGateway",
        "global.images.envoyGateway.image",
        "global.images.ratelimit.image",
        "global.imagePullSecrets",
    ),
)


# The certgen Job, its RBAC and the topology injector's webhook configuration
# (templates/certgen.yaml, certgen-rbac.yaml, envoy-proxy-topology-injector-webhook.yaml),
# made before each install and upgrade. They carry no delete policy, so Helm
# deletes one only before making it again: every one outlives the release.
_CHART = "gateway-helm"
_CERTGEN = f"{release_name_of(_CHART)}-certgen"
_BEFORE = ("pre-install", "pre-upgrade")
_RBAC = "rbac.authorization.k8s.io/v1"
HOOKS = (
    HelmHook("v1", "ServiceAccount", _CERTGEN, True, _BEFORE),
    HelmHook(_RBAC, "ClusterRole", f"{_CERTGEN}:{ENVOY_GATEWAY_NAMESPACE}", False, _BEFORE),
    HelmHook(_RBAC, "ClusterRoleBinding", f"{_CERTGEN}:{ENVOY_GATEWAY_NAMESPACE}", False, _BEFORE),
    HelmHook(_RBAC, "Role", _CERTGEN, True, _BEFORE),
    HelmHook(_RBAC, "RoleBinding", _CERTGEN, True, _BEFORE),
    HelmHook("batch/v1", "Job", _CERTGEN, True, _BEFORE),
    HelmHook(
        "admissionregistration.k8s.io/v1",
        "MutatingWebhookConfiguration",
        f"envoy-gateway-topology-injector.{ENVOY_GATEWAY_NAMESPACE}",
        False,
        _BEFORE,
    ),
)


def _values(_spec: ServingStackSpec) -> Values:
    # The one coupling no check can verify: without this wiring, HTTPRoutes to
    # an InferencePool never route while every component looks healthy.
    return {
        "config": {
            "envoyGateway": {
                "extensionApis": {"enableBackend": True},
                "extensionManager": {
                    "hooks": {
                        "xdsTranslator": {
                            "translation": {
                                "listener": {"includeAll": True},
                                "route": {"includeAll": True},
                                "cluster": {"includeAll": True},
                                "secret": {"includeAll": True},
                            },
                            "post": ["Translation", "Cluster", "Route"],
                        }
                    },
                    "service": {
                        "fqdn": {"hostname": AI_GATEWAY_FQDN, "port": AI_GATEWAY_EXTENSION_PORT}
                    },
                    "backendResources": [
                        {
                            "group": INFERENCE_POOL.group,
                            "kind": "InferencePool",
                            "version": INFERENCE_POOL.version,
                        }
                    ],
                },
            }
        }
    }


def _config(spec: ServingStackSpec) -> Values:
    # The EnvoyGateway document the chart renders from config.envoyGateway.
    config: Values = _values(spec)["config"]["envoyGateway"]
    return config


COMPONENT = Component(
    name="envoy-gateway",
    summary="The Gateway API implementation, wired to the AI Gateway's extension server.",
    namespace=ENVOY_GATEWAY_NAMESPACE,
    version=VERSION,
    order=60,
    version_field="versions.envoyGateway",
    version_description="Envoy Gateway chart version. Must support InferencePool backend "
    "resources (v1.8.x); v1.9.x is out of range until the AI Gateway pairs with it.",
    # ServingStack reference, versions.envoyGateway: v1.8 is the first with
    # InferencePool backend resources, and the AI Gateway v1.1 line is tested
    # against Envoy Gateway v1.8.x only.
    supported=VersionRange(
        "v1.8.0",
        "v1.9.0",
        "Envoy AI Gateway v1.1 is tested against Envoy Gateway v1.8.x with Gateway API v1.5.x, "
        "so v1.9.x waits for the AI Gateway release that pairs with it, and releases before "
        "v1.8 cannot route to an InferencePool",
    ),
    stacks=BOTH,
    disruptions=(
        Disruption(
            DisruptionClass.TRAFFIC,
            "rolls the Envoy proxies that carry the Gateway's traffic (a new version brings a "
            "new proxy image)",
        ),
        Disruption(DisruptionClass.CONTROL, "restarts the Envoy Gateway controller"),
    ),
    chart=ChartSource(
        _CHART,
        ENVOY_OCI,
        crds=CrdPlacement.SUBCHART,
        # The experimental channel's XBackendTrafficPolicy and XMesh.
        crd_groups=("gateway.networking.x-k8s.io",),
        reads=(READS,),
        hooks=HOOKS,
    ),
    values=_values,
    images=IMAGES,
    depends_on=(cert_manager.COMPONENT.name,),
    wait=True,
    requirements=(
        CRDServes(
            "gatewayclasses.gateway.networking.k8s.io",
            "v1",
            _GATEWAY_API_FIX,
            "GatewayClass",
            namespaced=False,
        ),
        CRDServes("gateways.gateway.networking.k8s.io", "v1", _GATEWAY_API_FIX, "Gateway"),
        CRDServes("httproutes.gateway.networking.k8s.io", "v1", _GATEWAY_API_FIX, "HTTPRoute"),
        CRDServes(
            "envoyproxies.gateway.envoyproxy.io", "v1alpha1", _ENVOY_GATEWAY_FIX, "EnvoyProxy"
        ),
        CRDServes("backends.gateway.envoyproxy.io", "v1alpha1", _ENVOY_GATEWAY_FIX, "Backend"),
        CRDServes(
            "clienttrafficpolicies.gateway.envoyproxy.io",
            "v1alpha1",
            _ENVOY_GATEWAY_FIX,
            "ClientTrafficPolicy",
        ),
    ),
    advisories=(
        ConfigFileWired(
            "Envoy Gateway's extensionManager is wired to the AI Gateway",
            "envoy-gateway-config",
            "envoy-gateway.yaml",
            _config,
            "install Envoy Gateway with the extensionApis and extensionManager values the "
            "requirements page lists",
            # The spec says "wired exactly as the values above". extensionManager
            # is the contract with the AI Gateway's extension server, so all of it
            # is exact: another hook order or another post list, an extra
            # backendResource, extra resources sent to the extension, or
            # failOpen: true (a failing hook then skips the AI Gateway's changes
            # instead of stopping the update) each change what routes. Other
            # extensionApis are the owner's business: the AI Gateway's own
            # values also enable EnvoyPatchPolicy (upstream-facts §7).
            exact=("extensionManager",),
            # ExtensionManager.failOpen defaults to false (upstream-facts §7).
            unset_means=(("extensionManager.failOpen", False),),
        ),
        WorkloadsAvailable(WORKLOADS, "check the envoy-gateway Deployment's events"),
        # The image tag is the chart version (gateway-helm sets it from appVersion).
        ImageTag(
            WORKLOADS,
            f"install Envoy Gateway {VERSION} (Managed mode pins it)",
            exact=False,
        ),
    ),
    not_checked=(
        "The Envoy Gateway controller runs with the extensionManager wired exactly as the values "
        "below: external processing delegated to the AI Gateway controller's Service, the Backend "
        "API enabled and InferencePool declared a backend resource.",
    ),
)
