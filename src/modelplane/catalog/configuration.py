"""The configuration the product composes on top of the substrate, in both modes.

Every object declares the APIs it needs; the plan holds it back until the
target serves them. Names and shapes follow upstream Modelplane
(upstream-facts §2, §7.1, §10, §13, §14).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import TYPE_CHECKING, Any

from modelplane.catalog import components as c
from modelplane.catalog.components import envoy_gateway, modelexpress_crds
from modelplane.catalog.images import ProductImages
from modelplane.wire import ApiRef, object_key

if TYPE_CHECKING:
    from modelplane.api.spec import ServingStackSpec

NS = c.MODELPLANE_NAMESPACE
GATEWAY_NAME = "inference-gateway"
ENVOY_PROXY_NAME = "inference-gateway"
ENVOY_GATEWAY_CONTROLLER = "gateway.envoyproxy.io/gatewayclass-controller"
HTTPS_LISTENER = "https"
HTTPS_PORT = 443
SELF_SIGNED_ISSUER = "modelplane-selfsigned"
CLUSTER_CA = "modelplane-cluster-ca"  # Certificate, its Secret, the CA Issuer and the Bundle
SERVING_CERT = "cluster-gateway-serving"
CLIENT_CAS_CONFIGMAP = "modelplane-fleet-gateway-cas"
CLIENT_AUTH_POLICY = "cluster-gateway-client-auth"
CA_KEY = "ca.crt"
# Engine pods are labelled kai.scheduler/queue=<KAI_QUEUE>; only leaf queues
# take workloads, so the root exists to own the hierarchy.
KAI_ROOT_QUEUE = "modelplane-root"
KAI_QUEUE = "modelplane"
# The leaf queue of the scheduler probe (plan.scheduler_probe): its own, so a
# probe never competes with the engines' queue, and its annotation records
# the KAI version last proven on this cluster.
KAI_PROBE_QUEUE = "modelplane-probe"
MODELEXPRESS_NAME = "modelexpress-server"
MODELEXPRESS_NAMESPACE = modelexpress_crds.SERVER_NAMESPACE
MODELEXPRESS_PORT = 8001
MODELEXPRESS_IMAGE = modelexpress_crds.SERVER_REPOSITORY
# The Lease on a target that names the one ServingStack acting on it
# (modelplane.actions.claim). It lives in the product's namespace so that a
# person finds it next to the rest of the product's objects.
CLAIM_NAME = "modelplane-claim"
CLAIM_NAMESPACE = NS

ENVOY_PROXIES = ApiRef("gateway.envoyproxy.io", "v1alpha1", "envoyproxies")
CLIENT_TRAFFIC_POLICIES = ApiRef("gateway.envoyproxy.io", "v1alpha1", "clienttrafficpolicies")
GATEWAY_CLASSES = ApiRef("gateway.networking.k8s.io", "v1", "gatewayclasses")
GATEWAYS = ApiRef("gateway.networking.k8s.io", "v1", "gateways")
ISSUERS = ApiRef("cert-manager.io", "v1", "issuers")
CERTIFICATES = ApiRef("cert-manager.io", "v1", "certificates")
BUNDLES = ApiRef("trust.cert-manager.io", "v1alpha1", "bundles")
QUEUES = ApiRef("scheduling.run.ai", "v2", "queues")
MODEL_METADATAS = modelexpress_crds.COMPONENT.requirements[0].api


class TeardownWave(IntEnum):
    """When teardown deletes an object; a wave is gone before the next one goes.

    An object that refers to another goes in an earlier wave than the one it
    refers to, while the controller that clears its finalizers still runs:
    the Gateway (and what targets it) before the GatewayClass, a KAI queue
    before its parent (upstream-facts §0.2 "Teardown chain", §13 "Queue webhook").
    """

    FIRST = 0
    SECOND = 1
    THIRD = 2
    # After the Helm releases, not waited for: a release may live in it.
    LAST = 3


class Hold(StrEnum):
    """Why an object is not applied (its plan action is hold)."""

    # The spec keeps it back on purpose, whatever the target serves: nothing
    # changes until the spec does, so it is no work left.
    WITHHELD = "Withheld"
    # Until the target serves the APIs it needs.
    WAITING_FOR_API = "WaitingForAPI"


@dataclass(frozen=True)
class ConfigObject:
    """One Kubernetes object of the product's own configuration."""

    body: dict[str, Any]
    needs: tuple[ApiRef, ...] = ()
    # Set only when the spec keeps the object back (Hold.WITHHELD); the plan
    # adds Hold.WAITING_FOR_API from what the target serves.
    hold: Hold | None = None
    hold_reason: str | None = None
    teardown_wave: TeardownWave = TeardownWave.THIRD

    def __post_init__(self) -> None:
        if (self.hold is None) != (self.hold_reason is None):
            raise ValueError(f"{self.key}: a hold needs a reason, and a reason a hold")

    @property
    def key(self) -> str:
        return object_key(self.body)


def _obj(
    api_version: str, kind: str, name: str, namespace: str | None = NS, **rest: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, **rest}


def _listeners(spec: ServingStackSpec) -> list[dict[str, Any]]:
    given = spec.gateway.listeners
    listeners: list[dict[str, Any]] = [
        {
            "name": listener.name,
            "port": listener.port,
            "protocol": str(listener.protocol),
            "allowedRoutes": {"namespaces": {"from": "All"}},
        }
        for listener in given
    ] or [
        {
            "name": "http",
            "port": 80,
            "protocol": "HTTP",
            "allowedRoutes": {"namespaces": {"from": "All"}},
        }
    ]
    if spec.gateway.hostname and https_listener_withheld(spec) is None:
        listeners.append(
            {
                "name": HTTPS_LISTENER,
                "port": HTTPS_PORT,
                "protocol": "HTTPS",
                "hostname": spec.gateway.hostname,
                "tls": {"mode": "Terminate", "certificateRefs": [{"name": SERVING_CERT}]},
                "allowedRoutes": {"namespaces": {"from": "All"}},
            }
        )
    return listeners


def https_listener_withheld(spec: ServingStackSpec) -> str | None:
    """Why the HTTPS listener is not on the Gateway, if it is not."""
    if not spec.gateway.hostname:
        return None
    if not spec.gateway.client_cas:
        return (
            f"the HTTPS listener for {spec.gateway.hostname} waits for a clientCAs entry: "
            "without one it would accept any client"
        )
    # The Gateway would be refused (two listeners of one name) or conflicted
    # (HTTPS sharing a port with another protocol).
    for listener in spec.gateway.listeners:
        if listener.name == HTTPS_LISTENER or listener.port == HTTPS_PORT:
            return (
                f"the HTTPS listener for {spec.gateway.hostname} needs the name "
                f"{HTTPS_LISTENER!r} and port {HTTPS_PORT}, but gateway.listeners entry "
                f"{listener.name!r} (port {listener.port}) takes one of them"
            )
    return None


def _pull_secrets(names: tuple[str, ...]) -> list[dict[str, str]]:
    return [{"name": name} for name in names]


# The proxies carry every inference request, and Envoy Gateway rolls them
# whenever their pod changes (its upgrade brings a new proxy image). Two, so
# a drain or an eviction leaves one serving; a roll that surges a new pod and
# waits for it Ready before an old one goes, so no moment has none, whatever
# Envoy Gateway's default (a bare RollingUpdate, 25%/25%, in v1.8:
# api/v1alpha1/kubernetes_helpers.go, DefaultKubernetesDeploymentStrategy);
# and a budget that lets a drain take one at a time (with one replica any
# budget that keeps it would block drains for good).
ENVOY_PROXY_REPLICAS = 2
ENVOY_PROXY_MAX_SURGE = 1


def _envoy_proxy_deployment(images: ProductImages) -> dict[str, Any]:
    """The proxy Deployment's settings: its rollout, and the image a mirror moves."""
    deployment: dict[str, Any] = {
        "replicas": ENVOY_PROXY_REPLICAS,
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 0, "maxSurge": ENVOY_PROXY_MAX_SURGE},
        },
    }
    # This EnvoyProxy replaces Envoy Gateway's default one (no mergeType), so
    # here is the only place the proxy image can be moved (images.md §5, the
    # merge trap). Only with a mirror or pull Secrets.
    proxy = images.moved.get(envoy_gateway.ENVOY_PROXY)
    if proxy is not None:
        deployment["container"] = {"image": proxy}
    secrets = images.secrets_for(envoy_gateway.ENVOY_PROXY)
    if secrets:
        deployment["pod"] = {"imagePullSecrets": _pull_secrets(secrets)}
    return deployment


def _envoy_proxy_kubernetes(images: ProductImages) -> dict[str, Any]:
    return {
        # EG defaults to Local, which some cloud load balancers reject.
        "envoyService": {"externalTrafficPolicy": "Cluster"},
        "envoyDeployment": _envoy_proxy_deployment(images),
        "envoyPDB": {"maxUnavailable": 1},
    }


def gateway_objects(
    spec: ServingStackSpec, images: ProductImages | None = None
) -> list[ConfigObject]:
    """Namespace, EnvoyProxy, GatewayClass and Gateway."""
    images = images or ProductImages()
    return [
        ConfigObject(_obj("v1", "Namespace", NS, namespace=None), teardown_wave=TeardownWave.LAST),
        ConfigObject(
            _obj(
                f"{ENVOY_PROXIES.group_version}",
                "EnvoyProxy",
                ENVOY_PROXY_NAME,
                spec={
                    "provider": {
                        "type": "Kubernetes",
                        "kubernetes": _envoy_proxy_kubernetes(images),
                    }
                },
            ),
            needs=(ENVOY_PROXIES,),
            teardown_wave=TeardownWave.THIRD,
        ),
        ConfigObject(
            _obj(
                GATEWAY_CLASSES.group_version,
                "GatewayClass",
                spec.gateway.class_name,
                namespace=None,
                spec={
                    "controllerName": ENVOY_GATEWAY_CONTROLLER,
                    "parametersRef": {
                        "group": ENVOY_PROXIES.group,
                        "kind": "EnvoyProxy",
                        "name": ENVOY_PROXY_NAME,
                        "namespace": NS,
                    },
                },
            ),
            needs=(GATEWAY_CLASSES,),
            teardown_wave=TeardownWave.SECOND,
        ),
        ConfigObject(
            _obj(
                GATEWAYS.group_version,
                "Gateway",
                GATEWAY_NAME,
                spec={"gatewayClassName": spec.gateway.class_name, "listeners": _listeners(spec)},
            ),
            needs=(GATEWAYS,),
            teardown_wave=TeardownWave.FIRST,
        ),
    ]


def _certificate(name: str, issuer: str, **spec: Any) -> dict[str, Any]:
    return _obj(
        CERTIFICATES.group_version,
        "Certificate",
        name,
        spec={
            "secretName": name,
            "issuerRef": {"name": issuer, "kind": "Issuer", "group": CERTIFICATES.group},
            **spec,
        },
    )


def pki_objects(spec: ServingStackSpec) -> list[ConfigObject]:
    """The gateway's private CA chain and the Bundle publishing its certificate."""
    hostname = spec.gateway.hostname
    if not hostname:
        return []
    issuer_needs = (ISSUERS,)
    cert_needs = (CERTIFICATES,)
    return [
        ConfigObject(
            _obj(ISSUERS.group_version, "Issuer", SELF_SIGNED_ISSUER, spec={"selfSigned": {}}),
            needs=issuer_needs,
        ),
        ConfigObject(
            _certificate(
                CLUSTER_CA,
                SELF_SIGNED_ISSUER,
                isCA=True,
                # X.509 limits a common name to 64 characters.
                commonName=f"modelplane cluster CA {hostname}"[:64],
                duration="87600h",
                renewBefore="8760h",
                privateKey={"algorithm": "ECDSA", "size": 256},
            ),
            needs=cert_needs,
        ),
        ConfigObject(
            _obj(
                ISSUERS.group_version, "Issuer", CLUSTER_CA, spec={"ca": {"secretName": CLUSTER_CA}}
            ),
            needs=issuer_needs,
        ),
        ConfigObject(
            _certificate(
                SERVING_CERT,
                CLUSTER_CA,
                dnsNames=[hostname],
                duration="2160h",
                renewBefore="720h",
                privateKey={"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            ),
            needs=cert_needs,
        ),
        # trust-manager accepts only CERTIFICATE blocks, so the CA's key can
        # never reach the published ConfigMap.
        ConfigObject(
            _obj(
                BUNDLES.group_version,
                "Bundle",
                CLUSTER_CA,
                namespace=None,
                spec={
                    "sources": [{"secret": {"name": CLUSTER_CA, "key": CA_KEY}}],
                    "target": {
                        "configMap": {"key": CA_KEY},
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
                    },
                },
            ),
            needs=(BUNDLES,),
        ),
    ]


def client_ca_objects(spec: ServingStackSpec) -> list[ConfigObject]:
    """The client CAs in one ConfigMap and the policy requiring them on HTTPS."""
    cas = sorted(spec.gateway.client_cas, key=lambda ca: ca.name)
    if not cas:
        return []
    bundle = "".join(
        ca.certificate if ca.certificate.endswith("\n") else ca.certificate + "\n" for ca in cas
    )
    withheld = (
        https_listener_withheld(spec)
        if spec.gateway.hostname
        else "clientCAs need gateway.hostname: without it there is no HTTPS listener to "
        "require client certificates on"
    )
    return [
        ConfigObject(_obj("v1", "ConfigMap", CLIENT_CAS_CONFIGMAP, data={CA_KEY: bundle})),
        ConfigObject(
            _obj(
                CLIENT_TRAFFIC_POLICIES.group_version,
                "ClientTrafficPolicy",
                CLIENT_AUTH_POLICY,
                spec={
                    "targetRefs": [
                        {
                            "group": GATEWAYS.group,
                            "kind": "Gateway",
                            "name": GATEWAY_NAME,
                            "sectionName": HTTPS_LISTENER,
                        }
                    ],
                    "tls": {
                        "clientValidation": {
                            "caCertificateRefs": [
                                {"kind": "ConfigMap", "group": "", "name": CLIENT_CAS_CONFIGMAP}
                            ]
                        }
                    },
                },
            ),
            needs=(CLIENT_TRAFFIC_POLICIES,),
            hold=Hold.WITHHELD if withheld else None,
            hold_reason=withheld,
            teardown_wave=TeardownWave.FIRST,
        ),
    ]


def _queue(name: str, parent: str | None) -> dict[str, Any]:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: dict[str, Any] = {"resources": {r: dict(unlimited) for r in ("cpu", "gpu", "memory")}}
    if parent:
        spec["parentQueue"] = parent
    return _obj(QUEUES.group_version, "Queue", name, namespace=None, spec=spec)


def _probe_queue(spec: ServingStackSpec) -> list[ConfigObject]:
    """The scheduler probe's queue, where the product installs KAI and so probes it."""
    from modelplane.pins import ComponentsMode

    if spec.components is not ComponentsMode.MANAGED:
        return []
    return [
        ConfigObject(
            _queue(KAI_PROBE_QUEUE, KAI_ROOT_QUEUE),
            needs=(QUEUES,),
            teardown_wave=TeardownWave.FIRST,
        )
    ]


def dynamo_objects(
    spec: ServingStackSpec, images: ProductImages | None = None
) -> list[ConfigObject]:
    """The KAI Queue hierarchy (with the scheduler probe's queue) and the ModelExpress server."""
    from modelplane.pins import Stack

    if spec.stack is not Stack.DYNAMO:
        return []
    images = images or ProductImages()
    mx_ns = MODELEXPRESS_NAMESPACE
    labels = {"modelplane.ai/modelexpress": MODELEXPRESS_NAME}
    port = MODELEXPRESS_PORT
    image = images.moved.get(
        modelexpress_crds.SERVER,
        f"{MODELEXPRESS_IMAGE}:{modelexpress_crds.COMPONENT.version_for(spec)}",
    )
    secrets = images.secrets_for(modelexpress_crds.SERVER)
    pod_pulls: dict[str, Any] = {"imagePullSecrets": _pull_secrets(secrets)} if secrets else {}
    probe = {"tcpSocket": {"port": port}, "periodSeconds": 10}
    return [
        # KAI rejects deleting a queue that still has children: child first.
        ConfigObject(
            _queue(KAI_ROOT_QUEUE, None), needs=(QUEUES,), teardown_wave=TeardownWave.SECOND
        ),
        ConfigObject(
            _queue(KAI_QUEUE, KAI_ROOT_QUEUE), needs=(QUEUES,), teardown_wave=TeardownWave.FIRST
        ),
        *_probe_queue(spec),
        ConfigObject(_obj("v1", "ServiceAccount", MODELEXPRESS_NAME, namespace=mx_ns)),
        ConfigObject(
            _obj(
                "rbac.authorization.k8s.io/v1",
                "Role",
                MODELEXPRESS_NAME,
                namespace=mx_ns,
                rules=[
                    {
                        "apiGroups": [MODEL_METADATAS.group],
                        "resources": [
                            "modelmetadatas",
                            "modelmetadatas/status",
                            "modelcacheentries",
                            "modelcacheentries/status",
                        ],
                        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
                    },
                    {
                        "apiGroups": [""],
                        "resources": ["configmaps"],
                        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
                    },
                ],
            )
        ),
        ConfigObject(
            _obj(
                "rbac.authorization.k8s.io/v1",
                "RoleBinding",
                MODELEXPRESS_NAME,
                namespace=mx_ns,
                roleRef={
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": MODELEXPRESS_NAME,
                },
                subjects=[
                    {"kind": "ServiceAccount", "name": MODELEXPRESS_NAME, "namespace": mx_ns}
                ],
            )
        ),
        ConfigObject(
            _obj(
                "v1",
                "Service",
                MODELEXPRESS_NAME,
                namespace=mx_ns,
                spec={
                    "selector": labels,
                    "ports": [{"name": "grpc", "port": port, "targetPort": port}],
                },
            )
        ),
        ConfigObject(
            _obj(
                "apps/v1",
                "Deployment",
                MODELEXPRESS_NAME,
                namespace=mx_ns,
                spec={
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "serviceAccountName": MODELEXPRESS_NAME,
                            **pod_pulls,
                            "containers": [
                                {
                                    "name": "server",
                                    "image": image,
                                    "ports": [{"name": "grpc", "containerPort": port}],
                                    "env": [
                                        {"name": "MODEL_EXPRESS_SERVER_PORT", "value": str(port)},
                                        {
                                            "name": "MODEL_EXPRESS_CACHE_DIRECTORY",
                                            "value": "/mnt/models",
                                        },
                                        {"name": "HF_HUB_CACHE", "value": "/mnt/models"},
                                        {"name": "MX_METADATA_BACKEND", "value": "kubernetes"},
                                        {
                                            "name": "POD_NAMESPACE",
                                            "valueFrom": {
                                                "fieldRef": {"fieldPath": "metadata.namespace"}
                                            },
                                        },
                                    ],
                                    "readinessProbe": probe,
                                    "livenessProbe": probe,
                                    "volumeMounts": [{"name": "cache", "mountPath": "/mnt/models"}],
                                }
                            ],
                            "volumes": [{"name": "cache", "emptyDir": {}}],
                        },
                    },
                },
            ),
            # The server stores its state in the ModelExpress CRDs.
            needs=(MODEL_METADATAS,),
        ),
    ]


def configuration_for(
    spec: ServingStackSpec, images: ProductImages | None = None
) -> list[ConfigObject]:
    """Every configuration object of the spec, in apply order.

    ``images`` is what the plan made of the product's own images under the
    mirror rules (``plan.images.product_images``); without it every image
    is the upstream one and no pod names a pull Secret.
    """
    return [
        *gateway_objects(spec, images),
        *pki_objects(spec),
        *client_ca_objects(spec),
        *dynamo_objects(spec, images),
    ]
