"""NebiusServiceAccountCredentials end to end: a target that accepts only exchanged IAM tokens.

The target's token webhook accepts a token only while the loopback
``TokenExchangeService`` vouches for it (``verify_nebius_token``: issued
there, not expired). The exchange issues one only for a JWT signed with a
registered service account key. The kubeconfig every stack gets runs an exec
plugin, as the Nebius CLI writes one, which the operator refuses.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import jwt
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from lightkube import Client
from lightkube.resources.core_v1 import Secret
from tests.identity_services import closed_port_url
from tests.identity_verifiers import (
    ExchangeTokenRequest,
    LoopbackNebius,
    TokenRefused,
    serve_nebius,
    verify_nebius_token,
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
    pem_body,
)
from tests.integration.substrate import Substrate, provide_substrate
from tests.testenv import TestEnv
from tests.waiting import wait_for
from typer.testing import CliRunner

from modelplane.api.spec import SecretType
from modelplane.cli.main import app

NEBIUS = SecretType.NEBIUS_SERVICE_ACCOUNT_CREDENTIALS
KEY = "credentials.json"
ACCOUNT = "serviceaccount-e00test"


@dataclass
class ServiceAccountKey:
    public_key_id: str
    key: rsa.RSAPrivateKey = field(repr=False)

    @property
    def private_pem(self) -> str:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()

    def credentials(self, account: str = ACCOUNT) -> str:
        """The service account credentials JSON, as provider-kubernetes reads it."""
        return json.dumps(
            {
                "private_key": self.private_pem,
                "public_key_id": self.public_key_id,
                "account_id": account,
            }
        )


def new_key(public_key_id: str) -> ServiceAccountKey:
    return ServiceAccountKey(
        public_key_id, rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )


@dataclass
class RecordingNebius(LoopbackNebius):
    """The loopback exchange, keeping every JWT it was sent to grep output for."""

    assertions: list[str] = field(default_factory=list, repr=False)

    def exchange(self, raw: bytes) -> tuple[grpc.StatusCode, str, bytes]:
        self.assertions.append(ExchangeTokenRequest.FromString(raw).subject_token)
        return super().exchange(raw)


@dataclass
class NebiusPolicy:
    service: LoopbackNebius

    def accept(self, token: str) -> str | None:
        try:
            verify_nebius_token(token, service=self.service)
        except TokenRefused:
            return None
        return IDENTITY_USER


# The key the exchange knows, and one it does not.
REGISTERED = new_key("publickey-e00registered")
UNREGISTERED = new_key("publickey-e00unknown")


def every_secret(service: RecordingNebius) -> list[str]:
    return [
        *pem_body(REGISTERED.private_pem),
        *pem_body(UNREGISTERED.private_pem),
        *service.assertions,
        *service.issued,
    ]


@pytest.fixture(scope="module")
def service() -> Iterator[RecordingNebius]:
    running = RecordingNebius(
        keys={(ACCOUNT, REGISTERED.public_key_id): REGISTERED.key.public_key()}
    )
    with serve_nebius(running) as s:
        yield s


@pytest.fixture(scope="module")
def cloud(
    service: RecordingNebius, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[IdentityTarget]:
    with identity_target(tmp_path_factory.mktemp("nebius"), NebiusPolicy(service).accept) as t:
        yield t


# -- modelplane check ---------------------------------------------------------


def test_check_runs_as_the_nebius_identity_at_the_exchange_it_is_given(
    cloud: IdentityTarget, service: RecordingNebius, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "nebius.yaml"
    kubeconfig.write_text(yaml.safe_dump(cloud_kubeconfig(cloud.env)))
    identity = tmp_path / KEY
    identity.write_text(REGISTERED.credentials())
    args = ["check", "--kubeconfig", str(kubeconfig), "--deny-target-cidr", "none"]
    args += ["--identity-type", str(NEBIUS), "--identity-file", str(identity)]

    approved = cloud.webhook.approved
    result = CliRunner().invoke(app, [*args, "--nebius-token-endpoint", service.endpoint])
    assert result.exit_code in (0, 1), result.output
    assert f"as the {NEBIUS} identity" in result.output.splitlines()[0]
    assert cloud.webhook.approved > approved
    assert_never_said(every_secret(service), output=result.output)

    result = CliRunner().invoke(
        app, [*args, "--nebius-token-endpoint", closed_port_url().removesuffix("/token")]
    )
    assert result.exit_code == 2
    assert "IdentityUnreachable" in result.output


# -- the operator -------------------------------------------------------------


def test_the_operator_reaches_ready_as_the_nebius_identity_and_says_each_failure(
    hub: Client,
    hub_env: TestEnv,
    substrate: Substrate,
    cloud: IdentityTarget,
    service: RecordingNebius,
    tmp_path: Path,
) -> None:
    h = Harness(hub, hub_env, cloud.env, substrate, tmp_path, "t-identity-nebius")
    try:
        _operator_run(h, cloud, service)
    finally:
        h.stop()


def _put(h: Harness, value: str) -> None:
    h.put_secret({KEY: value}, name="nebius-deployer")


def _operator_run(h: Harness, cloud: IdentityTarget, service: RecordingNebius) -> None:
    provide_substrate(client_for(cloud.env))
    put_kubeconfig(h.hub, h.ns, cloud_kubeconfig(cloud.env))
    _put(h, REGISTERED.credentials())
    put_stack(
        h.hub,
        identity_stack_body(
            h.ns, str(NEBIUS), "nebius-deployer", KEY, spec={"components": "Provided"}
        ),
    )
    # --relist: every resync reads the target (and the stack's Secrets)
    # afresh, so each change of the Secret below is seen at the next one.
    h.start("--nebius-token-endpoint", service.endpoint, "--resync", "5", "--relist", "1")
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
    assert service.issued and set(service.issued) & set(cloud.webhook.seen)

    # The exchange refuses a key it does not know.
    _put(h, UNREGISTERED.credentials())
    c = wait("IdentityRejected")
    assert "UNAUTHENTICATED" in c["message"] and f"{h.ns}/nebius-deployer" in c["message"]

    # Malformed: the field is named, its value is not.
    _put(h, json.dumps({**json.loads(REGISTERED.credentials()), "private_key": "not a key"}))
    c = wait("IdentityInvalid", words="private_key")

    # An exchange that is not there: a new process has no token cached, so it must mint.
    _put(h, REGISTERED.credentials())
    h.stop()
    h.start("--nebius-token-endpoint", closed_port_url().removesuffix("/token"), "--resync", "5")
    c = wait("IdentityUnreachable")
    assert "UNAVAILABLE" in c["message"]
    h.stop()
    # --relist: every resync reads the target (and the stack's Secrets)
    # afresh, so the Secret's deletion below is seen at the next one.
    h.start("--nebius-token-endpoint", service.endpoint, "--resync", "5", "--relist", "1")
    wait("Reconciled", "True")

    # The identity's Secret goes: a clear condition, and nothing falls back.
    h.hub.delete(Secret, "nebius-deployer", namespace=h.ns)
    c = wait("SecretNotFound")
    assert f"{h.ns}/nebius-deployer" in c["message"] and str(NEBIUS) in c["message"]

    # Teardown waits for the credentials, as for a missing kubeconfig, then
    # goes on as the identity once they are back.
    h.hub.delete(SS, "stack", namespace=h.ns)
    c = h.wait_condition("Teardown", "False", "SecretNotFound", deadline=60)
    assert "restore the Secret" in c["message"]
    statuses.append(json.dumps(h.status()))
    _put(h, REGISTERED.credentials())
    wait_for("the ServingStack to be gone", lambda: stack_gone(h.hub, h.ns), deadline=90)
    assert claim_released(cloud.env)

    h.stop()
    events = h.hub_env.http_client().get(f"/api/v1/namespaces/{h.ns}/events").text
    assert_never_said(
        every_secret(service), log=h.log.read_text(), events=events, status="\n".join(statuses)
    )
    # Not vacuous: JWTs were sent and IAM tokens reached the target.
    assert service.assertions and all(a.count(".") == 2 for a in service.assertions)
    assert jwt.get_unverified_header(service.assertions[0])["kid"] in (
        REGISTERED.public_key_id,
        UNREGISTERED.public_key_id,
    )
