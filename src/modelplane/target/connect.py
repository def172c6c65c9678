"""Reaching a target cluster from a ServingStack's credentials on the hub."""

from __future__ import annotations

import base64
from dataclasses import dataclass

import httpx2
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Secret

from modelplane.api.models import ServingStackSpec
from modelplane.target.kubeconfig import KubeconfigError, parse_kubeconfig
from modelplane.wire import FIELD_MANAGER


class CredentialsError(Exception):
    """The credentials cannot be read or used. ``reason`` is a condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Target:
    client: AsyncClient
    # The kubeconfig text, for helm; never logged.
    kubeconfig: str

    async def close(self) -> None:
        await self.client.close()


async def read_kubeconfig(hub: AsyncClient, spec: ServingStackSpec, namespace: str) -> str:
    identity = spec.cloud_identity
    if identity is not None:
        # Falling back to the kubeconfig's own credentials would act as a
        # different principal than the spec asks for; say so instead.
        raise CredentialsError(
            "CloudIdentityUnsupported",
            f"the {identity.type} identity in secrets is not supported by this operator yet: "
            "remove that entry to authenticate with the kubeconfig's embedded credentials",
        )
    ref = spec.kubeconfig_secret
    # The Kubeconfig entry may not name another namespace (the CRD refuses
    # it); only cloud identities may, as the spec says.
    try:
        secret = await hub.get(Secret, ref.name, namespace=namespace)
    except ApiError as err:
        if err.status.code == 404:
            raise CredentialsError(
                "SecretNotFound",
                f"Secret {namespace}/{ref.name} named by the Kubeconfig entry does not exist",
            ) from err
        raise
    data = secret.data or {}
    if ref.key not in data:
        raise CredentialsError(
            "SecretKeyMissing",
            f"Secret {namespace}/{ref.name} has no key {ref.key!r} (keys: "
            f"{', '.join(sorted(data)) or 'none'})",
        )
    try:
        return base64.b64decode(data[ref.key]).decode()
    except (ValueError, UnicodeDecodeError) as err:
        raise CredentialsError(
            "KubeconfigInvalid", f"Secret {namespace}/{ref.name} key {ref.key!r} is not text"
        ) from err


def connect(kubeconfig: str, *, allow_unsafe: bool = False, timeout: float = 10.0) -> Target:
    try:
        config = parse_kubeconfig(kubeconfig, allow_unsafe=allow_unsafe)
    except KubeconfigError as err:
        raise CredentialsError("KubeconfigRefused", str(err)) from err
    client = AsyncClient(config, timeout=httpx2.Timeout(timeout), field_manager=FIELD_MANAGER)
    return Target(client=client, kubeconfig=_normalise(kubeconfig))


def _normalise(kubeconfig: str) -> str:
    return yaml.safe_dump(yaml.safe_load(kubeconfig))
