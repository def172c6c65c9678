"""Who may read ``/metrics``: a caller the hub authenticates and authorizes.

``/metrics`` names every team's stacks, their versions and GPU counts, so it
is served as controller-runtime's secure metrics and kube-rbac-proxy serve
theirs (https://book.kubebuilder.io/reference/metrics#metrics-protection):
the caller's bearer token is checked with a TokenReview, and the user it
names is asked of the hub with a SubjectAccessReview for ``get`` on the
non-resource URL ``/metrics``. Whoever the hub's RBAC grants that reads the
metrics (the chart's ``<release>-metrics-reader`` ClusterRole; the Prometheus
role of kube-prometheus-stack grants it too); nobody else does, wherever
they reach the pod from.

Over HTTPS, not HTTP with the same checks: the token a Prometheus sends is a
credential of the hub, and must not cross the pod network in clear text.
The certificate is the one ``--metrics-cert-dir`` holds, or one the process
makes for itself at start (a scraper then skips verification, as the
chart's ServiceMonitor does by default, and still sends its token only over
an encrypted connection). The probes stay on their own plain-HTTP port: the
kubelet probes with no token.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import ipaddress
import logging
import socket
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import httpx2
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from lightkube import ApiError, AsyncClient
from lightkube.models.authentication_v1 import TokenReviewSpec
from lightkube.models.authorization_v1 import NonResourceAttributes, SubjectAccessReviewSpec
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.authorization_v1 import SubjectAccessReview

log = logging.getLogger("modelplane.operator")

PATH = "/metrics"
VERB = "get"
# How long a review's answer is reused for the same token: a scrape every
# 30 s costs the hub two reviews a minute at most, and a revoked grant or a
# deleted ServiceAccount stops being served within this long.
REVIEW_TTL_SECONDS = 30.0
# Tokens whose answers are remembered; past it the oldest go.
MAX_REMEMBERED = 256
# Reviews in flight at once: many callers with new tokens wait their turn
# rather than send the hub as many reviews.
MAX_REVIEWS_IN_FLIGHT = 4
# How long one review may take before the scrape is answered 503.
REVIEW_TIMEOUT_SECONDS = 5.0
# The certificate the process makes for itself when given none.
SELF_SIGNED_DAYS = 365


@dataclass(frozen=True)
class Verdict:
    """The answer to one request for ``/metrics``: its status and why."""

    status: int
    reason: str


SERVED = Verdict(200, "allowed")
NO_TOKEN = Verdict(401, "a bearer token is required")
NOT_AUTHENTICATED = Verdict(401, "the hub does not accept this token")
FORBIDDEN = Verdict(403, f"not allowed to {VERB} {PATH}")
UNAVAILABLE = Verdict(503, "the hub could not review the token")


@dataclass(frozen=True)
class Caller:
    """The user a TokenReview names, as a SubjectAccessReview asks about it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, list[str]] = field(default_factory=dict)


_Review = TypeVar("_Review", TokenReview, SubjectAccessReview)


class ReviewFailed(Exception):
    """The hub gave no answer to a review (unreachable, refused, too slow)."""


class Reviewer(Protocol):
    """The two questions asked of the hub; each returns the review's ``status``."""

    async def review_token(self, token: str) -> Mapping[str, Any]: ...

    async def review_access(self, caller: Caller) -> Mapping[str, Any]: ...


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or any(c.isspace() for c in token):
        return None
    return token


def caller_of(status: Mapping[str, Any]) -> Caller | None:
    """Who a TokenReview's status says the token is, or None when not authenticated."""
    if status.get("authenticated") is not True or status.get("error"):
        return None
    user = status.get("user") or {}
    username = user.get("username")
    if not isinstance(username, str) or not username:
        return None
    extra = user.get("extra") or {}
    return Caller(
        username=username,
        uid=str(user.get("uid") or ""),
        groups=tuple(str(g) for g in user.get("groups") or ()),
        extra={str(k): [str(v) for v in values] for k, values in extra.items()},
    )


def is_allowed(status: Mapping[str, Any]) -> bool:
    """Whether a SubjectAccessReview's status allows (and no authorizer denies)."""
    return status.get("allowed") is True and status.get("denied") is not True


def access_review_spec(caller: Caller) -> SubjectAccessReviewSpec:
    """The question: may ``caller`` get the non-resource URL /metrics?"""
    return SubjectAccessReviewSpec(
        user=caller.username,
        uid=caller.uid or None,
        groups=list(caller.groups) or None,
        extra=dict(caller.extra) or None,
        nonResourceAttributes=NonResourceAttributes(path=PATH, verb=VERB),
    )


async def verdict(header: str | None, reviewer: Reviewer) -> Verdict:
    """The answer to a request carrying ``header`` as its Authorization."""
    token = bearer_token(header)
    if token is None:
        return NO_TOKEN
    try:
        caller = caller_of(await reviewer.review_token(token))
        if caller is None:
            return NOT_AUTHENTICATED
        return SERVED if is_allowed(await reviewer.review_access(caller)) else FORBIDDEN
    except ReviewFailed as err:
        log.warning("a /metrics request was refused: %s", err)
        return UNAVAILABLE


class HubReviewer:
    """Asks the hub, as the operator (which needs tokenreviews and subjectaccessreviews create)."""

    def __init__(self, hub: AsyncClient) -> None:
        self.hub = hub

    async def review_token(self, token: str) -> Mapping[str, Any]:
        answer = await self._create(TokenReview(spec=TokenReviewSpec(token=token)))
        return answer.status.to_dict() if answer.status is not None else {}

    async def review_access(self, caller: Caller) -> Mapping[str, Any]:
        answer = await self._create(SubjectAccessReview(spec=access_review_spec(caller)))
        return answer.status.to_dict() if answer.status is not None else {}

    async def _create(self, review: _Review) -> _Review:
        try:
            async with asyncio.timeout(REVIEW_TIMEOUT_SECONDS):
                return await self.hub.create(review)
        except TimeoutError as err:
            raise ReviewFailed(f"no answer from the hub in {REVIEW_TIMEOUT_SECONDS:g}s") from err
        except ApiError as err:
            raise ReviewFailed(f"the hub refused the review: {err.status.message}") from err
        except (httpx2.HTTPError, OSError) as err:
            raise ReviewFailed(f"the hub is unreachable: {err}") from err


class RememberingReviewer:
    """A ``Reviewer`` that asks each question once per token for a while, a few at a time.

    Answers are kept by the token's SHA-256, never the token itself.
    """

    def __init__(self, inner: Reviewer, clock: Callable[[], float] = time.monotonic) -> None:
        self.inner, self.clock = inner, clock
        self.answers: dict[tuple[str, str], tuple[float, Mapping[str, Any]]] = {}
        self.slots = asyncio.Semaphore(MAX_REVIEWS_IN_FLIGHT)

    async def review_token(self, token: str) -> Mapping[str, Any]:
        key = ("token", hashlib.sha256(token.encode()).hexdigest())
        return await self._remembered(key, lambda: self.inner.review_token(token))

    async def review_access(self, caller: Caller) -> Mapping[str, Any]:
        key = ("access", repr(caller))
        return await self._remembered(key, lambda: self.inner.review_access(caller))

    async def _remembered(self, key: tuple[str, str], ask: Callable[[], Any]) -> Mapping[str, Any]:
        kept = self.answers.get(key)
        if kept is not None and kept[0] > self.clock():
            return kept[1]
        async with self.slots:
            answer: Mapping[str, Any] = await ask()
        self._keep(key, answer)
        return answer

    def _keep(self, key: tuple[str, str], answer: Mapping[str, Any]) -> None:
        now = self.clock()
        self.answers.pop(key, None)
        if len(self.answers) >= MAX_REMEMBERED:
            self.answers = {k: v for k, v in self.answers.items() if v[0] > now}
        while len(self.answers) >= MAX_REMEMBERED:
            del self.answers[next(iter(self.answers))]
        self.answers[key] = (now + REVIEW_TTL_SECONDS, answer)


def server_context(cert_dir: Path | None) -> ssl.SSLContext:
    """The TLS context of the metrics port: ``cert_dir``'s tls.crt and tls.key, or self-signed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_dir is not None:
        context.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
        return context
    cert, key = self_signed()
    # load_cert_chain reads files only; they live as long as this call.
    with tempfile.TemporaryDirectory(prefix="modelplane-metrics-") as scratch:
        cert_path, key_path = Path(scratch) / "tls.crt", Path(scratch) / "tls.key"
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        cert_path.write_bytes(cert)
        context.load_cert_chain(cert_path, key_path)
    return context


def self_signed() -> tuple[bytes, bytes]:
    """A certificate (PEM) and its key, for this host's name, localhost and 127.0.0.1."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "modelplane-metrics")])
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.DNSName(socket.gethostname()),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem
