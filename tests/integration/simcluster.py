"""Simulated-cluster targets for integration tests (conftest.py registers the fixtures).

``sim_target`` is one simulated GPU cluster for the session: kwok with the
default node layout (two H200 nodes, one CPU node), the upstream CRDs a
Provided-mode Standard stack checks, and the real Envoy Gateway and
trust-manager controllers. ``sim_nodes_target`` has the nodes only, for
Managed mode, whose fixture charts bring their own CRDs.

The upstream CRDs come from the shared fixtures (``../shared/fixtures/upstream``
next to the repository, or ``$MODELPLANE_UPSTREAM_FIXTURES``); tests that need
them are skipped, saying so, when that directory is absent.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Namespace, Secret
from tests.integration.substrate import Substrate
from tests.shared_fixtures import PROVIDED_STANDARD, upstream_dir
from tests.testenv import TestbinMissingError, TestEnv, find_binaries
from tests.testenv.controllers import KUBE_CONTROLLERS, find_controller
from tests.testenv.nodes import (
    DEFAULT_LAYOUT,
    HardwareMissingError,
    NodeLayout,
    hardware_dir,
)
from tests.testenv.simcluster import SimCluster

from modelplane.catalog.components._common import GPU_DEVICE_CLASS, GPU_TAINT_KEY
from modelplane.catalog.configuration import CLUSTER_CA, GATEWAY_NAME, NS, SERVING_CERT

REPO = Path(__file__).resolve().parents[2]


def upstream_crds(folders: Sequence[str] = PROVIDED_STANDARD) -> list[Path]:
    """The upstream CRD folders, or skip the test saying where they were looked for."""
    root = upstream_dir()
    if not root.is_dir():
        pytest.skip(
            f"upstream CRD fixtures not found at {root} "
            "(set MODELPLANE_UPSTREAM_FIXTURES to the shared fixtures/upstream directory)"
        )
    return [root / f for f in folders]


def require_gpu_hardware() -> None:
    """Skip the test, saying where the profile was looked for, unless GPU nodes can be made."""
    try:
        hardware_dir()
    except HardwareMissingError as exc:
        message = str(exc)
    else:
        return
    pytest.skip(message)


@contextlib.contextmanager
def simulated(
    directory: Path,
    *,
    nodes: str | None = DEFAULT_LAYOUT,
    crds: Sequence[Path] = (),
    gateway_controllers: bool = False,
) -> Iterator[TestEnv]:
    """A fresh API server with the simulated cluster started on it, all stopped on exit."""
    layout = NodeLayout.parse(nodes) if nodes else None
    if layout is not None and layout.gpu:
        require_gpu_hardware()
    wanted = ["kwok", *KUBE_CONTROLLERS] if nodes else []
    wanted += ["envoy-gateway", "trust-manager"] if gateway_controllers else []
    try:
        find_binaries()
        for name in wanted:
            find_controller(name)
    except TestbinMissingError as exc:
        message = str(exc)
    else:
        message = ""
    if message:
        pytest.fail(message, pytrace=False)  # outside `except`: no chained traceback
    env = TestEnv(directory)
    cluster = SimCluster(env)
    try:
        env.start()
        cluster.start(
            nodes=layout,
            crds=crds,
            gateway_controllers=gateway_controllers,
        )
        yield env
    finally:
        cluster.stop()
        env.stop()


@pytest.fixture(scope="session")
def sim_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestEnv]:
    """The simulated GPU cluster with upstream CRDs and the real gateway controllers."""
    crds = upstream_crds()
    with simulated(tmp_path_factory.mktemp("sim"), crds=crds, gateway_controllers=True) as env:
        yield env


@pytest.fixture(scope="session")
def sim_nodes_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestEnv]:
    """A simulated GPU cluster with nodes only: no CRDs, no gateway controllers."""
    with simulated(tmp_path_factory.mktemp("sim-nodes")) as env:
        yield env


# --------------------------------------------------------------------------
# What the gateway tests and bench/bench_gateway.py share
# --------------------------------------------------------------------------

# Provided mode fetches nothing; the operator's flags still name a substrate.
NO_SUBSTRATE = Substrate("http://127.0.0.1:9/charts", "http://127.0.0.1:9/manifests", REPO)

ENVOY_NS = "envoy-gateway-system"
OWNING_GATEWAY = "gateway.envoyproxy.io/owning-gateway-name"
LB_ADDRESS = "203.0.113.10"  # TEST-NET-3: no cloud load balancer here, so the test plays it


@dataclass(frozen=True)
class GatewayPki:
    """The gateway's private CA and serving certificate, as cert-manager would issue them.

    cert-manager's controller cannot be built from the Go module proxy (its
    binaries are separate, untagged modules), so tests create the Secrets
    behind the Certificates ``modelplane-cluster-ca`` and
    ``cluster-gateway-serving`` themselves; everything after that is done by
    the real trust-manager and Envoy Gateway.
    """

    ca_pem: str
    ca_key_pem: str
    serving_pem: str
    serving_key_pem: str
    client_ca_pem: str


def _pem_key(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _cert(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[str, ec.EllipticCurvePrivateKey]
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer[0])]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=30))
    )


def _ca(name: str) -> tuple[str, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _cert(name, key, (name, key))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key


def gateway_pki(hostname: str) -> GatewayPki:
    ca_pem, ca_key = _ca("modelplane-cluster-ca")
    key = ec.generate_private_key(ec.SECP256R1())
    serving = (
        _cert(hostname, key, ("modelplane-cluster-ca", ca_key))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(hostname)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    client_ca_pem, _ = _ca("fleet-gateway-a")
    return GatewayPki(
        ca_pem=ca_pem,
        ca_key_pem=_pem_key(ca_key),
        serving_pem=serving.public_bytes(serialization.Encoding.PEM).decode(),
        serving_key_pem=_pem_key(key),
        client_ca_pem=client_ca_pem,
    )


def put_issued_secrets(target: Client, pki: GatewayPki) -> None:
    """The Secrets cert-manager would have issued (see :class:`GatewayPki`)."""
    target.apply(Namespace.from_dict({"metadata": {"name": NS}}), field_manager="test")
    for name, crt, key in (
        (CLUSTER_CA, pki.ca_pem, pki.ca_key_pem),
        (SERVING_CERT, pki.serving_pem, pki.serving_key_pem),
    ):
        target.apply(
            Secret.from_dict(
                {
                    "metadata": {"name": name, "namespace": NS},
                    "type": "kubernetes.io/tls",
                    "stringData": {"tls.crt": crt, "tls.key": key, "ca.crt": pki.ca_pem},
                }
            ),
            field_manager="test",
            force=True,
        )


def delete_issued_secrets(target: Client) -> None:
    for name in (CLUSTER_CA, SERVING_CERT):
        with contextlib.suppress(ApiError):
            target.delete(Secret, name, namespace=NS)


def envoy_objects(target: Client, kind: type[Any]) -> list[Any]:
    """The Deployments or Services Envoy Gateway created for the operator's Gateway."""
    return list(target.list(kind, namespace=ENVOY_NS, labels={OWNING_GATEWAY: GATEWAY_NAME}))


def gpu_claim_and_pod(
    namespace: str, pod: str, *, node: str | None = None, finalizers: Sequence[str] = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ResourceClaim ``gpu`` for one GPU of the DRA driver's class, and a pod holding it.

    The real kube-scheduler allocates the claim from a GPU node's
    ResourceSlices (``node`` pins which) and reserves it for the pod.
    """
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_DEVICE_CLASS}}]
            }
        },
    }
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu"}],
        "containers": [
            {"name": "serve", "image": "serve:1", "resources": {"claims": [{"name": "gpu"}]}}
        ],
        "tolerations": [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    meta: dict[str, Any] = {"name": pod, "namespace": namespace}
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return claim, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
