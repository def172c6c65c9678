"""Who may read /metrics: each step of the decision, then the served app.

tests/integration/test_metrics_auth.py asks a real hub the same questions.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from cryptography import x509

from modelplane.operator import metrics
from modelplane.operator.metrics_auth import (
    FORBIDDEN,
    NO_TOKEN,
    NOT_AUTHENTICATED,
    REVIEW_TTL_SECONDS,
    SERVED,
    UNAVAILABLE,
    Caller,
    RememberingReviewer,
    ReviewFailed,
    Verdict,
    access_review_spec,
    bearer_token,
    caller_of,
    is_allowed,
    self_signed,
    server_context,
    verdict,
)

PROMETHEUS = {
    "authenticated": True,
    "user": {
        "username": "system:serviceaccount:monitoring:prometheus",
        "uid": "u-1",
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]},
    },
}
ALLOWED = {"allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding "reader"'}
DENIED = {"allowed": False}


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc.def", "abc.def"),
        ("bearer abc", "abc"),
        ("  Bearer   abc  ", "abc"),
        (None, None),
        ("", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer a b", None),
    ],
)
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


@pytest.mark.parametrize(
    ("status", "username"),
    [
        (PROMETHEUS, "system:serviceaccount:monitoring:prometheus"),
        ({"authenticated": False}, None),
        ({}, None),
        # an answer that says authenticated and also an error is not trusted
        ({**PROMETHEUS, "error": "token expired"}, None),
        ({"authenticated": True, "user": {}}, None),
        ({"authenticated": True, "user": {"username": ""}}, None),
        # "true" as a string is no boolean true
        ({"authenticated": "true", "user": {"username": "x"}}, None),
    ],
)
def test_caller_of_a_token_review(status: Mapping[str, Any], username: str | None) -> None:
    caller = caller_of(status)
    assert (caller.username if caller is not None else None) == username


@pytest.mark.parametrize(
    ("status", "allowed"),
    [
        (ALLOWED, True),
        (DENIED, False),
        ({}, False),
        ({"allowed": True, "denied": True}, False),
        ({"allowed": "true"}, False),
    ],
)
def test_is_allowed(status: Mapping[str, Any], allowed: bool) -> None:
    assert is_allowed(status) is allowed


def test_the_access_review_asks_for_get_on_metrics_as_the_whole_caller() -> None:
    caller = caller_of(PROMETHEUS)
    assert caller is not None
    spec = access_review_spec(caller).to_dict()
    assert spec == {
        "user": "system:serviceaccount:monitoring:prometheus",
        "uid": "u-1",
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]},
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


class _Hub:
    """Canned answers to the two reviews, and what was asked."""

    def __init__(
        self, token: Mapping[str, Any] | Exception, access: Mapping[str, Any] | Exception
    ) -> None:
        self.token, self.access = token, access
        self.asked: list[str] = []

    async def review_token(self, token: str) -> Mapping[str, Any]:
        self.asked.append("token")
        if isinstance(self.token, Exception):
            raise self.token
        return self.token

    async def review_access(self, caller: Caller) -> Mapping[str, Any]:
        self.asked.append("access")
        if isinstance(self.access, Exception):
            raise self.access
        return self.access


FAILED = ReviewFailed("no answer from the hub in 5s")


@pytest.mark.parametrize(
    ("header", "token_review", "access_review", "expected", "asked"),
    [
        ("Bearer t", PROMETHEUS, ALLOWED, SERVED, ["token", "access"]),
        # no token: the hub is not asked at all
        (None, PROMETHEUS, ALLOWED, NO_TOKEN, []),
        ("Basic dTpw", PROMETHEUS, ALLOWED, NO_TOKEN, []),
        # a token the hub does not take: access is not asked
        ("Bearer t", {"authenticated": False}, ALLOWED, NOT_AUTHENTICATED, ["token"]),
        # a real user without the grant
        ("Bearer t", PROMETHEUS, DENIED, FORBIDDEN, ["token", "access"]),
        # the hub gives no answer: refused, never served
        ("Bearer t", FAILED, ALLOWED, UNAVAILABLE, ["token"]),
        ("Bearer t", PROMETHEUS, FAILED, UNAVAILABLE, ["token", "access"]),
    ],
)
async def test_verdict(
    header: str | None,
    token_review: Mapping[str, Any] | Exception,
    access_review: Mapping[str, Any] | Exception,
    expected: Verdict,
    asked: list[str],
) -> None:
    hub = _Hub(token_review, access_review)
    assert await verdict(header, hub) == expected
    assert hub.asked == asked


async def test_answers_are_reused_for_a_while_by_the_tokens_hash() -> None:
    now = [0.0]
    hub = _Hub(PROMETHEUS, ALLOWED)
    remembering = RememberingReviewer(hub, clock=lambda: now[0])
    for _ in range(3):
        assert await verdict("Bearer secret-token", remembering) == SERVED
    assert hub.asked == ["token", "access"]
    assert not any("secret-token" in key for _, key in remembering.answers)
    now[0] = REVIEW_TTL_SECONDS + 1
    assert await verdict("Bearer secret-token", remembering) == SERVED
    assert hub.asked == ["token", "access"] * 2


async def test_a_failed_review_is_not_remembered() -> None:
    hub = _Hub(FAILED, ALLOWED)
    remembering = RememberingReviewer(hub)
    assert await verdict("Bearer t", remembering) == UNAVAILABLE
    assert remembering.answers == {}


async def test_remembered_answers_are_bounded() -> None:
    hub = _Hub({"authenticated": False}, DENIED)
    remembering = RememberingReviewer(hub)
    for i in range(1000):
        await verdict(f"Bearer t{i}", remembering)
    assert len(remembering.answers) <= 256


@pytest.mark.parametrize(
    ("token_review", "access_review", "status"),
    [
        (PROMETHEUS, ALLOWED, 200),
        (PROMETHEUS, DENIED, 403),
        ({"authenticated": False}, ALLOWED, 401),
    ],
)
async def test_metrics_are_served_only_to_an_allowed_caller(
    token_review: Mapping[str, Any], access_review: Mapping[str, Any], status: int
) -> None:
    hub = _Hub(token_review, access_review)
    async with TestClient(TestServer(metrics.metrics_app(hub))) as client:
        anonymous = await client.get("/metrics")
        assert anonymous.status == 401
        assert anonymous.headers["WWW-Authenticate"] == "Bearer"
        assert "modelplane_" not in await anonymous.text()
        answer = await client.get("/metrics", headers={"Authorization": "Bearer t"})
        assert answer.status == status
        assert ("modelplane_reconciles_total" in await answer.text()) is (status == 200)
        # the probes are not on this port
        assert (await client.get("/healthz")).status == 404


def test_the_self_signed_certificate_names_loopback_and_serves_tls() -> None:
    cert_pem, key_pem = self_signed()
    cert = x509.load_pem_x509_certificate(cert_pem)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert b"PRIVATE KEY" in key_pem
    context = server_context(None)
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
