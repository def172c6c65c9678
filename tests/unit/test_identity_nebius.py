"""NebiusServiceAccountCredentials against a loopback gRPC token exchange on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from tests.identity_verifiers import (
    CreateTokenResponse,
    ExchangeTokenRequest,
    LoopbackNebius,
    TokenRefused,
    serve_nebius,
    verify_nebius_token,
)

from modelplane.credentials.identity import nebius
from modelplane.credentials.identity.base import (
    Endpoints,
    IdentityError,
    IdentityFailure,
    TargetInfo,
)

ACCOUNT = "serviceaccount-e00test"
KEY_ID = "publickey-e00test"
TARGET = TargetInfo(cluster_name="mk8s", server="https://mk8s.example.com")

_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
PEM = _KEY.private_bytes(
    serialization.Encoding.PEM,
    serialization.PrivateFormat.PKCS8,
    serialization.NoEncryption(),
).decode()
# The base64 body of the key: what a leak would show even with the PEM armour cut.
KEY_BODY = "".join(PEM.strip().splitlines()[1:-1])


def credential(**override: object) -> bytes:
    doc: dict[str, object] = {"private_key": PEM, "public_key_id": KEY_ID, "account_id": ACCOUNT}
    doc.update(override)
    return json.dumps({k: v for k, v in doc.items() if v is not None}).encode()


@pytest.fixture
def exchange() -> Iterator[LoopbackNebius]:
    service = LoopbackNebius(keys={(ACCOUNT, KEY_ID): _KEY.public_key()})
    with serve_nebius(service) as running:
        yield running


def assert_no_secret(text: str) -> None:
    assert KEY_BODY[:64] not in text
    assert "PRIVATE KEY" not in text
    assert "eyJ" not in text  # no JWT: neither the assertion nor anything like it


async def test_exchange_issues_a_token_the_verifier_accepts(
    exchange: LoopbackNebius, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    minter = nebius.minter(credential(), TARGET, Endpoints(nebius_token_exchange=exchange.endpoint))
    before = time.time()
    token = await minter.mint()
    assert verify_nebius_token(token.value, service=exchange) == ACCOUNT
    assert before + 3590 < token.expires_at <= time.time() + 3600
    for text in (caplog.text, repr(token), repr(minter)):
        assert_no_secret(text)
        assert token.value not in text


def test_the_assertion_is_the_documented_jwt() -> None:
    minter = nebius.minter(credential(), TARGET, Endpoints())
    assertion = minter.assertion()
    header = jwt.get_unverified_header(assertion)
    assert header["alg"] == "RS256" and header["kid"] == KEY_ID
    claims = jwt.decode(
        assertion,
        _KEY.public_key(),
        algorithms=["RS256"],
        audience="token-service.iam.new.nebiuscloud.net",
    )
    assert claims["iss"] == claims["sub"] == ACCOUNT
    assert 0 < claims["exp"] - claims["iat"] <= 60
    assert minter.endpoint == "tokens.iam.api.nebius.cloud:443"


def test_the_request_encodes_as_the_proto_declares() -> None:
    raw = nebius.encode_exchange_request("eyJa.eyJb.c")
    request = ExchangeTokenRequest.FromString(raw)
    assert request.grant_type == "urn:ietf:params:oauth:grant-type:token-exchange"
    assert request.requested_token_type == "urn:ietf:params:oauth:token-type:access_token"
    assert request.subject_token == "eyJa.eyJb.c"
    assert request.subject_token_type == "urn:ietf:params:oauth:token-type:jwt"
    answer = nebius.decode_create_token_response(
        CreateTokenResponse(
            access_token="t" * 300,
            issued_token_type="urn:ietf:params:oauth:token-type:access_token",
            token_type="Bearer",
            expires_in=43200,
            scopes=["a", "b"],
        ).SerializeToString()
    )
    assert (answer.access_token, answer.token_type, answer.expires_in) == (
        "t" * 300,
        "Bearer",
        43200,
    )


async def test_a_key_the_exchange_does_not_know_is_rejected(
    exchange: LoopbackNebius, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    exchange.keys.clear()  # the key was revoked
    minter = nebius.minter(credential(), TARGET, Endpoints(nebius_token_exchange=exchange.endpoint))
    with pytest.raises(IdentityError) as err:
        await minter.mint()
    assert err.value.failure is IdentityFailure.REJECTED
    assert "UNAUTHENTICATED" in err.value.message
    assert "invalid service account credentials" in err.value.message
    assert not exchange.issued
    assert_no_secret(err.value.message + repr(err.value) + caplog.text)


async def test_details_quoting_the_jwt_are_scrubbed(exchange: LoopbackNebius) -> None:
    minter = nebius.minter(credential(), TARGET, Endpoints(nebius_token_exchange=exchange.endpoint))
    # A service that echoes what it was sent; the minter's own assertion is the secret.
    exchange.fail_with = (
        grpc.StatusCode.PERMISSION_DENIED,
        "bad subject_token " + minter.assertion(),
    )
    with pytest.raises(IdentityError) as err:
        await minter.mint()
    assert err.value.failure is IdentityFailure.REJECTED
    assert "PERMISSION_DENIED" in err.value.message and "[redacted]" in err.value.message
    assert_no_secret(err.value.message)


async def test_an_unavailable_exchange_is_unreachable(exchange: LoopbackNebius) -> None:
    exchange.fail_with = (grpc.StatusCode.UNAVAILABLE, "overloaded")
    minter = nebius.minter(credential(), TARGET, Endpoints(nebius_token_exchange=exchange.endpoint))
    with pytest.raises(IdentityError) as err:
        await minter.mint()
    assert err.value.failure is IdentityFailure.UNREACHABLE


async def test_no_exchange_listening_is_unreachable(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    minter = nebius.minter(credential(), TARGET, Endpoints(nebius_token_exchange=endpoint))
    with pytest.raises(IdentityError) as err:
        await minter.mint()
    assert err.value.failure is IdentityFailure.UNREACHABLE
    assert "UNAVAILABLE" in err.value.message
    assert_no_secret(err.value.message + caplog.text)


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (b"not json", "not a JSON object"),
        (b'"a string"', "not a JSON object"),
        (credential(private_key=None), "private_key is missing"),
        (credential(public_key_id=""), "public_key_id is missing"),
        (credential(account_id=7), "account_id must be a string"),
        (
            credential(
                private_key="-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
            ),
            "private_key is not",
        ),
        (credential(extra="x"), "unknown field(s) extra"),
        (
            credential(
                private_key=ec.generate_private_key(ec.SECP256R1())
                .private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
                .decode()
            ),
            "not an RSA key",
        ),
    ],
)
def test_malformed_credentials_are_invalid_naming_the_field(value: bytes, field: str) -> None:
    with pytest.raises(IdentityError) as err:
        nebius.minter(value, TARGET, Endpoints())
    assert err.value.failure is IdentityFailure.INVALID
    assert field in err.value.message
    assert_no_secret(err.value.message)


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("tokens.iam.api.nebius.cloud:443", ("tokens.iam.api.nebius.cloud:443", True)),
        ("https://tokens.iam.api.eu.nebius.cloud", ("tokens.iam.api.eu.nebius.cloud:443", True)),
        ("http://127.0.0.1:5000", ("127.0.0.1:5000", False)),
        ("http://[::1]:5000", ("[::1]:5000", False)),
    ],
)
def test_endpoints(endpoint: str, expected: tuple[str, bool]) -> None:
    assert nebius.exchange_endpoint(endpoint) == expected


@pytest.mark.parametrize(
    "endpoint", ["http://tokens.example.com:80", "ftp://x:1", "https://x/path", "x y:1"]
)
def test_clear_text_off_loopback_and_odd_endpoints_are_invalid(endpoint: str) -> None:
    with pytest.raises(IdentityError) as err:
        nebius.minter(credential(), TARGET, Endpoints(nebius_token_exchange=endpoint))
    assert err.value.failure is IdentityFailure.INVALID


def test_the_verifier_refuses_unknown_and_expired_tokens(exchange: LoopbackNebius) -> None:
    with pytest.raises(TokenRefused):
        verify_nebius_token("made-up", service=exchange)
    code, _, body = exchange.exchange(
        ExchangeTokenRequest(
            grant_type="urn:ietf:params:oauth:grant-type:token-exchange",
            requested_token_type="urn:ietf:params:oauth:token-type:access_token",
            subject_token=nebius.minter(credential(), TARGET, Endpoints()).assertion(),
            subject_token_type="urn:ietf:params:oauth:token-type:jwt",
        ).SerializeToString()
    )
    assert code is grpc.StatusCode.OK
    issued = CreateTokenResponse.FromString(body).access_token
    assert verify_nebius_token(issued, service=exchange) == ACCOUNT
    with pytest.raises(TokenRefused, match="expired"):
        verify_nebius_token(issued, service=exchange, now=time.time() + 3601)
