"""``AWSWebIdentityCredentials``: EKS tokens from a role assumed with a web identity.

What the identity Secret's value holds (one key, JSON):

- ``{"roleArn": "arn:aws:iam::111122223333:role/modelplane", "webIdentityToken": "<JWT>"}``:
  an OIDC token the role trusts, kept in the Secret. It must stay valid for as
  long as the operator mints (AssumeRoleWithWebIdentity refuses an expired
  one), so it suits tokens issued with a long lifetime or refreshed into the
  Secret by something else.
- ``{"roleArn": ..., "webIdentityTokenFile": PATH}`` with PATH exactly
  ``/var/run/secrets/eks.amazonaws.com/serviceaccount/token``: the operator
  pod's own projected ServiceAccount token (IRSA). The EKS Pod Identity
  Webhook mounts it at exactly that path and the kubelet rotates it (https://docs.aws.amazon.com/eks/latest/userguide/pod-configuration.html,
  aws/amazon-eks-pod-identity-webhook README), so it is re-read on every mint.
  No other path is accepted: a path in a hub Secret is a read of the
  operator's disk chosen by whoever writes the Secret, and only this one file
  is meant to be handed to STS. This form is opt-in (``modelplane run
  --allow-operator-identity``): the pod's token is the operator's own IAM
  identity, and without the flag anyone who can create a Secret and a
  ServingStack in any watched namespace could act as it. Without the flag
  such an entry is ``IdentityInvalid``, naming the flag, and the file is
  never read.

Optional fields: ``roleSessionName`` (default ``modelplane``) and
``clusterName``, for a kubeconfig whose cluster entry is not named after the
EKS cluster (``aws eks update-kubeconfig`` names it with the cluster ARN).

The token is what ``aws eks get-token`` prints (aws/aws-cli
``awscli/customizations/eks/get_token.py``): ``k8s-aws-v1.`` and the
unpadded base64url of a presigned STS ``GetCallerIdentity`` URL, signed with
SigV4 by botocore, valid 60 seconds as a URL (``X-Amz-Expires``), with the
header ``x-k8s-aws-id: <cluster name>`` signed in so that the token is good
for that one cluster. EKS accepts such a token for 15 minutes after it was
signed; like ``aws eks get-token`` it is reported to expire after 14, so that
callers refresh it before the server stops accepting it. The role's
credentials come from an unsigned ``AssumeRoleWithWebIdentity`` call
(botocore's STS client), made anew on every mint: once every 14 minutes.

botocore is synchronous, so each mint runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import botocore.session
from botocore import UNSIGNED
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from modelplane.credentials.identity.base import (
    Endpoints,
    IdentityError,
    IdentityFailure,
    TargetInfo,
    Token,
    json_fields,
)
from modelplane.kube.scrub import scrub

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
# aws-cli get_token.py: URL_TIMEOUT = 60, TOKEN_EXPIRATION_MINS = 14.
URL_EXPIRES_SECONDS = 60
TOKEN_LIFETIME_SECONDS = 14 * 60
# The projected token the EKS Pod Identity Webhook mounts for IRSA.
IRSA_TOKEN_FILE = "/var/run/secrets/eks.amazonaws.com/serviceaccount/token"
DEFAULT_REGION = "us-east-1"
DEFAULT_SESSION_NAME = "modelplane"
# The operator flag that lets a Secret name the pod's own token (see above).
ALLOW_OPERATOR_IDENTITY_FLAG = "--allow-operator-identity"

# arn:PARTITION:eks:REGION:ACCOUNT:cluster/NAME
_CLUSTER_ARN = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):eks:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):"
    r"cluster/(?P<name>[A-Za-z0-9][A-Za-z0-9_-]{0,99})$"
)
# IAM role ARNs; the path may hold slashes.
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
# STS RoleSessionName: 2-64 of [\w+=,.@-].
_SESSION_NAME = re.compile(r"^[\w+=,.@-]{2,64}$")
_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z0-9]+)+-\d+$")

# botocore's DEBUG records hold the canonical request (with the session token)
# and STS's answer body (with the secret key): keep them out of every log,
# whatever level the operator runs at.
logging.getLogger("botocore").setLevel(logging.INFO)

_FIELDS = {"roleArn", "webIdentityToken", "webIdentityTokenFile", "roleSessionName", "clusterName"}


def _invalid(message: str) -> IdentityError:
    return IdentityError(IdentityFailure.INVALID, f"AWSWebIdentityCredentials: {message}")


@dataclass(frozen=True)
class WebIdentity:
    """The Secret's value, checked."""

    role_arn: str
    role_session_name: str
    cluster_name: str | None
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None


def parse_credential(credential: bytes) -> WebIdentity:
    """Read the Secret's value; ``IdentityError(INVALID)`` naming the field when unusable.

    Messages never quote a value: any of them may be the token itself.
    """
    doc = json_fields(
        credential,
        _FIELDS,
        kind="AWSWebIdentityCredentials",
        expected="roleArn and webIdentityToken or webIdentityTokenFile, optionally "
        "roleSessionName and clusterName",
    )
    role_arn = doc.get("roleArn", "")
    if not role_arn:
        raise _invalid("field roleArn is missing")
    if not _ROLE_ARN.match(role_arn):
        raise _invalid("field roleArn is not an IAM role ARN (arn:aws:iam::ACCOUNT:role/NAME)")
    token = doc.get("webIdentityToken")
    token_file = doc.get("webIdentityTokenFile")
    if (token is None) == (token_file is None):
        raise _invalid("exactly one of webIdentityToken and webIdentityTokenFile must be given")
    if token is not None and not token.strip():
        raise _invalid("field webIdentityToken is empty")
    if token_file is not None and token_file != IRSA_TOKEN_FILE:
        raise _invalid(
            f"field webIdentityTokenFile may only be {IRSA_TOKEN_FILE} (the operator "
            "pod's projected IRSA token); put any other token in webIdentityToken"
        )
    session = doc.get("roleSessionName", DEFAULT_SESSION_NAME)
    if not _SESSION_NAME.match(session):
        raise _invalid("field roleSessionName must be 2-64 characters of [A-Za-z0-9_+=,.@-]")
    cluster = doc.get("clusterName")
    if cluster is not None and not _CLUSTER_NAME.match(cluster):
        raise _invalid("field clusterName is not an EKS cluster name")
    return WebIdentity(
        role_arn=role_arn,
        role_session_name=session,
        cluster_name=cluster,
        token=token.strip() if token is not None else None,
        token_file=token_file,
    )


def cluster_and_region(name: str) -> tuple[str, str | None]:
    """The EKS cluster name from a kubeconfig cluster entry, and the region an ARN names."""
    if name.startswith("arn:"):
        match = _CLUSTER_ARN.match(name)
        if not match:
            raise _invalid(
                "the kubeconfig's cluster name is an ARN but not an EKS cluster ARN "
                "(arn:aws:eks:REGION:ACCOUNT:cluster/NAME)"
            )
        return match["name"], match["region"]
    if not _CLUSTER_NAME.match(name):
        raise _invalid(
            "the kubeconfig's cluster name is not an EKS cluster name or ARN; "
            "set clusterName in the secret"
        )
    return name, None


class AWSMinter:
    """Mints EKS tokens for one role and one cluster."""

    def __init__(self, identity: WebIdentity, cluster: str, region: str, sts: str | None) -> None:
        self._identity = identity
        self._cluster = cluster
        self._region = region
        self._sts = sts
        # Connect and read timeouts bound a mint; retries belong to the caller,
        # which re-mints on its own schedule.
        self._config = Config(
            connect_timeout=5,
            read_timeout=10,
            retries={"total_max_attempts": 1, "mode": "standard"},
        )

    def __repr__(self) -> str:
        return f"AWSMinter(role={self._identity.role_arn!r}, cluster={self._cluster!r})"

    @property
    def cluster(self) -> str:
        return self._cluster

    @property
    def region(self) -> str:
        return self._region

    async def mint(self) -> Token:
        return await asyncio.to_thread(self._mint)

    def _web_identity_token(self) -> str:
        if self._identity.token is not None:
            return self._identity.token
        path = self._identity.token_file or IRSA_TOKEN_FILE
        try:
            token = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as err:
            raise IdentityError(
                IdentityFailure.INVALID,
                f"AWSWebIdentityCredentials: cannot read {path} ({type(err).__name__}): "
                "is the operator's ServiceAccount annotated with eks.amazonaws.com/role-arn?",
            ) from None
        if not token:
            raise _invalid(f"{path} is empty")
        return token

    def _mint(self) -> Token:
        web_token = self._web_identity_token()
        secrets: tuple[str, ...] = (web_token,)
        session = botocore.session.Session()
        try:
            # botocore builds STS operations from its data model at run time.
            sts: Any = session.create_client(
                "sts",
                region_name=self._region,
                endpoint_url=self._sts,
                config=self._config.merge(Config(signature_version=UNSIGNED)),
            )
            answer = sts.assume_role_with_web_identity(
                RoleArn=self._identity.role_arn,
                RoleSessionName=self._identity.role_session_name,
                WebIdentityToken=web_token,
            )
            creds = answer["Credentials"]
            key_id, secret, session_token = (
                creds["AccessKeyId"],
                creds["SecretAccessKey"],
                creds["SessionToken"],
            )
            secrets += (secret, session_token)
            expiration: datetime = creds["Expiration"]
            signer: Any = session.create_client(
                "sts",
                region_name=self._region,
                endpoint_url=self._sts,
                aws_access_key_id=key_id,
                aws_secret_access_key=secret,
                aws_session_token=session_token,
                config=self._config,
            )
            signer.meta.events.register(
                "before-sign.sts.GetCallerIdentity", self._sign_cluster_header
            )
            url = signer.generate_presigned_url(
                "get_caller_identity", ExpiresIn=URL_EXPIRES_SECONDS, HttpMethod="GET"
            )
        except ClientError as err:
            raise self._client_error(err, secrets) from None
        except ParamValidationError as err:
            raise _invalid(scrub(str(err), secrets)) from None
        except BotoCoreError as err:
            raise IdentityError(
                IdentityFailure.UNREACHABLE,
                "AWSWebIdentityCredentials: STS AssumeRoleWithWebIdentity failed: "
                + scrub(str(err), secrets),
            ) from None
        except (KeyError, TypeError):
            raise IdentityError(
                IdentityFailure.UNREACHABLE,
                "AWSWebIdentityCredentials: STS answered AssumeRoleWithWebIdentity "
                "without credentials",
            ) from None
        value = TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
        # The presigned URL is only as good as the session credentials it was signed with.
        expires_at = min(time.time() + TOKEN_LIFETIME_SECONDS, expiration.timestamp())
        return Token(value=value, expires_at=expires_at)

    def _sign_cluster_header(self, request: AWSRequest, **_: Any) -> None:
        request.headers[CLUSTER_ID_HEADER] = self._cluster

    @staticmethod
    def _client_error(err: ClientError, secrets: tuple[str, ...]) -> IdentityError:
        error = err.response.get("Error", {})
        code = scrub(str(error.get("Code", "Unknown")), secrets)
        message = scrub(str(error.get("Message", "")), secrets)
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        text = f"STS AssumeRoleWithWebIdentity refused: {code}" + (
            f": {message}" if message else ""
        )
        # A 5xx (or throttling) says nothing about the identity: the service is unwell.
        if isinstance(status, int) and status >= 500:
            return IdentityError(
                IdentityFailure.UNREACHABLE,
                f"AWSWebIdentityCredentials: STS answered {status}: {code}",
            )
        return IdentityError(IdentityFailure.REJECTED, f"AWSWebIdentityCredentials: {text}")


def minter(credential: bytes, target: TargetInfo, endpoints: Endpoints) -> AWSMinter:
    """A ``MinterFactory`` for ``AWSWebIdentityCredentials``."""
    identity = parse_credential(credential)
    if identity.token_file is not None and not endpoints.allow_operator_identity:
        raise _invalid(
            "webIdentityTokenFile names the operator pod's own projected token, which "
            "acts as the operator's IAM role; the operator accepts it only when run with "
            f"{ALLOW_OPERATOR_IDENTITY_FLAG}. Otherwise put the role's web identity "
            "token in webIdentityToken"
        )
    cluster, arn_region = cluster_and_region(identity.cluster_name or target.cluster_name)
    region = endpoints.aws_region or arn_region or DEFAULT_REGION
    if not _REGION.match(region):
        raise _invalid(f"region {region!r} is not an AWS region name")
    return AWSMinter(identity, cluster, region, endpoints.aws_sts)
