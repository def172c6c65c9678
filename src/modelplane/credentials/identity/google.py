"""GoogleApplicationCredentials: a service account key JSON, minted into OAuth2 tokens.

The facts this follows (upstream-facts §0.4; crossplane-contrib/provider-kubernetes
``pkg/kube/client/gke/gke.go``): the kubeconfig keeps giving the server and CA,
tokens carry the scopes ``cloud-platform`` and ``userinfo.email``, and Secret
data that is not JSON is a static access token. The key's own ``token_uri``
decides where tokens come from, as google-auth does
(``google.oauth2.service_account``, the JWT bearer grant of RFC 7523).

google-auth is synchronous; its refresh runs in a worker thread, through an
adapter of google-auth's ``transport.Request`` interface that hands each
request to an httpx2 client on the event loop (google-auth's own adapters
need ``requests``, ``urllib3`` or ``aiohttp``, none of which the operator
otherwise needs). That client's transport is the address guard the target's
clients use, so the token_uri is checked at the moment it is connected to,
with the one resolution the connection uses.
"""

from __future__ import annotations

import asyncio
import datetime
import math
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx2
from google.auth import exceptions as google_exceptions
from google.auth import transport as google_transport
from google.oauth2 import service_account

from modelplane.credentials.identity.base import (
    Endpoints,
    IdentityError,
    IdentityFailure,
    Minter,
    TargetInfo,
    Token,
)
from modelplane.kube.address import (
    DEFAULT_DENIED,
    AddressDenied,
    IPNetwork,
    Resolver,
    resolve,
)
from modelplane.kube.scrub import scrub
from modelplane.kube.transport import AddressGuard
from modelplane.untrusted import load_json

SCOPES = (
    "https://www.googleapis.com/auth/cloud-platform",
    "https://www.googleapis.com/auth/userinfo.email",
)
# Fields a service account key must have for the JWT bearer grant.
REQUIRED = ("client_email", "private_key", "token_uri")
TOKEN_TIMEOUT_SECONDS = 30.0
# google-auth leaves expiry unset when the answer has no expires_in.
DEFAULT_LIFETIME_SECONDS = 3600.0
INVALID = IdentityFailure.INVALID
WHAT = "the GoogleApplicationCredentials key"


class _Response(google_transport.Response):
    def __init__(self, response: httpx2.Response) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status_code

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    @property
    def data(self) -> bytes:
        return self._response.content


class _Request(google_transport.Request):
    """google-auth's request interface, sent by an async client on the event loop.

    google-auth refreshes in a worker thread; each request it makes is run on
    the operator's loop through ``client``, whose transport is an
    ``AddressGuard``: the token_uri's host is resolved, checked and connected
    to in one step, so the address used is the one checked.
    """

    def __init__(self, client: httpx2.AsyncClient, loop: asyncio.AbstractEventLoop) -> None:
        self._client = client
        self._loop = loop

    def __call__(
        self,
        url: str,
        method: str = "GET",
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> _Response:
        seconds = timeout or TOKEN_TIMEOUT_SECONDS
        request = self._client.request(
            method, url, content=body, headers=dict(headers or {}), timeout=seconds
        )
        try:
            response = asyncio.run_coroutine_threadsafe(request, self._loop).result(seconds + 5)
        except AddressDenied as err:
            raise _Denied(err) from None
        except (httpx2.HTTPError, TimeoutError) as err:
            # Only the kind: httpx2's text may quote the request.
            raise google_exceptions.TransportError(  # type: ignore[no-untyped-call]
                type(err).__name__
            ) from err
        return _Response(response)


class _Denied(Exception):
    """The token_uri's host resolved to a denied address when the request was made."""

    def __init__(self, denied: AddressDenied) -> None:
        super().__init__(str(denied))
        self.denied = denied


class StaticToken:
    """Secret data that is not JSON: an access token used as it is, never refreshed."""

    def __init__(self, value: str) -> None:
        self._value = value

    def __repr__(self) -> str:
        return "StaticToken()"

    async def mint(self) -> Token:
        return Token(self._value, math.inf)


class ServiceAccountMinter:
    """OAuth2 access tokens for one service account key, from the key's ``token_uri``."""

    def __init__(
        self,
        credentials: service_account.Credentials,
        token_uri: str,
        email: str,
        private_key: str,
        deny: tuple[IPNetwork, ...] = DEFAULT_DENIED,
        resolver: Resolver = resolve,
    ) -> None:
        self._resolver = resolver
        self._credentials = credentials
        self._token_uri = token_uri
        self._email = email
        # Only to scrub it from the messages of a service that echoes it.
        self._private_key = private_key
        self._deny = deny

    def __repr__(self) -> str:
        return f"ServiceAccountMinter({self._email!r})"

    def _refresh(self, request: _Request) -> Token:
        started = time.time()
        self._credentials.refresh(request)  # type: ignore[no-untyped-call]
        value = self._credentials.token
        if not isinstance(value, str) or not value:
            raise IdentityError(
                IdentityFailure.UNREACHABLE,
                f"the token service at {self._token_uri} answered without an access token",
            )
        expiry = self._credentials.expiry
        if expiry is None:
            return Token(value, started + DEFAULT_LIFETIME_SECONDS)
        # google-auth counts expires_in from when the answer arrived; the
        # service counted from when it answered, before that. Counting from
        # when the request was sent never trusts a token longer than meant.
        elapsed = time.time() - started
        return Token(value, expiry.replace(tzinfo=datetime.UTC).timestamp() - elapsed)

    async def mint(self) -> Token:
        # No redirect is followed and no proxy read from the environment: the
        # one request goes where the key says, to an address the guard checked.
        guard = AddressGuard(self._deny, httpx2.AsyncHTTPTransport(), resolver=self._resolver)
        async with httpx2.AsyncClient(
            transport=guard, trust_env=False, follow_redirects=False
        ) as client:
            request = _Request(client, asyncio.get_running_loop())
            try:
                return await asyncio.to_thread(self._refresh, request)
            except _Denied as err:
                raise IdentityError(
                    INVALID, f"{WHAT}'s token_uri is refused: {err.denied}"
                ) from None
            except google_exceptions.TransportError as err:
                raise IdentityError(
                    IdentityFailure.UNREACHABLE,
                    f"cannot reach the token service at {self._token_uri} ({err.args[0]})",
                ) from None
            except google_exceptions.RefreshError as err:
                raise self._refused(err) from None

    def _refused(self, err: google_exceptions.RefreshError) -> IdentityError:
        data = err.args[1] if len(err.args) > 1 else None
        detail = scrub(str(err.args[0]) if err.args else "", [self._private_key])[:300]
        if isinstance(data, Mapping) and "error" in data and not getattr(err, "retryable", False):
            # An OAuth2 error answer: the service read the assertion and said no.
            return IdentityError(
                IdentityFailure.REJECTED,
                f"the token service at {self._token_uri} refused service account "
                f"{self._email}: {detail}",
            )
        # Anything else (a 5xx, an answer that is not an OAuth2 one) is not a
        # verdict on the key; its body is not repeated.
        return IdentityError(
            IdentityFailure.UNREACHABLE,
            f"the token service at {self._token_uri} gave no usable answer",
        )


def _parse(credential: bytes) -> Any:
    try:
        return load_json(credential.decode("utf-8"))
    except UnicodeDecodeError:
        raise IdentityError(INVALID, f"{WHAT} is neither UTF-8 JSON nor a token") from None
    except ValueError:
        return None


def minter(credential: bytes, target: TargetInfo, endpoints: Endpoints) -> Minter:
    """A minter for the GoogleApplicationCredentials value ``credential``.

    ``target`` is not used, nor are the endpoint overrides: the key's
    ``token_uri`` decides where tokens come from, within ``endpoints.deny``.
    """
    info = _parse(credential)
    if info is None:
        text = credential.decode(errors="replace").strip()
        if not text or any(c.isspace() for c in text):
            raise IdentityError(
                INVALID, f"{WHAT} is neither JSON nor a single access token (no spaces)"
            )
        return StaticToken(text)
    if not isinstance(info, dict):
        raise IdentityError(INVALID, f"{WHAT} is JSON but not an object")
    if info.get("type") != "service_account":
        raise IdentityError(
            INVALID,
            f"{WHAT} has type {str(info.get('type'))[:40]!r}; only a service_account key "
            "(or a plain access token) is supported",
        )
    missing = [f for f in REQUIRED if not isinstance(info.get(f), str) or not info[f]]
    if missing:
        raise IdentityError(INVALID, f"{WHAT} has no {', '.join(missing)}")
    token_uri = info["token_uri"]
    parts = urlsplit(token_uri)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise IdentityError(INVALID, f"{WHAT}'s token_uri is not an https:// URL")
    try:
        credentials = service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
            info, scopes=list(SCOPES)
        )
    except (ValueError, TypeError, google_exceptions.GoogleAuthError) as err:
        # The library's text may quote the key; the kind is enough to act on.
        raise IdentityError(
            INVALID, f"{WHAT}'s private_key cannot be loaded ({type(err).__name__})"
        ) from None
    return ServiceAccountMinter(
        credentials,
        token_uri,
        str(info["client_email"])[:200],
        info["private_key"],
        endpoints.deny,
    )
