"""Provided mode on a simulated cluster, asserted on what the real controllers report.

The target runs the upstream CRDs, kwok's nodes and pods, Envoy Gateway v1.8.3
and trust-manager v0.25.0 (``sim_target``). Two things are played by the test,
each said where it happens: the Secrets cert-manager would issue (its
controller cannot be built here), and the cloud load balancer's address in the
Envoy Service's ``status.loadBalancer``. Everything else (acceptance,
programming, the Bundle's ConfigMap, the Gateway's addresses, finalizers) is
the controllers' own doing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Service
from lightkube.types import PatchType
from tests.integration.hubs import SS, Harness
from tests.integration.simcluster import (
    LB_ADDRESS,
    NO_SUBSTRATE,
    delete_issued_secrets,
    envoy_objects,
    gateway_pki,
    put_issued_secrets,
)
from tests.testenv import TestEnv
from tests.testenv.simcluster import SimCluster, envoy_gateway_config
from tests.waiting import gone, wait_for

from modelplane.catalog import components as catalog
from modelplane.catalog.configuration import (
    CLAIM_NAME,
    CLIENT_AUTH_POLICY,
    CLUSTER_CA,
    ENVOY_PROXY_NAME,
    GATEWAY_NAME,
    HTTPS_LISTENER,
    NS,
)

GATEWAY_CLASS = create_global_resource(
    "gateway.networking.k8s.io", "v1", "GatewayClass", "gatewayclasses"
)
GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
ENVOY_PROXY = create_namespaced_resource(
    "gateway.envoyproxy.io", "v1alpha1", "EnvoyProxy", "envoyproxies"
)
CLIENT_TRAFFIC_POLICY = create_namespaced_resource(
    "gateway.envoyproxy.io", "v1alpha1", "ClientTrafficPolicy", "clienttrafficpolicies"
)
BUNDLE = create_global_resource("trust.cert-manager.io", "v1alpha1", "Bundle", "bundles")
HOSTNAME = "west.example.com"
CLASS = "envoy"


def _conditions(obj: Any) -> dict[str, str]:
    status = obj.to_dict().get("status") or {}
    return {c["type"]: c["status"] for c in status.get("conditions") or []}


@pytest.fixture
def harness(
    hub: Client,
    hub_env: TestEnv,
    sim_target: TestEnv,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Harness]:
    namespace = "sim-" + request.node.name.removeprefix("test_")[:40].replace("_", "-").strip("-")
    h = Harness(hub, hub_env, sim_target, NO_SUBSTRATE, tmp_path, namespace)
    try:
        yield h
    finally:
        # The target is the session's: leave no stack (and so no claim) behind.
        try:
            h.hub.delete(SS, "stack", namespace=h.ns)
        except ApiError:
            pass
        else:
            wait_for("the ServingStack gone", lambda: gone(h.hub, SS, "stack", h.ns), deadline=120)
        h.stop()
        delete_issued_secrets(h.target)


def _provided(h: Harness, gateway: dict[str, Any]) -> None:
    h.put_secret({"kubeconfig": h.kubeconfig_text()})
    h.create({"components": "Provided", "gateway": gateway})
    h.start()


def _same_certificate(a: str, b: str) -> bool:
    return x509.load_pem_x509_certificate(a.encode()) == x509.load_pem_x509_certificate(b.encode())


def test_gateway_on_the_real_envoy_gateway_and_trust_manager(harness: Harness) -> None:
    t = harness.target
    pki = gateway_pki(HOSTNAME)
    # cert-manager's part, played by the test: the Secrets it would issue.
    put_issued_secrets(t, pki)
    _provided(
        harness,
        {
            "hostname": HOSTNAME,
            "clientCAs": [{"name": "fleet-a", "certificate": pki.client_ca_pem}],
        },
    )

    # Envoy Gateway accepts the class with the operator's EnvoyProxy as parameters.
    wait_for(
        "GatewayClass Accepted",
        lambda: _conditions(t.get(GATEWAY_CLASS, CLASS)).get("Accepted") == "True",
        deadline=180,
    )
    spec = t.get(GATEWAY_CLASS, CLASS).to_dict()["spec"]
    assert spec["parametersRef"] == {
        "group": "gateway.envoyproxy.io",
        "kind": "EnvoyProxy",
        "name": ENVOY_PROXY_NAME,
        "namespace": NS,
    }
    assert t.get(ENVOY_PROXY, ENVOY_PROXY_NAME, namespace=NS)

    wait_for(
        "Gateway Accepted",
        lambda: _conditions(t.get(GATEWAY, GATEWAY_NAME, namespace=NS)).get("Accepted") == "True",
        deadline=120,
    )
    listeners = t.get(GATEWAY, GATEWAY_NAME, namespace=NS).to_dict()["spec"]["listeners"]
    assert (HTTPS_LISTENER, 443, HOSTNAME) in [
        (x["name"], x["port"], x.get("hostname")) for x in listeners
    ]

    # The infrastructure Envoy Gateway creates; kwok runs the Deployment.
    services = wait_for("the Envoy Service", lambda: envoy_objects(t, Service), deadline=120)
    wait_for(
        "the Envoy Deployment ready (kwok)",
        lambda: any((d.status and d.status.readyReplicas) for d in envoy_objects(t, Deployment)),
        deadline=120,
    )
    # The cloud's part, played by the test: the load balancer's address.
    (service,) = services
    assert service.spec is not None and service.spec.type == "LoadBalancer"
    t.patch(
        Service.Status,
        service.metadata.name,  # type: ignore[union-attr]
        {"status": {"loadBalancer": {"ingress": [{"ip": LB_ADDRESS}]}}},
        namespace=service.metadata.namespace,  # type: ignore[union-attr]
        patch_type=PatchType.MERGE,
    )
    # Envoy Gateway writes it into the Gateway, and only then calls it Programmed.
    wait_for(
        "Gateway Programmed with the address",
        lambda: (
            _conditions(gw := t.get(GATEWAY, GATEWAY_NAME, namespace=NS)).get("Programmed")
            == "True"
            and [a["value"] for a in gw.to_dict()["status"].get("addresses", [])] == [LB_ADDRESS]
        ),
        deadline=120,
    )
    wait_for(
        "the address on the hub",
        lambda: (harness.status().get("gateway") or {}).get("address") == LB_ADDRESS,
        deadline=90,
    )

    # mTLS: the policy is accepted and attached to the HTTPS listener.
    def policy_accepted() -> bool:
        ctp = t.get(CLIENT_TRAFFIC_POLICY, CLIENT_AUTH_POLICY, namespace=NS).to_dict()
        return any(
            a["ancestorRef"].get("sectionName") == HTTPS_LISTENER
            and a["ancestorRef"]["name"] == GATEWAY_NAME
            and any(c["type"] == "Accepted" and c["status"] == "True" for c in a["conditions"])
            for a in (ctp.get("status") or {}).get("ancestors") or []
        )

    wait_for("ClientTrafficPolicy Accepted on the https listener", policy_accepted, deadline=120)

    # trust-manager syncs the Bundle into its ConfigMap; the hub gets that CA.
    wait_for(
        "Bundle Synced",
        lambda: _conditions(t.get(BUNDLE, CLUSTER_CA)).get("Synced") == "True",
        deadline=120,
    )
    published = (t.get(ConfigMap, CLUSTER_CA, namespace=NS).data or {})["ca.crt"]
    assert _same_certificate(published, pki.ca_pem)
    assert "PRIVATE KEY" not in published

    # The hub carries the certificates re-encoded from what was parsed
    # (plan.gateway.published_ca), so the same certificate, not the same text.
    def ca_on_hub() -> bool:
        ca = (harness.status().get("gateway") or {}).get("caCertificate")
        return ca is not None and _same_certificate(ca, published)

    wait_for(
        "the CA on the hub",
        ca_on_hub,
        deadline=90,
        detail=lambda: str(harness.condition("CACertificatePublished")),
    )
    harness.wait_condition("Ready", "True", deadline=120)
    # With the catalog's wiring the extensionManager advisory has nothing to say
    # (the miswired case below is the one where it warns).
    assert "extensionManager" not in harness.condition("RequirementsMet")["message"]

    # Deletion: Envoy Gateway's finalizer on the class is processed, its
    # infrastructure goes with the Gateway, and nothing of ours is left.
    assert _conditions(t.get(GATEWAY_CLASS, CLASS))
    finalizers = t.get(GATEWAY_CLASS, CLASS).metadata.finalizers  # type: ignore[union-attr]
    assert finalizers == ["gateway-exists-finalizer.gateway.networking.k8s.io"]
    harness.hub.delete(SS, "stack", namespace=harness.ns)
    wait_for(
        "the ServingStack gone", lambda: gone(harness.hub, SS, "stack", harness.ns), deadline=180
    )
    for kind, name, namespace in (
        (GATEWAY, GATEWAY_NAME, NS),
        (GATEWAY_CLASS, CLASS, None),
        (ENVOY_PROXY, ENVOY_PROXY_NAME, NS),
        (CLIENT_TRAFFIC_POLICY, CLIENT_AUTH_POLICY, NS),
        (BUNDLE, CLUSTER_CA, None),
        (Lease, CLAIM_NAME, NS),
    ):
        assert gone(t, kind, name, namespace), f"{kind} {name} left behind"
    wait_for(
        "Envoy Gateway's infrastructure gone",
        lambda: not envoy_objects(t, Deployment) and not envoy_objects(t, Service),
        deadline=120,
    )
    # trust-manager's target ConfigMap is owned by the Bundle: garbage collected.
    wait_for(
        "the Bundle's ConfigMap gone",
        lambda: gone(t, ConfigMap, CLUSTER_CA, NS),
        deadline=120,
    )


def test_miswired_extension_manager_warns_while_every_component_looks_healthy(
    harness: Harness, sim_target: TestEnv
) -> None:
    cluster = SimCluster(sim_target)
    wrong = envoy_gateway_config()["extensionManager"] | {
        "service": {"fqdn": {"hostname": catalog.AI_GATEWAY_FQDN, "port": 1064}}
    }
    # The real Envoy Gateway runs, and reads, the miswired configuration.
    cluster.start_envoy_gateway(overrides={"extensionManager": wrong})
    try:
        configmap = harness.target.get(
            ConfigMap, "envoy-gateway-config", namespace=catalog.ENVOY_GATEWAY_NAMESPACE
        )
        assert "port: 1064" in (configmap.data or {})["envoy-gateway.yaml"]
        _provided(harness, {})
        wait_for(
            "GatewayClass Accepted by the miswired Envoy Gateway",
            lambda: _conditions(harness.target.get(GATEWAY_CLASS, CLASS)).get("Accepted") == "True",
            deadline=180,
        )
        met = harness.wait_condition("RequirementsMet", "True", deadline=120)
        assert "warning(s)" in met["message"]
        assert "extensionManager" in met["message"]
        components = harness.status()["components"]
        assert {c["state"] for c in components} == {"Met"}, components
    finally:
        cluster.start_envoy_gateway()
