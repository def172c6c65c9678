"""The catalog: every substrate component of both stacks, as one table.

Facts and their sources are in ../shared/docs/upstream-facts.md (section per
component); the values the spec states are in the requirements document.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelplane import pins
from modelplane.catalog.advisories import (
    ConfigFileWired,
    CriticalPodsAdmitted,
    GpuNodesLabelled,
    GpuNodesPublishSlices,
    ImageTag,
    NoNodeAdvertises,
    SchedulerName,
    SelectsEverything,
    ServicePort,
    WorkloadArg,
    WorkloadsAvailable,
)
from modelplane.catalog.types import (
    ChartSource,
    Component,
    CRDServes,
    GpuNodes,
    ManifestSource,
    ObjectExists,
    Values,
    VersionRange,
    Workloads,
)
from modelplane.pins import Stack
from modelplane.wire import ApiRef

if TYPE_CHECKING:
    from modelplane.api.models import ServingStackSpec

BOTH = frozenset({Stack.STANDARD, Stack.DYNAMO})
STANDARD = frozenset({Stack.STANDARD})
DYNAMO = frozenset({Stack.DYNAMO})

# The namespace the product composes its own configuration in; trust-manager
# must watch it as its trust namespace.
MODELPLANE_NAMESPACE = "modelplane-system"

JETSTACK = "https://charts.jetstack.io"
ENVOY_OCI = "oci://docker.io/envoyproxy"

# The AI Gateway chart names its controller Deployment and Service after
# controller.fullnameOverride; Envoy Gateway's extension manager dials it.
AI_GATEWAY_NAMESPACE = "envoy-ai-gateway-system"
AI_GATEWAY_CONTROLLER = "ai-gateway-controller"
AI_GATEWAY_EXTENSION_PORT = 1063
AI_GATEWAY_FQDN = f"{AI_GATEWAY_CONTROLLER}.{AI_GATEWAY_NAMESPACE}.svc.cluster.local"

ENVOY_GATEWAY_NAMESPACE = "envoy-gateway-system"
NVIDIA_DRA_NAMESPACE = "nvidia-dra-driver"
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_DEVICE_CLASS = "gpu.nvidia.com"
SYSTEM_CRITICAL_CLASSES = ("system-node-critical", "system-cluster-critical")


def _cert_manager_values(_spec: ServingStackSpec) -> Values:
    # CRDs are kept on uninstall so finalizers on composed Certificates and
    # Issuers can still be released (upstream-facts §1).
    return {"crds": {"enabled": True}}


ENVOY_PROXY_STATS_PORT = 19001


def _prometheus_values(_spec: ServingStackSpec) -> Values:
    # Modelplane's scrape targets are PodMonitors in workload namespaces: the
    # chart's default release-label selector never matches them.
    return {
        "fullnameOverride": "prometheus",
        "grafana": {"enabled": False},
        "alertmanager": {"enabled": False},
        "prometheus": {
            "prometheusSpec": {
                "podMonitorSelectorNilUsesHelmValues": False,
                "podMonitorNamespaceSelector": {},
                "additionalScrapeConfigs": [
                    {
                        "job_name": "envoy-gateway-proxy",
                        "metrics_path": "/stats/prometheus",
                        "kubernetes_sd_configs": [{"role": "pod"}],
                        "relabel_configs": [
                            {
                                "action": "keep",
                                "source_labels": [
                                    "__meta_kubernetes_pod_label_app_kubernetes_io_component",
                                    "__meta_kubernetes_pod_label_app_kubernetes_io_managed_by",
                                ],
                                "regex": "proxy;envoy-gateway",
                            },
                            {
                                "action": "keep",
                                "source_labels": ["__meta_kubernetes_pod_container_port_number"],
                                "regex": str(ENVOY_PROXY_STATS_PORT),
                            },
                        ],
                    }
                ],
            }
        },
    }


def _nfd_values(_spec: ServingStackSpec) -> Values:
    # Without the toleration the worker never labels tainted GPU nodes, the
    # DRA kubelet plugin never schedules there, and claims stay pending.
    return {
        "worker": {
            "tolerations": [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
        }
    }


def _dra_driver_values(spec: ServingStackSpec) -> Values:
    # gpuResourcesEnabledOverride acknowledges the chart's guard against a
    # co-existing device plugin; without it the chart refuses to render.
    values: Values = {
        "gpuResourcesEnabledOverride": True,
        "resources": {"computeDomains": {"enabled": False}},
    }
    if spec.nvidia_driver_root != pins.NVIDIA_DRIVER_ROOT:
        values["nvidiaDriverRoot"] = spec.nvidia_driver_root
    return values


def _needs_critical_pods_quota(spec: ServingStackSpec) -> bool:
    # The spec ties the quota to a non-default driver root: that is how the
    # cluster composition says "GKE" without the stack inspecting its cloud.
    return spec.nvidia_driver_root != pins.NVIDIA_DRIVER_ROOT


def _critical_pods_quota(_spec: ServingStackSpec) -> list[dict[str, Any]]:
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


def _envoy_gateway_values(_spec: ServingStackSpec) -> Values:
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


def _ai_gateway_values(_spec: ServingStackSpec) -> Values:
    # Pin the controller's name so its Service answers at AI_GATEWAY_FQDN, and
    # bind InferencePool read access to Envoy Gateway's own namespace.
    return {
        "controller": {"fullnameOverride": AI_GATEWAY_CONTROLLER},
        "envoyGateway": {"namespace": ENVOY_GATEWAY_NAMESPACE},
    }


def _trust_manager_values(_spec: ServingStackSpec) -> Values:
    return {
        "crds": {"enabled": True, "keep": True},
        "app": {"trust": {"namespace": MODELPLANE_NAMESPACE}},
        # The default package only serves useDefaultCAs, which the gateway PKI
        # never uses; dropping it drops an init container and its image.
        "defaultPackage": {"enabled": False},
    }


INFERENCE_POOL = ApiRef("inference.networking.k8s.io", "v1", "inferencepools")

# What the advisory checks look for (upstream-facts §17). Workloads are found
# by image repository, whatever release, namespace or mirror runs them.
GPUS = GpuNodes(
    taint=GPU_TAINT_KEY,
    labels=(
        "nvidia.com/gpu.present",  # GPU Operator / GPU feature discovery
        "nvidia.com/gpu.product",
        "cloud.google.com/gke-accelerator",
        "k8s.amazonaws.com/accelerator",
    ),
    nfd_label_prefix="feature.node.kubernetes.io/pci-",
    pci_vendor="10de",
    resource="nvidia.com/gpu",
    driver=GPU_DEVICE_CLASS,
)
CERT_MANAGER_WORKLOADS = Workloads(
    "the cert-manager controller and webhook",
    ("jetstack/cert-manager-controller", "jetstack/cert-manager-webhook"),
)
PROMETHEUS_OPERATOR_WORKLOADS = Workloads(
    "the Prometheus Operator", ("prometheus-operator/prometheus-operator",)
)
NFD_WORKLOADS = Workloads("the NFD master", ("nfd/node-feature-discovery",))
DRA_KUBELET_PLUGIN = Workloads(
    "the DRA driver",
    ("dra-driver-nvidia/dra-driver-nvidia-gpu", "nvidia/k8s-dra-driver-gpu"),
    kinds=("DaemonSet",),
)
ENVOY_GATEWAY_WORKLOADS = Workloads("the Envoy Gateway controller", ("envoyproxy/gateway",))
AI_GATEWAY_WORKLOADS = Workloads("the AI Gateway controller", ("envoyproxy/ai-gateway-controller",))
TRUST_MANAGER_WORKLOADS = Workloads("trust-manager", ("jetstack/trust-manager",))
LWS_WORKLOADS = Workloads("the LeaderWorkerSet controller", ("lws/lws",))
KAI_WORKLOADS = Workloads(
    "the KAI operator and scheduler", ("kai-scheduler/operator", "kai-scheduler/scheduler")
)
KAI_SCHEDULER_WORKLOADS = Workloads("the KAI scheduler", ("kai-scheduler/scheduler",))
GROVE_WORKLOADS = Workloads("the Grove operator", ("grove/grove-operator",))
KAI_SCHEDULER_NAME = "kai-scheduler"
PROMETHEUS = ApiRef("monitoring.coreos.com", "v1", "prometheuses")


def _envoy_gateway_config(spec: ServingStackSpec) -> Values:
    # The EnvoyGateway document the chart renders from config.envoyGateway.
    config: Values = _envoy_gateway_values(spec)["config"]["envoyGateway"]
    return config


_GATEWAY_API_FIX = "install the Gateway API v1.5 CRDs (Envoy Gateway v1.8 ships them)"
_ENVOY_GATEWAY_FIX = "install the Envoy Gateway v1.8 CRDs"

CERT_MANAGER = Component(
    name="cert-manager",
    summary="Issues the gateway's certificates.",
    namespace="cert-manager",
    version=pins.CERT_MANAGER,
    version_field="versions.certManager",
    stacks=BOTH,
    chart=ChartSource("cert-manager", JETSTACK),
    values=_cert_manager_values,
    wait=True,
    requirements=(CRDServes("certificates.cert-manager.io", "v1", "install cert-manager"),),
    advisories=(
        WorkloadsAvailable(CERT_MANAGER_WORKLOADS, "check the cert-manager Deployments' events"),
    ),
    not_checked=("The cert-manager controller and webhook are running and issue Certificates.",),
)

KUBE_PROMETHEUS_STACK = Component(
    name="kube-prometheus-stack",
    summary="Prometheus and its operator, scraping PodMonitors in every namespace.",
    namespace="monitoring",
    version=pins.KUBE_PROMETHEUS_STACK,
    version_field="versions.prometheus",
    stacks=BOTH,
    chart=ChartSource(
        "kube-prometheus-stack", "https://prometheus-community.github.io/helm-charts"
    ),
    values=_prometheus_values,
    requirements=(
        CRDServes(
            "podmonitors.monitoring.coreos.com", "v1", "install the Prometheus Operator CRDs"
        ),
        CRDServes(
            "servicemonitors.monitoring.coreos.com", "v1", "install the Prometheus Operator CRDs"
        ),
    ),
    advisories=(
        SelectsEverything(
            PROMETHEUS,
            "Prometheus",
            ("podMonitorSelector", "podMonitorNamespaceSelector"),
            "Prometheus selects PodMonitors in every namespace",
            "set prometheus.prometheusSpec.podMonitorSelectorNilUsesHelmValues to false and "
            "podMonitorNamespaceSelector to {}",
        ),
        WorkloadsAvailable(
            PROMETHEUS_OPERATOR_WORKLOADS, "check the Prometheus Operator Deployment's events"
        ),
    ),
    not_checked=(
        "Prometheus discovers PodMonitor objects in every namespace: with the chart, set "
        "podMonitorSelectorNilUsesHelmValues to false and podMonitorNamespaceSelector to empty.",
        "A scrape job for the Envoy Gateway proxy pods' stats endpoint, for proxy-level "
        "request metrics.",
    ),
    not_needed=("Grafana and Alertmanager are disabled.",),
)

NODE_FEATURE_DISCOVERY = Component(
    name="node-feature-discovery",
    summary="Labels GPU nodes so the DRA driver's kubelet plugin targets them.",
    namespace="node-feature-discovery",
    version=pins.NODE_FEATURE_DISCOVERY,
    version_field="versions.nodeFeatureDiscovery",
    stacks=BOTH,
    chart=ChartSource(
        "node-feature-discovery", "https://kubernetes-sigs.github.io/node-feature-discovery/charts"
    ),
    values=_nfd_values,
    requirements=(
        CRDServes("nodefeatures.nfd.k8s-sigs.io", "v1alpha1", "install node-feature-discovery"),
    ),
    advisories=(
        GpuNodesLabelled(
            GPUS,
            f"run the NFD worker on every GPU node, tolerating the {GPU_TAINT_KEY} taint",
        ),
        WorkloadsAvailable(NFD_WORKLOADS, "check the NFD master Deployment's events"),
    ),
    not_checked=(
        "The NFD worker runs on the GPU nodes, tolerating their taint, and labels them with "
        "feature.node.kubernetes.io/pci-10de and friends.",
    ),
)

DRA_CRITICAL_PODS_QUOTA = Component(
    name="dra-driver-critical-pods-quota",
    summary="Admits the DRA driver's system-critical pods where quota restricts them (GKE).",
    namespace=NVIDIA_DRA_NAMESPACE,
    version=pins.NVIDIA_DRA_DRIVER,
    stacks=BOTH,
    objects=_critical_pods_quota,
    enabled=_needs_critical_pods_quota,
    not_checked=(
        "On clusters that restrict system-node-critical pods by namespace quota (GKE does), the "
        "DRA driver's namespace needs a ResourceQuota admitting them.",
    ),
)

NVIDIA_DRA_DRIVER = Component(
    name="nvidia-dra-driver-gpu",
    summary="Publishes GPUs as DRA ResourceSlices and the gpu.nvidia.com DeviceClass.",
    namespace=NVIDIA_DRA_NAMESPACE,
    version=pins.NVIDIA_DRA_DRIVER,
    version_field="versions.nvidiaDraDriver",
    stacks=BOTH,
    chart=ChartSource("dra-driver-nvidia-gpu", "oci://registry.k8s.io/dra-driver-nvidia/charts"),
    values=_dra_driver_values,
    depends_on=(DRA_CRITICAL_PODS_QUOTA.name,),
    requirements=(
        ObjectExists(
            ApiRef("resource.k8s.io", "v1", "deviceclasses"),
            "DeviceClass",
            GPU_DEVICE_CLASS,
            "install the NVIDIA DRA driver for GPUs (Kubernetes 1.34+ serves resource.k8s.io/v1)",
        ),
    ),
    advisories=(
        NoNodeAdvertises(
            GPUS,
            "disable the NVIDIA device plugin (GPU Operator: devicePlugin.enabled=false); DRA "
            "allocates the GPUs",
        ),
        GpuNodesPublishSlices(
            GPUS,
            "check that the DRA driver's kubelet plugin runs on the node (NVIDIA driver, NFD "
            "labels, tolerations)",
        ),
        CriticalPodsAdmitted(
            DRA_KUBELET_PLUGIN,
            SYSTEM_CRITICAL_CLASSES,
            "kube-system",
            "create a ResourceQuota scoped to PriorityClass system-node-critical and "
            "system-cluster-critical in the driver's namespace",
        ),
    ),
    not_checked=(
        "The NVIDIA kernel driver and Container Toolkit on every GPU node.",
        "The driver's kubelet plugin publishes each GPU node's devices as ResourceSlices.",
        "No device plugin advertising nvidia.com/gpu: a second allocator would hand out the "
        "same GPUs behind DRA's back.",
    ),
    not_needed=("ComputeDomains (multi-node NVLink) and their prerequisites are disabled.",),
)

ENVOY_GATEWAY = Component(
    name="envoy-gateway",
    summary="The Gateway API implementation, wired to the AI Gateway's extension server.",
    namespace=ENVOY_GATEWAY_NAMESPACE,
    version=pins.ENVOY_GATEWAY,
    version_field="versions.envoyGateway",
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
    chart=ChartSource("gateway-helm", ENVOY_OCI),
    values=_envoy_gateway_values,
    depends_on=(CERT_MANAGER.name,),
    wait=True,
    requirements=(
        CRDServes("gatewayclasses.gateway.networking.k8s.io", "v1", _GATEWAY_API_FIX),
        CRDServes("gateways.gateway.networking.k8s.io", "v1", _GATEWAY_API_FIX),
        CRDServes("httproutes.gateway.networking.k8s.io", "v1", _GATEWAY_API_FIX),
        CRDServes("envoyproxies.gateway.envoyproxy.io", "v1alpha1", _ENVOY_GATEWAY_FIX),
        CRDServes("backends.gateway.envoyproxy.io", "v1alpha1", _ENVOY_GATEWAY_FIX),
        CRDServes("clienttrafficpolicies.gateway.envoyproxy.io", "v1alpha1", _ENVOY_GATEWAY_FIX),
    ),
    advisories=(
        ConfigFileWired(
            "Envoy Gateway's extensionManager is wired to the AI Gateway",
            "envoy-gateway-config",
            "envoy-gateway.yaml",
            _envoy_gateway_config,
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
        WorkloadsAvailable(ENVOY_GATEWAY_WORKLOADS, "check the envoy-gateway Deployment's events"),
        # The image tag is the chart version (gateway-helm sets it from appVersion).
        ImageTag(
            ENVOY_GATEWAY_WORKLOADS,
            f"install Envoy Gateway {pins.ENVOY_GATEWAY} (Managed mode pins it)",
            exact=False,
        ),
    ),
    not_checked=(
        "The Envoy Gateway controller runs with the extensionManager wired exactly as the values "
        "below: external processing delegated to the AI Gateway controller's Service, the Backend "
        "API enabled and InferencePool declared a backend resource.",
    ),
)

AI_GATEWAY_CRDS = Component(
    name="ai-gateway-crds",
    summary="The Envoy AI Gateway CRDs.",
    namespace=AI_GATEWAY_NAMESPACE,
    version=pins.AI_GATEWAY,
    stacks=BOTH,
    chart=ChartSource("ai-gateway-crds-helm", ENVOY_OCI),
    wait=True,
    requirements=(
        CRDServes(
            "aigatewayroutes.aigateway.envoyproxy.io",
            "v1alpha1",
            f"install the Envoy AI Gateway {pins.AI_GATEWAY} CRDs",
        ),
    ),
    not_checked=(
        "The AI Gateway APIs are v1alpha1 and move with the controller. A provided install "
        f"tracks the pinned {pins.AI_GATEWAY} release.",
    ),
)

AI_GATEWAY = Component(
    name="ai-gateway",
    summary="The Envoy AI Gateway controller, Envoy Gateway's extension server.",
    namespace=AI_GATEWAY_NAMESPACE,
    version=pins.AI_GATEWAY,
    stacks=BOTH,
    chart=ChartSource("ai-gateway-helm", ENVOY_OCI),
    values=_ai_gateway_values,
    depends_on=(AI_GATEWAY_CRDS.name, ENVOY_GATEWAY.name),
    advisories=(
        ServicePort(
            AI_GATEWAY_NAMESPACE,
            AI_GATEWAY_CONTROLLER,
            AI_GATEWAY_EXTENSION_PORT,
            f"install the AI Gateway chart into {AI_GATEWAY_NAMESPACE} with "
            f"controller.fullnameOverride={AI_GATEWAY_CONTROLLER}",
        ),
        WorkloadsAvailable(AI_GATEWAY_WORKLOADS, "check the ai-gateway-controller Deployment"),
    ),
    not_checked=(
        f"The AI Gateway controller is reachable at {AI_GATEWAY_FQDN}:{AI_GATEWAY_EXTENSION_PORT}, "
        "the address the Envoy Gateway extensionManager values point at.",
    ),
)

GAIE_CRDS = Component(
    name="gaie-crds",
    summary="The Gateway API Inference Extension CRDs (InferencePool).",
    namespace="",
    version=pins.GATEWAY_API_INFERENCE_EXTENSION,
    stacks=BOTH,
    manifests=ManifestSource(
        "https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases/download",
        "{version}/manifests.yaml",
        # The v1.0.1 release's CRDs besides InferencePool v1 (upstream-facts §9).
        other_crds=(
            "inferencepools.inference.networking.x-k8s.io",
            "inferenceobjectives.inference.networking.x-k8s.io",
        ),
    ),
    requirements=(
        CRDServes(
            f"{INFERENCE_POOL.resource}.{INFERENCE_POOL.group}",
            INFERENCE_POOL.version,
            "install the Gateway API Inference Extension CRDs "
            f"({pins.GATEWAY_API_INFERENCE_EXTENSION} or newer)",
        ),
    ),
)

TRUST_MANAGER = Component(
    name="trust-manager",
    summary="Publishes the gateway CA certificate, without its key, for the control plane.",
    namespace=MODELPLANE_NAMESPACE,
    version=pins.TRUST_MANAGER,
    version_field="versions.trustManager",
    stacks=BOTH,
    chart=ChartSource("trust-manager", JETSTACK),
    values=_trust_manager_values,
    depends_on=(CERT_MANAGER.name,),
    requirements=(CRDServes("bundles.trust.cert-manager.io", "v1alpha1", "install trust-manager"),),
    advisories=(
        WorkloadArg(
            TRUST_MANAGER_WORKLOADS,
            "--trust-namespace",
            MODELPLANE_NAMESPACE,
            "cert-manager",
            f"set the chart value app.trust.namespace={MODELPLANE_NAMESPACE}",
        ),
        WorkloadsAvailable(TRUST_MANAGER_WORKLOADS, "check the trust-manager Deployment"),
    ),
    not_checked=(
        f"trust-manager watches {MODELPLANE_NAMESPACE} as its trust namespace, where the gateway "
        "PKI composes its Bundle.",
    ),
)

LEADER_WORKER_SET = Component(
    name="leader-worker-set",
    summary="LeaderWorkerSet, for multi-node engines on the Standard stack.",
    namespace="lws-system",
    version=pins.LEADER_WORKER_SET,
    version_field="standard.leaderWorkerSet",
    stacks=STANDARD,
    chart=ChartSource("lws", "oci://registry.k8s.io/lws/charts"),
    requirements=(
        CRDServes(
            "leaderworkersets.leaderworkerset.x-k8s.io", "v1", "install LeaderWorkerSet v0.8"
        ),
    ),
    advisories=(
        WorkloadsAvailable(LWS_WORKLOADS, "check the LeaderWorkerSet controller Deployment"),
    ),
    not_checked=("The LeaderWorkerSet controller is running. Modelplane composes against v0.8.",),
)

KAI_SCHEDULER = Component(
    name="kai-scheduler",
    summary="Gang-schedules Grove's PodCliqueSets against a Queue.",
    namespace="kai-scheduler",
    version=pins.KAI_SCHEDULER,
    version_field="dynamo.kaiScheduler",
    stacks=DYNAMO,
    chart=ChartSource("kai-scheduler", "oci://ghcr.io/kai-scheduler/kai-scheduler"),
    wait=True,
    requirements=(CRDServes("queues.scheduling.run.ai", "v2", "install the KAI Scheduler v0.16"),),
    advisories=(
        SchedulerName(
            KAI_SCHEDULER_WORKLOADS,
            KAI_SCHEDULER_NAME,
            "--scheduler-name",
            f"install KAI with its default schedulerName {KAI_SCHEDULER_NAME}",
        ),
        WorkloadsAvailable(KAI_WORKLOADS, "check the KAI Deployments in its namespace"),
    ),
    not_checked=(
        "The scheduler answers to the schedulerName kai-scheduler and its Queue webhook is "
        "serving. Modelplane composes against the v0.16 line.",
    ),
)

GROVE = Component(
    name="grove",
    summary="Runs a multi-node engine as a gang-scheduled PodCliqueSet.",
    namespace="grove-system",
    version=pins.GROVE,
    version_field="dynamo.grove",
    # ServingStack reference, dynamo.grove; upstream-facts §12 (grove#753).
    supported=VersionRange(
        "v0.1.0-alpha.12-rc2",
        why="earlier releases append Grove's own env vars after the template's instead of "
        "prepending them (grove#753), so MODELPLANE_LEADER_ADDRESS cannot be aliased to them",
    ),
    stacks=DYNAMO,
    chart=ChartSource("grove-charts", "oci://ghcr.io/ai-dynamo/grove"),
    depends_on=(KAI_SCHEDULER.name,),
    requirements=(CRDServes("podcliquesets.grove.io", "v1alpha1", f"install Grove {pins.GROVE}"),),
    advisories=(
        ImageTag(GROVE_WORKLOADS, f"install Grove {pins.GROVE} (Managed mode pins it)"),
        WorkloadsAvailable(GROVE_WORKLOADS, "check the grove-operator Deployment"),
    ),
    not_checked=(
        "Grove's API is v1alpha1 with no compatibility promise, so a provided install must run "
        "exactly the pinned version; a CRD check cannot tell alpha revisions apart.",
    ),
)

MODELEXPRESS_CRDS = Component(
    name="modelexpress-crds",
    summary="The ModelExpress metadata CRDs its server stores peer state in.",
    namespace="",
    version=pins.MODEL_EXPRESS,
    version_field="dynamo.modelExpress",
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
        ),
    ),
)

# Ordered so that dependencies come first; teardown walks it backwards.
COMPONENTS: tuple[Component, ...] = (
    CERT_MANAGER,
    KUBE_PROMETHEUS_STACK,
    NODE_FEATURE_DISCOVERY,
    DRA_CRITICAL_PODS_QUOTA,
    NVIDIA_DRA_DRIVER,
    ENVOY_GATEWAY,
    AI_GATEWAY_CRDS,
    AI_GATEWAY,
    GAIE_CRDS,
    TRUST_MANAGER,
    LEADER_WORKER_SET,
    KAI_SCHEDULER,
    GROVE,
    MODELEXPRESS_CRDS,
)

BY_NAME: dict[str, Component] = {c.name: c for c in COMPONENTS}


def components_for(spec: ServingStackSpec) -> list[Component]:
    """The components of the spec's stack that its settings enable."""
    return [c for c in COMPONENTS if spec.stack in c.stacks and c.enabled(spec)]


def components_of_stack(stack: Stack) -> list[Component]:
    return [c for c in COMPONENTS if stack in c.stacks]
