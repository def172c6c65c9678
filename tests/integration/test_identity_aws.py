"""AWSWebIdentityCredentials end to end: a target that accepts only EKS tokens for its name.

The target's token webhook accepts a token only when it is what ``aws eks
get-token`` makes: a presigned ``GetCallerIdentity`` URL on the loopback STS,
signed (``verify_eks_token`` recomputes SigV4) with session credentials that
STS issued, for the cluster ``west``. The STS issues those credentials only
for the web identity token registered with the role. The kubeconfig every
stack gets names the cluster by its EKS ARN, as ``aws eks update-kubeconfig``
writes it, and runs the exec plugin the operator refuses.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml
from lightkube import Client
from lightkube.resources.core_v1 import Secret
from tests.identity_services import closed_port_url
from tests.identity_verifiers import (
    EKS_TOKEN_PREFIX,
    LoopbackSTS,
    TokenRefused,
    decode_eks_token,
    serve_sts,
    verify_eks_token,
)
from tests.integration.hubs import SS, Harness, client_for, put_kubeconfig, put_stack, stack_gone
from tests.integration.identity_harness import (
    IDENTITY_USER,
    IdentityTarget,
    assert_never_said,
    claim_released,
    cloud_kubeconfig,
    identity_stack_body,
    identity_target,
)
from tests.integration.substrate import Substrate, provide_substrate
from tests.testenv import TestEnv
from tests.waiting import wait_for
from typer.testing import CliRunner

from modelplane.api.spec import SecretType
from modelplane.cli.main import app
from modelplane.credentials.identity import aws

AWS = SecretType.AWS_WEB_IDENTITY_CREDENTIALS
KEY = "credentials.json"
REGION = "eu-west-1"
ROLE = "arn:aws:iam::111122223333:role/modelplane-deployer"
CLUSTER = "west"
WEST_ARN = f"arn:aws:eks:{REGION}:111122223333:cluster/{CLUSTER}"
EAST_ARN = f"arn:aws:eks:{REGION}:111122223333:cluster/east"


def _jwt() -> str:
    """A web identity token shaped like the OIDC JWT a role trusts, unique to this run."""

    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    claims = json.dumps({"sub": "system:serviceaccount:mp:deployer", "n": secrets.token_hex(8)})
    head = part(b'{"alg":"RS256","kid":"test"}')
    return f"{head}.{part(claims.encode())}.{part(secrets.token_bytes(64))}"


# The token the role trusts, and one STS knows nothing of.
WEB_TOKEN = _jwt()
UNKNOWN_TOKEN = _jwt()


@dataclass
class EksPolicy:
    """The target's authenticator: EKS tokens for ``cluster``, from ``sts``'s sessions."""

    sts: LoopbackSTS
    cluster: str = CLUSTER

    def accept(self, token: str) -> str | None:
        try:
            verify_eks_token(token, cluster_name=self.cluster, sts=self.sts)
        except TokenRefused:
            return None
        return IDENTITY_USER


def credential(**fields: str) -> str:
    return json.dumps({"roleArn": ROLE, "webIdentityToken": WEB_TOKEN, **fields})


def every_secret(sts: LoopbackSTS, cloud: IdentityTarget) -> list[str]:
    """Each secret the tests used or the flow made: to be found in no captured text."""
    out = [WEB_TOKEN, UNKNOWN_TOKEN]
    for issued in sts.issued.values():
        out += [issued.secret_access_key, issued.session_token]
    for token in cloud.webhook.seen:
        if token.startswith(EKS_TOKEN_PREFIX):
            url = decode_eks_token(token)
            query = dict(parse_qsl(urlsplit(url).query))
            out += [token, token[len(EKS_TOKEN_PREFIX) :], url, query["X-Amz-Signature"]]
    return out


@pytest.fixture(scope="module")
def sts() -> Iterator[LoopbackSTS]:
    with serve_sts(LoopbackSTS(roles={WEB_TOKEN: ROLE}, region=REGION)) as running:
        yield running


@pytest.fixture(scope="module")
def cloud(sts: LoopbackSTS, tmp_path_factory: pytest.TempPathFactory) -> Iterator[IdentityTarget]:
    with identity_target(tmp_path_factory.mktemp("eks"), EksPolicy(sts).accept) as t:
        yield t


@pytest.fixture(autouse=True)
def _reset(sts: LoopbackSTS) -> None:
    sts.fail_with = None


# -- modelplane check ---------------------------------------------------------


def test_check_runs_as_the_aws_identity_at_the_sts_it_is_given(
    cloud: IdentityTarget, sts: LoopbackSTS, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "eks.yaml"
    kubeconfig.write_text(yaml.safe_dump(cloud_kubeconfig(cloud.env, cluster_name=WEST_ARN)))
    identity = tmp_path / KEY
    identity.write_text(credential())
    base = ["check", "--kubeconfig", str(kubeconfig), "--deny-target-cidr", "none"]
    as_aws = ["--identity-type", str(AWS), "--identity-file", str(identity)]
    endpoints = ["--aws-sts-endpoint", sts.url, "--aws-region", REGION]

    approved = cloud.webhook.approved
    result = CliRunner().invoke(app, [*base, *as_aws, *endpoints])
    # Met or unmet requirements (0 or 1), never a connection error (2).
    assert result.exit_code in (0, 1), result.output
    assert f"as the {AWS} identity" in result.output.splitlines()[0]
    assert cloud.webhook.approved > approved
    assert_never_said(every_secret(sts, cloud), output=result.output)

    # A token service that is not there: said as such, exit 2.
    result = CliRunner().invoke(
        app, [*base, *as_aws, "--aws-sts-endpoint", closed_port_url(), "--aws-region", REGION]
    )
    assert result.exit_code == 2
    assert "IdentityUnreachable" in result.output

    # A kubeconfig naming another cluster: STS signs, the target refuses.
    kubeconfig.write_text(yaml.safe_dump(cloud_kubeconfig(cloud.env, cluster_name=EAST_ARN)))
    result = CliRunner().invoke(app, [*base, *as_aws, *endpoints])
    assert result.exit_code == 2
    assert "refused the credentials (401" in result.output
    assert_never_said(every_secret(sts, cloud), output=result.output)


def test_check_takes_the_region_from_its_flag(
    cloud: IdentityTarget, sts: LoopbackSTS, tmp_path: Path
) -> None:
    # A plain cluster name carries no region, so --aws-region decides the
    # signature's scope; the STS scopes its sessions to eu-west-1.
    kubeconfig = tmp_path / "eks.yaml"
    kubeconfig.write_text(yaml.safe_dump(cloud_kubeconfig(cloud.env, cluster_name=CLUSTER)))
    identity = tmp_path / KEY
    identity.write_text(credential())
    args = [
        "check",
        "--kubeconfig",
        str(kubeconfig),
        "--deny-target-cidr",
        "none",
        "--identity-type",
        str(AWS),
        "--identity-file",
        str(identity),
        "--aws-sts-endpoint",
        sts.url,
        "--aws-region",
    ]
    result = CliRunner().invoke(app, [*args, "us-west-2"])
    assert result.exit_code == 2 and "401" in result.output
    result = CliRunner().invoke(app, [*args, REGION])
    assert result.exit_code in (0, 1), result.output


# -- the operator -------------------------------------------------------------


def test_the_operator_reaches_ready_as_the_aws_identity_and_says_each_failure(
    hub: Client,
    hub_env: TestEnv,
    substrate: Substrate,
    cloud: IdentityTarget,
    sts: LoopbackSTS,
    tmp_path: Path,
) -> None:
    h = Harness(hub, hub_env, cloud.env, substrate, tmp_path, "t-identity-aws")
    try:
        _operator_run(h, cloud, sts)
    finally:
        h.stop()


def _put(h: Harness, value: str) -> None:
    h.put_secret({KEY: value}, name="aws-deployer")


def _operator_run(h: Harness, cloud: IdentityTarget, sts: LoopbackSTS) -> None:
    # --relist: every resync reads the target (and the stack's Secrets)
    # afresh, so the Secret's deletion below is seen at the next one.
    flags = ["--aws-region", REGION, "--resync", "5", "--relist", "1"]
    provide_substrate(client_for(cloud.env))
    put_kubeconfig(h.hub, h.ns, cloud_kubeconfig(cloud.env, cluster_name=WEST_ARN))
    _put(h, credential())
    put_stack(
        h.hub,
        identity_stack_body(h.ns, str(AWS), "aws-deployer", KEY, spec={"components": "Provided"}),
    )
    h.start("--aws-sts-endpoint", sts.url, *flags)
    statuses: list[str] = []

    def wait(
        reason: str, status: str = "False", words: str = "", deadline: float = 90
    ) -> dict[str, Any]:
        # ``words`` tells two conditions of one reason apart.
        def said() -> dict[str, Any] | None:
            c = h.condition("Ready")
            ok = c.get("status") == status and c.get("reason") == reason
            return c if ok and words in c.get("message", "") else None

        try:
            c = wait_for(f"Ready={status} {reason} {words}", said, deadline=deadline)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{h.status()}\n{h.log.read_text()[-3000:]}") from None
        statuses.append(json.dumps(h.status()))
        return dict(c)

    wait("Reconciled", "True", deadline=120)
    assert cloud.webhook.approved > 0
    assert sts.requests, "the operator never called the loopback STS"

    # The kubeconfig names another cluster: STS signs, the target refuses, and
    # the condition says which identity it refused, after one fresh token.
    put_kubeconfig(h.hub, h.ns, cloud_kubeconfig(cloud.env, cluster_name=EAST_ARN))
    c = wait("TargetUnauthorized")
    assert str(AWS) in c["message"] and "aws-deployer" in c["message"]
    assert "401" in c["message"] and "cluster name" in c["message"]
    put_kubeconfig(h.hub, h.ns, cloud_kubeconfig(cloud.env, cluster_name=WEST_ARN))
    wait("Reconciled", "True")

    # STS refuses a web identity it does not know.
    _put(h, credential(webIdentityToken=UNKNOWN_TOKEN))
    c = wait("IdentityRejected")
    assert "InvalidIdentityToken" in c["message"] and f"{h.ns}/aws-deployer" in c["message"]

    # Malformed: the field is named, its value is not.
    _put(h, json.dumps({"roleArn": "modelplane-deployer", "webIdentityToken": WEB_TOKEN}))
    c = wait("IdentityInvalid")
    assert "roleArn" in c["message"]

    # The operator's own projected token is refused unless the operator allows it.
    _put(h, json.dumps({"roleArn": ROLE, "webIdentityTokenFile": aws.IRSA_TOKEN_FILE}))
    c = wait("IdentityInvalid", words="--allow-operator-identity")
    assert "webIdentityTokenFile" in c["message"]

    # An STS that is not there: a new process has no token cached, so it must mint.
    _put(h, credential())
    h.stop()
    h.start("--aws-sts-endpoint", closed_port_url(), *flags)
    c = wait("IdentityUnreachable")
    assert "AssumeRoleWithWebIdentity" in c["message"]
    h.stop()
    h.start("--aws-sts-endpoint", sts.url, *flags)
    wait("Reconciled", "True")

    # The identity's Secret goes: a clear condition, and nothing falls back.
    h.hub.delete(Secret, "aws-deployer", namespace=h.ns)
    c = wait("SecretNotFound")
    assert f"{h.ns}/aws-deployer" in c["message"] and str(AWS) in c["message"]

    # Teardown waits for the credentials, as for a missing kubeconfig, then
    # goes on as the identity once they are back.
    h.hub.delete(SS, "stack", namespace=h.ns)
    c = h.wait_condition("Teardown", "False", "SecretNotFound", deadline=60)
    assert "restore the Secret" in c["message"]
    statuses.append(json.dumps(h.status()))
    _put(h, credential())
    wait_for("the ServingStack to be gone", lambda: stack_gone(h.hub, h.ns), deadline=90)
    assert claim_released(cloud.env)

    h.stop()
    events = h.hub_env.http_client().get(f"/api/v1/namespaces/{h.ns}/events").text
    captured = every_secret(sts, cloud)
    assert_never_said(captured, log=h.log.read_text(), events=events, status="\n".join(statuses))
    # The check is not vacuous: tokens signed with issued sessions reached the target.
    assert any(t.startswith(EKS_TOKEN_PREFIX) for t in cloud.webhook.seen)
    assert len(captured) > 2 + 2 * len(sts.issued)
