"""GoogleApplicationCredentials end to end: a target that accepts only the identity's tokens.

The target's token webhook approves a token only while the loopback Google
token service vouches for it (issued there, not expired), or when the test
registered it as a static token. The kubeconfig every stack gets runs
``gke-gcloud-auth-plugin``, as a GKE kubeconfig does, or embeds the admin
token where a test shows that the kubeconfig's own credentials are never a
fallback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient, Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Namespace, Secret
from lightkube.types import PatchType
from tests.identity_services import GoogleTokenService, closed_port_url, google_token_service
from tests.integration.hubs import (
    SS,
    Harness,
    client_for,
    ensure_namespace,
    put_kubeconfig,
    put_secret,
    put_stack,
    stack_gone,
)
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
from tests.testenv import TestEnv, find_binaries
from tests.waiting import wait_for, wait_for_async
from typer.testing import CliRunner

from modelplane.actions.helm import Helm
from modelplane.api.spec import SecretType
from modelplane.cli.main import app
from modelplane.credentials.connect import Credentials, CredentialsError, Identity, connect
from modelplane.operator.options import OperatorOptions
from modelplane.operator.reconciler import StackReconciler

GOOGLE = SecretType.GOOGLE_APPLICATION_CREDENTIALS
KEY = "key.json"


@dataclass
class Policy:
    """What the target's webhook accepts besides the token service's live tokens."""

    service: GoogleTokenService
    static: set[str] = field(default_factory=set)
    # Tokens the target refuses although they are live (revoked server-side).
    refused: set[str] = field(default_factory=set)
    refuse_all: bool = False

    def accept(self, token: str) -> str | None:
        if self.refuse_all or token in self.refused:
            return None
        if token in self.static or self.service.valid(token):
            return IDENTITY_USER
        return None


@pytest.fixture(scope="module")
def service() -> Iterator[GoogleTokenService]:
    with google_token_service() as s:
        yield s


@pytest.fixture(scope="module")
def policy(service: GoogleTokenService) -> Policy:
    return Policy(service)


@pytest.fixture(scope="module")
def cloud(policy: Policy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[IdentityTarget]:
    with identity_target(tmp_path_factory.mktemp("gke"), policy.accept) as t:
        yield t


@pytest.fixture(autouse=True)
def _reset(policy: Policy, service: GoogleTokenService) -> None:
    policy.static.clear()
    policy.refused.clear()
    policy.refuse_all = False
    service.lifetime = 3600
    service.revoked.clear()


def _credentials(env: TestEnv, data: str | bytes, **user: Any) -> Credentials:
    kubeconfig = cloud_kubeconfig(env, user=user or None)
    raw = data.encode() if isinstance(data, str) else data
    return Credentials(yaml.safe_dump(kubeconfig), Identity(GOOGLE, raw, "Secret t/sa key 'k'"))


async def _namespaces(client: Any) -> list[str]:
    return [str(n.metadata.name) async for n in client.list(Namespace)]


async def test_the_key_reaches_a_target_that_accepts_only_its_tokens_refreshed_ahead(
    cloud: IdentityTarget, service: GoogleTokenService, tmp_path: Path
) -> None:
    service.lifetime = 2
    account = service.account("refresh")
    target = await connect(_credentials(cloud.env, service.key_json(account)))
    failures: list[str] = []
    async with target:
        assert "kube-system" in await _namespaces(target.client)

        expired: list[str] = []

        async def refreshed() -> bool:
            assert target.identity is not None
            # The token the clients send now: the service must still call it
            # valid (the target caches tokens it accepted for 10 s, so its
            # answers alone would not show an expired one).
            token = await target.identity.token()
            if service.valid(token) != account.email:
                expired.append(token)
            try:
                await _namespaces(target.client)
            except ApiError as err:
                failures.append(f"{err.status.code}")
            return service.mints(account.email) >= 4

        await wait_for_async("three refreshes of a 2 s token", refreshed, deadline=60)
        assert failures == []
        # Refreshed ahead of expiry; how far ahead (a quarter of a short
        # life) is pinned on an injected clock in tests/unit/test_identity_cache.py.
        assert expired == []

        # helm gets a short-lived token in its private kubeconfig, never the key.
        kubeconfig = await target.helm_kubeconfig()
        assert account.private_pem not in kubeconfig
        assert all(line not in kubeconfig for line in pem_body(account.private_pem))
        token = yaml.safe_load(kubeconfig)["users"][0]["user"]["token"]
        assert service.valid(token) == account.email
        helm = Helm(str(find_binaries()["helm"]), tmp_path / "helm")
        assert json.loads(await helm.run("list", "-A", "-o", "json", kubeconfig=kubeconfig)) == []


async def test_a_401_forces_one_refresh_and_one_retry_never_a_loop(
    cloud: IdentityTarget, service: GoogleTokenService, policy: Policy
) -> None:
    # kube-apiserver caches a token it accepted for 10 s (a fixed
    # TokenSuccessCacheTTL, no flag), so each case refuses tokens the target
    # has not accepted yet; refusals are not cached.
    account = service.account("retry")
    target = await connect(_credentials(cloud.env, service.key_json(account)))
    async with target:
        # The first token (minted by connect) is refused by the target.
        policy.refused.update(service.issued)
        assert "default" in await _namespaces(target.client)
        assert service.mints(account.email) == 2

    account = service.account("refused")
    target = await connect(_credentials(cloud.env, service.key_json(account)))
    async with target:
        policy.refuse_all = True
        reviews = len(cloud.webhook.seen)
        with pytest.raises(ApiError) as caught:
            await _namespaces(target.client)
        assert caught.value.status.code == 401
        # One refresh, one retry: two reviews, one more token, then the 401 stands.
        assert service.mints(account.email) == 2
        assert len(cloud.webhook.seen) == reviews + 2


@pytest.mark.parametrize(
    ("case", "reason", "words"),
    [
        ("revoked", "IdentityRejected", "invalid_grant"),
        ("malformed", "IdentityInvalid", "has no private_key"),
        ("unreachable", "IdentityUnreachable", "cannot reach the token service"),
    ],
)
async def test_a_key_that_gives_no_token_never_falls_back_to_the_kubeconfig(
    cloud: IdentityTarget, service: GoogleTokenService, case: str, reason: str, words: str
) -> None:
    account = service.account(case)
    key = json.loads(service.key_json(account))
    if case == "revoked":
        service.revoked.add(account.email)
    elif case == "malformed":
        del key["private_key"]
    else:
        key["token_uri"] = closed_port_url()
    reviews = len(cloud.webhook.seen)
    # The kubeconfig's own admin token would work; it must not be used.
    with pytest.raises(CredentialsError) as caught:
        await connect(_credentials(cloud.env, json.dumps(key), token=cloud.env.token))
    assert caught.value.reason == reason
    assert words in str(caught.value)
    assert "Secret t/sa key 'k'" in str(caught.value)
    assert_never_said(
        [*pem_body(account.private_pem), *service.assertions, cloud.env.token],
        error=str(caught.value),
    )
    assert len(cloud.webhook.seen) == reviews


async def test_data_that_is_not_json_is_sent_as_a_static_token(
    cloud: IdentityTarget, policy: Policy
) -> None:
    policy.static.add("ya29.static-test-token")
    target = await connect(_credentials(cloud.env, b"ya29.static-test-token\n"))
    async with target:
        assert "default" in await _namespaces(target.client)
    assert cloud.webhook.seen[-1] == "ya29.static-test-token"


def test_check_runs_as_the_identity_it_is_given(
    cloud: IdentityTarget, service: GoogleTokenService, tmp_path: Path
) -> None:
    account = service.account("check")
    kubeconfig = tmp_path / "gke.yaml"
    kubeconfig.write_text(yaml.safe_dump(cloud_kubeconfig(cloud.env)))
    key = tmp_path / "key.json"
    key.write_text(service.key_json(account))
    base = ["check", "--kubeconfig", str(kubeconfig), "--deny-target-cidr", "none"]
    identity = ["--identity-type", str(GOOGLE), "--identity-file", str(key)]

    # Without the identity the kubeconfig's exec plugin is all there is.
    refused = CliRunner().invoke(app, base)
    assert refused.exit_code == 2

    result = CliRunner().invoke(app, [*base, *identity])
    # An empty cluster: requirements unmet (1), not a connection error (2).
    assert result.exit_code == 1, result.output
    assert f"as the {GOOGLE} identity" in result.output.splitlines()[0]
    assert service.mints(account.email) == 1
    assert_never_said([*pem_body(account.private_pem), *service.issued], output=result.output)

    service.revoked.add(account.email)
    result = CliRunner().invoke(app, [*base, *identity, "-o", "json"])
    assert result.exit_code == 2
    assert "IdentityRejected" in result.output and "invalid_grant" in result.output


# -- the cross-namespace grant, through the reconciler against the real hub ---


async def test_an_identity_secret_in_another_namespace_needs_its_grant(
    hub: Client,
    hub_env: TestEnv,
    cloud: IdentityTarget,
    service: GoogleTokenService,
    tmp_path: Path,
) -> None:
    team, owner = "t-identity-team", "t-identity-owner"
    for ns in (team, owner):
        ensure_namespace(hub, ns)
    account = service.account("shared")
    put_kubeconfig(hub, team, cloud_kubeconfig(cloud.env))
    put_secret(hub, owner, "gke-deployer", {KEY: service.key_json(account)})
    body = identity_stack_body(
        team,
        str(GOOGLE),
        "gke-deployer",
        KEY,
        secret_namespace=owner,
        spec={"components": "Provided"},
    )
    put_stack(hub, body)
    stored = hub.get(SS, "stack", namespace=team).to_dict()
    async_hub = AsyncClient(KubeConfig.from_dict(hub_env.kubeconfig))
    helm = Helm(str(find_binaries()["helm"]), tmp_path / "helm")

    async def reason(**options: Any) -> str | None:
        reconciler = StackReconciler(async_hub, helm, OperatorOptions(**options), lambda *a: None)
        return (await reconciler.reconcile(stored)).blocked_reason

    try:
        assert await reason() == "CrossNamespaceRefDenied"
        assert service.mints(account.email) == 0

        _grant(hub, owner, "gke-deployer", "other-team, t-identity-team")
        assert await reason() != "CrossNamespaceRefDenied"
        assert service.mints(account.email) >= 1

        minted = service.mints(account.email)
        assert await reason(no_cross_namespace_refs=True) == "CrossNamespaceRefDenied"
        assert service.mints(account.email) == minted
    finally:
        await async_hub.close()


def _grant(hub: Client, namespace: str, name: str, value: str) -> None:
    hub.patch(
        Secret,
        name,
        {"metadata": {"annotations": {"modelplane.ai/allowed-namespaces": value}}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )


# -- the operator -------------------------------------------------------------


def test_the_operator_reaches_ready_as_the_identity_and_tears_down_as_it(
    hub: Client,
    hub_env: TestEnv,
    substrate: Substrate,
    service: GoogleTokenService,
    policy: Policy,
    tmp_path: Path,
) -> None:
    with identity_target(tmp_path / "gke", policy.accept) as cloud:
        h = Harness(hub, hub_env, cloud.env, substrate, tmp_path, "t-identity-operator")
        try:
            _operator_run(h, cloud, service)
        finally:
            h.stop()


def _operator_run(h: Harness, cloud: IdentityTarget, service: GoogleTokenService) -> None:
    service.lifetime = 30
    account = service.account("operator")
    key_json = service.key_json(account)
    provide_substrate(client_for(cloud.env))
    put_kubeconfig(h.hub, h.ns, cloud_kubeconfig(cloud.env))
    h.put_secret({KEY: key_json}, name="gke-deployer")
    put_stack(
        h.hub,
        identity_stack_body(
            h.ns, str(GOOGLE), "gke-deployer", KEY, spec={"components": "Provided"}
        ),
    )
    # Every resync reads the target (and the stack's Secrets) afresh, so the
    # Secret's deletion below is seen at the next one, not an hour later.
    h.start("--relist", "1")
    h.wait_condition("Ready", "True", deadline=120)
    statuses = [json.dumps(h.status())]
    assert cloud.webhook.approved > 0
    assert all(service.valid(t) or t not in service.issued for t in cloud.webhook.seen)

    # The identity's Secret goes: a clear condition, and nothing falls back.
    h.hub.delete(Secret, "gke-deployer", namespace=h.ns)
    c = h.wait_condition("Ready", "False", "SecretNotFound", deadline=90)
    assert f"{h.ns}/gke-deployer" in c["message"] and str(GOOGLE) in c["message"]
    statuses.append(json.dumps(h.status()))

    # Teardown waits for the credentials, as for a missing kubeconfig ...
    h.hub.delete(SS, "stack", namespace=h.ns)
    c = h.wait_condition("Teardown", "False", "SecretNotFound", deadline=60)
    assert "restore the Secret" in c["message"]
    statuses.append(json.dumps(h.status()))
    # ... and goes on as the identity once they are back.
    h.put_secret({KEY: key_json}, name="gke-deployer")
    wait_for("the ServingStack to be gone", lambda: stack_gone(h.hub, h.ns), deadline=90)
    assert claim_released(cloud.env)

    h.stop()
    events = h.hub_env.http_client().get(f"/api/v1/namespaces/{h.ns}/events").text
    assert_never_said(
        [*pem_body(account.private_pem), *service.issued, *service.assertions],
        log=h.log.read_text(),
        events=events,
        status="\n".join(statuses),
    )
    # The tokens went to the target: the check above is not vacuous.
    assert set(service.issued) & set(cloud.webhook.seen)


def test_the_operator_flag_forbids_granted_cross_namespace_identities(
    hub: Client,
    hub_env: TestEnv,
    substrate: Substrate,
    cloud: IdentityTarget,
    service: GoogleTokenService,
    tmp_path: Path,
) -> None:
    h = Harness(hub, hub_env, cloud.env, substrate, tmp_path, "t-identity-no-xns")
    owner = "t-identity-no-xns-owner"
    ensure_namespace(hub, owner)
    account = service.account("forbidden")
    put_secret(hub, owner, "gke-deployer", {KEY: service.key_json(account)})
    _grant(hub, owner, "gke-deployer", "*")
    put_kubeconfig(hub, h.ns, cloud_kubeconfig(cloud.env))
    put_stack(
        hub,
        identity_stack_body(
            h.ns,
            str(GOOGLE),
            "gke-deployer",
            KEY,
            secret_namespace=owner,
            spec={"components": "Provided"},
        ),
    )
    try:
        h.start("--no-cross-namespace-refs")
        c = h.wait_condition("Ready", "False", "CrossNamespaceRefDenied", deadline=90)
        assert "--no-cross-namespace-refs" in c["message"] and owner in c["message"]
        assert service.mints(account.email) == 0
    finally:
        h.stop()
