"""The operator reads its own objects only where it writes them.

A target's tenants can write Secrets, Gateways and ConfigMaps in their own
namespaces, with any labels. ``to_observed`` (one conversion for the
direct reads and the watches) takes a Helm release only from its release's
namespace and under Helm's own Secret name, the Gateway address only from the
product's Gateway, and the CA only when the Bundle's ConfigMap holds
certificates and nothing else.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from typer.testing import CliRunner

from modelplane.api.models import ServingStack
from modelplane.catalog.configuration import CA_KEY, CLUSTER_CA, GATEWAY_NAME, NS
from modelplane.cli.main import app
from modelplane.observe.state import Listed, to_observed
from modelplane.plan import plan
from modelplane.plan.gateway import published_address, published_ca
from modelplane.wire import DIGEST_ANNOTATION, MANAGED_BY, MANAGED_BY_LABEL, RELEASE_DIGEST_LABEL

from .conftest import manifest

GATEWAYS = ("gateway.networking.k8s.io/v1", "Gateway")


def release_secret(
    release: str,
    namespace: str,
    revision: int,
    status: str = "deployed",
    *,
    name: str | None = None,
    version: str | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name or f"sh.helm.release.v1.{release}.v{revision}",
            "namespace": namespace,
            "labels": {
                "owner": "helm",
                "name": release,
                "status": status,
                "version": version if version is not None else str(revision),
                RELEASE_DIGEST_LABEL: "d1",
            },
        },
        "type": "helm.sh/release.v1",
    }


REAL = release_secret("mp-cert-manager", "cert-manager", 1)


def releases(*secrets: dict[str, Any]) -> dict[str, tuple[str, int, str]]:
    observed = to_observed(Listed(apis={}, release_secrets=list(secrets)))
    return {n: (r.namespace, r.revision, r.status) for n, r in observed.releases.items()}


def test_the_release_secret_in_its_own_namespace_is_the_release() -> None:
    assert releases(REAL) == {"mp-cert-manager": ("cert-manager", 1, "deployed")}


@pytest.mark.parametrize(
    "fake",
    [
        # The case: a newer, pending revision from a tenant's namespace.
        release_secret("mp-cert-manager", "tenant-a", 7, "pending-install"),
        # In the release namespace, but not under Helm's name for it.
        release_secret("mp-cert-manager", "cert-manager", 7, "failed", name="look-alike"),
        # Helm's name of one revision, labelled as another.
        release_secret(
            "mp-cert-manager",
            "cert-manager",
            7,
            "failed",
            name="sh.helm.release.v1.mp-cert-manager.v7",
            version="8",
        ),
        # A version Helm never writes.
        release_secret("mp-cert-manager", "cert-manager", 7, "failed", version="seven"),
    ],
    ids=["other-namespace", "other-name", "labels-disagree", "version-not-a-number"],
)
def test_a_look_alike_release_secret_is_ignored(fake: dict[str, Any]) -> None:
    assert releases(REAL, fake) == {"mp-cert-manager": ("cert-manager", 1, "deployed")}
    # Nor does a look-alike stand in for a release that is missing.
    assert releases(fake) == {}


def test_a_release_the_catalog_does_not_install_is_ignored() -> None:
    assert releases(release_secret("mp-something-else", "cert-manager", 1)) == {}


def gateway(namespace: str, address: str, name: str = GATEWAY_NAME) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            "annotations": {DIGEST_ANNOTATION: "d1"},
        },
        "status": {"addresses": [{"type": "IPAddress", "value": address}]},
    }


def addresses(*gateways: dict[str, Any]) -> list[str]:
    return to_observed(Listed(apis={}, items={GATEWAYS: list(gateways)})).gateway_addresses


def test_the_gateway_address_is_only_the_products_gateways() -> None:
    ours = gateway(NS, "203.0.113.9")
    # Listed after ours: the last one listed used to win.
    tenant = gateway("tenant-a", "198.51.100.66")
    assert addresses(ours, tenant) == ["203.0.113.9"]
    assert addresses(tenant) == []


@pytest.mark.parametrize(
    "value", ["x" * 254, "10.0.0.1\x1b[2J", "a b", "", 17], ids=["long", "esc", "space", "", "int"]
)
def test_an_address_that_is_no_address_is_not_published(value: Any) -> None:
    # Observed as the target holds it (strings only); the plan publishes none.
    assert published_address(addresses(gateway(NS, value))) is None


def test_the_first_address_shaped_like_one_is_published() -> None:
    assert published_address(["a b", "203.0.113.9", "198.51.100.1"]) == "203.0.113.9"


def _certificate(ca: bool = True) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "modelplane-cluster-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _private_key() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


CERT = _certificate()


def bundle(data: dict[str, str] | None) -> tuple[str | None, str | None]:
    cm = None if data is None else {"metadata": {"name": CLUSTER_CA, "namespace": NS}, "data": data}
    # The ConfigMap as observed, then the plan's verdict on it.
    raw = to_observed(Listed(apis={}, ca_configmap=cm)).bundle_ca_certificate
    return published_ca(raw) if raw else (None, None)


def test_certificates_are_published() -> None:
    other = _certificate()
    assert bundle({CA_KEY: CERT}) == (CERT, None)
    assert bundle({CA_KEY: CERT + "\n" + other}) == (CERT + other, None)


@pytest.mark.parametrize("data", [None, {}, {CA_KEY: ""}], ids=["no-configmap", "no-key", "empty"])
def test_no_ca_yet_is_no_problem(data: dict[str, str] | None) -> None:
    assert bundle(data) == (None, None)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (CERT + _private_key(), "PRIVATE KEY"),
        (_private_key(), "PRIVATE KEY"),
        ("garbage\n" + CERT, "text outside"),
        ("-----BEGIN CERTIFICATE-----\nMIIBnotacert\n-----END CERTIFICATE-----\n", "not a cert"),
        (CERT * 17, "more than 16"),
        ("-----BEGIN CERTIFICATE-----\n" + "A" * 70_000 + "\n-----END CERTIFICATE-----\n", "bytes"),
    ],
    ids=["cert-and-key", "key", "garbage", "bad-der", "too-many", "too-large"],
)
def test_anything_but_certificates_is_not_published_and_says_why(text: str, problem: str) -> None:
    ca, why = bundle({CA_KEY: text})
    assert ca is None
    assert why is not None and problem in why
    assert f"ConfigMap {NS}/{CLUSTER_CA} key {CA_KEY}" in why
    assert "MII" not in why and len(why) <= 300  # never the text


def test_the_plan_carries_why_the_ca_is_not_published() -> None:
    stack = ServingStack.model_validate(manifest(gateway={"hostname": "west.example.com"}))
    ca = bundle({CA_KEY: CERT + _private_key()})
    observed = to_observed(
        Listed(apis={}, ca_configmap={"metadata": {}, "data": {CA_KEY: CERT + _private_key()}})
    )
    gateway = plan(stack, observed).gateway
    assert (gateway.ca_certificate, gateway.ca_problem) == ca
    assert gateway.ca_problem is not None and "PRIVATE KEY" in gateway.ca_problem


def test_render_observed_judges_the_ca_and_address_as_the_operator_does(tmp_path: Path) -> None:
    # render --observed reads Observed from a file, past to_observed: the
    # plan's own judgement is what keeps it from showing what the hub never
    # would.
    stack = tmp_path / "stack.json"
    stack.write_text(json.dumps(manifest(gateway={"hostname": "west.example.com"})))
    observed = tmp_path / "observed.json"
    observed.write_text(
        json.dumps(
            {
                "gateway_addresses": ["not an address", "203.0.113.9"],
                "bundle_ca_certificate": CERT + _private_key(),
            }
        )
    )
    result = CliRunner().invoke(
        app, ["render", "-f", str(stack), "--observed", str(observed), "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    gateway = json.loads(result.stdout)["gateway"]
    assert gateway["address"] == "203.0.113.9"
    assert gateway["caCertificate"] is None
    assert "PRIVATE KEY" in gateway["caProblem"]
    assert "PRIVATE KEY-----" not in result.stdout


@pytest.mark.parametrize(
    "item",
    [
        {},
        {"metadata": ["no", "object"]},
        {"metadata": {}},
        {"metadata": {"name": "x", "annotations": "no map"}},
    ],
    ids=["empty", "metadata not an object", "no name", "annotations not a map"],
)
def test_an_item_a_plan_cannot_name_is_passed_over(item: dict[str, Any]) -> None:
    # A reflector once kept such a body from a List answered to a watch, and
    # every plan of the stack failed on it (KeyError: 'metadata').
    observed = to_observed(Listed(apis={}, items={GATEWAYS: [item]}))
    assert observed.applied == {}
    assert observed.gateway_addresses == []
