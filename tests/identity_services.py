"""Loopback stand-ins for cloud token services, for unit and integration tests.

``serve`` runs any request handler on 127.0.0.1; ``GoogleTokenService`` is
Google's OAuth2 token endpoint as a service account key's ``token_uri`` sees
it (the JWT bearer grant of RFC 7523): it verifies the signed assertion with
the key's public half and issues short-lived opaque tokens it can vouch for.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from tests.serving import serve_requests

# (method, path, headers, body) -> (status, JSON body or raw text)
Handler = Callable[[str, str, dict[str, str], bytes], tuple[int, Any]]

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
# google-auth signs every assertion for Google's own token endpoint, whatever
# the key's token_uri (google/oauth2/service_account.py,
# _make_authorization_grant_assertion); a token_uri elsewhere is only where it
# is sent.
GOOGLE_AUDIENCE = "https://oauth2.googleapis.com/token"
SCOPES = {
    "https://www.googleapis.com/auth/cloud-platform",
    "https://www.googleapis.com/auth/userinfo.email",
}


@contextlib.contextmanager
def serve(handler: Handler) -> Iterator[str]:
    """Run ``handler`` over HTTP on 127.0.0.1 until the block ends; yields the base URL."""

    class _Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, payload = handler(self.command, self.path, dict(self.headers), body)
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            kind = "text/plain" if isinstance(payload, str) else "application/json"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serve_requests(_Handler) as url:
        yield url


def _b64url(data: str) -> bytes:
    return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))


@dataclass
class ServiceAccount:
    email: str
    key: rsa.RSAPrivateKey = field(repr=False)
    key_id: str

    @property
    def private_pem(self) -> str:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()


@dataclass
class GoogleTokenService:
    """Issues tokens for the service accounts it knows, ``lifetime`` seconds each."""

    lifetime: int = 3600
    url: str = ""
    accounts: dict[str, ServiceAccount] = field(default_factory=dict)
    revoked: set[str] = field(default_factory=set)
    # token -> (email, expires_at): what a target's webhook may accept.
    issued: dict[str, tuple[str, float]] = field(default_factory=dict)
    # Every assertion received, to grep captured output for.
    assertions: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def token_uri(self) -> str:
        return f"{self.url}/token"

    def account(self, name: str = "deployer") -> ServiceAccount:
        email = f"{name}@test-project.iam.gserviceaccount.com"
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        account = ServiceAccount(email, key, secrets.token_hex(20))
        self.accounts[email] = account
        return account

    def key_json(self, account: ServiceAccount, token_uri: str | None = None) -> str:
        """The key file Google gives for ``account``, its token_uri pointing here."""
        return json.dumps(
            {
                "type": "service_account",
                "project_id": "test-project",
                "private_key_id": account.key_id,
                "private_key": account.private_pem,
                "client_email": account.email,
                "client_id": "1234567890",
                "auth_uri": "https://accounts.google.com/o/oauth2/auth",
                "token_uri": token_uri or self.token_uri,
            }
        )

    def valid(self, token: str) -> str | None:
        """The email a token was issued to, if it was issued here and has not expired."""
        with self.lock:
            found = self.issued.get(token)
        if found is None or found[1] <= time.time():
            return None
        return found[0]

    def mints(self, email: str | None = None) -> int:
        with self.lock:
            return sum(1 for e, _ in self.issued.values() if email is None or e == email)

    def handle(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, Any]:
        if method != "POST" or path != "/token":
            return 404, {"error": "not_found"}
        form = parse_qs(body.decode())
        if form.get("grant_type") != [JWT_BEARER] or len(form.get("assertion", [])) != 1:
            return 400, {"error": "unsupported_grant_type"}
        assertion = form["assertion"][0]
        with self.lock:
            self.assertions.append(assertion)
        refusal = self._verify(assertion)
        if refusal is not None:
            return 400, {"error": "invalid_grant", "error_description": refusal}
        claims = json.loads(_b64url(assertion.split(".")[1]))
        token = f"ya29.test-{secrets.token_urlsafe(24)}"
        with self.lock:
            self.issued[token] = (claims["iss"], time.time() + self.lifetime)
        return 200, {"access_token": token, "expires_in": self.lifetime, "token_type": "Bearer"}

    def _verify(self, assertion: str) -> str | None:
        try:
            head, payload, signature = assertion.split(".")
            header = json.loads(_b64url(head))
            claims = json.loads(_b64url(payload))
        except ValueError:
            return "Malformed assertion."
        account = self.accounts.get(claims.get("iss", ""))
        if header.get("alg") != "RS256" or account is None:
            return "Invalid issuer or algorithm."
        try:
            account.key.public_key().verify(
                _b64url(signature),
                f"{head}.{payload}".encode(),
                padding.PKCS1v15(),
                hashes.SHA256(),
            )
        except InvalidSignature:
            return "Invalid JWT Signature."
        if account.email in self.revoked:
            return "Invalid JWT Signature."
        now = time.time()
        if claims.get("aud") != GOOGLE_AUDIENCE or not claims.get("exp", 0) > now:
            return "Invalid JWT: audience or expiry."
        if set(str(claims.get("scope", "")).split()) != SCOPES:
            return "Invalid scope."
        return None


@contextlib.contextmanager
def google_token_service(lifetime: int = 3600) -> Iterator[GoogleTokenService]:
    service = GoogleTokenService(lifetime=lifetime)
    with serve(service.handle) as url:
        service.url = url
        yield service


def closed_port_url() -> str:
    """A loopback URL nothing listens on (the port was free a moment ago)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/token"
