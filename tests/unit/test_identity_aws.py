"""AWSWebIdentityCredentials against a loopback STS on 127.0.0.1."""

from __future__ import annotations

import base64
import json
import logging
import socket
import time
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from tests.identity_verifiers import (
    LoopbackSTS,
    TokenRefused,
    decode_eks_token,
    serve_sts,
    verify_eks_token,
)

from modelplane.credentials.identity import aws
from modelplane.credentials.identity.base import (
    Endpoints,
    IdentityError,
    IdentityFailure,
    TargetInfo,
)

ROLE = "arn:aws:iam::111122223333:role/modelplane"
WEB_TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJlLWF3cw"
CLUSTER_ARN = "arn:aws:eks:eu-west-1:111122223333:cluster/west"


def credential(**fields: str) -> bytes:
    return json.dumps({"roleArn": ROLE, "webIdentityToken": WEB_TOKEN, **fields}).encode()


@pytest.fixture
def sts() -> Iterator[LoopbackSTS]:
    with serve_sts(LoopbackSTS(roles={WEB_TOKEN: ROLE}, region="eu-west-1")) as running:
        yield running


def target(name: str = CLUSTER_ARN) -> TargetInfo:
    return TargetInfo(cluster_name=name, server="https://west.example.com")


def secrets_of(sts: LoopbackSTS) -> list[str]:
    out = [WEB_TOKEN]
    for issued in sts.issued.values():
        out += [issued.secret_access_key, issued.session_token]
    return out


def assert_no_secret(text: str, sts: LoopbackSTS) -> None:
    for secret in secrets_of(sts):
        assert secret not in text


async def test_token_is_a_presigned_get_caller_identity_for_the_cluster(
    sts: LoopbackSTS, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    minter = aws.minter(credential(), target(), Endpoints(aws_sts=sts.url))
    before = time.time()
    token = await minter.mint()

    assert token.value.startswith("k8s-aws-v1.")
    assert "=" not in token.value
    url = decode_eks_token(token.value)
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    (key_id,) = sts.issued
    assert query["Action"] == "GetCallerIdentity"
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert query["X-Amz-Credential"].split("/")[0] == key_id
    assert query["X-Amz-Credential"].split("/")[2:] == ["eu-west-1", "sts", "aws4_request"]
    assert set(query["X-Amz-SignedHeaders"].split(";")) >= {"host", "x-k8s-aws-id"}
    assert query["X-Amz-Expires"] == "60"
    assert query["X-Amz-Security-Token"] == sts.issued[key_id].session_token
    assert query["X-Amz-Signature"]
    # The role and session the Secret names were asked for, unsigned, with the token.
    (asked,) = sts.requests
    assert asked["RoleArn"] == [ROLE] and asked["WebIdentityToken"] == [WEB_TOKEN]
    assert asked["RoleSessionName"] == ["modelplane"]

    assert verify_eks_token(token.value, cluster_name="west", sts=sts) == ROLE
    # Reported expiry: 14 minutes, as aws eks get-token says, not EKS's 15.
    assert before + 13 * 60 < token.expires_at <= time.time() + 14 * 60
    # Nothing secret in the log, the token's repr or the minter's repr.
    assert_no_secret(caplog.text + repr(token) + repr(minter), sts)
    assert token.value not in caplog.text + repr(token)


async def test_a_token_for_another_cluster_is_refused(sts: LoopbackSTS) -> None:
    token = await aws.minter(credential(), target(), Endpoints(aws_sts=sts.url)).mint()
    with pytest.raises(TokenRefused, match="signature"):
        verify_eks_token(token.value, cluster_name="east", sts=sts)


async def test_a_tampered_or_stale_token_is_refused(sts: LoopbackSTS) -> None:
    token = await aws.minter(credential(), target(), Endpoints(aws_sts=sts.url)).mint()
    url = decode_eks_token(token.value)
    forged = url.replace("X-Amz-Expires=60", "X-Amz-Expires=900")
    forged_token = "k8s-aws-v1." + base64.urlsafe_b64encode(forged.encode()).decode().rstrip("=")
    with pytest.raises(TokenRefused):
        verify_eks_token(forged_token, cluster_name="west", sts=sts)
    with pytest.raises(TokenRefused, match="expired"):
        verify_eks_token(token.value, cluster_name="west", sts=sts, now=time.time() + 16 * 60)


async def test_cluster_name_override_and_plain_names(sts: LoopbackSTS) -> None:
    plain = aws.minter(
        credential(), target("west"), Endpoints(aws_sts=sts.url, aws_region="eu-west-1")
    )
    assert plain.cluster == "west" and plain.region == "eu-west-1"
    token = await plain.mint()
    assert verify_eks_token(token.value, cluster_name="west", sts=sts) == ROLE

    named = aws.minter(
        credential(clusterName="prod-west"),
        target("my-context"),
        Endpoints(aws_sts=sts.url, aws_region="eu-west-1"),
    )
    token = await named.mint()
    assert verify_eks_token(token.value, cluster_name="prod-west", sts=sts) == ROLE
    # A configured region wins over the ARN's.
    assert (
        aws.minter(credential(), target(), Endpoints(aws_region="us-west-2")).region == "us-west-2"
    )
    assert aws.minter(credential(), target("west"), Endpoints()).region == "us-east-1"


async def test_token_lifetime_is_bounded_by_the_session_credentials(sts: LoopbackSTS) -> None:
    sts.credential_lifetime = 120
    token = await aws.minter(credential(), target(), Endpoints(aws_sts=sts.url)).mint()
    assert token.expires_at <= time.time() + 121


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (b"not json", "JSON object"),
        (b"\xff\xfe", "JSON object"),
        (b"[1]", "JSON object"),
        (json.dumps({"webIdentityToken": WEB_TOKEN}).encode(), "roleArn is missing"),
        (json.dumps({"roleArn": "admin", "webIdentityToken": WEB_TOKEN}).encode(), "roleArn"),
        (json.dumps({"roleArn": ROLE}).encode(), "exactly one of webIdentityToken"),
        (
            json.dumps(
                {"roleArn": ROLE, "webIdentityToken": WEB_TOKEN, "webIdentityTokenFile": "/x"}
            ).encode(),
            "exactly one of",
        ),
        (json.dumps({"roleArn": ROLE, "webIdentityToken": 5}).encode(), "webIdentityToken must"),
        (
            json.dumps({"roleArn": ROLE, "webIdentityTokenFile": "/etc/shadow"}).encode(),
            "webIdentityTokenFile may only be",
        ),
        (credential(roleSessionName="x"), "roleSessionName"),
        (credential(clusterName="no/slash"), "clusterName"),
        (credential(secretAccessKey="AKIA"), "unknown field"),
    ],
)
def test_malformed_credential_is_invalid_naming_the_field(value: bytes, field: str) -> None:
    with pytest.raises(IdentityError) as err:
        aws.minter(value, target(), Endpoints())
    assert err.value.failure is IdentityFailure.INVALID
    assert field in err.value.message
    assert WEB_TOKEN not in err.value.message and "/etc/shadow" not in err.value.message


def test_a_cluster_arn_that_is_not_eks_is_invalid() -> None:
    with pytest.raises(IdentityError) as err:
        aws.minter(
            credential(), target("arn:aws:ecs:eu-west-1:111122223333:cluster/x"), Endpoints()
        )
    assert err.value.failure is IdentityFailure.INVALID
    assert "EKS cluster ARN" in err.value.message


async def test_the_irsa_file_is_read_at_each_mint(
    sts: LoopbackSTS, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    # The Secret may only name the one well-known path; the test points that path elsewhere.
    from pathlib import Path

    projected = Path(str(tmp_path)) / "token"
    projected.write_text(WEB_TOKEN + "\n")
    monkeypatch.setattr(aws, "IRSA_TOKEN_FILE", str(projected))
    value = json.dumps({"roleArn": ROLE, "webIdentityTokenFile": str(projected)}).encode()
    minter = aws.minter(value, target(), Endpoints(aws_sts=sts.url, allow_operator_identity=True))
    token = await minter.mint()
    assert verify_eks_token(token.value, cluster_name="west", sts=sts) == ROLE
    projected.unlink()
    with pytest.raises(IdentityError) as err:
        await minter.mint()
    assert err.value.failure is IdentityFailure.INVALID
    assert "FileNotFoundError" in err.value.message


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("InvalidIdentityToken", "Couldn't retrieve verification key"),
        ("AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity"),
        ("ExpiredTokenException", "Token expired: current date/time is after " + WEB_TOKEN),
    ],
)
async def test_sts_refusal_is_rejected_with_its_code_and_no_token(
    sts: LoopbackSTS, caplog: pytest.LogCaptureFixture, code: str, message: str
) -> None:
    caplog.set_level(logging.DEBUG)
    sts.fail_with = (400 if code != "AccessDenied" else 403, code, message)
    with pytest.raises(IdentityError) as err:
        await aws.minter(credential(), target(), Endpoints(aws_sts=sts.url)).mint()
    assert err.value.failure is IdentityFailure.REJECTED
    assert code in err.value.message
    assert message.split(":")[0] in err.value.message
    assert_no_secret(err.value.message + str(err.value) + repr(err.value) + caplog.text, sts)


async def test_an_unknown_web_identity_is_rejected(sts: LoopbackSTS) -> None:
    other = credential(webIdentityToken="eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")
    with pytest.raises(IdentityError) as err:
        await aws.minter(other, target(), Endpoints(aws_sts=sts.url)).mint()
    assert err.value.failure is IdentityFailure.REJECTED
    assert "InvalidIdentityToken" in err.value.message


async def test_sts_5xx_is_unreachable(sts: LoopbackSTS) -> None:
    sts.fail_with = (503, "ServiceUnavailable", "try later")
    with pytest.raises(IdentityError) as err:
        await aws.minter(credential(), target(), Endpoints(aws_sts=sts.url)).mint()
    assert err.value.failure is IdentityFailure.UNREACHABLE
    assert "503" in err.value.message


async def test_unreachable_sts_is_unreachable(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens on the port now: the connection is refused.
    minter = aws.minter(credential(), target(), Endpoints(aws_sts=f"http://127.0.0.1:{port}"))
    with pytest.raises(IdentityError) as err:
        await minter.mint()
    assert err.value.failure is IdentityFailure.UNREACHABLE
    assert f"127.0.0.1:{port}" in err.value.message
    assert WEB_TOKEN not in err.value.message + caplog.text
