"""Fetching a file by URL (release manifests), redirects followed one checked hop at a time.

A manifest URL is built from the catalog, or from a mirror flag, and the
server behind it answers what it likes: httpx following redirects by itself
would connect wherever a ``Location`` points. Here each hop is a request of
its own through the ``AddressGuard`` every other connection uses, so every
address is checked when it is connected to, with the one resolution the
connection uses; at most ``MAX_HOPS`` redirects are followed, a redirect
from https:// to http:// or to another scheme is refused, and the body is
read only up to a limit.

The request goes straight to the checked address: a proxy in the
operator's environment (``HTTPS_PROXY``) is not used, as it would resolve
the name itself. A network that can reach the upstream only through a proxy
serves the manifests from a mirror instead (``--gaie-manifests-url``).
"""

from __future__ import annotations

from collections.abc import Iterable

import httpx2

from modelplane.kube.address import IPNetwork, Resolver, resolve
from modelplane.kube.transport import AddressGuard

MAX_HOPS = 5
_REDIRECTS = (301, 302, 303, 307, 308)


class FetchError(ValueError):
    """The URL cannot be fetched as it answered; the message is safe to show."""


def next_hop(current: str, location: str) -> str:
    """Where a redirect from ``current`` to ``location`` leads, if it may be followed."""
    target = httpx2.URL(current).join(location)
    if target.scheme not in ("http", "https") or not target.host:
        raise FetchError(f"redirected to a {target.scheme or 'schemeless'} URL, not http(s)")
    if httpx2.URL(current).scheme == "https" and target.scheme == "http":
        raise FetchError("redirected from https:// to http://, which is refused")
    return str(target)


async def fetch(
    url: str,
    *,
    deny: Iterable[IPNetwork],
    limit: int,
    timeout: float = 60.0,
    resolver: Resolver = resolve,
) -> bytes:
    """The body at ``url``, at most ``limit`` bytes, after at most ``MAX_HOPS`` redirects.

    ``AddressDenied`` for a hop whose host is refused, ``FetchError`` for a
    redirect that may not be followed or a body over the limit, and httpx2's
    ``HTTPStatusError`` for any other answer that is not a success.
    """
    guard = AddressGuard(deny, httpx2.AsyncHTTPTransport(), resolver=resolver)
    async with httpx2.AsyncClient(
        transport=guard, timeout=timeout, follow_redirects=False, trust_env=False
    ) as http:
        for _hop in range(MAX_HOPS + 1):
            async with http.stream("GET", url) as response:
                location = response.headers.get("location")
                if response.status_code in _REDIRECTS and location:
                    url = next_hop(url, location)
                    continue
                response.raise_for_status()
                data = bytearray()
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > limit:
                        raise FetchError(f"serves more than {limit // (1024 * 1024)} MiB")
                return bytes(data)
    raise FetchError(f"answers more than {MAX_HOPS} redirects")
