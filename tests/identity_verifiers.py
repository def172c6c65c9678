"""Loopback token services for the AWS and Nebius identities, and verifiers of what they issue.

``LoopbackSTS`` answers ``AssumeRoleWithWebIdentity`` in STS's XML shapes
(https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRoleWithWebIdentity.html,
errors in ``ErrorResponse``); ``verify_eks_token`` checks an EKS token the way
the EKS authenticator does (kubernetes-sigs/aws-iam-authenticator
``pkg/token/token.go``): a presigned ``GetCallerIdentity`` URL on the STS host,
SigV4 with ``host`` and ``x-k8s-aws-id`` signed, ``X-Amz-Expires=60``, signed
no more than 15 minutes ago, and a signature that botocore recomputes from the
session credentials the loopback STS issued, for the expected cluster: a token
for another cluster fails there.

``LoopbackNebius`` serves ``nebius.iam.v1.TokenExchangeService/Exchange`` over
gRPC on loopback, decodes the request with the protobuf runtime (the message
as nebius/api ``nebius/iam/v1/token_service.proto`` declares it), verifies
the JWT with the registered public key and issues an opaque access token;
``verify_nebius_token`` accepts only such a token, before it expires.

Both verifiers return the identity the token proves, or raise ``TokenRefused``:
a token webhook in front of a test API server maps one to ``authenticated``.
"""

from __future__ import annotations

import base64
import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit
from xml.sax.saxutils import escape

import grpc
import jwt
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

EKS_TOKEN_PREFIX = "k8s-aws-v1."
EKS_TOKEN_MAX_AGE = 15 * 60
STS_NS = "https://sts.amazonaws.com/doc/2011-06-15/"


class TokenRefused(Exception):
    """The token proves nothing; the message says why (safe to show in a test)."""


# --------------------------------------------------------------------------- AWS


@dataclass
class IssuedCredentials:
    secret_access_key: str = field(repr=False)
    session_token: str = field(repr=False)
    role_arn: str
    expires_at: float


@dataclass
class LoopbackSTS:
    """A loopback STS; ``roles`` maps a web identity token to the role ARN it may assume."""

    roles: dict[str, str] = field(default_factory=dict)
    region: str = "us-east-1"
    credential_lifetime: float = 3600.0
    # When set, every AssumeRoleWithWebIdentity answers this (status, code, message).
    fail_with: tuple[int, str, str] | None = None
    issued: dict[str, IssuedCredentials] = field(default_factory=dict)
    requests: list[dict[str, list[str]]] = field(default_factory=list)
    url: str = ""

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc

    def _answer(self, form: dict[str, list[str]]) -> tuple[int, str]:
        self.requests.append(form)
        if form.get("Action") != ["AssumeRoleWithWebIdentity"]:
            return 400, _sts_error("Sender", "InvalidAction", "unsupported action")
        if self.fail_with is not None:
            status, code, message = self.fail_with
            return status, _sts_error("Sender" if status < 500 else "Receiver", code, message)
        token = form.get("WebIdentityToken", [""])[0]
        role_arn = form.get("RoleArn", [""])[0]
        if self.roles.get(token) != role_arn:
            # Real STS says this without quoting the token.
            return 400, _sts_error(
                "Sender", "InvalidIdentityToken", "Couldn't retrieve verification key"
            )
        key_id = "ASIA" + secrets.token_hex(8).upper()
        secret = secrets.token_urlsafe(30)
        session_token = secrets.token_urlsafe(60)
        expires = time.time() + self.credential_lifetime
        self.issued[key_id] = IssuedCredentials(secret, session_token, role_arn, expires)
        session = form.get("RoleSessionName", ["s"])[0]
        stamp = datetime.fromtimestamp(expires, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = (
            f'<AssumeRoleWithWebIdentityResponse xmlns="{STS_NS}">'
            "<AssumeRoleWithWebIdentityResult>"
            "<SubjectFromWebIdentityToken>system:serviceaccount:mp:op</SubjectFromWebIdentityToken>"
            "<Audience>sts.amazonaws.com</Audience>"
            "<AssumedRoleUser>"
            f"<Arn>{escape(role_arn)}/{escape(session)}</Arn>"
            f"<AssumedRoleId>AROA{secrets.token_hex(6).upper()}:{escape(session)}</AssumedRoleId>"
            "</AssumedRoleUser>"
            "<Credentials>"
            f"<SessionToken>{session_token}</SessionToken>"
            f"<SecretAccessKey>{secret}</SecretAccessKey>"
            f"<Expiration>{stamp}</Expiration>"
            f"<AccessKeyId>{key_id}</AccessKeyId>"
            "</Credentials>"
            "<Provider>oidc.eks.us-east-1.amazonaws.com</Provider>"
            "</AssumeRoleWithWebIdentityResult>"
            f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
            "</AssumeRoleWithWebIdentityResponse>"
        )
        return 200, body


def _sts_error(kind: str, code: str, message: str) -> str:
    return (
        f'<ErrorResponse xmlns="{STS_NS}"><Error><Type>{kind}</Type><Code>{escape(code)}</Code>'
        f"<Message>{escape(message)}</Message></Error>"
        f"<RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
    )


@contextmanager
def serve_sts(sts: LoopbackSTS) -> Iterator[LoopbackSTS]:
    """Run ``sts`` on 127.0.0.1 until the block ends."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = parse_qs(self.rfile.read(length).decode(), keep_blank_values=True)
            status, body = sts._answer(form)
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/xml")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    sts.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield sts
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def decode_eks_token(token: str) -> str:
    """The presigned URL inside an EKS token."""
    if not token.startswith(EKS_TOKEN_PREFIX):
        raise TokenRefused("not an EKS token (no k8s-aws-v1. prefix)")
    body = token[len(EKS_TOKEN_PREFIX) :]
    if "=" in body:
        raise TokenRefused("EKS token is padded base64")
    try:
        return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raise TokenRefused("EKS token is not base64url") from None


def verify_eks_token(
    token: str, *, cluster_name: str, sts: LoopbackSTS, now: float | None = None
) -> str:
    """The role ARN an EKS token proves for ``cluster_name``, or ``TokenRefused``."""
    now = time.time() if now is None else now
    url = decode_eks_token(token)
    parts = urlsplit(url)
    if f"{parts.scheme}://{parts.netloc}" != sts.url or parts.path not in ("", "/"):
        raise TokenRefused(f"presigned URL is not for the STS at {sts.url}")
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = dict(pairs)
    if len(query) != len(pairs):
        raise TokenRefused("presigned URL repeats a parameter")
    if query.get("Action") != "GetCallerIdentity" or query.get("Version") != "2011-06-15":
        raise TokenRefused("presigned URL is not GetCallerIdentity")
    if query.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
        raise TokenRefused("presigned URL is not signed with SigV4")
    if query.get("X-Amz-Expires") != "60":
        raise TokenRefused("X-Amz-Expires is not 60")
    signed = query.get("X-Amz-SignedHeaders", "").split(";")
    if "host" not in signed or "x-k8s-aws-id" not in signed:
        raise TokenRefused("host and x-k8s-aws-id are not both signed")
    credential = query.get("X-Amz-Credential", "").split("/")
    if len(credential) != 5 or credential[2:] != [sts.region, "sts", "aws4_request"]:
        raise TokenRefused("X-Amz-Credential is not scoped to the region's sts")
    key_id, day = credential[0], credential[1]
    amz_date = query.get("X-Amz-Date", "")
    try:
        signed_at = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        raise TokenRefused("X-Amz-Date is malformed") from None
    if not amz_date.startswith(day):
        raise TokenRefused("X-Amz-Date and the credential scope disagree")
    age = now - signed_at.timestamp()
    if age > EKS_TOKEN_MAX_AGE or age < -60:
        raise TokenRefused("EKS token is expired or from the future")
    issued = sts.issued.get(key_id)
    if issued is None:
        raise TokenRefused("unknown access key")
    if issued.expires_at <= now:
        raise TokenRefused("session credentials expired")
    if query.get("X-Amz-Security-Token") != issued.session_token:
        raise TokenRefused("session token does not match the access key")
    signature = query.get("X-Amz-Signature", "")
    unsigned = [(k, v) for k, v in pairs if k != "X-Amz-Signature"]
    request = AWSRequest(
        method="GET",
        url=f"{parts.scheme}://{parts.netloc}/?{urlencode(unsigned)}",
        headers={"x-k8s-aws-id": cluster_name},
    )
    request.context["timestamp"] = amz_date
    auth = SigV4QueryAuth(
        Credentials(key_id, issued.secret_access_key, issued.session_token),
        "sts",
        sts.region,
        expires=60,
    )
    canonical = auth.canonical_request(request)
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    if not secrets.compare_digest(expected, signature):
        raise TokenRefused(f"signature does not verify for cluster {cluster_name}")
    return issued.role_arn


# ------------------------------------------------------------------------ Nebius


def _token_service_messages() -> tuple[type[Any], type[Any]]:
    """ExchangeTokenRequest and CreateTokenResponse, declared as token_service.proto does."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="modelplane_tests/nebius_token_service.proto",
        package="nebius.iam.v1",
        syntax="proto3",
    )
    string = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
    int64 = descriptor_pb2.FieldDescriptorProto.TYPE_INT64
    optional = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    repeated = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    request = proto.message_type.add(name="ExchangeTokenRequest")
    for number, name, label in [
        (1, "grant_type", optional),
        (2, "requested_token_type", optional),
        (3, "subject_token", optional),
        (4, "subject_token_type", optional),
        (5, "scopes", repeated),
        (6, "audience", optional),
        (7, "actor_token", optional),
        (8, "actor_token_type", optional),
        (9, "resource", repeated),
    ]:
        request.field.add(name=name, number=number, type=string, label=label)
    response = proto.message_type.add(name="CreateTokenResponse")
    for number, name, kind, label in [
        (1, "access_token", string, optional),
        (2, "issued_token_type", string, optional),
        (3, "token_type", string, optional),
        (4, "expires_in", int64, optional),
        (5, "scopes", string, repeated),
    ]:
        response.field.add(name=name, number=number, type=kind, label=label)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return (
        message_factory.GetMessageClass(
            pool.FindMessageTypeByName("nebius.iam.v1.ExchangeTokenRequest")
        ),
        message_factory.GetMessageClass(
            pool.FindMessageTypeByName("nebius.iam.v1.CreateTokenResponse")
        ),
    )


ExchangeTokenRequest, CreateTokenResponse = _token_service_messages()


@dataclass
class IssuedNebiusToken:
    account_id: str
    expires_at: float


@dataclass
class LoopbackNebius:
    """A loopback TokenExchangeService; ``keys`` maps (account_id, public_key_id) to a key."""

    keys: dict[tuple[str, str], RSAPublicKey] = field(default_factory=dict)
    token_lifetime: int = 3600
    # When set, every Exchange answers this gRPC status and details.
    fail_with: tuple[grpc.StatusCode, str] | None = None
    issued: dict[str, IssuedNebiusToken] = field(default_factory=dict)
    endpoint: str = ""

    def exchange(self, raw: bytes) -> tuple[grpc.StatusCode, str, bytes]:
        if self.fail_with is not None:
            return self.fail_with[0], self.fail_with[1], b""
        request = ExchangeTokenRequest.FromString(raw)
        if (
            request.grant_type != "urn:ietf:params:oauth:grant-type:token-exchange"
            or request.subject_token_type != "urn:ietf:params:oauth:token-type:jwt"
            or request.requested_token_type != "urn:ietf:params:oauth:token-type:access_token"
        ):
            return grpc.StatusCode.INVALID_ARGUMENT, "unsupported token exchange", b""
        try:
            header = jwt.get_unverified_header(request.subject_token)
            claims = jwt.decode(request.subject_token, options={"verify_signature": False})
            key = self.keys[(str(claims.get("iss")), str(header.get("kid")))]
            claims = jwt.decode(
                request.subject_token,
                key,
                algorithms=["RS256"],
                audience="token-service.iam.new.nebiuscloud.net",
                options={"require": ["exp", "iat", "iss", "sub", "aud"]},
            )
        except (jwt.PyJWTError, KeyError):
            return grpc.StatusCode.UNAUTHENTICATED, "invalid service account credentials", b""
        if claims["sub"] != claims["iss"] or claims["exp"] - claims["iat"] > 3600:
            return grpc.StatusCode.UNAUTHENTICATED, "invalid service account credentials", b""
        access = "nebius-iam-" + secrets.token_urlsafe(32)
        self.issued[access] = IssuedNebiusToken(claims["sub"], time.time() + self.token_lifetime)
        answer = CreateTokenResponse(
            access_token=access,
            issued_token_type="urn:ietf:params:oauth:token-type:access_token",
            token_type="Bearer",
            expires_in=self.token_lifetime,
        )
        return grpc.StatusCode.OK, "", answer.SerializeToString()


@contextmanager
def serve_nebius(service: LoopbackNebius) -> Iterator[LoopbackNebius]:
    """Run ``service`` as a plaintext gRPC server on 127.0.0.1 until the block ends."""
    from concurrent import futures

    def exchange(raw: bytes, context: grpc.ServicerContext) -> bytes:
        code, details, body = service.exchange(raw)
        if code is not grpc.StatusCode.OK:
            context.abort(code, details)
        return body

    handler = grpc.method_handlers_generic_handler(
        "nebius.iam.v1.TokenExchangeService",
        {"Exchange": grpc.unary_unary_rpc_method_handler(exchange)},
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    service.endpoint = f"http://127.0.0.1:{port}"
    try:
        yield service
    finally:
        server.stop(grace=None).wait()


def verify_nebius_token(token: str, *, service: LoopbackNebius, now: float | None = None) -> str:
    """The service account an access token from ``service`` proves, or ``TokenRefused``."""
    now = time.time() if now is None else now
    issued = service.issued.get(token)
    if issued is None:
        raise TokenRefused("not a token the exchange issued")
    if issued.expires_at <= now:
        raise TokenRefused("token expired")
    return issued.account_id
