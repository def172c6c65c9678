"""A target's address and its answers are untrusted: the operator and check, end to end.

Every server here listens on loopback and plays a part: 127.0.0.2 stands for
a denied address (the metadata service) and is put on the deny list; the
servers on 127.0.0.3 are allowed and answer like things that are not an API
server (a metadata service's credentials, an HTML page, plain text), each
with a secret-looking body and reason phrase. No test sends anything to a
non-loopback address: the default list is unit-tested on addresses alone
(tests/unit/test_target_address.py).
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from tests.integration.hubs import SS, ensure_namespace, put_kubeconfig, put_stack, stack_body
from tests.integration.substrate import Substrate, run_operator
from tests.testenv import TestEnv
from tests.waiting import wait_for
from typer.testing import CliRunner

from modelplane.cli.main import app

SECRET = "AKIAEXAMPLESECRET-wJalrXUtnFEMI"
REASON = "ReasonPhraseSecret-7f3a"
TOKEN = "target-token-that-never-shows"
DENIED_IP = "127.0.0.2"
ALLOWED_IP = "127.0.0.3"

# Aggregated discovery of a server with only a few core resources.
_CORE = {
    "kind": "APIGroupDiscoveryList",
    "apiVersion": "apidiscovery.k8s.io/v2",
    "items": [
        {
            "metadata": {"name": ""},
            "versions": [
                {
                    "version": "v1",
                    "resources": [
                        {"resource": r, "responseKind": {"kind": k}, "scope": s, "verbs": ["get"]}
                        for r, k, s in (
                            ("namespaces", "Namespace", "Cluster"),
                            ("secrets", "Secret", "Namespaced"),
                            ("configmaps", "ConfigMap", "Namespaced"),
                        )
                    ],
                }
            ],
        }
    ],
}
_GROUPS = {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "items": []}


_LEASES = "/apis/coordination.k8s.io/v1/namespaces/modelplane-system/leases"
_NOT_FOUND = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}


def _answer(kind: str) -> tuple[int, str, bytes]:
    """An error answer that is not a Kubernetes Status: (code, content type, body)."""
    if kind == "metadata":
        creds = {"Code": "Success", "AccessKeyId": SECRET, "Token": SECRET, "message": SECRET}
        return 403, "application/json", json.dumps(creds).encode()
    if kind == "html":
        return 500, "text/html; charset=utf-8", f"<html><h1>{SECRET}</h1></html>".encode()
    return 404, "text/plain", f"secret: {SECRET}\n".encode()


@dataclass
class Server:
    """An HTTP server on one loopback address; the first path segment picks its part."""

    ip: str
    requests: list[str] = field(default_factory=list)
    # The operator claims a target before it writes anything else; the
    # "apply" and "helm" parts each keep their own Lease so the claim succeeds
    # and the next write is the one that meets the HTML answer. One Lease for
    # both would be two stacks claiming one target: the later would find the
    # earlier's claim at its next reconcile.
    leases: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def _reply(self, code: int, content_type: str, body: bytes, reason: str) -> None:
                self.send_response(code, reason)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _handle(self) -> None:
                server.requests.append(f"{self.command} {self.path}")
                part, _, rest = self.path.lstrip("/").partition("/")
                path = "/" + rest.split("?", 1)[0]
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                helm = self.headers.get("User-Agent", "").startswith("Helm/")
                if part in ("metadata", "html", "text") or (part == "helm" and helm):
                    self._reply(*_answer("html" if part == "helm" else part), REASON)
                elif path in ("/api", "/apis"):
                    doc = _CORE if path == "/api" else _GROUPS
                    self._reply(200, "application/json", json.dumps(doc).encode(), "OK")
                elif part == "lists":
                    # Discovery works; every list is refused with a non-Status body.
                    self._reply(*_answer("metadata"), REASON)
                elif part in ("apply", "helm") and path.startswith(_LEASES):
                    if self.command == "POST":
                        server.leases[part] = body
                        self._reply(201, "application/json", body, "Created")
                    elif self.command == "GET" and part in server.leases:
                        self._reply(200, "application/json", server.leases[part], "OK")
                    else:
                        self._reply(404, "application/json", json.dumps(_NOT_FOUND).encode(), "")
                elif self.command == "GET":
                    empty = {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": []}
                    self._reply(200, "application/json", json.dumps(empty).encode(), "OK")
                elif part == "helm":  # the operator's own writes succeed
                    self._reply(200, "application/json", body, "OK")
                else:  # "apply": reads work, writes answer with an HTML page
                    self._reply(*_answer("html"), REASON)

            do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _handle

        self.httpd = http.server.ThreadingHTTPServer((self.ip, 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, part: str = "") -> str:
        return f"http://{self.ip}:{self.port}" + (f"/{part}" if part else "")

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def kubeconfig_for(server: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "t",
        "contexts": [{"name": "t", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": TOKEN}}],
    }


@pytest.fixture
def denied() -> Iterator[Server]:
    s = Server(DENIED_IP)
    yield s
    s.close()


@pytest.fixture
def allowed() -> Iterator[Server]:
    s = Server(ALLOWED_IP)
    yield s
    s.close()


# ---- modelplane check ------------------------------------------------------------


def _check(tmp_path: Path, server: str, *deny: str) -> Any:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig_for(server)))
    args = ["check", "--kubeconfig", str(path)]
    for cidr in deny:
        args += ["--deny-target-cidr", cidr]
    return CliRunner().invoke(app, args)


def test_check_never_connects_to_a_denied_address(tmp_path: Path, denied: Server) -> None:
    result = _check(tmp_path, denied.url(), f"{DENIED_IP}/32")
    assert result.exit_code == 2, result.output
    assert f"{DENIED_IP} is, in the denied range {DENIED_IP}/32" in result.output
    assert TOKEN not in result.output
    assert denied.requests == []


def test_check_refuses_a_name_that_resolves_to_a_denied_address(tmp_path: Path) -> None:
    # localhost resolves to loopback addresses; deny every one it has.
    addresses = sorted({i[4][0] for i in socket.getaddrinfo("localhost", 0, 0, socket.SOCK_STREAM)})
    assert addresses, "localhost resolves to nothing"
    local = Server(addresses[0]) if ":" not in addresses[0] else Server("127.0.0.1")
    try:
        cidrs = [f"{a}/{128 if ':' in a else 32}" for a in addresses]
        result = _check(tmp_path, f"http://localhost:{local.port}", *cidrs)
    finally:
        local.close()
    assert result.exit_code == 2, result.output
    assert "localhost resolves to" in result.output
    assert local.requests == []


@pytest.mark.parametrize("part", ["metadata", "html", "text"])
def test_check_tells_a_non_status_answer_by_code_and_type(
    tmp_path: Path, allowed: Server, part: str
) -> None:
    code, content_type, _ = _answer(part)
    result = _check(tmp_path, allowed.url(part))
    assert result.exit_code == 2, result.output
    assert allowed.requests, "the allowed server was never asked"
    assert SECRET not in result.output
    assert REASON not in result.output
    media = content_type.split(";")[0]
    assert f"{code} an answer of type {media}, not a Kubernetes Status" in result.output


# ---- the operator ------------------------------------------------------------------


def _stack(hub: Client, ns: str, name: str, server: str, spec: dict[str, Any]) -> None:
    secret = f"{name}-kubeconfig"
    put_kubeconfig(hub, ns, kubeconfig_for(server), name=secret, key="k")
    put_stack(hub, stack_body(ns, name, spec, secret=secret, key="k"))


def _not_ready(hub: Client, ns: str, name: str, reason: str) -> dict[str, Any] | None:
    status = hub.get(SS, name, namespace=ns).to_dict().get("status") or {}
    for c in status.get("conditions") or []:
        if c["type"] == "Ready" and c["status"] == "False" and c["reason"] == reason:
            return dict(c)
    return None


def test_operator_refuses_denied_targets_and_repeats_no_foreign_body(
    hub: Client,
    hub_env: TestEnv,
    substrate: Substrate,
    denied: Server,
    allowed: Server,
    tmp_path: Path,
) -> None:
    ns = "t-target-address"
    ensure_namespace(hub, ns)
    provided = {"components": "Provided"}
    cases = {
        # name: (server, spec, reason, words the message must hold)
        "denied": (
            denied.url(),
            {},
            "TargetAddressDenied",
            [f"{DENIED_IP} is, in the denied range {DENIED_IP}/32"],
        ),
        "html": (allowed.url("html"), provided, "TargetError", ["500", "of type text/html"]),
        "metadata": (
            allowed.url("metadata"),
            provided,
            "TargetUnauthorized",
            ["403", "of type application/json"],
        ),
        "text": (allowed.url("text"), provided, "TargetError", ["404", "of type text/plain"]),
        # Discovery answers; lightkube's lists get the metadata service's JSON.
        "lists": (
            allowed.url("lists"),
            provided,
            "TargetUnauthorized",
            ["403", "of type application/json"],
        ),
        # Reads answer; the first apply gets an HTML page: an ActionFailed event.
        "apply": (allowed.url("apply"), provided, "ActionFailed", ["500", "of type text/html"]),
        # The operator's requests are answered; helm's get the HTML page.
        "helm": (
            allowed.url("helm"),
            {},
            "ActionFailed",
            ["Kubernetes cluster unreachable", "its answer is not repeated"],
        ),
    }
    for name, (server, spec, _, _) in cases.items():
        _stack(hub, ns, name, server, spec)
    log = tmp_path / "operator.log"
    deny = ["--deny-target-cidr", "default", "--deny-target-cidr", f"{DENIED_IP}/32"]
    proc = run_operator(hub_env.kubeconfig_path, substrate, ns, log, *deny)
    try:
        for name, (_, _, reason, words) in cases.items():
            try:
                c = wait_for(
                    f"Ready=False {reason} on {name}",
                    lambda name=name, reason=reason: _not_ready(hub, ns, name, reason),
                    deadline=90,
                )
            except AssertionError as err:
                status = hub.get(SS, name, namespace=ns).to_dict().get("status")
                raise AssertionError(f"{err}\n{status}\n{log.read_text()[-3000:]}") from None
            for w in words:
                assert w in c["message"], (name, c["message"])
        events = hub_env.http_client().get(f"/api/v1/namespaces/{ns}/events").json()["items"]
        assert any(e["reason"] == "ActionFailed" for e in events), events
    finally:
        proc.terminate()
        proc.wait(15)
    # A denied address is never connected to, not even by helm.
    assert denied.requests == []
    assert allowed.requests
    statuses = json.dumps([hub.get(SS, n, namespace=ns).to_dict()["status"] for n in cases])
    for text in (json.dumps(events), statuses, log.read_text()):
        assert SECRET not in text
        assert REASON not in text
        assert TOKEN not in text
