"""``NebiusServiceAccountCredentials``: IAM tokens from a service account's authorized key.

The identity Secret's value is the service account credentials JSON that
crossplane-contrib/provider-kubernetes reads (``pkg/kube/client/nebius/nebius.go``),
with exactly these non-empty fields:

    {"private_key": "-----BEGIN PRIVATE KEY-----\\n...", "public_key_id": "publickey-...",
     "account_id": "serviceaccount-..."}

The key is exchanged for an IAM access token the way Nebius documents for
service accounts (https://docs.nebius.com/grpc-api/auth): a JWT signed RS256
with the private key, header ``kid`` = ``public_key_id``, claims ``iss`` =
``sub`` = ``account_id``, a one-minute ``exp``, and the ``aud`` every Nebius
SDK sends (``token-service.iam.new.nebiuscloud.net``: nebius/pysdk
``base/service_account/service_account.py``, nebius/gosdk), is sent to
``nebius.iam.v1.TokenExchangeService/Exchange`` (RFC 8693 fields, messages of
nebius/api ``nebius/iam/v1/token_service.proto``) at
``tokens.iam.api.nebius.cloud:443``, the service's documented endpoint
(https://docs.nebius.com/grpc-api/endpoints/define). The answer's
``access_token`` is sent to the cluster as a bearer token until its
``expires_in`` runs out.

Why not the ``nebius`` SDK from PyPI: it exchanges keys only through its own
``SDK`` object, which brings its own channel pool, event-loop bridge and
background token renewal (and aiohttp, portalocker and 15 MB of generated
API), while this provider needs one request per mint against an endpoint
the operator chooses, with its caller owning caching and refresh. So the
JWT is made with pyjwt (which the SDK uses too) and the one unary call is
made with grpcio. Its two messages are a handful of string fields and one
integer, encoded here by field number from the proto file above; the
loopback test server decodes them with the protobuf runtime to check that.

``Endpoints.nebius_token_exchange`` overrides the endpoint: ``host:port`` or
``https://host:port`` (TLS), or ``http://host:port`` for loopback addresses
only (tests), so that a JWT never crosses a network in clear text.
"""

from __future__ import annotations

import ipaddress
import re
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import grpc
import grpc.aio
import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from modelplane.credentials.identity.base import (
    Endpoints,
    IdentityError,
    IdentityFailure,
    TargetInfo,
    Token,
    json_fields,
)
from modelplane.kube.scrub import scrub

DEFAULT_ENDPOINT = "tokens.iam.api.nebius.cloud:443"
EXCHANGE_METHOD = "/nebius.iam.v1.TokenExchangeService/Exchange"
JWT_AUDIENCE = "token-service.iam.new.nebiuscloud.net"
JWT_LIFETIME_SECONDS = 60
GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
REQUESTED_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
SUBJECT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"
CALL_TIMEOUT_SECONDS = 10.0

_FIELDS = ("private_key", "public_key_id", "account_id")
_HOST_PORT = re.compile(r"^[A-Za-z0-9.-]+:\d{1,5}$|^\[[0-9A-Fa-f:.]+\]:\d{1,5}$")

# gRPC codes that mean the service heard the key and said no.
_REFUSALS = {
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
}


def _invalid(message: str) -> IdentityError:
    return IdentityError(IdentityFailure.INVALID, f"NebiusServiceAccountCredentials: {message}")


@dataclass(frozen=True)
class ServiceAccountKey:
    """The Secret's value, checked."""

    account_id: str
    public_key_id: str
    private_key: RSAPrivateKey = field(repr=False)
    private_key_pem: str = field(repr=False)


def parse_credential(credential: bytes) -> ServiceAccountKey:
    """Read the Secret's value; ``IdentityError(INVALID)`` naming the field when unusable."""
    doc = json_fields(
        credential,
        _FIELDS,
        kind="NebiusServiceAccountCredentials",
        expected="exactly private_key, public_key_id and account_id",
    )
    for name in _FIELDS:
        if not doc.get(name, "").strip():
            raise _invalid(f"field {name} is missing or empty")
    try:
        key = serialization.load_pem_private_key(doc["private_key"].encode(), password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        # The loader's message may quote the data; say only which field is wrong.
        raise _invalid("field private_key is not an unencrypted PEM private key") from None
    if not isinstance(key, RSAPrivateKey):
        raise _invalid("field private_key is not an RSA key (Nebius signs with RS256)")
    return ServiceAccountKey(
        account_id=doc["account_id"].strip(),
        public_key_id=doc["public_key_id"].strip(),
        private_key=key,
        private_key_pem=doc["private_key"],
    )


def exchange_endpoint(value: str | None) -> tuple[str, bool]:
    """``(host:port, secure)`` for the exchange endpoint."""
    if not value:
        return DEFAULT_ENDPOINT, True
    if "://" not in value:
        target, secure = value, True
    else:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _invalid(
                "the Nebius token exchange endpoint must be host:port, https://host:port "
                "or http://LOOPBACK:port"
            )
        if parts.path not in ("", "/") or parts.query:
            raise _invalid("the Nebius token exchange endpoint takes no path")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        target, secure = f"{host}:{port}", parts.scheme == "https"
        if not secure and not _is_loopback(parts.hostname):
            raise _invalid(
                "the Nebius token exchange endpoint may use http:// only on a loopback "
                "address: the signed JWT must not cross a network in clear text"
            )
    if not _HOST_PORT.match(target):
        raise _invalid("the Nebius token exchange endpoint is not host:port")
    return target, secure


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# Protobuf wire format, enough for ExchangeTokenRequest and CreateTokenResponse
# (nebius/api nebius/iam/v1/token_service.proto): fields are strings (wire
# type 2) but for CreateTokenResponse.expires_in, an int64 (wire type 0).


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _string_field(number: int, value: str) -> bytes:
    data = value.encode("utf-8")
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def encode_exchange_request(subject_token: str) -> bytes:
    """An ``ExchangeTokenRequest`` for a self-signed JWT."""
    return (
        _string_field(1, GRANT_TYPE)
        + _string_field(2, REQUESTED_TOKEN_TYPE)
        + _string_field(3, subject_token)
        + _string_field(4, SUBJECT_TOKEN_TYPE)
    )


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


@dataclass(frozen=True)
class ExchangeAnswer:
    access_token: str = field(repr=False)
    token_type: str
    expires_in: int


def decode_create_token_response(data: bytes) -> ExchangeAnswer:
    """The fields of a ``CreateTokenResponse`` this provider reads; ValueError if malformed."""
    strings: dict[int, str] = {}
    expires_in = 0
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
            if number == 4:
                # int64: a negative value arrives as its 64-bit two's complement.
                expires_in = value - (1 << 64) if value >= 1 << 63 else value
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated field")
            if number in (1, 2, 3):
                strings[number] = data[pos : pos + length].decode("utf-8")
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(data):
            raise ValueError("truncated field")
    return ExchangeAnswer(
        access_token=strings.get(1, ""), token_type=strings.get(3, ""), expires_in=expires_in
    )


def _identity(value: bytes) -> bytes:
    return value


class NebiusMinter:
    """Mints Nebius IAM tokens for one service account key."""

    def __init__(self, key: ServiceAccountKey, endpoint: str, secure: bool) -> None:
        self._key = key
        self._endpoint = endpoint
        self._secure = secure

    def __repr__(self) -> str:
        return f"NebiusMinter(account={self._key.account_id!r}, endpoint={self._endpoint!r})"

    @property
    def endpoint(self) -> str:
        return self._endpoint

    def assertion(self) -> str:
        """The self-signed JWT the exchange takes (valid one minute)."""
        now = int(time.time())
        return jwt.encode(
            {
                "iss": self._key.account_id,
                "sub": self._key.account_id,
                "aud": JWT_AUDIENCE,
                "iat": now,
                "exp": now + JWT_LIFETIME_SECONDS,
                "jti": uuid.uuid4().hex,
            },
            self._key.private_key,
            algorithm="RS256",
            headers={"kid": self._key.public_key_id},
        )

    def _channel(self) -> grpc.aio.Channel:
        if self._secure:
            return grpc.aio.secure_channel(self._endpoint, grpc.ssl_channel_credentials())
        return grpc.aio.insecure_channel(self._endpoint)

    async def mint(self) -> Token:
        assertion = self.assertion()
        secrets = (assertion, self._key.private_key_pem)
        try:
            async with self._channel() as channel:
                call = channel.unary_unary(
                    EXCHANGE_METHOD,
                    request_serializer=_identity,
                    response_deserializer=_identity,
                )
                raw: bytes = await call(
                    encode_exchange_request(assertion), timeout=CALL_TIMEOUT_SECONDS
                )
        except grpc.aio.AioRpcError as err:
            code = err.code()
            details = scrub(err.details() or "", secrets)
            text = f"token exchange at {self._endpoint} answered {code.name}" + (
                f": {details}" if details else ""
            )
            failure = IdentityFailure.REJECTED if code in _REFUSALS else IdentityFailure.UNREACHABLE
            raise IdentityError(failure, f"NebiusServiceAccountCredentials: {text}") from None
        try:
            answer = decode_create_token_response(raw)
        except (ValueError, UnicodeDecodeError):
            answer = ExchangeAnswer("", "", 0)
        if not answer.access_token or answer.expires_in <= 0:
            raise IdentityError(
                IdentityFailure.UNREACHABLE,
                f"NebiusServiceAccountCredentials: token exchange at {self._endpoint} "
                "answered without an access token and its lifetime",
            )
        if answer.token_type and answer.token_type.lower() != "bearer":
            raise IdentityError(
                IdentityFailure.UNREACHABLE,
                f"NebiusServiceAccountCredentials: token exchange at {self._endpoint} "
                f"issued a token of type {scrub(answer.token_type[:40], secrets)!r}, not Bearer",
            )
        return Token(value=answer.access_token, expires_at=time.time() + answer.expires_in)


def minter(credential: bytes, target: TargetInfo, endpoints: Endpoints) -> NebiusMinter:
    """A ``MinterFactory`` for ``NebiusServiceAccountCredentials``."""
    key = parse_credential(credential)
    endpoint, secure = exchange_endpoint(endpoints.nebius_token_exchange)
    return NebiusMinter(key, endpoint, secure)
