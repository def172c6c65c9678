"""Reaching a target cluster from a ServingStack's credentials on the hub.

A ``Target`` is the one owner of a connection to a target: lightkube's
client, the raw HTTP client that discovery needs (lightkube has no public
call for a GET with its own ``Accept`` header), and the transport both send
through. Whoever opens a Target closes it, once, and everything closes.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from types import TracebackType

import httpx2
import yaml
from lightkube import AsyncClient
from lightkube.config import client_adapter
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.kubeconfig import SingleConfig
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


# Targets opened and not yet closed, for the metrics: a number that only grows
# is a leak.
_open = 0


def open_targets() -> int:
    return _open


class TargetClient(AsyncClient):
    """lightkube's client, with the raw HTTP client built from the same parameters.

    Functions that take a lightkube client and need a raw GET (discovery)
    find the raw client here; both go through ``params.transport``. Closing
    this closes both.
    """

    def __init__(
        self,
        config: SingleConfig,
        params: ConnectionParams,
        *,
        field_manager: str | None = FIELD_MANAGER,
    ) -> None:
        super().__init__(
            config,
            timeout=params.timeout,
            trust_env=params.trust_env,
            transport=params.transport,  # type: ignore[arg-type]
            proxy=params.proxy,
            http2=params.http2,
            field_manager=field_manager,
        )
        # lightkube's public adapter: base URL, TLS and auth as the kubeconfig says.
        self.http: httpx2.AsyncClient = client_adapter.AsyncClient(config, params)

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            await self.http.aclose()


@dataclass
class Target:
    """One open connection to a target: its clients, and the kubeconfig helm gets.

    ``close`` closes everything, once; ``async with`` closes it on the way out.
    """

    client: TargetClient
    # The kubeconfig text, for helm; never logged.
    kubeconfig: str = field(repr=False)
    _closed: bool = field(default=False, repr=False)

    @property
    def http(self) -> httpx2.AsyncClient:
        return self.client.http

    async def close(self) -> None:
        global _open
        if self._closed:
            return
        self._closed = True
        _open -= 1
        await self.client.close()

    async def __aenter__(self) -> Target:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


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


async def open_target(
    config: SingleConfig,
    *,
    timeout: float = 10.0,
    trust_env: bool = True,
    kubeconfig: str = "",
) -> Target:
    """Connect to the cluster ``config`` names."""
    global _open
    params = ConnectionParams(timeout=httpx2.Timeout(timeout), trust_env=trust_env)
    client = TargetClient(config, params)
    _open += 1
    return Target(client=client, kubeconfig=kubeconfig)


async def connect(kubeconfig: str, *, allow_unsafe: bool = False, timeout: float = 10.0) -> Target:
    """Vet a kubeconfig from a Secret and connect to its target."""
    try:
        config = parse_kubeconfig(kubeconfig, allow_unsafe=allow_unsafe)
    except KubeconfigError as err:
        raise CredentialsError("KubeconfigRefused", str(err)) from err
    return await open_target(config, timeout=timeout, kubeconfig=_normalise(kubeconfig))


def _normalise(kubeconfig: str) -> str:
    return yaml.safe_dump(yaml.safe_load(kubeconfig))
