"""An admission webhook that refuses calls for a while, as cert-manager's does after install.

The test runs the webhook: an HTTPS server on loopback with its own CA,
speaking admission.k8s.io/v1 AdmissionReview, registered on the target by a
ValidatingWebhookConfiguration (``clientConfig.url``, ``caBundle``) for
cert-manager.io objects, as cert-manager's chart registers
``webhook.cert-manager.io``. It answers the first ``FAILURES`` calls with an
HTTP 500, then admits.

Why a 500 and not a denial: a cert-manager webhook that is not ready yet
does not deny, it cannot be called. The API server then answers the client
500 InternalError ``failed calling webhook "webhook.cert-manager.io": failed
to call webhook: Post ...: connect: connection refused`` (or an x509 error
while cainjector has not injected the CA yet); see cert-manager issues 3133,
3840, 4453 and https://cert-manager.io/docs/troubleshooting/webhook/. A
500 from the webhook gives that same InternalError, ``failed calling
webhook``, only with another cause, and lets the test count the calls. A
denial (``admission webhook ... denied the request``) is a verdict on the
object, which retrying does not change.

The operator runs with a 300 s resync, beyond every deadline here: the
stack converges only if the operator retries on its own.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import http.server
import ipaddress
import itertools
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from lightkube import Client
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.admissionregistration_v1 import ValidatingWebhookConfiguration
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace
from tests.integration.hubs import SS, Harness, client_for, crd_established
from tests.integration.substrate import CHART_CRDS, MANIFEST_CRDS, Substrate, crd
from tests.shared_fixtures import upstream_dir
from tests.testenv import TestEnv
from tests.waiting import wait_for

from modelplane.catalog import components as catalog
from modelplane.catalog.configuration import CLUSTER_CA, NS, SELF_SIGNED_ISSUER, SERVING_CERT

# Where the other integration tests look too (MODELPLANE_UPSTREAM_FIXTURES wins).
UPSTREAM = upstream_dir()
# The cert-manager chart's names: ValidatingWebhookConfiguration
# "<fullname>-webhook" holding the webhook "webhook.cert-manager.io"
# (deploy/charts/cert-manager/templates/webhook-validating-webhook.yaml).
CONFIGURATION = "cert-manager-webhook"
WEBHOOK = "webhook.cert-manager.io"
FAILURES = 3
PROBE_NAMESPACE = "webhook-probe"
ISSUER = create_namespaced_resource("cert-manager.io", "v1", "Issuer", "issuers")
CERTIFICATE = create_namespaced_resource("cert-manager.io", "v1", "Certificate", "certificates")
DEVICE_CLASS = create_global_resource("resource.k8s.io", "v1", "DeviceClass", "deviceclasses")


# -- the webhook ------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def _pki() -> Pki:
    """A CA of the test's own and a serving certificate for 127.0.0.1 signed by it."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "webhook-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return Pki(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


@dataclass(frozen=True)
class Call:
    """One AdmissionReview the webhook answered, with the hub as it stood then."""

    at: float
    kind: str
    name: str
    allowed: bool
    hub: dict[str, Any]


@dataclass
class NotReadyWebhook:
    """Answers HTTP 500 to the first ``failures`` calls, then admits everything.

    Calls for objects in PROBE_NAMESPACE are the test's own probes: always
    admitted, never counted. ``snapshot`` runs before each counted call is
    answered, while the operator waits for that answer.
    """

    failures: int
    snapshot: Callable[[], dict[str, Any]]
    calls: list[Call] = field(default_factory=list)
    probes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, review: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        request = review.get("request") or {}
        uid = request.get("uid", "")
        admitted = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": True},
        }
        if request.get("namespace") == PROBE_NAMESPACE:
            with self.lock:
                self.probes += 1
            return 200, admitted
        with self.lock:
            allowed = len([c for c in self.calls if not c.allowed]) >= self.failures
            self.calls.append(
                Call(
                    at=time.monotonic(),
                    kind=str((request.get("kind") or {}).get("kind")),
                    name=str(request.get("name")),
                    allowed=allowed,
                    hub=self.snapshot(),
                )
            )
        return (200, admitted) if allowed else (500, None)

    @property
    def failed(self) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if not c.allowed]


def _handler(webhook: NotReadyWebhook) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            code, body = webhook.answer(review)
            data = json.dumps(body).encode() if body else b"webhook not ready\n"
            self.send_response(code)
            kind = "application/json" if body else "text/plain"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextlib.contextmanager
def serve_webhook(webhook: NotReadyWebhook, pki: Pki, tmp: Path) -> Iterator[str]:
    """Serve ``webhook`` over HTTPS on 127.0.0.1 until the block ends; yields its URL."""
    (tmp / "tls.crt").write_bytes(pki.cert_pem)
    (tmp / "tls.key").write_bytes(pki.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp / "tls.crt", tmp / "tls.key")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(webhook))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/validate"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _configuration(url: str, ca_pem: bytes) -> ValidatingWebhookConfiguration:
    return ValidatingWebhookConfiguration.from_dict(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": CONFIGURATION},
            "webhooks": [
                {
                    "name": WEBHOOK,
                    "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
                    "rules": [
                        {
                            "apiGroups": ["cert-manager.io"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["*/*"],
                        }
                    ],
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 10,
                }
            ],
        }
    )


# -- the target's substrate ---------------------------------------------------


def _provided_crds() -> list[dict[str, Any]]:
    """The Standard stack's CRDs: cert-manager's real ones, stand-ins for the rest.

    Issuer and Certificate come from the upstream release, so the objects the
    webhook guards also pass cert-manager's own schema.
    """
    files = [
        UPSTREAM / "cert-manager" / "cert-manager.io_issuers.yaml",
        UPSTREAM / "cert-manager" / "cert-manager.io_certificates.yaml",
    ]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        pytest.skip(f"shared upstream fixtures are absent: {', '.join(missing)}")
    upstream = [yaml.safe_load(f.read_text()) for f in files]
    standard = {
        c.chart.chart for c in catalog.components_of_stack(catalog.Stack.STANDARD) if c.chart
    }
    stand_ins = [
        crd(*spec)
        for chart, specs in CHART_CRDS.items()
        if chart in standard and chart != "cert-manager"
        for spec in specs
    ] + [crd(*spec) for spec in MANIFEST_CRDS["gaie-crds"]]
    return upstream + stand_ins


def _install_substrate(target: Client) -> None:
    crds = _provided_crds()
    for body in crds:
        target.apply(CustomResourceDefinition.from_dict(body), field_manager="owner", force=True)
    target.apply(
        DEVICE_CLASS.from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": catalog.GPU_DEVICE_CLASS},
                "spec": {},
            }
        ),
        field_manager="owner",
    )
    for body in crds:
        name = body["metadata"]["name"]
        wait_for(f"CRD {name} established", lambda n=name: crd_established(target, n), deadline=60)


def _probe(target: Client, webhook: NotReadyWebhook) -> bool:
    """True once the API server calls the webhook (it picks a new configuration up late)."""
    issuer = ISSUER.from_dict(
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Issuer",
            "metadata": {"name": "probe", "namespace": PROBE_NAMESPACE},
            "spec": {"selfSigned": {}},
        }
    )
    before = webhook.probes
    target.create(issuer, dry_run=True)
    return webhook.probes > before


# -- the test -------------------------------------------------------------------


@pytest.fixture
def harness(hub: Client, hub_env: TestEnv, target: TestEnv, tmp_path: Path) -> Iterator[Harness]:
    # Provided mode installs no chart and fetches no manifest: the operator
    # gets addresses where nothing answers, so either would fail loudly.
    nowhere = Substrate("http://127.0.0.1:9/charts", "http://127.0.0.1:9/manifests", tmp_path)
    h = Harness(hub, hub_env, target, nowhere, tmp_path, "t-webhook-not-ready")
    try:
        yield h
    finally:
        h.stop()


def _hub_state(h: Harness, hub: Client) -> dict[str, Any]:
    try:
        obj = hub.get(SS, "stack", namespace=h.ns).to_dict()
    except Exception as err:  # raised in the webhook thread, it would only drop the call
        return {"error": repr(err)}
    ready = next(
        (c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == "Ready"), {}
    )
    return {
        "resourceVersion": obj["metadata"]["resourceVersion"],
        "ready": (ready.get("status"), ready.get("reason")),
        "status_patches": h.hub_env.request_total(
            verb="PATCH", resource="servingstacks", subresource="status"
        ),
    }


def test_a_webhook_that_is_not_ready_yet_is_retried_with_backoff_and_named(
    harness: Harness, tmp_path: Path
) -> None:
    h = harness
    # A client of its own: the webhook's thread reads the hub while the test polls it.
    hub = client_for(h.hub_env)
    webhook = NotReadyWebhook(FAILURES, snapshot=lambda: _hub_state(h, hub))
    _install_substrate(h.target)
    pki = _pki()
    with serve_webhook(webhook, pki, tmp_path) as url:
        h.target.apply(Namespace.from_dict({"metadata": {"name": PROBE_NAMESPACE}}))
        h.target.apply(_configuration(url, pki.ca_pem), field_manager="owner")
        wait_for("the webhook called", lambda: _probe(h.target, webhook), deadline=30)

        h.put_secret({"kubeconfig": h.kubeconfig_text()})
        h.create({"components": "Provided", "gateway": {"hostname": "west.example.com"}})
        h.start("--resync", "300")

        ready = h.wait_condition("Ready", "False", "WebhookNotReady", deadline=90)
        refused = webhook.failed[0]
        # The API server's own words name the webhook; the operator adds the
        # configuration that holds it and the object it refused.
        assert f'failed calling webhook "{WEBHOOK}"' in ready["message"], ready
        assert f"ValidatingWebhookConfiguration {CONFIGURATION}" in ready["message"], ready
        assert f"{refused.kind} {NS}/{refused.name}" in ready["message"], ready

        # Retried by the operator on its own: Ready within a wait far below
        # the 300 s resync.
        h.wait_condition("Ready", "True", deadline=150)
        failed = webhook.failed
        assert len(failed) == FAILURES
        # With backoff: each wait at least the 5, 10, 20 s the schedule
        # gives (less the spread of two requests' latency). Lower bounds
        # only, which a loaded machine cannot break (it only lengthens a
        # wait); the exact schedule is pinned on an injected clock in
        # tests/unit/test_webhook_errors.py.
        gaps = [b.at - a.at for a, b in itertools.pairwise(failed)]
        gaps.append(next(c for c in webhook.calls if c.allowed).at - failed[-1].at)
        least = [0.8 * 5.0 * 2**n for n in range(len(gaps))]
        assert all(gap >= low for gap, low in zip(gaps, least, strict=True)), (gaps, least)

        # Status written when it changed, not on every retry: as the first
        # retry was called, Ready already said WebhookNotReady; from then to
        # the first admitted call the hub saw no status write at all.
        first_retry = failed[1].hub
        first_admitted = next(c for c in webhook.calls if c.allowed).hub
        assert first_retry["ready"] == ("False", "WebhookNotReady"), first_retry
        assert first_admitted["status_patches"] == first_retry["status_patches"], (
            first_retry,
            first_admitted,
        )
        assert first_admitted["resourceVersion"] == first_retry["resourceVersion"]

    # Converged without duplicates: each cert-manager object once, as planned.
    issuers = {i.metadata.name for i in h.target.list(ISSUER, namespace=NS)}
    certificates = {c.metadata.name for c in h.target.list(CERTIFICATE, namespace=NS)}
    assert issuers == {SELF_SIGNED_ISSUER, CLUSTER_CA}
    assert certificates == {CLUSTER_CA, SERVING_CERT}
