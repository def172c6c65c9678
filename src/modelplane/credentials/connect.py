"""Reaching a target cluster from a ServingStack's credentials on the hub.

Reads the Secrets ``spec.secrets`` names, vets the kubeconfig, builds the
cloud identity's token source, and has ``kube.client`` open the connection
(a ``Target``, the one owner of its clients). Every refusal is a
``CredentialsError`` whose reason goes to ``Ready``.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml
from lightkube import AsyncClient
from lightkube.config.kubeconfig import SingleConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Secret

from modelplane.api.spec import SecretType, ServingStackSpec
from modelplane.credentials.identity import providers
from modelplane.credentials.identity.base import Endpoints, IdentityError, TargetInfo
from modelplane.credentials.identity.cache import TokenCache, TokenSource, cache_key
from modelplane.credentials.kubeconfig import (
    KubeconfigError,
    load_kubeconfig,
    vet_kubeconfig,
    without_credentials,
)
from modelplane.kube.address import DEFAULT_DENIED, AddressDenied, IPNetwork
from modelplane.kube.answers import bounded
from modelplane.kube.client import Target, open_target
from modelplane.kube.errors import ErrorKind, KnownError
from modelplane.vocabulary import BlockedReason


class CredentialsError(KnownError):
    """The credentials cannot be read or used. ``reason`` is the Ready condition's."""

    kind = ErrorKind.CREDENTIALS

    def __init__(self, reason: BlockedReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def condition_reason(self) -> str:
        return str(self.reason)


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


ALLOWED_NAMESPACES_ANNOTATION = "modelplane.ai/allowed-namespaces"


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


async def _get_secret(
    hub: AsyncClient,
    namespace: str,
    name: str,
    entry: str,
    *,
    missing: CredentialsError | None = None,
) -> Secret:
    """The Secret; ``missing`` is what a 404 raises instead of SecretNotFound."""
    try:
        return await hub.get(Secret, name, namespace=namespace)
    except ApiError as err:
        if err.status.code == 404:
            if missing is not None:
                raise missing from None
            raise CredentialsError(
                BlockedReason.SECRET_NOT_FOUND,
                f"Secret {namespace}/{name} named by the {entry} entry does not exist",
            ) from err
        if err.status.code == 403:
            # A gap in the operator's RBAC, not a fault of the stack: said in
            # Ready like any missing credential, rather than a traceback.
            message = hub_forbidden(err, "get", "secrets", f"Secret {namespace}/{name}")
            raise CredentialsError(BlockedReason.HUB_FORBIDDEN, message) from err
        raise


def _value(secret: Secret, namespace: str, key: str, reason: BlockedReason, *, text: bool) -> bytes:
    name = secret.metadata.name if secret.metadata else "?"
    data = secret.data or {}
    if key not in data:
        # The key asked for only: the names of the others are the Secret's
        # owner's to tell, and go to a status many can read.
        raise CredentialsError(
            BlockedReason.SECRET_KEY_MISSING, f"Secret {namespace}/{name} has no key {key!r}"
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
    kubeconfig = _value(
        secret, namespace, ref.key, BlockedReason.KUBECONFIG_INVALID, text=True
    ).decode()
    entry = spec.cloud_identity
    if entry is None:
        return Credentials(kubeconfig)
    where = entry.namespace or namespace
    source = f"Secret {where}/{entry.name} key {entry.key!r}"
    if where != namespace and not cross_namespace_refs:
        raise CredentialsError(
            BlockedReason.CROSS_NAMESPACE_REF_DENIED,
            f"the {entry.type} entry names {source} in another namespace, and this "
            "operator runs with --no-cross-namespace-refs: put the identity Secret in "
            f"{namespace}",
        )
    # Elsewhere, a Secret that does not exist and one that does not grant
    # this namespace are one refusal: whoever writes this stack learns
    # nothing of what another namespace holds.
    denied = CredentialsError(
        BlockedReason.CROSS_NAMESPACE_REF_DENIED,
        f"the {entry.type} entry names {source}, which does not exist or does not grant "
        f"namespace {namespace}: its owner may create it and annotate it "
        f"{ALLOWED_NAMESPACES_ANNOTATION}={namespace} (a comma-separated list, or *)",
    )
    secret = await _get_secret(
        hub, where, entry.name, str(entry.type), missing=denied if where != namespace else None
    )
    annotations = dict((secret.metadata.annotations if secret.metadata else None) or {})
    # The grant is checked before anything else of the Secret is read or said.
    if where != namespace and not granted(annotations, namespace):
        raise denied
    credential = _value(secret, where, entry.key, BlockedReason.IDENTITY_INVALID, text=False)
    return Credentials(kubeconfig, Identity(entry.type, credential, source))


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
    # A hub user's Secret holds up to 1 MiB: parsed once, off the event loop.
    try:
        vetted = await asyncio.to_thread(
            vetted_kubeconfig,
            credentials.kubeconfig,
            identity=identity is not None,
            allow_unsafe=allow_unsafe,
        )
    except KubeconfigError as err:
        raise CredentialsError(BlockedReason.KUBECONFIG_REFUSED, str(err)) from err
    config = vetted.config
    if identity is not None and config.cluster.insecure:
        # The identity's tokens would go to whoever answers: refused, not warned.
        raise CredentialsError(
            BlockedReason.KUBECONFIG_REFUSED,
            f"cluster {config.context.cluster!r} sets insecure-skip-tls-verify, so the "
            f"server's certificate would not be checked and the {identity.type} identity's "
            "tokens would go to whoever answers at its address; remove it and give "
            "certificate-authority-data",
        )
    if identity is not None and not config.cluster.server.lower().startswith("https://"):
        # Over plain HTTP the token is readable on the way, and anyone on
        # the path can answer for the target: the same refusal.
        raise CredentialsError(
            BlockedReason.KUBECONFIG_REFUSED,
            f"cluster {config.context.cluster!r} is served over plain HTTP, so the "
            f"{identity.type} identity's tokens would cross the network readable by anyone "
            "on the path; give an https:// server",
        )
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
            kubeconfig=vetted.text,
            # Only an identity's token is put into it (``helm_kubeconfig``);
            # kept for each open target, the parse is some 3 KiB.
            kubeconfig_doc=vetted.doc if source is not None else None,
            identity=source,
        )
    except AddressDenied as err:
        raise CredentialsError(BlockedReason.TARGET_ADDRESS_DENIED, str(err)) from err
    except (ssl.SSLError, ValueError) as err:
        # Certificate data that is not base64 or not PEM; its text could
        # quote the data, so only the kind of failure is named.
        raise CredentialsError(
            BlockedReason.KUBECONFIG_REFUSED,
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
        BlockedReason(err.failure.value),
        f"the {identity.type} identity ({identity.source}): {err.message}",
    )


def token_source(
    identity: Identity, target: TargetInfo, endpoints: Endpoints, tokens: TokenCache
) -> TokenSource:
    """The cached token source of ``identity`` for ``target``; refusals are ``CredentialsError``."""
    make = providers.factory(identity.type)
    if make is None:
        raise CredentialsError(
            BlockedReason.CLOUD_IDENTITY_UNSUPPORTED,
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


@dataclass(frozen=True)
class VettedKubeconfig:
    """A Secret's kubeconfig, parsed once: the document, its text for helm, and its config."""

    # With an identity, its users are emptied (``without_credentials``).
    doc: dict[str, Any] = field(repr=False)
    text: str = field(repr=False)
    config: SingleConfig = field(repr=False)


def vetted_kubeconfig(kubeconfig: str, *, identity: bool, allow_unsafe: bool) -> VettedKubeconfig:
    """Parse, empty the users of (with an identity) and vet a kubeconfig, from one parse.

    Refusals are ``KubeconfigError``.
    """
    doc = load_kubeconfig(kubeconfig)
    if identity:
        doc = without_credentials(doc)
    config = vet_kubeconfig(doc, allow_unsafe=allow_unsafe)
    return VettedKubeconfig(doc, yaml.safe_dump(doc), config)
