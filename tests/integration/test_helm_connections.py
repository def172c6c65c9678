"""Every connection helm makes goes to an address the deny list admits: the real helm.

A fake API server on loopback answers every request with a redirect to a
denied address (127.0.0.2, added to the deny list: every 127/8 address is
this host's, so a listener there proves whether helm ever reached it). helm
runs as the operator runs it, through ``TargetHelm``, over HTTPS (CONNECT
through the proxy) and plain HTTP (absolute-form requests). Another puts
HELM_KUBETOKEN and HELM_KUBEAPISERVER in the operator's environment and
shows neither reaches helm. The last two run the operator: with no helm on
PATH, and against a kubeconfig that skips TLS verification.
"""

from __future__ import annotations

import base64
import datetime
import http.server
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tests.integration.hubs import Harness
from tests.testenv import TestEnv
from tests.waiting import wait_for

from modelplane.actions.helm import NO_HELM, Helm, HelmConnectionDenied, HelmError, TargetHelm
from modelplane.kube.address import DEFAULT_DENIED
from modelplane.kube.answers import describe_error
from modelplane.kube.errors import ErrorKind, classify

DENIED_IP = "127.0.0.2"
DENY = (*DEFAULT_DENIED, ipaddress.ip_network(f"{DENIED_IP}/32"))
KUBECONFIG_TOKEN = "the-kubeconfigs-own-token"
POD_TOKEN = "a-token-in-the-operators-environment"


class Listener:
    """A TCP listener on the denied address that counts every connection made to it."""

    def __init__(self) -> None:
        self.sock = socket.create_server((DENIED_IP, 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


def _self_signed() -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-apiserver")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


@dataclass
class FakeApiServer:
    """Answers every request with ``redirect`` (a 302 to it) or, without one, a 403 Status."""

    tmp: Path
    tls: bool
    redirect: str | None = None
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Authorization)

    def __post_init__(self) -> None:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                server.requests.append((self.path, self.headers.get("Authorization")))
                if server.redirect is not None:
                    self.send_response(302)
                    self.send_header("Location", server.redirect + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps(
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "reason": "Forbidden",
                        "code": 403,
                        "message": "forbidden",
                    }
                ).encode()
                self.send_response(403)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.ca = b""
        if self.tls:
            cert, key = _self_signed()
            (self.tmp / "cert.pem").write_bytes(cert)
            (self.tmp / "key.pem").write_bytes(key)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.tmp / "cert.pem", self.tmp / "key.pem")
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            self.ca = cert
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"

    def kubeconfig(self) -> str:
        cluster: dict[str, str] = {"server": self.url}
        if self.tls:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca).decode()
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "t",
                "contexts": [{"name": "t", "context": {"cluster": "c", "user": "u"}}],
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": KUBECONFIG_TOKEN}}],
            }
        )

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    yield found
    found.close()


@pytest.fixture
def target_helm(helm: Helm, tmp_path: Path) -> TargetHelm:
    return TargetHelm.guarding(
        Helm(str(helm.binary), tmp_path / "helm-home", timeout_seconds=30), DENY
    )


@pytest.mark.parametrize("tls", [True, False], ids=["https", "http"])
async def test_helm_is_never_let_through_a_redirect_to_a_denied_address(
    tls: bool, tmp_path: Path, listener: Listener, target_helm: TargetHelm
) -> None:
    scheme = "https" if tls else "http"
    server = FakeApiServer(tmp_path, tls, redirect=f"{scheme}://{DENIED_IP}:{listener.port}")
    try:
        with pytest.raises(HelmConnectionDenied) as caught:
            await target_helm.run("list", "--namespace", "default", kubeconfig=server.kubeconfig())
    finally:
        server.close()
    # helm asked the server, was redirected, and never reached the address behind it.
    assert server.requests, "helm never reached the fake API server"
    assert listener.accepted == 0
    # What the operator reports: a denied address, naming it and its range.
    assert classify(caught.value).kind is ErrorKind.ADDRESS_DENIED
    said = describe_error(caught.value)
    assert f"{DENIED_IP}/32" in said
    assert "helm was refused a connection" in said


async def test_helm_takes_no_server_or_token_from_the_operators_environment(
    tmp_path: Path,
    listener: Listener,
    target_helm: TargetHelm,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HELM_KUBETOKEN", POD_TOKEN)
    monkeypatch.setenv("HELM_KUBEAPISERVER", f"https://{DENIED_IP}:{listener.port}")
    monkeypatch.setenv("HTTPS_PROXY", f"http://{DENIED_IP}:{listener.port}")
    server = FakeApiServer(tmp_path, tls=True)
    try:
        with pytest.raises(HelmError):
            await target_helm.run("list", "--namespace", "default", kubeconfig=server.kubeconfig())
    finally:
        server.close()
    assert server.requests, "helm did not go to the kubeconfig's server"
    assert {auth for _, auth in server.requests} == {f"Bearer {KUBECONFIG_TOKEN}"}
    assert listener.accepted == 0


def test_helm_reaches_a_real_api_server_through_the_proxy(
    target_env: TestEnv, target_helm: TargetHelm
) -> None:
    import asyncio

    kubeconfig = yaml.safe_dump(target_env.kubeconfig)
    out = asyncio.run(
        target_helm.run("list", "--all-namespaces", "-o", "json", kubeconfig=kubeconfig)
    )
    assert isinstance(json.loads(out), list)


def test_an_operator_without_helm_runs_and_says_so_where_helm_is_needed(
    harness: Harness, tmp_path: Path
) -> None:
    """PATH stripped of helm, MODELPLANE_HELM unset: no traceback, no exit, a clear Ready."""
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create({})  # Managed: releases need helm
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "MODELPLANE_HELM"}
    env["PATH"] = str(empty)
    sub = harness.substrate
    harness.proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "modelplane.cli.main",
            "run",
            "--kubeconfig",
            str(harness.hub_env.kubeconfig_path),
            "--namespace",
            harness.ns,
            "--chart-repository",
            sub.chart_repository,
            "--gaie-manifests-url",
            f"{sub.manifests_base}/gaie-crds",
            "--manifests-url-for",
            f"modelexpress-crds={sub.manifests_base}/modelexpress-crds",
        ],
        stdout=harness.log.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
    )

    def said() -> dict[str, str] | None:
        ready = harness.condition("Ready")
        return ready if ready.get("status") == "False" and NO_HELM in ready["message"] else None

    ready = wait_for("Ready=False naming the missing helm", said, deadline=120)
    # A component that could not be acted on, as any failed release is.
    assert ready["reason"] == "ActionFailed"
    assert harness.proc.poll() is None, harness.log.read_text()[-2000:]
    assert "Traceback" not in harness.log.read_text()


def test_a_kubeconfig_that_skips_tls_verification_is_said_in_an_event_and_a_condition(
    harness: Harness,
) -> None:
    doc = dict(harness.target_env.kubeconfig)
    doc["clusters"] = [
        {
            "name": entry["name"],
            "cluster": {"server": entry["cluster"]["server"], "insecure-skip-tls-verify": True},
        }
        for entry in doc["clusters"]
    ]
    harness.put_secret({"kubeconfig": yaml.safe_dump(doc)})
    harness.create({"components": "Provided"})
    harness.start()

    def warned() -> list[dict[str, str]] | None:
        events = harness.hub_env.http_client().get(f"/api/v1/namespaces/{harness.ns}/events")
        found = [
            e
            for e in events.json()["items"]
            if e["reason"] == "InsecureTarget" and e["type"] == "Warning"
        ]
        return found or None

    (event,) = wait_for("an InsecureTarget Warning event", warned, deadline=90)
    assert "insecure-skip-tls-verify" in event["message"]
    # Allowed, though: the operator reached the target and reconciled it.
    harness.wait_condition("RequirementsMet", "False", "RequirementsUnmet", deadline=90)
    # And said for as long as it stands, where tools look, not only once.
    verified = harness.condition("TargetVerified")
    assert (verified.get("status"), verified.get("reason")) == ("False", "InsecureSkipTLSVerify")
    assert "insecure-skip-tls-verify" in verified["message"]
