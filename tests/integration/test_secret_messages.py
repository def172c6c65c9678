"""What the operator says of a stack's Secrets tells no more than the stack may know.

Against the real hub: a missing key names the key asked for, never the keys
the Secret holds; a Secret in another namespace that does not exist and one
that exists but does not grant this namespace give one reason and one
message, so a stack's author cannot probe which Secrets exist elsewhere. In
the stack's own namespace, which its author can read anyway, a missing
Secret is still said to be missing.
"""

from __future__ import annotations

import asyncio

import pytest
from lightkube import AsyncClient, Client, KubeConfig
from tests.integration.hubs import ensure_namespace, put_secret
from tests.testenv import TestEnv

from modelplane.api.spec import ServingStackSpec
from modelplane.credentials.connect import CredentialsError, read_credentials

TEAM, OWNER = "secret-msg-team", "secret-msg-owner"
KC = {"type": "Kubeconfig", "name": "kc", "key": "kubeconfig"}


def _read(hub_env: TestEnv, *secrets: dict[str, str]) -> CredentialsError:
    spec = ServingStackSpec.model_validate({"secrets": list(secrets)})

    async def run() -> CredentialsError:
        async with AsyncClient(KubeConfig.from_dict(hub_env.kubeconfig)) as client:
            with pytest.raises(CredentialsError) as err:
                await read_credentials(client, spec, TEAM)
            return err.value

    return asyncio.run(run())


@pytest.fixture(scope="module")
def secrets(hub: Client) -> None:
    for ns in (TEAM, OWNER):
        ensure_namespace(hub, ns)
    put_secret(hub, TEAM, "kc", {"kubeconfig": "apiVersion: v1\n"})
    put_secret(hub, TEAM, "keys", {"private-name-1": "x", "private-name-2": "y"})
    put_secret(hub, OWNER, "exists", {"k": "v"})


def test_a_missing_key_names_the_key_asked_for_only(hub_env: TestEnv, secrets: None) -> None:
    err = _read(hub_env, {**KC, "name": "keys"})
    assert err.reason == "SecretKeyMissing"
    assert "'kubeconfig'" in str(err) and f"{TEAM}/keys" in str(err)
    assert "private-name" not in str(err)


def test_a_missing_secret_in_its_own_namespace_is_said_to_be_missing(
    hub_env: TestEnv, secrets: None
) -> None:
    err = _read(hub_env, {**KC, "name": "absent"})
    assert err.reason == "SecretNotFound" and "does not exist" in str(err)


def test_absent_and_ungranted_secrets_elsewhere_read_the_same(
    hub_env: TestEnv, secrets: None
) -> None:
    def identity(name: str) -> dict[str, str]:
        return {"type": "AWSWebIdentityCredentials", "name": name, "key": "k", "namespace": OWNER}

    absent = _read(hub_env, KC, identity("absent"))
    ungranted = _read(hub_env, KC, identity("exists"))
    assert absent.reason == ungranted.reason == "CrossNamespaceRefDenied"
    # One message but for the name the author wrote themselves.
    assert str(absent).replace("absent", "NAME") == str(ungranted).replace("exists", "NAME")
    assert "does not exist or does not grant" in str(ungranted)
