"""The one HTTP transport every client of a target sends through.

lightkube's ``ConnectionParams`` takes a ``transport``; the target's lightkube
client and its raw HTTP client are both built on one ``GuardedTransport``, so
lists, watches, discovery and applies all pass the same two rules:

- **Where**: before every request the host is resolved and each address it
  resolves to is checked against the deny list (``address.py``); the request
  then goes to one of the addresses just checked (the URL carries the
  address, the ``Host`` header and TLS server name keep the name), so a name
  that resolves elsewhere a moment later (DNS rebinding) cannot slip past.
- **What comes back**: an answer that is not a success is passed on only if
  it is a Kubernetes ``Status``; anything else is replaced by a Status that
  says its HTTP status code and media type, and nothing of its body, reason
  phrase or headers (``answers.py``). lightkube builds its ``ApiError`` from
  whatever JSON an error answer holds, ``kind`` unchecked, and the text of
  httpx's status errors holds the reason phrase and the redirect
  ``Location``: replacing the answer here covers every caller at once.
  A success answer is asked for uncoded and bounded as it is read, in
  bytes and in what its parse would build (``bounded.py``), whichever
  client reads it.

With a transport given, httpx reads no proxy from the environment: requests
to a target go straight to the address that was checked.

A cloud identity's bearer tokens are put on by ``AuthTransport`` around the
guard: lightkube takes auth only from the kubeconfig's user, but any
transport, so one ``TokenAuth`` on the shared transport serves both clients.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Generator, Iterable
from typing import Protocol

import httpx2

from modelplane.kube.address import IPAddress, IPNetwork, Resolver, literal, resolve, vet
from modelplane.kube.answers import MAX_MESSAGE, describe_answer, status_of
from modelplane.kube.bounded import UNBOUNDED, BoundedStream, bound_of, refuse_coded

# An error answer is read whole only up to this size: a Status is far smaller.
MAX_ERROR_BODY = 64 * 1024
# Headers of an error answer worth keeping; the rest are the server's free text.
_KEPT_HEADERS = ("retry-after", "audit-id")


class AddressGuard(httpx2.AsyncBaseTransport):
    """The "where" rule alone: every request goes to an address just checked, or nowhere.

    For connections whose answers are not a Kubernetes API's (a token
    service, fetched manifests), whose error bodies and redirects their
    callers read themselves. Redirects are never followed here: a client on
    it follows one only by sending a new request, which is checked afresh.
    """

    def __init__(
        self,
        deny: Iterable[IPNetwork],
        inner: httpx2.AsyncBaseTransport,
        *,
        resolver: Resolver = resolve,
    ) -> None:
        self._deny = tuple(deny)
        self._inner = inner
        self._resolve = resolver
        self._closed = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        addresses = await vet(url.host, port, self._deny, self._resolve)
        return await self._send(request, addresses)

    async def _send(self, request: httpx2.Request, addresses: list[IPAddress]) -> httpx2.Response:
        if literal(request.url.host) is not None:
            return await self._inner.handle_async_request(request)
        last: httpx2.TransportError | None = None
        for address in addresses:
            try:
                return await self._inner.handle_async_request(_pinned(request, str(address)))
            except (httpx2.ConnectError, httpx2.ConnectTimeout) as err:
                last = err  # nothing was sent: the next address may answer
        assert last is not None
        raise last

    async def aclose(self) -> None:
        # Both clients of a target close it; the pool closes once.
        if not self._closed:
            self._closed = True
            await self._inner.aclose()


class GuardedTransport(AddressGuard):
    """Both rules, for a target's API server: where requests go, and what comes back."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        # httpx asks for gzip (and whatever else it can decode) by default,
        # and decodes it with no bound on what it inflates to.
        request.headers["Accept-Encoding"] = "identity"
        response = await super().handle_async_request(request)
        if not response.is_success:
            return await _as_status(response)
        try:
            refuse_coded(request, response)
        except ValueError:
            await response.aclose()
            raise
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        bound = bound_of(request)
        if bound is not UNBOUNDED:
            # An unbounded answer (a watch, bounded by its lines) is passed
            # as it is: counting it bounds nothing, and a layer more costs
            # each open watch its frames for as long as it is open.
            response.stream = BoundedStream(response.stream, bound, request)
        return response


def _pinned(request: httpx2.Request, address: str) -> httpx2.Request:
    """The request sent to ``address``, still naming its host to HTTP and TLS."""
    if "%" in address:
        # A zoned IPv6 address cannot be written in a URL; connect by name.
        return request
    return httpx2.Request(
        request.method,
        request.url.copy_with(host=address),
        headers=request.headers,  # carries Host: the name, not the address
        stream=request.stream,
        extensions={**request.extensions, "sni_hostname": request.url.host},
    )


async def _read_at_most(response: httpx2.Response, limit: int) -> bytes | None:
    try:
        # Read already when a transport built it from bytes.
        content = response.content
    except httpx2.ResponseNotRead:
        pass
    else:
        return content if len(content) <= limit else None
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in response.aiter_raw():
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
    finally:
        await response.aclose()
    return b"".join(chunks)


async def _as_status(response: httpx2.Response) -> httpx2.Response:
    """The error answer as a Kubernetes Status that carries nothing else of it."""
    content_type = response.headers.get("content-type")
    encoded = response.headers.get("content-encoding", "identity").lower() != "identity"
    body = await _read_at_most(response, MAX_ERROR_BODY)
    doc = status_of(body, content_type) if body is not None and not encoded else None
    if doc is None:
        doc = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": describe_answer(content_type),
            "reason": "NotAStatus",
            "code": response.status_code,
        }
    elif len(str(doc.get("message") or "")) > MAX_MESSAGE:
        doc = {**doc, "message": str(doc["message"])[:MAX_MESSAGE] + "..."}
    headers = {k: v for k, v in response.headers.items() if k.lower() in _KEPT_HEADERS}
    # Exactly this media type: lightkube turns only it into an ApiError.
    headers["content-type"] = "application/json"
    return httpx2.Response(
        response.status_code,
        headers=headers,
        content=json.dumps(doc).encode(),
        # Without the server's reason phrase, httpx falls back to the standard one.
        extensions={k: v for k, v in response.extensions.items() if k == "http_version"},
    )


class Tokens(Protocol):
    """Where bearer tokens come from (``credentials.identity.cache.TokenSource``)."""

    async def token(self) -> str: ...

    async def refresh(self, stale: str) -> str: ...


class TokenAuth(httpx2.Auth):
    """Bearer tokens from ``Tokens``; on a 401, one refresh and one retry."""

    # The body is read before the first send so that the retry can send it again.
    requires_request_body = True

    def __init__(self, source: Tokens) -> None:
        self.source = source

    def sync_auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response]:
        raise RuntimeError("TokenAuth mints tokens asynchronously: use an AsyncClient")

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        token = await self.source.token()
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code != 401:
            return
        # The token may have been revoked or expired early: mint once and
        # retry once. The retry's answer stands, whatever it is.
        token = await self.source.refresh(token)
        request.headers["Authorization"] = f"Bearer {token}"
        yield request


class AuthTransport(httpx2.AsyncBaseTransport):
    """Runs an ``httpx2.Auth`` flow at the transport, for clients that take no auth of ours."""

    def __init__(self, auth: httpx2.Auth, inner: httpx2.AsyncBaseTransport) -> None:
        self._auth = auth
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._auth.requires_request_body:
            await request.aread()
        flow = self._auth.async_auth_flow(request)
        request = await flow.__anext__()
        while True:
            response = await self._inner.handle_async_request(request)
            if self._auth.requires_response_body:
                await response.aread()
            try:
                request = await flow.asend(response)
            except StopAsyncIteration:
                return response
            await response.aclose()

    async def aclose(self) -> None:
        await self._inner.aclose()
