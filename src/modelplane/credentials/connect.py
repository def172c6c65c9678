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
from lightkube.config.models import User
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Secret

from modelplane.actions.helm import Helm
from modelplane.api.models import SecretType, ServingStackSpec
from modelplane.credentials.identity import providers
from modelplane.credentials.identity.base import Endpoints, IdentityError, TargetInfo
from modelplane.credentials.identity.cache import IdentityAuth, TokenCache, TokenSource, cache_key
from modelplane.credentials.kubeconfig import KubeconfigError, parse_kubeconfig, without_credentials
from modelplane.kube.address import DEFAULT_DENIED, AddressDenied, IPNetwork, host_and_port, vet
from modelplane.kube.answers import bounded
from modelplane.kube.errors import ErrorKind, KnownError
from modelplane.kube.transport import GuardedTransport
from modelplane.wire import FIELD_MANAGER


class CredentialsError(KnownError):
    """The credentials cannot be read or used. ``reason`` is a condition reason."""

    kind = ErrorKind.CREDENTIALS

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def condition_reason(self) -> str:
        return self.reason


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
        auth: httpx2.Auth | None = None,
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
        if auth is not None:
            # A cloud identity: one auth for both clients, so they share one
            # token and one refresh. lightkube takes auth only from the
            # kubeconfig's user (emptied here) and keeps its httpx2 client in
            # _client._client, with no public setter.
            self.http.auth = auth
            self._client._client.auth = auth

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
    # The kubeconfig text, for helm; never logged. With an identity, its
    # users are empty and ``helm_kubeconfig`` puts a fresh token in.
    kubeconfig: str = field(repr=False)
    identity: TokenSource | None = field(default=None, repr=False)
    _closed: bool = field(default=False, repr=False)

    async def helm_kubeconfig(self) -> str:
        """The kubeconfig helm gets: with an identity, a short-lived token, never the key."""
        if self.identity is None:
            return self.kubeconfig
        token = await self.identity.token()
        doc = yaml.safe_load(self.kubeconfig)
        doc["users"] = [
            {"name": entry.get("name"), "user": {"token": token}} for entry in doc["users"]
        ]
        return str(yaml.safe_dump(doc))

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


ALLOWED_NAMESPACES_ANNOTATION = "modelplane.ai/allowed-namespaces"
CROSS_NAMESPACE_DENIED = "CrossNamespaceRefDenied"
IDENTITY_UNSUPPORTED = "CloudIdentityUnsupported"


@dataclass(frozen=True)
class Identity:
    """A cloud identity entry's credential, read from its Secret."""

    type: SecretType
    # The value under the entry's key; never logged.
    credential: bytes = field(repr=False)
    # "Secret ns/name key 'k'", for messages.
    source: str


@dataclass(frozen=True)
class Credentials:
    """What a ServingStack's ``spec.secrets`` gives: the kubeconfig and, maybe, an identity."""

    kubeconfig: str = field(repr=False)
    identity: Identity | None = None


async def _get_secret(hub: AsyncClient, namespace: str, name: str, entry: str) -> Secret:
    try:
        return await hub.get(Secret, name, namespace=namespace)
    except ApiError as err:
        if err.status.code == 404:
            raise CredentialsError(
                "SecretNotFound",
                f"Secret {namespace}/{name} named by the {entry} entry does not exist",
            ) from err
        if err.status.code == 403:
            # A gap in the operator's RBAC, not a fault of the stack: said in
            # Ready like any missing credential, rather than a traceback.
            message = hub_forbidden(err, "get", "secrets", f"Secret {namespace}/{name}")
            raise CredentialsError(HUB_FORBIDDEN, message) from err
        raise


def _value(secret: Secret, namespace: str, key: str, reason: str, *, text: bool) -> bytes:
    name = secret.metadata.name if secret.metadata else "?"
    data = secret.data or {}
    if key not in data:
        raise CredentialsError(
            "SecretKeyMissing",
            f"Secret {namespace}/{name} has no key {key!r} (keys: "
            f"{', '.join(sorted(data)) or 'none'})",
        )
    try:
        value = base64.b64decode(data[key])
        if text:
            value.decode()
    except (ValueError, UnicodeDecodeError) as err:
        what = "text" if text else "base64 data"
        raise CredentialsError(
            reason, f"Secret {namespace}/{name} key {key!r} is not {what}"
        ) from err
    return value


def granted(annotations: dict[str, str], namespace: str) -> bool:
    """Whether a Secret's grant names ``namespace`` (a comma list, or ``*``)."""
    allowed = {n.strip() for n in annotations.get(ALLOWED_NAMESPACES_ANNOTATION, "").split(",")}
    return "*" in allowed or namespace in allowed


async def read_credentials(
    hub: AsyncClient,
    spec: ServingStackSpec,
    namespace: str,
    *,
    cross_namespace_refs: bool = True,
) -> Credentials:
    """Read the Secrets ``spec.secrets`` names; refusals are ``CredentialsError``.

    An identity Secret in another namespace is a confused deputy unless that
    Secret grants this namespace: whoever writes a ServingStack here chooses
    the server (through their own kubeconfig) the identity's tokens go to.
    So without the grant nothing is minted; ``cross_namespace_refs=False``
    (``--no-cross-namespace-refs``, as Flux has) refuses such entries outright.
    """
    ref = spec.kubeconfig_secret
    # The Kubeconfig entry may not name another namespace (the CRD refuses
    # it); only cloud identities may, as the spec says.
    secret = await _get_secret(hub, namespace, ref.name, "Kubeconfig")
    kubeconfig = _value(secret, namespace, ref.key, "KubeconfigInvalid", text=True).decode()
    entry = spec.cloud_identity
    if entry is None:
        return Credentials(kubeconfig)
    where = entry.namespace or namespace
    source = f"Secret {where}/{entry.name} key {entry.key!r}"
    if where != namespace and not cross_namespace_refs:
        raise CredentialsError(
            CROSS_NAMESPACE_DENIED,
            f"the {entry.type} entry names {source} in another namespace, and this "
            "operator runs with --no-cross-namespace-refs: put the identity Secret in "
            f"{namespace}",
        )
    secret = await _get_secret(hub, where, entry.name, str(entry.type))
    annotations = dict((secret.metadata.annotations if secret.metadata else None) or {})
    # The grant is checked before anything else of the Secret is read or said.
    if where != namespace and not granted(annotations, namespace):
        raise CredentialsError(
            CROSS_NAMESPACE_DENIED,
            f"the {entry.type} entry names {source}, which does not grant namespace "
            f"{namespace}: annotate that Secret {ALLOWED_NAMESPACES_ANNOTATION}={namespace} "
            "(a comma-separated list, or *) if its owner agrees",
        )
    credential = _value(secret, where, entry.key, "IdentityInvalid", text=False)
    return Credentials(kubeconfig, Identity(entry.type, credential, source))


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
    identity: TokenSource | None = None,
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
    if identity is not None:
        # The identity replaces the kubeconfig's user; nothing of it is used.
        config = config._replace(user=User())
    auth = IdentityAuth(identity) if identity is not None else None
    client = TargetClient(config, params, auth=auth)
    _open += 1
    return Target(client=client, kubeconfig=kubeconfig, identity=identity)


async def connect(
    credentials: Credentials | str,
    *,
    allow_unsafe: bool = False,
    timeout: float = 10.0,
    deny: Iterable[IPNetwork] = DEFAULT_DENIED,
    tokens: TokenCache | None = None,
    endpoints: Endpoints | None = None,
) -> Target:
    """Vet a kubeconfig from a Secret and connect to its target, as its identity if any.

    Every refusal is a ``CredentialsError`` whose reason goes to ``Ready``
    and whose message names the field, host or range, never a credential.
    With an identity the first token is minted here, so a key that does not
    work is said before anything is sent to the target.
    """
    if isinstance(credentials, str):
        credentials = Credentials(credentials)
    identity = credentials.identity
    kubeconfig = credentials.kubeconfig
    if identity is not None:
        kubeconfig = without_credentials(kubeconfig)
    try:
        config = parse_kubeconfig(kubeconfig, allow_unsafe=allow_unsafe)
    except KubeconfigError as err:
        raise CredentialsError("KubeconfigRefused", str(err)) from err
    source = None
    if identity is not None:
        source = token_source(
            identity,
            TargetInfo(cluster_name=config.context.cluster, server=config.cluster.server),
            endpoints or Endpoints(),
            tokens if tokens is not None else TokenCache(),
        )
    try:
        target = await open_target(
            config,
            deny=deny,
            timeout=timeout,
            kubeconfig=_normalise(kubeconfig),
            identity=source,
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
    if source is not None and identity is not None:
        try:
            await source.token()
        except IdentityError as err:
            await target.close()
            raise identity_refused(err, identity) from None
        except BaseException:
            await target.close()
            raise
    return target


def identity_refused(err: IdentityError, identity: Identity) -> CredentialsError:
    """An identity's failure as the condition it gives, naming where the key came from."""
    return CredentialsError(
        err.failure.value, f"the {identity.type} identity ({identity.source}): {err.message}"
    )


def token_source(
    identity: Identity, target: TargetInfo, endpoints: Endpoints, tokens: TokenCache
) -> TokenSource:
    """The cached token source of ``identity`` for ``target``; refusals are ``CredentialsError``."""
    make = providers.factory(identity.type)
    if make is None:
        raise CredentialsError(
            IDENTITY_UNSUPPORTED,
            f"the {identity.type} identity in secrets is not supported by this operator: "
            "the kubeconfig's own credentials are not used in its place",
        )
    key = cache_key(
        str(identity.type),
        identity.credential,
        target.cluster_name,
        target.server,
        repr(endpoints),
    )
    try:
        return tokens.source(key, lambda: make(identity.credential, target, endpoints))
    except IdentityError as err:
        raise identity_refused(err, identity) from None


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
