"""Reaching a target cluster from a ServingStack's credentials on the hub.

A ``Target`` is the one owner of a connection to a target: lightkube's
client, the raw HTTP client that discovery needs (lightkube has no public
call for a GET with its own ``Accept`` header), and the transport both send
through. Whoever opens a Target closes it, once, and everything closes.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Iterable
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
from modelplane.target.address import DEFAULT_DENIED, AddressDenied, IPNetwork, host_and_port, vet
from modelplane.target.answers import bounded
from modelplane.target.helm import Helm
from modelplane.target.kubeconfig import KubeconfigError, parse_kubeconfig
from modelplane.target.transport import GuardedTransport
from modelplane.wire import FIELD_MANAGER


class CredentialsError(Exception):
    """The credentials cannot be read or used. ``reason`` is a condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


ADDRESS_DENIED = "TargetAddressDenied"
# The hub refused the operator a request its RBAC should allow.
HUB_FORBIDDEN = "HubForbidden"


def hub_forbidden(err: ApiError, verb: str, resource: str, where: str, group: str = "") -> str:
    """Say which permission the hub refused, and how to grant it.

    The hub is the operator's own cluster, so its Status message (which
    names the ServiceAccount) is repeated; the verb and resource are said
    apart from it so the line reads the same on any API server.
    """
    qualified = f"{resource} in API group {group}" if group else resource
    return (
        f"the hub refused the operator {verb} on {qualified} ({where}): "
        f"{bounded(err.status.message or 'forbidden')}. Grant its ServiceAccount "
        f"{verb} on {qualified} (deploy/chart's RBAC does)"
    )


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
        if err.status.code == 403:
            # A gap in the operator's RBAC, not a fault of the stack: said in
            # Ready like any missing credential, rather than a traceback.
            message = hub_forbidden(err, "get", "secrets", f"Secret {namespace}/{ref.name}")
            raise CredentialsError(HUB_FORBIDDEN, message) from err
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


async def check_server(server: str, deny: Iterable[IPNetwork]) -> None:
    """Refuse a server whose host is, or resolves to, a denied address.

    A name that cannot be resolved now is let through: the first request
    fails on it and says the target is unreachable, which is what it is.
    """
    host, port = host_and_port(server)
    try:
        await vet(host, port, deny)
    except AddressDenied:
        raise
    except httpx2.TransportError:
        pass


async def open_target(
    config: SingleConfig,
    *,
    deny: Iterable[IPNetwork] = DEFAULT_DENIED,
    timeout: float = 10.0,
    trust_env: bool = True,
    kubeconfig: str = "",
) -> Target:
    """Connect to the cluster ``config`` names, refusing a denied address before anything.

    Raises ``AddressDenied`` for a refused server, ``ValueError`` or
    ``ssl.SSLError`` for certificate data that cannot be loaded.
    """
    global _open
    deny = tuple(deny)
    await check_server(config.cluster.server, deny)
    assert config.user is not None, "lightkube gives every context a user"
    verify = client_adapter.verify_cluster(
        config.cluster, config.user, config.abs_file, trust_env=trust_env
    )
    transport = GuardedTransport(deny, httpx2.AsyncHTTPTransport(verify=verify))
    params = ConnectionParams(
        timeout=httpx2.Timeout(timeout),
        trust_env=trust_env,
        # lightkube types the field as a sync transport; its AsyncClient takes an async one.
        transport=transport,  # type: ignore[arg-type]
    )
    client = TargetClient(config, params)
    _open += 1
    return Target(client=client, kubeconfig=kubeconfig)


async def connect(
    kubeconfig: str,
    *,
    allow_unsafe: bool = False,
    timeout: float = 10.0,
    deny: Iterable[IPNetwork] = DEFAULT_DENIED,
) -> Target:
    """Vet a kubeconfig from a Secret and connect to its target.

    Every refusal is a ``CredentialsError`` whose reason goes to ``Ready``
    and whose message names the field, host or range, never a credential.
    """
    try:
        config = parse_kubeconfig(kubeconfig, allow_unsafe=allow_unsafe)
    except KubeconfigError as err:
        raise CredentialsError("KubeconfigRefused", str(err)) from err
    try:
        return await open_target(
            config, deny=deny, timeout=timeout, kubeconfig=_normalise(kubeconfig)
        )
    except AddressDenied as err:
        raise CredentialsError(ADDRESS_DENIED, str(err)) from err
    except (ssl.SSLError, ValueError) as err:
        # Certificate data that is not base64 or not PEM; its text could
        # quote the data, so only the kind of failure is named.
        raise CredentialsError(
            "KubeconfigRefused",
            "the kubeconfig's certificate-authority-data, client-certificate-data or "
            f"client-key-data cannot be loaded ({type(err).__name__})",
        ) from err


async def kubeconfig_allowed(kubeconfig: str, deny: Iterable[IPNetwork]) -> None:
    """Raise ``AddressDenied`` if the kubeconfig's server is refused: the rule of every request."""
    config = parse_kubeconfig(kubeconfig, allow_unsafe=True)
    await check_server(config.cluster.server, deny)


@dataclass(frozen=True)
class TargetHelm(Helm):
    """helm that runs only against a target the operator would connect to itself.

    helm opens its own connections, outside the guarded transport, so the
    server of the kubeconfig it gets is checked just before every call.
    Between that check and helm's own lookup a name could change its answer;
    the Python clients, which pin the address they checked, cannot be fooled so.
    """

    deny: tuple[IPNetwork, ...] = DEFAULT_DENIED

    @classmethod
    def guarding(cls, helm: Helm, deny: Iterable[IPNetwork]) -> TargetHelm:
        return cls(helm.binary, helm.home, helm.timeout_seconds, deny=tuple(deny))

    async def run(self, *args: str, kubeconfig: str, stdin: bytes | None = None) -> str:
        await kubeconfig_allowed(kubeconfig, self.deny)
        return await super().run(*args, kubeconfig=kubeconfig, stdin=stdin)


def _normalise(kubeconfig: str) -> str:
    return yaml.safe_dump(yaml.safe_load(kubeconfig))
