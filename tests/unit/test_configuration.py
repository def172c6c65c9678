"""The configuration composed on top of the substrate, in both modes."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.api.spec import ServingStackSpec
from modelplane.catalog import configuration as cfg
from modelplane.catalog.configuration import ConfigObject, configuration_for

from .conftest import CA_PEM, CA_PEM_B

BUILTIN_GROUPS = {"", "apps", "rbac.authorization.k8s.io"}


def _spec(**fields: Any) -> ServingStackSpec:
    return ServingStackSpec.model_validate(
        {"secrets": [{"type": "Kubeconfig", "name": "kc", "key": "k"}], **fields}
    )


def _by_kind(objects: list[ConfigObject]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for o in objects:
        out.setdefault(o.body["kind"], []).append(o.body)
    return out


def _one(objects: list[ConfigObject], kind: str, name: str | None = None) -> ConfigObject:
    found = [
        o
        for o in objects
        if o.body["kind"] == kind and (name is None or o.body["metadata"]["name"] == name)
    ]
    assert len(found) == 1, (kind, name, [o.key for o in found])
    return found[0]


HOST = "west.example.com"
CAS = [
    {"name": "zeta", "certificate": CA_PEM_B.rstrip("\n")},
    {"name": "alpha", "certificate": CA_PEM},
]


def test_base_objects() -> None:
    objects = configuration_for(_spec())
    kinds = [o.body["kind"] for o in objects]
    assert kinds == ["Namespace", "EnvoyProxy", "GatewayClass", "Gateway"]
    ns = _one(objects, "Namespace").body
    assert ns == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "modelplane-system"},
    }
    proxy = _one(objects, "EnvoyProxy").body
    assert proxy["metadata"] == {"name": "inference-gateway", "namespace": "modelplane-system"}
    assert proxy["spec"]["provider"]["type"] == "Kubernetes"
    assert (
        proxy["spec"]["provider"]["kubernetes"]["envoyService"]["externalTrafficPolicy"]
        == "Cluster"
    )
    gc = _one(objects, "GatewayClass").body
    assert gc["metadata"] == {"name": "envoy"}
    assert gc["spec"] == {
        "controllerName": "gateway.envoyproxy.io/gatewayclass-controller",
        "parametersRef": {
            "group": "gateway.envoyproxy.io",
            "kind": "EnvoyProxy",
            "name": "inference-gateway",
            "namespace": "modelplane-system",
        },
    }


def test_gateway_class_name_from_spec() -> None:
    objects = configuration_for(_spec(gateway={"className": "modelplane-eg"}))
    assert _one(objects, "GatewayClass").body["metadata"]["name"] == "modelplane-eg"
    assert _one(objects, "Gateway").body["spec"]["gatewayClassName"] == "modelplane-eg"


def test_default_listener_is_http_80_from_all_namespaces() -> None:
    gateway = _one(configuration_for(_spec()), "Gateway").body
    assert gateway["metadata"] == {"name": "inference-gateway", "namespace": "modelplane-system"}
    assert gateway["spec"]["listeners"] == [
        {
            "name": "http",
            "port": 80,
            "protocol": "HTTP",
            "allowedRoutes": {"namespaces": {"from": "All"}},
        }
    ]


def test_spec_listeners_replace_the_default() -> None:
    listeners = [
        {"name": "web", "port": 8080, "protocol": "HTTP"},
        {"name": "raw", "port": 9000, "protocol": "TCP"},
    ]
    gateway = _one(configuration_for(_spec(gateway={"listeners": listeners})), "Gateway").body
    assert [(x["name"], x["port"], x["protocol"]) for x in gateway["spec"]["listeners"]] == [
        ("web", 8080, "HTTP"),
        ("raw", 9000, "TCP"),
    ]
    for x in gateway["spec"]["listeners"]:
        assert x["allowedRoutes"] == {"namespaces": {"from": "All"}}


def test_no_hostname_no_pki() -> None:
    kinds = _by_kind(configuration_for(_spec()))
    for kind in ("Issuer", "Certificate", "Bundle"):
        assert kind not in kinds
    assert cfg.https_listener_withheld(_spec()) is None


def test_hostname_adds_the_pki_and_bundle() -> None:
    objects = configuration_for(_spec(gateway={"hostname": HOST}))
    selfsigned = _one(objects, "Issuer", "modelplane-selfsigned").body
    assert selfsigned["spec"] == {"selfSigned": {}}
    ca = _one(objects, "Certificate", "modelplane-cluster-ca").body["spec"]
    assert ca["isCA"] is True
    assert ca["secretName"] == "modelplane-cluster-ca"
    assert ca["issuerRef"] == {
        "name": "modelplane-selfsigned",
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    assert ca["commonName"] == f"modelplane cluster CA {HOST}"
    ca_issuer = _one(objects, "Issuer", "modelplane-cluster-ca").body
    assert ca_issuer["spec"] == {"ca": {"secretName": "modelplane-cluster-ca"}}
    serving = _one(objects, "Certificate", "cluster-gateway-serving").body["spec"]
    assert serving["dnsNames"] == [HOST]
    assert serving["secretName"] == "cluster-gateway-serving"
    assert serving["issuerRef"]["name"] == "modelplane-cluster-ca"
    for o in objects:
        if o.body["kind"] in ("Issuer", "Certificate"):
            assert o.body["metadata"]["namespace"] == "modelplane-system"
    bundle = _one(objects, "Bundle").body
    assert bundle["apiVersion"] == "trust.cert-manager.io/v1alpha1"
    # Only the certificate, never the key: ca.crt of the CA's Secret.
    assert bundle["spec"]["sources"] == [
        {"secret": {"name": "modelplane-cluster-ca", "key": "ca.crt"}}
    ]
    assert bundle["spec"]["target"]["configMap"] == {"key": "ca.crt"}
    assert bundle["spec"]["target"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "modelplane-system"}
    }


def test_long_hostname_common_name_is_cut_to_64() -> None:
    host = ("a" * 60) + ".example.com"
    objects = configuration_for(_spec(gateway={"hostname": host}))
    cn = _one(objects, "Certificate", "modelplane-cluster-ca").body["spec"]["commonName"]
    assert len(cn) == 64
    serving = _one(objects, "Certificate", "cluster-gateway-serving").body["spec"]
    assert serving["dnsNames"] == [host]


def test_https_listener_held_back_until_a_client_ca_exists() -> None:
    spec = _spec(gateway={"hostname": HOST})
    gateway = _one(configuration_for(spec), "Gateway").body
    assert [x["name"] for x in gateway["spec"]["listeners"]] == ["http"]
    reason = cfg.https_listener_withheld(spec)
    assert reason is not None
    assert HOST in reason and "clientCAs" in reason and "any client" in reason


def test_https_listener_with_hostname_and_client_ca() -> None:
    listeners = [{"name": "web", "port": 8080, "protocol": "HTTP"}]
    spec = _spec(gateway={"hostname": HOST, "listeners": listeners, "clientCAs": CAS})
    assert cfg.https_listener_withheld(spec) is None
    gateway = _one(configuration_for(spec), "Gateway").body
    web, https = gateway["spec"]["listeners"]
    assert web["name"] == "web"  # the spec's listeners stay, HTTPS is added
    assert https == {
        "name": "https",
        "port": 443,
        "protocol": "HTTPS",
        "hostname": HOST,
        "tls": {"mode": "Terminate", "certificateRefs": [{"name": "cluster-gateway-serving"}]},
        "allowedRoutes": {"namespaces": {"from": "All"}},
    }


def test_client_cas_configmap_sorted_by_name() -> None:
    objects = configuration_for(_spec(gateway={"hostname": HOST, "clientCAs": CAS}))
    cm = _one(objects, "ConfigMap", "modelplane-fleet-gateway-cas").body
    assert cm["metadata"]["namespace"] == "modelplane-system"
    assert list(cm["data"]) == ["ca.crt"]
    alpha, zeta = CAS[1]["certificate"], CAS[0]["certificate"] + "\n"
    assert cm["data"]["ca.crt"] == alpha + zeta
    assert cm["data"]["ca.crt"].endswith("\n")


def test_client_traffic_policy_requires_client_certificates_on_https() -> None:
    objects = configuration_for(_spec(gateway={"hostname": HOST, "clientCAs": CAS}))
    policy = _one(objects, "ClientTrafficPolicy")
    assert policy.hold is None
    assert policy.body["apiVersion"] == "gateway.envoyproxy.io/v1alpha1"
    assert policy.body["metadata"] == {
        "name": "cluster-gateway-client-auth",
        "namespace": "modelplane-system",
    }
    assert policy.body["spec"]["targetRefs"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "inference-gateway",
            "sectionName": "https",
        }
    ]
    assert policy.body["spec"]["tls"]["clientValidation"]["caCertificateRefs"] == [
        {"kind": "ConfigMap", "group": "", "name": "modelplane-fleet-gateway-cas"}
    ]


def test_client_cas_without_hostname_are_withheld() -> None:
    objects = configuration_for(_spec(gateway={"clientCAs": CAS}))
    policy = _one(objects, "ClientTrafficPolicy")
    assert policy.hold is cfg.Hold.WITHHELD
    assert policy.hold_reason is not None and "hostname" in policy.hold_reason
    gateway = _one(objects, "Gateway").body
    assert [x["name"] for x in gateway["spec"]["listeners"]] == ["http"]


def test_no_client_cas_no_policy() -> None:
    kinds = _by_kind(configuration_for(_spec(gateway={"hostname": HOST})))
    assert "ClientTrafficPolicy" not in kinds and "ConfigMap" not in kinds


def test_standard_has_no_dynamo_objects() -> None:
    kinds = _by_kind(configuration_for(_spec()))
    for kind in ("Queue", "Deployment", "Service"):
        assert kind not in kinds


def test_dynamo_queues() -> None:
    objects = configuration_for(_spec(stack="Dynamo"))
    root = _one(objects, "Queue", "modelplane-root")
    leaf = _one(objects, "Queue", "modelplane")
    assert root.body["apiVersion"] == "scheduling.run.ai/v2"
    assert "namespace" not in root.body["metadata"]  # Queues are cluster-scoped
    assert "parentQueue" not in root.body["spec"]
    assert leaf.body["spec"]["parentQueue"] == "modelplane-root"
    for q in (root, leaf):
        assert set(q.body["spec"]["resources"]) == {"cpu", "gpu", "memory"}
        for r in q.body["spec"]["resources"].values():
            assert r == {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    # KAI refuses to delete a queue with children: the leaf goes first.
    assert leaf.teardown_wave < root.teardown_wave


def test_dynamo_modelexpress_server() -> None:
    objects = configuration_for(_spec(stack="Dynamo", dynamo={"modelExpress": "0.5.0"}))
    names = {
        (o.body["kind"], o.body["metadata"].get("namespace"), o.body["metadata"]["name"])
        for o in objects
        if o.body["metadata"]["name"] == "modelexpress-server"
    }
    assert names == {
        (kind, "default", "modelexpress-server")
        for kind in ("ServiceAccount", "Role", "RoleBinding", "Service", "Deployment")
    }
    deployment = _one(objects, "Deployment").body
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "nvcr.io/nvidia/ai-dynamo/modelexpress-server:0.5.0"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MX_METADATA_BACKEND"] == "kubernetes"
    assert env["MODEL_EXPRESS_SERVER_PORT"] == "8001"
    assert "POD_NAMESPACE" in env
    service = _one(objects, "Service").body
    assert service["spec"]["ports"] == [{"name": "grpc", "port": 8001, "targetPort": 8001}]
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]
    assert _one(objects, "Deployment").needs == (cfg.MODEL_METADATAS,)


def test_modelexpress_default_tag() -> None:
    deployment = _one(configuration_for(_spec(stack="Dynamo")), "Deployment").body
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith(":0.4.1")


EVERYTHING = {
    "stack": "Dynamo",
    "gateway": {"hostname": HOST, "clientCAs": CAS},
}


@pytest.mark.parametrize("fields", [{}, EVERYTHING, {**EVERYTHING, "stack": "Standard"}])
def test_every_object_declares_the_apis_it_needs(fields: dict[str, Any]) -> None:
    for o in configuration_for(_spec(**fields)):
        group, _, version = o.body["apiVersion"].rpartition("/")
        if group in BUILTIN_GROUPS:
            continue
        own = {(api.group, api.version, api.resource) for api in o.needs}
        assert (group, version, _plural(o.body["kind"])) in own, (
            f"{o.key} does not declare its own API"
        )


def _plural(kind: str) -> str:
    lower = kind.lower()
    if lower.endswith("y") and lower[-2] not in "aeiou":
        return lower[:-1] + "ies"
    return lower + ("es" if lower.endswith("s") else "s")


def test_keys_are_unique() -> None:
    keys = [o.key for o in configuration_for(_spec(**EVERYTHING))]
    assert len(keys) == len(set(keys))
    assert "v1/Namespace/modelplane-system" in keys
    assert "gateway.networking.k8s.io/v1/GatewayClass/envoy" in keys


@pytest.mark.parametrize(
    "listener",
    [
        {"name": "https", "port": 8443, "protocol": "TCP"},
        {"name": "tls", "port": 443, "protocol": "TCP"},
    ],
)
def test_https_listener_held_back_when_a_spec_listener_takes_its_name_or_port(
    listener: dict[str, Any],
) -> None:
    spec = _spec(gateway={"hostname": HOST, "clientCAs": CAS, "listeners": [listener]})
    reason = cfg.https_listener_withheld(spec)
    assert reason is not None and repr(listener["name"]) in reason
    objects = configuration_for(spec)
    listeners = _one(objects, "Gateway").body["spec"]["listeners"]
    assert [x["name"] for x in listeners] == [listener["name"]]
    # The policy would otherwise target the spec's own listener.
    assert _one(objects, "ClientTrafficPolicy").hold_reason == reason
